"""The NVFP4 linear (csrc/gemm_nvfp4.c): a GEMM over a file's E2M1 codes and blocked e4m3
scales as stored, on every path this CPU runs, against an independent float64 decode
(tests/_nvfp4_blocks.py) and matmul on the same quantised activations."""
import numpy as np
import pytest

from h3cy import _kernels
from h3cy.errors import H3ValueError
from _nvfp4_blocks import bf16_act, decode, quant_act, random_part


def _isas():
    return ["ref"] + [i for i in ("avx2", "avx512", "amx", "neon") if _kernels.isa_supported(i)]


def _rel(a, b):
    return float(np.linalg.norm(a - b) / np.linalg.norm(b))


def _act(isa):
    """the activations the path multiplies: on AMX the bf16 route (h3_linear_nvfp4_route
    "auto"), x rounded to bf16; elsewhere x quantised to int8 per 32"""
    return bf16_act if isa == "amx" else quant_act


@pytest.mark.parametrize("isa", _isas())
@pytest.mark.parametrize("N,K,awq", [(37, 288, False), (300, 544, True), (16, 1056, True)])
def test_gemm_matches_float64_on_quantised_activations(isa, N, K, awq):
    """rel L2 <= 1e-5 against float64 (x [* pre] quantised as documented) @ W^T (observed
    ~1e-7: float32 accumulation); a swapped nibble order, an unswizzled scale read as
    plain or a missing pre-scale gives ~1.  N not a multiple of 16 or 128 (padded scale
    tiles), K over two decoded K blocks (512), rows padded in the file.  Every path's
    result is the reference's, bit for bit (but AMX's: the bf16 route, against float64 on
    the bf16-rounded activations); against the unquantised x the error is the
    activation quantisation's (bound 2e-2, observed ~5e-3)."""
    rng = np.random.default_rng(N + K)
    part = random_part(N, K, rng, awq, pad_rows=3)
    W = decode(part, N, K)
    M = 67                                   # over one block of 64 rows, odd
    x = rng.standard_normal((M, K)).astype(np.float32)
    x[0, :32] = 0.0                          # an all-zero activation block
    x[1, 5] = 40.0                           # an outlier channel
    bias = rng.standard_normal(N).astype(np.float32)
    pool = _kernels.ThreadPool(2)
    core = _kernels.linear_attach_nvfp4([part], N, K, bias, 0, isa, pool)
    y = np.full((M, N), np.nan, np.float32)
    core.forward(x, y, 0)
    pre = part[3]
    want = _act(isa)(x, pre) @ (W / pre[None, :] if awq else W).T + bias
    assert _rel(y, want) <= 1e-5
    full = x.astype(np.float64) @ W.T + bias
    assert _rel(y, full) <= 2e-2
    ref = _kernels.linear_attach_nvfp4([part], N, K, bias, 0, "ref", _kernels.ThreadPool(1))
    y_ref = np.empty_like(y)
    ref.forward(x, y_ref, 0)
    if isa != "amx":                                 # (AMX: the bf16 route, tests/test_nvfp4_bf16_route.py)
        np.testing.assert_array_equal(y, y_ref)      # the same bits on every path and thread count
    deq = core.dequantized()
    assert np.abs(deq - W).max() <= 1e-6 * np.abs(W).max()


@pytest.mark.parametrize("isa", _isas())
def test_nibble_order_and_scale_tiles(isa):
    """A hand-built row: byte j = codes (2j, 2j+1) as (high, low); the block scale of row r
    and block c placed by hand in the blocked layout; one input at a time picks each weight."""
    N, K = 130, 64                           # rows 128, 129 in the second 128-row tile
    codes = np.zeros((N, K // 2), np.uint8)
    codes[129, 0] = (0x7 << 4) | 0x9         # w[129, 0] = +6, w[129, 1] = -0.5
    codes[129, 20] = 0x0A                    # w[129, 41] = -1 (block 2)
    blocked = np.zeros(256 * 4, np.uint8)
    ncb = 1
    off = lambda r, c: (((r // 128) * ncb + c // 4) * 32 + r % 32) * 16 + ((r % 128) // 32) * 4 + c % 4  # noqa: E731
    blocked[off(129, 0)] = 0x38              # e4m3 1.0
    blocked[off(129, 2)] = 0x40              # e4m3 2.0
    core = _kernels.linear_attach_nvfp4([(codes, blocked, 0.5, None)], N, K, None, 0, isa, _kernels.ThreadPool(1))
    x = np.zeros((3, K), np.float32)
    x[0, 0], x[1, 1], x[2, 41] = 1.0, 1.0, 1.0
    y = np.empty((3, N), np.float32)
    core.forward(x, y, 0)
    assert y[0, 129] == 6.0 * 0.5 and y[1, 129] == -0.5 * 0.5 and y[2, 129] == -1.0 * 2.0 * 0.5
    assert not np.any(np.delete(y, 129, axis=1))


@pytest.mark.parametrize("isa", _isas())
def test_parts_pair_and_residual(isa):
    """Three parts (q/k/v-like, two with different AWQ scales: separate quantised
    activations), a SwiGLU pair from two tensors, the gated residual epilogue."""
    rng = np.random.default_rng(5)
    M, K, H = 9, 256, 40
    pool = _kernels.ThreadPool(2)
    parts = [random_part(H, K, rng, awq=i > 0) for i in range(3)]
    Ws = [decode(p, H, K) for p in parts]
    x = rng.standard_normal((M, K)).astype(np.float32)
    want = np.concatenate([_act(isa)(x, p[3]) @ (W / (p[3][None, :] if p[3] is not None else 1)).T
                           for p, W in zip(parts, Ws)], axis=1)
    core = _kernels.linear_attach_nvfp4(parts, 3 * H, K, None, 0, isa, pool)
    y = np.empty((M, 3 * H), np.float32)
    core.forward(x, y, 0)
    assert _rel(y, want) <= 1e-5
    resid = rng.standard_normal((M, 3 * H)).astype(np.float32)
    gate = rng.standard_normal((2, 3 * H)).astype(np.float32)
    rows = (np.arange(M) % 2).astype(np.int32)
    y2 = np.empty_like(y)
    core.forward(x, y2, 2, resid=resid, gate=gate, gate_row=rows)
    assert _rel(y2, resid + gate[rows] * want) <= 1e-5
    bias = rng.standard_normal(2 * H).astype(np.float32)
    pc = _kernels.linear_attach_nvfp4(parts[1:], 2 * H, K, bias, 1, isa, pool)
    y3 = np.empty((M, H), np.float32)
    pc.forward(x, y3, 1)
    g, v = want[:, H:2 * H] + bias[:H], want[:, 2 * H:] + bias[H:]
    assert _rel(y3, g / (1 + np.exp(-g)) * v) <= 1e-5


def test_attach_refuses_bad_input():
    rng = np.random.default_rng(9)
    pool = _kernels.ThreadPool(1)
    codes, scales, s2, _ = random_part(20, 64, rng)
    with pytest.raises(ValueError, match="multiple of 32"):
        _kernels.linear_attach_nvfp4([(np.ascontiguousarray(codes[:, :24]), scales[:128 * 4], s2, None)], 20, 48, None, 0, "ref", pool)
    with pytest.raises(ValueError, match="blocked"):
        _kernels.linear_attach_nvfp4([(codes, scales[:100], s2, None)], 20, 64, None, 0, "ref", pool)
    with pytest.raises(ValueError, match="codes"):
        _kernels.linear_attach_nvfp4([(codes[:10], scales, s2, None)], 20, 64, None, 0, "ref", pool)
    bad = scales.copy()
    bad[0] = 0x7F
    with pytest.raises(H3ValueError, match="NaN"):
        _kernels.linear_attach_nvfp4([(codes, bad, s2, None)], 20, 64, None, 0, "ref", pool)
    with pytest.raises(H3ValueError, match="scale_2"):
        _kernels.linear_attach_nvfp4([(codes, scales, float("inf"), None)], 20, 64, None, 0, "ref", pool)
    pre = np.ones(64, np.float32)
    pre[3] = np.nan
    with pytest.raises(H3ValueError, match="pre_scale"):
        _kernels.linear_attach_nvfp4([(codes, scales, s2, pre)], 20, 64, None, 0, "ref", pool)
    with pytest.raises(ValueError, match="split"):
        _kernels.linear_attach_nvfp4([(codes, scales, s2, None)] * 3, 30, 64, None, 1, "ref", pool)   # a pair of 3 parts
