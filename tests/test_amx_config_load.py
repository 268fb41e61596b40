"""Every AMX tile configuration load in csrc/ and bench/ tells the compiler it reads the
whole 64-byte configuration.

GCC 12's ``_tile_loadconfig`` (amxtileintrin.h) is an asm whose memory operand is the first 8
bytes of the configuration, so at -O2 GCC removed the stores of ``rows[]`` and ``colsb[]`` as
dead: LDTILECFG then configured every tile 0 x 0 and the first tile instruction raised #UD
(SIGILL in the int8 GEMM on a 2-core Xeon with AMX, session 32).  csrc/amx_tiles.h's
``amx_load_config`` puts an empty asm taking the whole struct before the intrinsic; the C
sources go through it, the standalone bench programs through bench/amx_bench.h's load_config.
On an AMX host the GEMM tests run the kernels themselves; this one holds the rule on every host.
"""
import os
import re

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
FENCE = re.compile(r'__asm__ volatile\(""\s*::\s*"m"\(\*?\w+\)\);')


def sources(folder, exts=(".c", ".h", ".inc")):
    top = os.path.join(ROOT, folder)
    for name in sorted(os.listdir(top)):
        if name.endswith(exts):
            yield os.path.join(top, name)


def loadconfig_calls(path):
    """(line number, the line and the one before it) of each _tile_loadconfig call"""
    lines = open(path, encoding="utf-8").read().splitlines()
    return [(i + 1, lines[i], lines[i - 1] if i else "") for i, ln in enumerate(lines)
            if "_tile_loadconfig(" in ln and not ln.lstrip().startswith(("*", "/*", "//"))]


def test_csrc_loads_tile_configurations_only_through_amx_load_config():
    calls = {p: loadconfig_calls(p) for p in sources("csrc")}
    calls = {os.path.basename(p): c for p, c in calls.items() if c}
    assert list(calls) == ["amx_tiles.h"], f"_tile_loadconfig outside amx_tiles.h: {calls}"
    (line, text, before), = calls["amx_tiles.h"]
    assert text.strip() == "_tile_loadconfig(c);" and FENCE.search(before), (line, before, text)
    src = open(os.path.join(ROOT, "csrc", "amx_tiles.h"), encoding="utf-8").read()
    helper = src[src.index("static inline void amx_load_config("):]
    assert helper.index("_tile_loadconfig(c);") < helper.index("}")


def test_bench_programs_fence_their_own_configuration_loads():
    seen = 0
    for p in sources("bench"):
        for line, text, before in loadconfig_calls(p):
            seen += 1
            assert FENCE.search(before), f"{os.path.basename(p)}:{line}: {text.strip()} without the fence before it"
    assert seen >= 1  # amx_bench.h's load_config (a rule over nothing would pass vacuously)
