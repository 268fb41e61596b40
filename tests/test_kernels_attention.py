"""Attention kernels (csrc/attn*.c) against a naive float64 softmax(q k^T * scale) v.

Every ISA path the host has runs every case, with 1 and 2 threads.  The oracle is
numpy in float64; the scalar ``ref`` path (the C specification) is checked against it
and each SIMD path is checked against both.  Bounds (max |got - want| / max |want|):
observed <= 2.4e-6 for every path and case here (float32 rounding of the dot products
and the exp); a wrong mask, a missed key tile or a skipped rescale gives >= 1e-2.
"""
import functools
import subprocess
import sys
import textwrap

import numpy as np
import pytest

import h3cy
from h3cy.ops.bf16 import round_bf16
from h3cy import _kernels
from h3cy.errors import H3ValueError
from h3cy.ops import Attention, attention, attention_workspace_bytes

from _compare import assert_close, assert_nontrivial, max_rel
from conftest import isa_params

MAX_REL = 2e-5   # observed <= 2.4e-6 (ref, S=1000 D=128); SIMD <= 2.1e-6
REL_L2 = 1e-5    # observed <= 1.2e-6
VS_REF = 2e-5    # SIMD vs the scalar ref, observed <= 2.2e-6

# (S, Hq, Hkv, D, causal): lengths around the tile sizes (16/64 queries, 128 keys, 6-row
# micro-tiles), head dims that are not multiples of the vector width (or odd), GQA and
# causal.
CASES = [
    (1, 1, 1, 8, False),
    (1, 2, 1, 64, True),
    (2, 2, 2, 72, True),
    (3, 4, 2, 128, False),
    (17, 4, 1, 256, True),
    (64, 3, 3, 64, False),
    (65, 2, 1, 8, True),
    (129, 2, 1, 5, False),      # odd head dim: micro-tile tails in both products
    (257, 2, 1, 72, True),
    (257, 2, 2, 256, False),
    (1000, 2, 2, 128, False),
    (1000, 4, 2, 64, True),
    (3001, 1, 1, 64, True),
]


def case_id(c):
    S, Hq, Hkv, D, causal = c
    return f"S{S}-H{Hq}x{Hkv}-D{D}" + ("-causal" if causal else "")


def naive(q, k, v, scale, causal, rows=None):
    """float64 softmax(q k^T * scale) v per head; rows: the query rows to compute."""
    S, Hq, D = q.shape
    g = Hq // k.shape[1]
    rows = np.arange(S) if rows is None else np.asarray(rows)
    out = np.empty((len(rows), Hq, D))
    for h in range(Hq):
        s = q[rows, h].astype(np.float64) @ k[:, h // g].astype(np.float64).T * scale
        if causal:
            s = np.where(np.arange(S)[None, :] <= rows[:, None], s, -np.inf)
        s -= s.max(axis=1, keepdims=True)
        p = np.exp(s)
        p /= p.sum(axis=1, keepdims=True)
        out[:, h] = p @ v[:, h // g].astype(np.float64)
    return out


@functools.lru_cache(maxsize=None)
def case_data(case):
    S, Hq, Hkv, D, causal = case
    rng = np.random.default_rng(S * 7919 + D)
    q = rng.standard_normal((S, Hq, D), dtype=np.float32)
    k = rng.standard_normal((S, Hkv, D), dtype=np.float32)
    v = rng.standard_normal((S, Hkv, D), dtype=np.float32)
    q *= 2.0   # peakier softmax than unit scores: the running max matters
    want = naive(q, k, v, 1.0 / np.sqrt(D), causal)
    ref = attention(q, k, v, causal=causal, isa="ref", threads=2)
    return q, k, v, want, ref


def run_guarded(att, q, k, v):
    """Run into the middle of a buffer with one guard row each side; check the guards."""
    S, Hq, D = q.shape
    buf = np.full((S + 2, Hq, D), 1234.5, dtype=np.float32)
    out = att(q, k, v, out=buf[1:-1])
    assert out.base is buf or out.base is buf.base
    assert np.all(buf[0] == 1234.5) and np.all(buf[-1] == 1234.5), "guard rows written"
    return buf[1:-1].copy()


@pytest.mark.parametrize("threads", [1, 2])
@pytest.mark.parametrize("case", CASES, ids=case_id)
@pytest.mark.parametrize("isa", isa_params())
def test_attention_matches_float64(isa, case, threads):
    q, k, v, want, ref = case_data(case)
    assert_nontrivial(want)
    att = Attention(causal=case[4], isa=isa, threads=threads)
    assert att.isa == isa
    got = run_guarded(att, q, k, v)
    assert_close(got, want, rel_l2_tol=REL_L2, max_rel_tol=MAX_REL, what=f"{isa} vs float64")
    if isa != "ref":
        assert_close(got, ref, max_rel_tol=VS_REF, what=f"{isa} vs ref")


@pytest.mark.parametrize("isa", isa_params())
def test_low_level_reports_the_path_that_ran(isa):
    q, k, v, want, _ = case_data(CASES[3])
    out = np.empty_like(q)
    pool = h3cy.ops.ThreadPool(2)
    ran = _kernels.attention(q, k, v, out, 1.0 / np.sqrt(q.shape[2]), False, isa, pool)
    assert ran == isa
    assert max_rel(out, want) <= MAX_REL


@pytest.mark.parametrize("isa", isa_params())
def test_thread_count_does_not_change_result(isa):
    # each (head, query tile) is computed by one thread in a fixed order: bit-identical
    q, k, v, _, _ = case_data((1000, 4, 2, 64, True))
    one = attention(q, k, v, causal=True, isa=isa, threads=1)
    two = attention(q, k, v, causal=True, isa=isa, threads=2)
    np.testing.assert_array_equal(one, two)


@pytest.mark.parametrize("isa", isa_params())
def test_views_into_fused_qkv_and_in_place(isa):
    rng = np.random.default_rng(5)
    S, Hq, Hkv, D = 130, 4, 2, 72
    fused = rng.standard_normal((S, Hq + 2 * Hkv, D), dtype=np.float32)  # [q heads|k|v]
    q, k, v = fused[:, :Hq], fused[:, Hq:Hq + Hkv], fused[:, Hq + Hkv:]
    assert not q.flags.c_contiguous                   # rows are strided
    want = naive(q, k, v, 0.3, True)
    kv = fused[:, Hq:].copy()
    got = attention(q, k, v, scale=0.3, causal=True, isa=isa)
    assert_close(got, want, max_rel_tol=MAX_REL, what="strided")
    # out == q: each unit packs its q rows before writing them; k, v are untouched
    res = attention(q, k, v, scale=0.3, causal=True, isa=isa, out=q)
    assert res is q
    assert_close(fused[:, :Hq], want, max_rel_tol=MAX_REL, what="in place")
    np.testing.assert_array_equal(fused[:, Hq:], kv)


@pytest.mark.parametrize("isa", isa_params())
def test_large_scores_and_explicit_scale(isa):
    # scores up to ~1e3: exp would overflow without the running max
    rng = np.random.default_rng(9)
    q = rng.standard_normal((300, 2, 32), dtype=np.float32) * 8
    k = rng.standard_normal((300, 2, 32), dtype=np.float32) * 8
    v = rng.standard_normal((300, 2, 32), dtype=np.float32)
    want = naive(q, k, v, 0.5, False)
    got = attention(q, k, v, scale=0.5, isa=isa)
    # observed 2e-6: near one-hot rows, the error is float32 rounding of the scores
    assert_close(got, want, max_rel_tol=1e-4, what="large scores")


def test_empty_sequence_is_a_no_op():
    q = np.empty((0, 2, 16), np.float32)
    out = attention(q, q[:, :1], q[:, :1])
    assert out.shape == (0, 2, 16)


BF16_CASES = [  # S, Hq, Hkv, D, causal
    (1, 2, 2, 64, False),      # one key: a 31-key masked tail
    (31, 3, 3, 64, False),     # one partial query half and key block
    (100, 4, 2, 128, False),   # grouped heads, 2 query units, key tail of 4
    (257, 2, 1, 128, False),   # 5 units' worth of tails
    (64, 1, 1, 32, False),     # one d chunk
    (70, 2, 2, 48, False),     # D not a multiple of 32: AMX falls back to AVX-512
    (70, 2, 2, 64, True),      # causal: AMX falls back to AVX-512
]


@pytest.mark.parametrize("case", BF16_CASES, ids=case_id)
@pytest.mark.parametrize("isa", isa_params())
def test_bf16_inputs(isa, case):
    """bf16_inputs (a bf16 model's q, k, v): non-causal attention with D % 32 == 0 multiplies
    bf16 pairs (AMX tiles, or VDPBF16PS on AVX-512 CPUs with AVX512-BF16) and rounds the
    softmax numerators to bf16 before P.V, as torch's bf16 attention does; every other path
    and case ignores the flag (the same bits)."""
    S, Hq, Hkv, D, causal = case
    rng = np.random.default_rng(S + D)
    q = round_bf16(rng.standard_normal((S, Hq, D), dtype=np.float32) * 2)
    k = round_bf16(rng.standard_normal((S, Hkv, D), dtype=np.float32))
    v = round_bf16(rng.standard_normal((S, Hkv, D), dtype=np.float32))
    scale = 1.0 / np.sqrt(D)
    want = naive(q, k, v, scale, causal)
    assert_nontrivial(want)
    got = {}
    for flag in (False, True):
        for threads in (1, 2):
            out = np.full_like(q, np.nan)
            _kernels.attention(q, k, v, out, scale, causal, isa, h3cy.ops.ThreadPool(threads), flag)
            got[flag, threads] = out
    np.testing.assert_array_equal(got[True, 1], got[True, 2])   # thread count: same bits
    if not _has_bf16_attention(isa) or causal or D % 32:
        np.testing.assert_array_equal(got[True, 2], got[False, 2])
    else:
        # bf16 numerators, ~2^-9 relative each: observed rel L2 8.1e-4 to 8.6e-4, max rel
        # 6.4e-4 to 8.8e-4 (AMX, Sapphire Rapids; S = 257-1000, D = 64/128), likewise with
        # VDPBF16PS on Zen 4; a wrong layout, pair order or key mask gives O(1)
        assert_close(got[True, 2], want, rel_l2_tol=3e-3, max_rel_tol=5e-3, what=f"{isa} bf16 vs float64")
        if S > 1:   # (one key: both give v itself)
            assert not np.array_equal(got[True, 2], got[False, 2]), "the bf16 kernel did not run"


@pytest.mark.parametrize("isa", isa_params())
def test_bf16_inputs_on_fused_qkv_views_and_in_place(isa):
    """The bf16 kernels read q, k, v through their row strides (views into one fused QKV
    row, as the DiT's are) and may write out over q."""
    rng = np.random.default_rng(6)
    S, Hq, Hkv, D = 150, 4, 2, 64
    fused = round_bf16(rng.standard_normal((S, Hq + 2 * Hkv, D), dtype=np.float32))
    q, k, v = fused[:, :Hq], fused[:, Hq:Hq + Hkv], fused[:, Hq + Hkv:]
    assert not q.flags.c_contiguous
    want = naive(q, k, v, 0.125, False)
    kv = fused[:, Hq:].copy()
    pool = h3cy.ops.ThreadPool(2)
    out = np.empty((S, Hq, D), np.float32)
    _kernels.attention(q, k, v, out, 0.125, False, isa, pool, True)
    tol = dict(rel_l2_tol=3e-3, max_rel_tol=5e-3) if _has_bf16_attention(isa) else dict(max_rel_tol=MAX_REL)
    assert_close(out, want, what="strided", **tol)
    _kernels.attention(q, k, v, q, 0.125, False, isa, pool, True)   # out == q
    np.testing.assert_array_equal(fused[:, :Hq], out)
    np.testing.assert_array_equal(fused[:, Hq:], kv)


def _has_bf16_attention(isa):
    """Paths whose attention takes bf16_inputs: AMX tiles, or AVX-512 with AVX512-BF16."""
    return isa == "amx" or (isa == "avx512" and "avx512_bf16" in h3cy.ops.cpu_features())


def test_workspace_is_independent_of_S():
    small = attention_workspace_bytes(64, 56, 56, 128, threads=2)
    big = attention_workspace_bytes(40_000, 56, 56, 128, threads=2)
    assert small == big > 0
    # per thread it is a few query/key tiles: far below one head of K (S * D floats)
    assert big < 2 * 400 * 1024
    assert attention_workspace_bytes(10, 1, 1, 257) == 0


BAD = [
    ("D > 256", lambda: (np.zeros((4, 1, 257), np.float32),) * 3, "head dim"),
    ("Hq % Hkv", lambda: (np.zeros((4, 3, 8), np.float32), np.zeros((4, 2, 8), np.float32),
                          np.zeros((4, 2, 8), np.float32)), "multiple"),
    ("float64", lambda: (np.zeros((4, 2, 8)),) * 3, "float32"),
    ("2-d", lambda: (np.zeros((4, 8), np.float32),) * 3, "shape"),
    ("S mismatch", lambda: (np.zeros((4, 2, 8), np.float32), np.zeros((5, 2, 8), np.float32),
                            np.zeros((5, 2, 8), np.float32)), "shape"),
    ("D mismatch", lambda: (np.zeros((4, 2, 8), np.float32), np.zeros((4, 2, 16), np.float32),
                            np.zeros((4, 2, 16), np.float32)), "shape"),
    ("k/v heads", lambda: (np.zeros((4, 2, 8), np.float32), np.zeros((4, 2, 8), np.float32),
                           np.zeros((4, 1, 8), np.float32)), "shape"),
    ("strided D", lambda: (np.zeros((4, 2, 16), np.float32)[:, :, ::2],) * 3, "contiguous"),
    ("transposed", lambda: (np.zeros((2, 4, 8), np.float32).transpose(1, 0, 2),) * 3,
     "contiguous"),
    ("list", lambda: ([[[0.0]]],) * 3, "numpy array"),
]


@pytest.mark.parametrize("name,make,msg", BAD, ids=[b[0] for b in BAD])
def test_bad_input_raises_value_error(name, make, msg):
    q, k, v = make()
    with pytest.raises(H3ValueError, match=msg):
        attention(q, k, v)


def test_bad_out_and_options():
    q = np.zeros((4, 2, 8), np.float32)
    kv = np.zeros((4, 1, 8), np.float32)
    with pytest.raises(H3ValueError, match="shape"):
        attention(q, kv, kv, out=np.zeros((4, 1, 8), np.float32))
    ro = np.zeros((4, 2, 8), np.float32)
    ro.flags.writeable = False
    with pytest.raises(H3ValueError, match="read-only"):
        attention(q, kv, kv, out=ro)
    fused = np.zeros((4, 3, 8), np.float32)
    with pytest.raises(H3ValueError, match="overlaps k"):   # caught in C
        attention(fused[:, :2], fused[:, 2:], fused[:, 2:], out=fused[:, 1:])
    with pytest.raises(H3ValueError, match="scale"):
        attention(q, kv, kv, scale=float("nan"))
    with pytest.raises(H3ValueError, match="threads"):
        attention(q, kv, kv, threads=0)
    with pytest.raises(ValueError):
        attention(q, kv, kv, isa="sse9")


@pytest.mark.parametrize("qshape,kvshape,msg", [
    ((4, 1, 257), (4, 1, 257), "head dim D must be in 1..256, got 257"),
    ((4, 3, 8), (4, 2, 8), "Hq=3 is not a multiple of Hkv=2"),
])
def test_c_validation_messages(qshape, kvshape, msg):
    # bypass the Python checks: the C entry point must refuse on its own, naming the value
    q = np.zeros(qshape, np.float32)
    kv = np.zeros(kvshape, np.float32)
    out = np.zeros_like(q)
    with pytest.raises(H3ValueError, match=msg):
        _kernels.attention(q, kv, kv, out, 1.0, False, "ref", h3cy.ops.ThreadPool(1))


LONG_S_SCRIPT = textwrap.dedent("""
    import resource, sys, numpy as np
    from h3cy.ops import Attention
    S, Hq, Hkv, D = 20_000, 2, 1, 64
    rng = np.random.default_rng(3)
    q = rng.standard_normal((S, Hq, D), dtype=np.float32)
    k = rng.standard_normal((S, Hkv, D), dtype=np.float32)
    v = rng.standard_normal((S, Hkv, D), dtype=np.float32)
    out = np.full((S, Hq, D), 7.0, np.float32)      # written now, so in the baseline
    att = Attention(causal=True, threads=2)
    att(q[:200], k[:200], v[:200], out=out[:200])   # warm the pool and the code
    before = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss * 1024
    att(q, k, v, out=out)
    after = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss * 1024
    rows = [0, 1, 127, 9_999, 12_345, S - 1]
    np.save(sys.argv[1], out[rows])
    print(after - before, q.nbytes + k.nbytes + v.nbytes + out.nbytes,
          att.workspace_bytes(S, Hq, Hkv, D), att.isa)
""")


def test_long_sequence_memory_is_linear(tmp_path):
    # A fresh process, so the peak RSS reflects this call only.  An S x S score matrix
    # would be 1.6 GB per head; the online softmax needs only per-thread tiles.
    path = tmp_path / "rows.npy"
    res = subprocess.run([sys.executable, "-c", LONG_S_SCRIPT, str(path)],
                         capture_output=True, text=True, timeout=300)
    assert res.returncode == 0, res.stderr
    growth, arrays, ws, isa = res.stdout.split()
    growth, arrays, ws = int(growth), int(arrays), int(ws)
    # observed growth 128 KiB (the workspace) for 30.7 MB of arrays; one S x S score
    # matrix would be 52x the arrays.  Bound: 1/8 of q+k+v+out.
    assert growth <= arrays // 8, f"peak RSS grew by {growth} bytes ({isa})"
    assert ws < 1 << 20                      # per-thread tiles, independent of S
    S, Hq, Hkv, D = 20_000, 2, 1, 64
    rng = np.random.default_rng(3)
    q = rng.standard_normal((S, Hq, D), dtype=np.float32)
    k = rng.standard_normal((S, Hkv, D), dtype=np.float32)
    v = rng.standard_normal((S, Hkv, D), dtype=np.float32)
    rows = [0, 1, 127, 9_999, 12_345, S - 1]
    want = naive(q, k, v, 1.0 / np.sqrt(D), True, rows=rows)
    # observed 1e-6: the long causal rows sum 20,000 probabilities in float32
    assert_close(np.load(path), want, max_rel_tol=MAX_REL, what=f"S=20000 rows ({isa})")
