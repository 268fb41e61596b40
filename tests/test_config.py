"""ISA selection (H3CY_ISA, isa=), thread defaults and the errors around them."""
import os
import subprocess
import sys

import numpy as np
import pytest

import h3cy
from h3cy import UnsupportedCPUError
from h3cy.errors import H3ValueError


def run_py(code, **env):
    full = dict(os.environ)
    full.update(env)
    return subprocess.run([sys.executable, "-c", code], env=full, capture_output=True,
                          text=True, timeout=120)


def test_env_isa_ref_is_used_by_new_objects():
    r = run_py("import numpy as np, h3cy; w = np.ones((4, 8), np.float32);"
               "print(h3cy.ops.active_isa(), h3cy.ops.Linear(w, weights='fp32').isa)",
               H3CY_ISA="ref")
    assert r.returncode == 0, r.stderr
    assert r.stdout.split() == ["ref", "ref"]


def test_env_isa_unknown_or_missing_is_a_clear_error():
    r = run_py("import h3cy; h3cy.ops.active_isa()", H3CY_ISA="sse9")
    assert r.returncode != 0 and "unknown ISA 'sse9'" in r.stderr
    missing = next(i for i in ("neon", "amx", "avx512", "avx2") if i not in h3cy.ops.available_isas())
    r = run_py("import h3cy; h3cy.ops.active_isa()", H3CY_ISA=missing)
    assert r.returncode != 0 and "UnsupportedCPUError" in r.stderr and missing in r.stderr


def test_isa_max_hides_the_paths_above_it():
    """H3CY_ISA_MAX=ref: only ref is listed and chosen, a higher path named explicitly (by
    argument or H3CY_ISA) is refused naming the variable; the real CPU features are still
    reported.  With the cap at the best path nothing changes."""
    code = ("import numpy as np, h3cy\n"
            "print(h3cy.ops.available_isas(), h3cy.ops.active_isa())\n"
            "w = np.ones((4, 8), np.float32)\n"
            "for isa in ('avx2', 'avxvnni', 'avx512', 'amx', 'neon'):\n"
            "    try:\n"
            "        h3cy.ops.Linear(w, weights='fp32', isa=isa); print(isa, 'ran')\n"
            "    except h3cy.UnsupportedCPUError as e:\n"
            "        print(isa, 'refused', 'H3CY_ISA_MAX' in str(e))\n")
    r = run_py(code, H3CY_ISA_MAX="ref")
    assert r.returncode == 0, r.stderr
    lines = r.stdout.splitlines()
    assert lines[0] == "['ref'] ref"
    for isa in ("avx2", "avxvnni", "avx512", "amx", "neon"):
        said = f"{isa} refused {h3cy._kernels.isa_supported(isa)}"   # hidden, or absent
        assert said in lines, (isa, lines)
    best = h3cy.ops.available_isas()[-1]
    r = run_py("import h3cy; print(h3cy.ops.available_isas(), h3cy.ops.active_isa())", H3CY_ISA_MAX=best)
    assert r.stdout.strip() == f"{h3cy.ops.available_isas()} {h3cy.ops.active_isa()}", r.stderr
    r = run_py("import h3cy; h3cy.ops.active_isa()", H3CY_ISA_MAX="ref", H3CY_ISA=best)
    assert (r.returncode != 0) == (best != "ref")
    r = run_py("import h3cy; h3cy.ops.available_isas()", H3CY_ISA_MAX="sse9")
    assert r.returncode != 0 and "H3CY_ISA_MAX='sse9'" in r.stderr


def test_isa_argument_overrides_and_is_reported():
    w = np.ones((4, 8), np.float32)
    for isa in h3cy.ops.available_isas():
        assert h3cy.ops.Linear(w, weights="fp32", isa=isa).isa == isa
    missing = [i for i in ("ref", "avx2", "avxvnni", "avx512", "amx", "neon") if i not in h3cy.ops.available_isas()]
    for isa in missing:
        with pytest.raises(UnsupportedCPUError, match=isa):
            h3cy.ops.Linear(w, weights="fp32", isa=isa)
    with pytest.raises(ValueError, match="unknown ISA"):
        h3cy.ops.Linear(w, weights="fp32", isa="mmx")


def test_best_isa_is_supported_and_ref_always_present():
    avail = h3cy.ops.available_isas()
    assert "ref" in avail
    assert h3cy.ops.resolve_isa(None) in avail or os.environ.get("H3CY_ISA")
    assert all(isinstance(f, str) for f in h3cy.ops.cpu_features())


def test_avxvnni_path_follows_the_cpu_feature():
    """avxvnni runs where CPUID says AVX-VNNI (and AVX2 is usable), never elsewhere; on such
    a CPU without AVX-512 it is the default, and its int GEMMs are reported as avxvnni."""
    feats = set(h3cy.ops.cpu_features())
    has = "avx_vnni" in feats and h3cy._kernels.isa_supported("avx2")
    assert h3cy._kernels.isa_supported("avxvnni") == has
    assert h3cy._kernels.isa_vector("avxvnni") == "avx2"
    if has and not h3cy._kernels.isa_supported("avx512"):
        assert h3cy._kernels.isa_best() == "avxvnni"
    if not has:
        assert h3cy._kernels.isa_best() != "avxvnni"
        with pytest.raises(UnsupportedCPUError, match="AVX-VNNI|AVX2"):
            h3cy.ops.Linear(np.ones((4, 8), np.float32), weights="int8", isa="avxvnni")
    else:
        assert h3cy.ops.Linear(np.ones((4, 8), np.float32), weights="int8", isa="avxvnni").isa == "avxvnni"


def test_set_num_threads_sets_the_default():
    w = np.ones((4, 8), np.float32)
    try:
        h3cy.set_num_threads(3)
        assert h3cy.get_num_threads() == 3
        assert h3cy.ops.Linear(w, weights="fp32").threads == 3
        assert h3cy.ops.Linear(w, weights="fp32", threads=1).threads == 1
    finally:
        h3cy.set_num_threads(None)
    n = h3cy.get_num_threads()
    assert 1 <= n <= (os.cpu_count() or 1)


@pytest.mark.parametrize("bad", [0, -2, 2.5, True, "4"])
def test_bad_thread_counts_raise(bad):
    """One check, one error type (H3ValueError, a ValueError) wherever a thread count goes."""
    with pytest.raises(H3ValueError, match="threads must be a positive int"):
        h3cy.set_num_threads(bad)
    with pytest.raises(H3ValueError, match="threads must be a positive int"):
        h3cy.ops.Linear(np.ones((2, 2), np.float32), weights="fp32", threads=bad)
    with pytest.raises(H3ValueError, match="threads must be a positive int"):
        h3cy.ops.Compute.resolve("fp32", threads=bad)


def test_env_threads():
    r = run_py("import h3cy; print(h3cy.get_num_threads())", H3CY_THREADS="5")
    assert r.returncode == 0 and r.stdout.strip() == "5"
    r = run_py("import h3cy; h3cy.get_num_threads()", H3CY_THREADS="zero")
    assert r.returncode != 0 and "H3CY_THREADS" in r.stderr


def test_selfcheck_cli_runs_and_verifies():
    r = subprocess.run([sys.executable, "-m", "h3cy", "selfcheck", "--size", "64,96,80", "--shapes", "64x96", "--rows", "16", "--no-save",
                        "--threads", "1"], capture_output=True, text=True, timeout=300)
    assert r.returncode == 0, r.stdout + r.stderr
    assert "ISA path" in r.stdout and "selfcheck: ok" in r.stdout
    for mode in ("fp32", "bf16", "fp16", "int8", "int4"):
        assert f"h3cy {mode}" in r.stdout


def test_portable_int_path_warns_once(monkeypatch):
    import warnings
    from h3cy.ops import _base as ops
    monkeypatch.setattr(ops, "_warned", set())
    feats = [f for f in ops.cpu_features() if f != "avx512_vnni"]
    monkeypatch.setattr(ops, "cpu_features", lambda: feats)
    with warnings.catch_warnings(record=True) as w:
        warnings.simplefilter("always")
        ops._warn_if_portable("int8", "avx512")
        ops._warn_if_portable("int8", "avx512")
        ops._warn_if_portable("bf16", "avx512")
        ops._warn_if_portable("int4", "amx")
    msgs = [str(x.message) for x in w]
    assert len(msgs) == 1 and "without VNNI" in msgs[0]


def test_env_hugepages_off_is_passed_down_and_keeps_the_bits():
    """H3CY_HUGEPAGES=0 is read by h3cy._config (the C library reads no environment) and
    reaches every linear the kernels make; a GEMM large enough for huge pages (a 16 MB
    weight and workspace) gives the same bits either way."""
    code = ("import numpy as np, h3cy; from h3cy import _config; rng = np.random.default_rng(0);"
            "w = rng.standard_normal((2048, 2048)).astype(np.float32); x = rng.standard_normal((256, 2048)).astype(np.float32);"
            "y = h3cy.ops.Linear(w, weights='fp32', isa='ref', threads=1)(x);"
            "print(_config.huge_pages(), int(y.view(np.uint32).astype(np.uint64).sum()))")
    on = run_py(code, H3CY_HUGEPAGES="1")
    off = run_py(code, H3CY_HUGEPAGES="0")
    assert on.returncode == 0 and off.returncode == 0, on.stderr + off.stderr
    assert on.stdout.split()[0] == "True" and off.stdout.split()[0] == "False"
    assert on.stdout.split()[1] == off.stdout.split()[1]


@pytest.mark.parametrize("value, want", [
    ("", ("i8mm", "bf16")), ("all", ("i8mm", "bf16")), ("none", ()), ("i8mm", ("i8mm",)),
    ("bf16", ("bf16",)), ("bf16,i8mm", ("i8mm", "bf16")), (" I8MM ", ("i8mm",)),
])
def test_env_neon_ext_is_parsed_in_config(value, want):
    """H3CY_NEON_EXT (the neon path's SMMLA / BFMMLA switch) is read by h3cy._config; the
    C library gets it per linear as h3_linear_opts.ext_off.  Off ARM no linear uses an
    extension, whatever the variable says (on AArch64 the qemu C test checks the choice)."""
    code = ("import numpy as np, h3cy; from h3cy import _config, _kernels;"
            "l = h3cy.ops.Linear(np.ones((4, 8), np.float32), weights='int8', isa='ref');"
            "print(','.join(_config.neon_extensions()) or '-', ','.join(l.extensions) or '-',"
            " ','.join(h3cy.ops.neon_extensions()) or '-', ','.join(_kernels.cpu_extensions()) or '-')")
    r = run_py(code, H3CY_NEON_EXT=value)
    assert r.returncode == 0, r.stderr
    allowed, used, active, cpu = r.stdout.split()
    assert allowed == (",".join(want) or "-")
    assert used == "-"                       # isa='ref' never uses an extension
    assert active == (",".join(n for n in cpu.split(",") if n in want) or "-")
    if os.uname().machine not in ("aarch64", "arm64"):
        assert cpu == "-" and active == "-"  # HWCAP2 exists on AArch64 only


@pytest.mark.parametrize("value", ["sve", "i8mm,sve", ","])
def test_env_neon_ext_unknown_is_a_clear_error(value):
    r = run_py("import numpy as np, h3cy; h3cy.ops.Linear(np.ones((4, 8), np.float32), weights='int8')",
               H3CY_NEON_EXT=value)
    assert r.returncode != 0 and "H3CY_NEON_EXT" in r.stderr and "i8mm" in r.stderr


@pytest.mark.parametrize("value, tiles", [("", "auto"), ("auto", "auto"), ("0", "off"), ("1", "on"), (" 1 ", "on")])
def test_env_gguf_tiles_picks_the_gguf_layers_path(value, tiles):
    """H3CY_GGUF_TILES is read by h3cy._config and moves only the GGUF layers of the 'amx'
    path: by default (auto) the types with a scale per 32 values to the AMX tile kernel
    (csrc/gguf_amx.c; the same bits) and those per 16 (Q6_K, Q3_K, Q2_K) and the IQ4s (a
    linear with one such part) to the AVX-512 VNNI kernel; 1 / 0 put every type on the tiles / on VNNI;
    every other path is kept."""
    code = ("from h3cy import _config; from h3cy.weights.linears import gguf_isa;"
            "print(_config.gguf_tiles(), *(gguf_isa(i, t) for i in ('amx', 'avx512', 'avx2', 'ref', 'neon')"
            " for t in (['Q8_0'], ['Q4_K', 'Q5_K'], ['Q6_K'], ['Q4_K', 'Q6_K'], ['IQ4_XS'])))")
    r = run_py(code, H3CY_GGUF_TILES=value)
    assert r.returncode == 0, r.stderr
    amx = {"auto": ["amx", "amx", "avx512", "avx512", "avx512"], "on": ["amx"] * 5, "off": ["avx512"] * 5}[tiles]
    want = [tiles] + amx + [i for i in ("avx512", "avx2", "ref", "neon") for _ in range(5)]
    assert r.stdout.split() == want


def test_env_gguf_tiles_unknown_is_a_clear_error():
    r = run_py("from h3cy.weights.linears import gguf_isa; gguf_isa('amx', ['Q8_0'])", H3CY_GGUF_TILES="yes")
    assert r.returncode != 0 and "H3CY_GGUF_TILES" in r.stderr and "auto" in r.stderr


@pytest.mark.parametrize("var, value", [("H3CY_GGUF_KQ", "yes"), ("H3CY_GGUF_KQ", "4"), ("H3CY_GGUF_GROUP", "0"),
                                        ("H3CY_GGUF_GROUP", "17"), ("H3CY_GGUF_GROUP", "four"),
                                        ("H3CY_GGUF_Q8D", "on"), ("H3CY_GGUF_Q8D", "3"), ("H3CY_GGUF_PF", "on"),
                                        ("H3CY_GGUF_PF", "3")])
def test_env_gguf_c_knobs_unknown_is_a_clear_error(var, value):
    """H3CY_GGUF_KQ, H3CY_GGUF_GROUP, H3CY_GGUF_Q8D and H3CY_GGUF_PF reach each GGUF linear through h3cy._config (the C
    library reads no environment); a bad value is an error naming the variable where a GGUF
    linear is made."""
    code = ("import numpy as np, sys; sys.path.insert(0, 'tests'); from _gguf_files import random_blocks, TYPES;"
            "from h3cy import _kernels; _kernels.linear_attach_gguf([random_blocks('Q8_0', 16, 64,"
            " np.random.default_rng(0))], [TYPES['Q8_0'][0]], 16, 64, None, 0, 'ref', _kernels.ThreadPool(1))")
    assert run_py(code).returncode == 0
    r = run_py(code, **{var: value})
    assert r.returncode != 0 and var in r.stderr


def test_env_gguf_group_and_prefetch_keep_the_bits():
    """H3CY_GGUF_GROUP moves only the order of the driver's panel loop (column panels per pass
    over the K blocks), and H3CY_GGUF_PF=0 / 2 only drop or add the prefetch of the next K
    block's weights, and H3CY_GGUF_KQ=1 only keeps the activations' rows in place for the amx
    path's Q4_K kernel (not its tile layout), never a result: a Q4_K and a Q8_0 linear give the
    same bits with 3 panels a pass, without the prefetch and with it on every path, and with
    the rows in place, as with the defaults, on the machine's best path and ref."""
    code = ("import numpy as np, hashlib; from h3cy import _kernels, ops; import sys; sys.path.insert(0, 'tests');"
            "from _gguf_files import random_blocks, TYPES;"
            "from h3cy.weights.linears import gguf_isa; rng = np.random.default_rng(1);"
            "x = rng.standard_normal((70, 512)).astype(np.float32); h = hashlib.sha1();"
            "[h.update(np.ascontiguousarray(_kernels.linear_attach_gguf([random_blocks(t, 90, 512, rng)], [TYPES[t][0]],"
            " 90, 512, None, 0, gguf_isa(i, [t]), _kernels.ThreadPool(2)).forward(x, y := np.empty((70, 90), np.float32), 0)"
            " or y).tobytes()) for i in ('ref', ops.active_isa()) for t in ('Q4_K', 'Q8_0')]; print(h.hexdigest())")
    runs = [run_py(code), run_py(code, H3CY_GGUF_GROUP="3"), run_py(code, H3CY_GGUF_PF="0"),
            run_py(code, H3CY_GGUF_PF="2"), run_py(code, H3CY_GGUF_KQ="1")]
    assert all(r.returncode == 0 for r in runs), "".join(r.stderr for r in runs)
    assert len({r.stdout for r in runs}) == 1
