"""A LoRA's addend on one linear (csrc/gemm_lora.c): the down product on all threads in
fixed row chunks, the up product on the ISA's fp32 micro-kernel over packed B panels.

Against a float64 reference of y = x W^T + (x A^T * scale) B^T, for every ISA path this CPU
runs: equal to the ref path bit for bit (np.array_equal: a -0/+0 difference is the one
documented exception), the same bits on 1 and 2 threads, M across several 128-row chunks
and not a multiple of any MR, a fused-QKV-shaped B (each rank nonzero on one third of the
columns, interleaved per head as h3cy stores QKV), the SwiGLU pair epilogue and int8."""
import numpy as np
import pytest

from h3cy import _kernels
from h3cy.ops import Linear
from conftest import isa_params

M, K, HEADS, D, R = 300, 40, 3, 16, 6      # 3 chunks of 128 rows; N = 3 * HEADS * D


def qkv_b(rng, r):
    """B (3*HEADS*D, 3r): rank block p in [q, k, v] nonzero on part p's rows of every head
    (h3cy's interleaved QKV layout), as a to_q/to_k/to_v LoRA on the fused linear."""
    b = np.zeros((3 * HEADS * D, 3 * r), np.float32)
    for h in range(HEADS):
        for p in range(3):
            rows = slice(h * 3 * D + p * D, h * 3 * D + (p + 1) * D)
            b[rows, p * r:(p + 1) * r] = rng.standard_normal((D, r)).astype(np.float32)
    return b


def case(seed=0):
    rng = np.random.default_rng(seed)
    N = 3 * HEADS * D
    w = (rng.standard_normal((N, K)) * 0.2).astype(np.float32)
    a = rng.standard_normal((3 * R, K)).astype(np.float32)
    b = qkv_b(rng, R)
    scale = np.repeat(np.float32([0.5, 0.25, 2.0]), R).astype(np.float32)
    x = rng.standard_normal((M, K)).astype(np.float32)
    return w, a, b, scale, x


def run(w, a, b, scale, x, isa, threads, weights="fp32", pair=False, int_down=None):
    lin = Linear(w, weights=weights, isa=isa, threads=threads, pair=pair)
    lin.core.set_lora(_kernels.LoraCore(a, b, scale, isa=isa, int_down=int_down))
    return lin(x)


@pytest.mark.parametrize("isa", isa_params())
def test_lora_linear_matches_float64_and_ref_on_every_path(isa):
    w, a, b, scale, x = case()
    want = x.astype(np.float64) @ w.T.astype(np.float64) + \
        ((x.astype(np.float64) @ a.T.astype(np.float64)) * scale) @ b.T.astype(np.float64)
    got = run(w, a, b, scale, x, isa, 2)
    # observed 3e-7 relative (fp32 sums over K = 40 and 18 ranks); a rank in the wrong
    # place or a panel with the wrong ranks is O(1)
    err = np.abs(got - want).max() / np.abs(want).max()
    # AMX runs both products on bf16 tiles (x, A, u, B rounded to bf16: ~2^-8 relative per
    # factor of the LoRA's part, bound 1e-2); the other paths are float32 FMA
    assert err < (1e-2 if isa == "amx" else 1e-5), err
    ref = run(w, a, b, scale, x, "ref", 1)
    if isa != "amx":
        assert np.array_equal(got, ref)
    assert np.array_equal(run(w, a, b, scale, x, isa, 1), got)


@pytest.mark.parametrize("isa", isa_params(include_ref=False))
def test_lora_on_int8_and_swiglu_pair_equals_ref(isa):
    w, a, b, scale, x = case(1)
    for weights, pair in (("int8", False), ("fp32", True), ("int8", True)):
        got = run(w, a, b, scale, x, isa, 2, weights, pair)
        # the default down product on an int base reads the base's int8 rows on every path,
        # the reference's included (tests/test_lora_int_down.py)
        ref = run(w, a, b, scale, x, "ref", 1, weights, pair)
        if isa == "amx":    # the up product on bf16 tiles (a LoraCore made for "amx")
            assert np.abs(got - ref).max() <= 1e-2 * np.abs(ref).max(), (weights, pair)
        else:
            assert np.array_equal(got, ref), (weights, pair)
        base = Linear(w, weights=weights, isa=isa, threads=2, pair=pair)(x)
        assert not np.allclose(got, base, atol=1e-3), (weights, pair)   # the LoRA did something
