"""Cross-compile csrc/ (portable files + *_neon.c, never the x86 files) and the C test
driver for aarch64, run it under qemu-user and require that the NEON path was compared
with ref (GEMM in every weights mode, conversions, element-wise ops) and passed.

Needs the Debian packages gcc-aarch64-linux-gnu, libc6-dev-arm64-cross and qemu-user
(.ci/run installs them).  Under CI=true a missing tool fails; elsewhere it skips with
the package name.  The driver runs with --quick (fewer shapes): qemu emulates NEON and
soft-float FMAs slowly.  It runs twice: on an emulated CPU with the dot-product extension
(SDOT integer kernels) and on a plain ARMv8.0 Cortex-A53 (SMULL integer kernels)."""
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
    # -cpu max has the dot-product extension (SDOT int kernels); cortex-a53 is plain
    # ARMv8.0 (the SMULL/SADALP int kernels).  Both must match ref bit for bit.
    for cpu, dotprod in (("max", "yes"), ("cortex-a53", "no")):
        r = subprocess.run([qemu, "-cpu", cpu, str(exe), "--quick"], capture_output=True, text=True,
                           timeout=600)
        out = r.stdout + r.stderr
        assert r.returncode == 0, f"driver (-cpu {cpu}) exited {r.returncode}:\n{out[-6000:]}"
        assert re.search(r"^ok: \d+ checks$", r.stdout, re.M), out[-3000:]
        tested = re.search(r"^isas tested: (.*)$", r.stdout, re.M).group(1).split()
        assert "neon" in tested, f"the NEON path was not exercised: {tested}"
        assert not any(i in tested for i in ("avx2", "avxvnni", "avx512", "amx")), tested
        assert f"aarch64 asimddp: {dotprod}" in r.stdout, f"-cpu {cpu}: expected asimddp {dotprod}"
        for part in ("convert", "gemm", "ops", "dit", "qwen", "vit", "loop"):
            m = re.search(rf"^{part} +(\d+) checks, 0 failed", r.stdout, re.M)
            assert m and int(m.group(1)) > 0, f"-cpu {cpu}: driver part '{part}' ran no checks:\n{r.stdout[-3000:]}"
