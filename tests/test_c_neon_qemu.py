"""Cross-compile csrc/ (portable files + *_neon.c, never the x86 files) and the C test
driver for aarch64, run it under qemu-user and require that the NEON path was compared
with ref (GEMM in every weights mode, conversions, element-wise ops) and passed.

Needs the Debian packages gcc-aarch64-linux-gnu, libc6-dev-arm64-cross and qemu-user
(.ci/run installs them).  Under CI=true a missing tool fails; elsewhere it skips with
the package name.  The driver runs with --quick (fewer shapes): qemu emulates NEON and
soft-float FMAs slowly.  It runs twice: on qemu's `max` CPU, which has the dot product
(SDOT) and the ARMv8.6 i8mm and bf16 extensions, so that int linears run the SMMLA kernels
and bf16-input linears BFMMLA (the public-API GEMM tests then check SMMLA bit for bit in
every int mode, and the driver's "neon ext" part calls the SDOT kernels directly); and on a
plain ARMv8.0 Cortex-A53 (SMULL integer kernels, no extension may be picked).  A third,
short run of the "neon ext" part alone on a Neoverse N1 (SDOT, no i8mm/bf16: a Graviton 2)
checks that the dispatcher does not pick them there either.  (This qemu, 7.2, has no
i8mm=off/bf16=off CPU properties, hence CPU models without them.)"""
import re
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

sys.path.insert(0, str(Path(__file__).parent / "c"))
import cbuild  # noqa: E402

from conftest import missing_tool as _missing  # noqa: E402


def test_neon_paths_match_ref_under_qemu():
    if shutil.which("aarch64-linux-gnu-gcc") is None:
        _missing("aarch64-linux-gnu-gcc not found (Debian package gcc-aarch64-linux-gnu)")
    qemu = shutil.which("qemu-aarch64") or shutil.which("qemu-aarch64-static")
    if qemu is None:
        _missing("qemu-aarch64 not found (Debian package qemu-user)")
    libc = Path("/usr/aarch64-linux-gnu/lib/libc.a")
    try:
        exe = cbuild.build_neon()
    except subprocess.CalledProcessError as e:
        if not libc.exists():
            _missing("no static aarch64 libc (Debian package libc6-dev-arm64-cross)")
        raise AssertionError(f"cross build failed: {' '.join(e.cmd)}\n{e.stdout}\n{e.stderr}")
    # -cpu max has the dot-product extension and i8mm/bf16 (SMMLA int kernels, BFMMLA for
    # bf16 inputs; SDOT called directly); cortex-a53 is plain ARMv8.0 (the SMULL/SADALP int
    # kernels).  Both must match ref bit for bit (BFMMLA: within its stated bound).
    for cpu, dotprod, mm in (("max", "yes", "yes"), ("cortex-a53", "no", "no")):
        r = subprocess.run([qemu, "-cpu", cpu, str(exe), "--quick"], capture_output=True, text=True,
                           timeout=600)
        out = r.stdout + r.stderr
        assert r.returncode == 0, f"driver (-cpu {cpu}) exited {r.returncode}:\n{out[-6000:]}"
        assert re.search(r"^ok: \d+ checks$", r.stdout, re.M), out[-3000:]
        tested = re.search(r"^isas tested: (.*)$", r.stdout, re.M).group(1).split()
        assert "neon" in tested, f"the NEON path was not exercised: {tested}"
        assert not any(i in tested for i in ("avx2", "avxvnni", "avx512", "amx")), tested
        assert f"aarch64 asimddp: {dotprod}" in r.stdout, f"-cpu {cpu}: expected asimddp {dotprod}"
        _check_extensions(r.stdout, cpu, mm)
        for part in ("convert", "gemm", "ops", "video", "dit", "qwen", "vit", "loop", "neon ext"):
            m = re.search(rf"^{part} +(\d+) checks, 0 failed", r.stdout, re.M)
            assert m and int(m.group(1)) > 0, f"-cpu {cpu}: driver part '{part}' ran no checks:\n{r.stdout[-3000:]}"
    # Neoverse N1: SDOT but no i8mm/bf16; the dispatch and SDOT kernel checks only (~2 s)
    r = subprocess.run([qemu, "-cpu", "neoverse-n1", str(exe), "--quick", "--only", "neon ext"],
                       capture_output=True, text=True, timeout=600)
    assert r.returncode == 0, f"driver (-cpu neoverse-n1) exited {r.returncode}:\n{r.stdout[-3000:]}{r.stderr}"
    assert "aarch64 asimddp: yes" in r.stdout, r.stdout[-3000:]
    _check_extensions(r.stdout, "neoverse-n1", "no")


def _check_extensions(out, cpu, mm):
    """The CPU has i8mm and bf16 (mm "yes") or neither, and a default int8 linear and a
    bf16-input one got the SMMLA / BFMMLA tables exactly then; the part ran checks."""
    assert f"aarch64 i8mm: {mm}, bf16: {mm}" in out, f"-cpu {cpu}: expected i8mm/bf16 {mm}:\n{out[-3000:]}"
    want = "int8 i8mm, bf16 inputs bf16" if mm == "yes" else "int8 none, bf16 inputs none"
    assert f"neon linear extensions: {want}" in out, f"-cpu {cpu}: dispatcher picked otherwise:\n{out[-3000:]}"
    m = re.search(r"^neon ext +(\d+) checks, 0 failed", out, re.M)
    assert m and int(m.group(1)) > 0, f"-cpu {cpu}: the neon ext part failed or ran no checks:\n{out[-3000:]}"
    if mm == "yes":  # the BFMMLA bound was exercised
        assert re.search(r"worst err/bound neon bf16mm vs ref +[0-9.e-]+ over [1-9]", out), out[-3000:]
