"""Build h3cy: C kernels from csrc/ plus the Cython drivers from pyx/.

The C sources are csrc/*.c (the op kernels) and csrc/models/*.c (the model drivers built
on them).  Kernel files named *_avx2.c, *_avxvnni.c, *_avx512.c, *_amx.c and *_neon.c (in either
folder) are compiled with that instruction set's flags and nothing else is; the path is
chosen at run time from CPU features (csrc/cpu.c).  Never -march=native or -ffast-math: a wheel must run on any CPU
of its architecture, and the reference kernels need IEEE rounding.

Environment knobs (build time only):
  H3CY_DEBUG=1     Cython boundscheck on, -O1 -g, assertions kept.
"""
import glob
import os
import platform
import sys

import numpy
from Cython.Build import cythonize
from setuptools import Extension, setup
from setuptools.command.build_ext import build_ext

MACHINE = platform.machine().lower()
IS_X86 = MACHINE in ("x86_64", "amd64")
IS_ARM64 = MACHINE in ("aarch64", "arm64")
DEBUG = os.environ.get("H3CY_DEBUG") == "1"

BASE_CFLAGS = ["-std=c11", "-D_GNU_SOURCE", "-ffp-contract=off", "-fno-math-errno",
               "-Wall", "-Wextra", "-Wno-unused-parameter"]
BASE_CFLAGS += ["-O1", "-g"] if DEBUG else ["-O3"]

ISA_FLAGS = {
    "avx2": ["-mavx2", "-mfma", "-mf16c"],
    "avxvnni": ["-mavx2", "-mfma", "-mf16c", "-mavxvnni"],
    "avx512": ["-mavx2", "-mfma", "-mf16c", "-mavx512f", "-mavx512bw", "-mavx512vl",
               "-mavx512dq", "-mavx512bf16", "-mavx512vnni"],
    "amx": ["-mavx2", "-mfma", "-mf16c", "-mavx512f", "-mavx512bw", "-mavx512vl",
            "-mavx512dq", "-mavx512bf16", "-mavx512vnni", "-mamx-tile", "-mamx-bf16",
            "-mamx-int8"],
    "neon": [],
}


def isa_of(path):
    stem = os.path.splitext(os.path.basename(path))[0]
    for isa in ISA_FLAGS:
        if stem.endswith("_" + isa):
            return isa
    return None


def csrc_files(pattern):
    """csrc/ files matching pattern, its subfolders' too (csrc/models/), sorted."""
    return sorted(glob.glob(os.path.join("csrc", "**", pattern), recursive=True))


def csrc_sources():
    """Portable C files go into the extension's own source list; ISA files are returned
    separately so build_ext can compile each with its flags."""
    plain, isa_files = [], {}
    for path in csrc_files("*.c"):
        isa = isa_of(path)
        if isa is None:
            plain.append(path)
        elif (isa in ("avx2", "avxvnni", "avx512", "amx") and IS_X86) or (isa == "neon" and IS_ARM64):
            isa_files.setdefault(isa, []).append(path)
    return plain, isa_files


class BuildExtWithISA(build_ext):
    """Compile ISA-specific kernel files with their own flags and link them in."""

    def build_extension(self, ext):
        isa_files = csrc_sources()[1]
        objects = []
        for isa, files in sorted(isa_files.items()):
            objects += self.compiler.compile(
                files, output_dir=self.build_temp, include_dirs=["csrc"],
                extra_postargs=["-fPIC"] + BASE_CFLAGS + ISA_FLAGS[isa],
                depends=csrc_files("*.h") + csrc_files("*.inc"))
        ext.extra_objects = list(ext.extra_objects or []) + objects
        super().build_extension(ext)


plain, _ = csrc_sources()
directives = {"language_level": 3, "boundscheck": DEBUG, "wraparound": False,
              "initializedcheck": DEBUG, "cdivision": True, "embedsignature": True}

ext = Extension(
    "h3cy._kernels",
    sources=["pyx/_kernels.pyx"] + plain,
    include_dirs=["csrc", "pyx", numpy.get_include()],
    define_macros=[("NPY_NO_DEPRECATED_API", "NPY_1_7_API_VERSION")],
    extra_compile_args=BASE_CFLAGS,
    extra_link_args=["-pthread"],
    # the ISA files are compiled on the side (BuildExtWithISA) and linked as extra objects:
    # list them (and the .inc bodies) here too, or an edit to one never relinks the module
    depends=(csrc_files("*.h") + csrc_files("*.inc") + glob.glob("pyx/*.pxd") + glob.glob("pyx/*.pxi")
             + [f for files in csrc_sources()[1].values() for f in files]),
)

setup(
    ext_modules=cythonize([ext], compiler_directives=directives, include_path=["pyx"]),
    cmdclass={"build_ext": BuildExtWithISA},
)
