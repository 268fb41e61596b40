"""A LoRA's up product fused into the int kernel's final store (csrc/gemm.c int_block ->
the table's ukr_int_lora; AMX by default, the reference table when a LoRA asks with
LoraCore(fused=True)) against the second pass over the output (fused=False,
gemm_lora_add): the same values, bit for bit (np.array_equal; the fused sums run the
panel's rank range, whose extra terms are exact zero products).

Shapes that reach every branch of the driver: two K blocks (K = 1100, the int K block is
1024), M not a multiple of any MR, large M (int4 widened per K block on AMX) and small M
(weights walked 8 panels at a time), int8 and int4 (groups of 64: several scale segments
per K block), N no multiple of any NR, B with per-rank column runs (panels whose first rank
is no multiple of 32) and columns no rank reaches, the SwiGLU pair at a half H that is a
multiple of every NR (fused) and one that is not (the value half falls back to the second
pass), the gated residual epilogue."""
import numpy as np
import pytest

from h3cy import _kernels
from h3cy.ops import Linear
from conftest import isa_params

K, R = 1100, 17


def lora_b(rng, N):
    """B (N, R): each rank nonzero on a random run of columns, one rank all zero, and the
    last 5 columns reached by no rank."""
    b = np.zeros((N, R), np.float32)
    for r in range(R):
        if r == R // 2:
            continue
        lo = int(rng.integers(0, N - 5))
        hi = int(rng.integers(lo + 1, N - 4))
        b[lo:hi, r] = rng.standard_normal(hi - lo).astype(np.float32)
    return b


def make(isa, weights, pair, N, seed):
    rng = np.random.default_rng(seed)
    w = (rng.standard_normal((N, K)) * 0.05).astype(np.float32)
    a = (rng.standard_normal((R, K)) * 0.05).astype(np.float32)
    b = lora_b(rng, N)
    scale = rng.uniform(0.5, 2.0, R).astype(np.float32)
    extra = {"group_size": 64} if weights == "int4" else {}
    lin = Linear(w, weights=weights, isa=isa, threads=2, pair=pair, **extra)
    return lin, (a, b, scale)


def outputs(lin, x, kinds):
    M, N = x.shape[0], lin.N
    rng = np.random.default_rng(7)
    resid = rng.standard_normal((M, N)).astype(np.float32)
    gate = rng.standard_normal((3, N)).astype(np.float32)
    gate_row = (np.arange(M) % 3).astype(np.int32)
    out = []
    for kind in kinds:
        if kind == "plain":
            out.append(lin(x))
        elif kind == "swiglu":
            out.append(lin.swiglu(x))
        else:
            out.append(lin.residual(x, resid, gate, gate_row))
    return out


CASES = [  # (weights, pair, N, M)
    ("int8", False, 200, 150), ("int8", False, 200, 40), ("int4", False, 200, 150), ("int4", False, 200, 40),
    ("int8", True, 2 * 64, 150), ("int8", True, 2 * 100, 150), ("int4", True, 2 * 100, 40),
]


@pytest.mark.parametrize("isa", isa_params())
@pytest.mark.parametrize("weights,pair,N,M", CASES)
@pytest.mark.parametrize("int_down", [False, True], ids=["float_down", "int_down"])
def test_fused_lora_equals_second_pass(isa, weights, pair, N, M, int_down):
    lin, parts = make(isa, weights, pair, N, seed=N + M)
    x = np.random.default_rng(M).standard_normal((M, K)).astype(np.float32)
    kinds = ["plain", "swiglu"] if pair else ["plain", "residual"]
    base = outputs(lin, x, kinds)
    got = {}
    for fused in (False, True):
        lin.core.set_lora(_kernels.LoraCore(*parts, isa=isa, fused=fused, int_down=int_down))
        got[fused] = outputs(lin, x, kinds)
    lin.core.set_lora(None)
    for kind, b0, g0, g1 in zip(kinds, base, got[False], got[True]):
        assert np.array_equal(g1, g0), (kind, np.abs(g1 - g0).max())
        # the LoRA reached the output (its part is O(0.1) of an O(1) output)
        assert np.abs(g1 - b0).max() > 1e-2, kind
    # detached: the base bits again
    assert all(np.array_equal(p, q) for p, q in zip(outputs(lin, x, kinds), base))


def test_fused_kernel_runs_on_ref_when_asked():
    """The reference table's fused kernel sums over the NR-column panel's rank range (as
    the AMX tiles do), the second pass on ref over each column's own range: a rank whose u
    is infinite reaches the columns of its panel that it does not touch as inf * 0 = NaN
    only when fused.  Proves the fused kernel ran (values are otherwise the same)."""
    rng = np.random.default_rng(0)
    M, N, Kk = 9, 16, 100
    w = (rng.standard_normal((N, Kk)) * 0.2).astype(np.float32)
    a = rng.standard_normal((3, Kk)).astype(np.float32)
    b = rng.standard_normal((N, 3)).astype(np.float32)
    b[4:, 0] = 0.0                          # rank 0 on columns 0-3 only
    scale = np.float32([np.inf, 1.0, 1.0])
    x = rng.standard_normal((M, Kk)).astype(np.float32)
    nan_cols = {}
    for fused in (False, True):
        lin = Linear(w, weights="int8", isa="ref", threads=1)
        lin.core.set_lora(_kernels.LoraCore(a, b, scale, isa="ref", fused=fused))
        nan_cols[fused] = np.flatnonzero(np.isnan(lin(x)).any(axis=0)).tolist()
    assert nan_cols[False] == []
    assert nan_cols[True] == [4, 5, 6, 7]   # the rest of rank 0's 8-column ref panel
