"""The GGUF GEMM's AMX tile micro-kernels against their scalar definitions, bit for bit, on any
machine: csrc/gguf_amx.c against gguf_ukr_ref, csrc/gguf_kq_amx.c (Q4_K / Q5_K, the integer
super-block order) against gguf_ukr_kq_ref and, to 1e-6, the common order.
tests/c/test_gguf_amx_emul.c compiles the kernels with the AVX-512/AMX intrinsics replaced by a plain-C emulation that follows Intel's pseudo-code
and checks the tile shapes (tests/c/amx_emul/immintrin.h), under ASan/UBSan.  It covers every
GGUF type the GEMM runs (32- and 16-value segments, with and without a min), row counts that
are and are not multiples of the 16-row tiles, odd segment counts, a K block inside a longer
row and partial panels.  What it cannot check is the silicon (timing, the real instructions'
encodings): bench/gguf_amx_check.py does that on an AMX machine."""
import re
import shutil
import subprocess
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).parent / "c"))
import cbuild  # noqa: E402

from conftest import missing_tool  # noqa: E402

ROOT = Path(__file__).resolve().parents[1]


def test_gguf_amx_kernel_equals_ref_under_emulation(tmp_path):
    if shutil.which("gcc") is None:
        missing_tool("gcc is not installed (Debian package gcc)")
    base, _ = cbuild.setup_flags()
    exe = tmp_path / "gguf_amx_emul"
    # -O0: UBSan at -O1 takes ~50 s to compile the emulated lane loops inlined into the kernel
    # (always_inline), -O0 ~1 s and the run ~3 s
    sanitize = [f for f in cbuild.SANITIZE_FLAGS if not f.startswith("-O")] + ["-O0"]
    cmd = (["gcc"] + base + sanitize +
           ["-I", str(ROOT / "tests" / "c" / "amx_emul"), "-I", str(ROOT / "csrc"),
            str(ROOT / "tests" / "c" / "test_gguf_amx_emul.c"), str(ROOT / "csrc" / "gguf_panel_ref.c"),
            "-lm", "-o", str(exe)])
    b = subprocess.run(cmd, capture_output=True, text=True)
    if b.returncode and re.search(r"cannot find .*(asan|ubsan)", b.stderr):
        missing_tool(f"the sanitizer runtimes are missing (Debian package libgcc-12-dev): {b.stderr[-400:]}")
    assert b.returncode == 0, f"build failed: {' '.join(cmd)}\n{b.stderr[-4000:]}"
    r = subprocess.run([str(exe)], capture_output=True, text=True, timeout=300)
    out = r.stdout + r.stderr
    assert r.returncode == 0, r.stdout[-2000:] + r.stderr[-2000:]  # the FAIL line before a leak report
    # 12 types x their K blocks (32, 96, 256, 512 where the segment divides them) x 10 row counts,
    # then the K-quant kernel: 2 types x 1 and 2 super-blocks x 11 row counts (1..130: partial
    # and whole 32-row blocks), then Q8_0 in place (gguf_q8d_amx.c): 4 K blocks x 10 row counts
    m = re.search(r"^ok: (\d+) checks$", r.stdout, re.M)
    assert m and int(m.group(1)) == 480 + 44 + 40, out[-2000:]
    m = re.search(r"^kq: largest difference from the common order (\S+) ", r.stdout, re.M)
    assert m and 0 < float(m.group(1)) <= 1e-6, out[-2000:]
    # the rows past the last 16 went to the AVX-512 kernel whenever there were some (6 of the
    # 10 row counts), and only then (the driver fails otherwise)
    assert re.search(r"^tail runs: 288$", r.stdout, re.M), out[-2000:]
