"""Build csrc/ plus the C test driver outside setuptools (for the sanitizer and qemu tests).

The compile flags are read from setup.py (its BASE_CFLAGS and ISA_FLAGS literals), so a
flag added there reaches these builds too; the file selection mirrors setup.py's
csrc_sources(): every csrc/*.c and csrc/models/*.c, with *_avx2/_avxvnni/_avx512/_amx.c only for
x86 targets and *_neon.c only for aarch64 targets, each ISA file compiled with its ISA's
flags only.

Standalone use (handy while editing kernels):
    python3 tests/c/cbuild.py native|sanitize|neon [driver args...]
builds into tests/_cbuild/<kind>/ and runs the driver.
"""
import ast
import glob
import os
import shutil
import subprocess
import sys
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
CSRC = ROOT / "csrc"
DRIVER = ROOT / "tests" / "c" / "test_kernels.c"
BUILD_ROOT = ROOT / "tests" / "_cbuild"
X86_ISAS = ("avx2", "avxvnni", "avx512", "amx")

SANITIZE_FLAGS = ["-fsanitize=address,undefined", "-fno-sanitize-recover=all", "-g", "-O1"]


def setup_flags():
    """(BASE_CFLAGS without the optimisation level, ISA_FLAGS) as setup.py defines them."""
    tree = ast.parse((ROOT / "setup.py").read_text())
    base = isa = None
    for node in tree.body:
        if isinstance(node, ast.Assign) and len(node.targets) == 1 and isinstance(node.targets[0], ast.Name):
            name = node.targets[0].id
            if name == "BASE_CFLAGS" and base is None:
                base = ast.literal_eval(node.value)
            elif name == "ISA_FLAGS" and isa is None:
                isa = ast.literal_eval(node.value)
    if base is None or isa is None:
        raise RuntimeError("setup.py no longer defines BASE_CFLAGS / ISA_FLAGS as literals")
    base = [f for f in base if not (f.startswith("-O") or f == "-g")]
    return base, isa


def isa_of(path, isa_flags):
    stem = Path(path).stem
    for isa in isa_flags:
        if stem.endswith("_" + isa):
            return isa
    return None


def sources(arch, isa_flags):
    """[(path, isa or None)] for the target arch ("x86_64" or "aarch64"), as setup.py picks."""
    out = []
    for path in sorted(glob.glob(str(CSRC / "**" / "*.c"), recursive=True)):
        isa = isa_of(path, isa_flags)
        if isa is None or (isa in X86_ISAS and arch == "x86_64") or (isa == "neon" and arch == "aarch64"):
            out.append((path, isa))
    return out


def host_arch():
    m = os.uname().machine.lower()
    return "aarch64" if m in ("aarch64", "arm64") else m


def build(kind, cc="gcc", arch=None, extra=(), link_extra=(), jobs=2, driver=DRIVER):
    """Compile every source and the driver (a C file with main(); the test driver unless
    given) into BUILD_ROOT/kind; return the binary path.  Raises
    subprocess.CalledProcessError (with the compiler output) on failure."""
    arch = arch or host_arch()
    base, isa_flags = setup_flags()
    out = BUILD_ROOT / kind
    if out.exists():
        shutil.rmtree(out)
    out.mkdir(parents=True)
    units = sources(arch, isa_flags) + [(str(driver), None)]

    def compile_one(unit):
        path, isa = unit
        # csrc/gemm.c -> csrc_gemm.o, csrc/models/dit.c -> models_dit.o: one flat folder
        obj = out / (Path(path).parent.name + "_" + Path(path).stem + ".o")
        cmd = [cc, "-c", path, "-o", str(obj), "-I", str(CSRC)] + base + list(extra)
        if isa:
            cmd += isa_flags[isa]
        r = subprocess.run(cmd, capture_output=True, text=True)
        if r.returncode != 0:
            raise subprocess.CalledProcessError(r.returncode, cmd, r.stdout, r.stderr)
        return str(obj)

    with ThreadPoolExecutor(max_workers=jobs) as ex:
        objs = list(ex.map(compile_one, units))
    exe = out / Path(driver).stem
    cmd = [cc, "-o", str(exe)] + objs + list(extra) + list(link_extra) + ["-pthread", "-lm"]
    r = subprocess.run(cmd, capture_output=True, text=True)
    if r.returncode != 0:
        raise subprocess.CalledProcessError(r.returncode, cmd, r.stdout, r.stderr)
    return exe


def build_native():
    return build("native", extra=["-O2"])


def build_sanitize():
    return build("sanitize", extra=SANITIZE_FLAGS)


def build_neon():
    return build("neon", cc="aarch64-linux-gnu-gcc", arch="aarch64", extra=["-O2"], link_extra=["-static"])


if __name__ == "__main__":
    kind = sys.argv[1] if len(sys.argv) > 1 else "native"
    exe = {"native": build_native, "sanitize": build_sanitize, "neon": build_neon}[kind]()
    cmd = ([shutil.which("qemu-aarch64")] if kind == "neon" else []) + [str(exe)] + sys.argv[2:]
    sys.exit(subprocess.run(cmd).returncode)
