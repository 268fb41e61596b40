"""Build csrc/ and the C test driver (tests/c/test_kernels.c) with AddressSanitizer and
UndefinedBehaviorSanitizer and run it: every ISA path this CPU supports against ref,
with guard elements, thread pool and error paths (see the driver's header).

Compile flags come from setup.py (tests/c/cbuild.py reads them), so the sanitized build
is the shipped build plus -fsanitize=address,undefined -fno-sanitize-recover=all -g -O1."""
import os
import re
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

sys.path.insert(0, str(Path(__file__).parent / "c"))
import cbuild  # noqa: E402

from conftest import missing_tool as _missing  # noqa: E402


def test_c_driver_under_asan_ubsan():
    if shutil.which("gcc") is None:
        _missing("gcc is not installed (Debian package gcc)")
    try:
        exe = cbuild.build_sanitize()
    except subprocess.CalledProcessError as e:
        if re.search(r"cannot find .*(asan|ubsan)", e.stderr or ""):
            _missing(f"the sanitizer runtimes are missing (Debian package libgcc-12-dev): {e.stderr[-400:]}")
        raise AssertionError(f"build failed: {' '.join(e.cmd)}\n{e.stdout}\n{e.stderr}")
    env = dict(os.environ)
    env["ASAN_OPTIONS"] = "detect_leaks=1:abort_on_error=0:halt_on_error=1"
    env["UBSAN_OPTIONS"] = "print_stacktrace=1:halt_on_error=1"
    r = subprocess.run([str(exe)], capture_output=True, text=True, env=env, timeout=600)
    out = r.stdout + r.stderr
    assert r.returncode == 0, f"driver exited {r.returncode}:\n{out[-6000:]}"
    assert re.search(r"^ok: \d+ checks$", r.stdout, re.M), out[-3000:]
    assert "runtime error" not in out and "AddressSanitizer" not in out, out[-6000:]
    tested = re.search(r"^isas tested: (.*)$", r.stdout, re.M).group(1).split()
    assert tested[0] == "ref"
    # every part of the driver ran checks (element-wise ops and attention included)
    for part in ("cpu", "alloc", "pool", "convert", "gemm errors", "gemm", "ops", "audio", "dit", "qwen", "vit", "loop"):
        m = re.search(rf"^{part} +(\d+) checks, 0 failed", r.stdout, re.M)
        assert m and int(m.group(1)) > 0, f"driver part '{part}' ran no checks:\n{r.stdout[-3000:]}"
