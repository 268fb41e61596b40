"""The NVFP4 linear's bf16 route (h3_linear_nvfp4_route; csrc/nvfp4_bf16_ref.c, the AMX
kernel nvfp4_amx.c): activations (times the AWQ pre-scale) rounded to bf16, the weights
e2m1 * e4m3 exact in bf16, float32 sums per K block of 1024 times scale_2.  On a CPU
without AMX it runs its scalar reference through the same panel driver (32-column panels,
the activations in the AMX tile layout, rows past M zero), so the layout and the driver are
checked here; bench/nvfp4_amx_check.py checks the AMX kernel on an AMX machine."""
import numpy as np
import pytest

from h3cy import _kernels
from h3cy.errors import H3ValueError
from _nvfp4_blocks import bf16_act, decode, random_part


def _isas():
    return ["ref"] + [i for i in ("avx2", "avx512", "amx", "neon") if _kernels.isa_supported(i)]


def _rel(a, b):
    return float(np.linalg.norm(a - b) / np.linalg.norm(b))


def _within_fp32_sum_bound(y, xa, W, bias):
    """|y - xa W^T - bias| <= (K + K / 1024 + 2) u (|xa| |W|^T + |bias|), u = 2^-24: what
    float32 sums of exact products may lose in any order (AMX's included), the per-block
    fmaf by scale_2 and the bias add; True when every element is within it."""
    K = xa.shape[1]
    exact = xa @ W.T + bias
    bound = (K + K / 1024 + 2) * 2.0 ** -24 * (np.abs(xa) @ np.abs(W).T + np.abs(bias))
    return bool(np.all(np.abs(y - exact) <= bound))


def _bf16_core(parts, N, K, bias, pair, isa, pool):
    core = _kernels.linear_attach_nvfp4(parts, N, K, bias, pair, isa, pool)
    _kernels.linear_nvfp4_route(core, "bf16")
    return core


@pytest.mark.parametrize("isa", _isas())
@pytest.mark.parametrize("N,K,M,awq", [(37, 288, 5, False), (70, 2112, 33, True), (33, 1056, 67, True)])
def test_bf16_route_matches_float64_on_bf16_activations(isa, N, K, M, awq):
    """Every element within float32 summation's bound of float64 bf16(x [* pre]) @
    (e2m1 e4m3 scale_2)^T, and rel L2 <= 1e-6 (observed 2e-7..4e-7); with the activations quantised to int8
    instead (the int8 route's) or unrounded the error is ~1e-3..1e-2, a swapped pair or
    column in the B layout ~1.  N past one or two 32-column panels (columns past N zero),
    K over one and two K blocks of 1024 (and a 64-input tail), M past one 32-row tile group
    (the rows past M in the last group zero)."""
    rng = np.random.default_rng(N * K + M)
    part = random_part(N, K, rng, awq, pad_rows=3)
    W = decode(part, N, K)
    x = rng.standard_normal((M, K)).astype(np.float32)
    x[1, 5] = 40.0                                           # an outlier channel
    bias = rng.standard_normal(N).astype(np.float32)
    pool = _kernels.ThreadPool(2)
    core = _bf16_core([part], N, K, bias, 0, isa, pool)
    y = np.full((M, N), np.nan, np.float32)
    core.forward(x, y, 0)
    pre = part[3]
    Wf = W / pre[None, :] if awq else W                      # the file's weights, pre on x
    want = bf16_act(x, pre) @ Wf.T + bias
    assert _rel(y, want) <= 1e-6
    assert _within_fp32_sum_bound(y, bf16_act(x, pre), Wf, bias)
    ref = _bf16_core([part], N, K, bias, 0, "ref", _kernels.ThreadPool(1))
    y_ref = np.empty_like(y)
    ref.forward(x, y_ref, 0)
    if isa != "amx":                                         # the reference's pieces (AVX-512: its decode, the same bits)
        np.testing.assert_array_equal(y, y_ref)


@pytest.mark.parametrize("isa", _isas())
def test_bf16_route_parts_pair_and_residual(isa):
    """Three parts with different scale_2 and two AWQ slots (each its own bf16 rows and
    scale_2 per panel), the SwiGLU pair across two parts, the gated residual."""
    rng = np.random.default_rng(11)
    M, K, H = 40, 320, 45
    pool = _kernels.ThreadPool(2)
    parts = [random_part(H, K, rng, awq=i > 0) for i in range(3)]
    Ws = [decode(p, H, K) for p in parts]
    x = rng.standard_normal((M, K)).astype(np.float32)
    want = np.concatenate([bf16_act(x, p[3]) @ (W / (p[3][None, :] if p[3] is not None else 1)).T
                           for p, W in zip(parts, Ws)], axis=1)
    core = _bf16_core(parts, 3 * H, K, None, 0, isa, pool)
    y = np.empty((M, 3 * H), np.float32)
    core.forward(x, y, 0)
    assert _rel(y, want) <= 1e-6
    resid = rng.standard_normal((M, 3 * H)).astype(np.float32)
    gate = rng.standard_normal((2, 3 * H)).astype(np.float32)
    rows = (np.arange(M) % 2).astype(np.int32)
    y2 = np.empty_like(y)
    core.forward(x, y2, 2, resid=resid, gate=gate, gate_row=rows)
    assert _rel(y2, resid + gate[rows] * want) <= 1e-6
    bias = rng.standard_normal(2 * H).astype(np.float32)
    pc = _bf16_core(parts[1:], 2 * H, K, bias, 1, isa, pool)
    y3 = np.empty((M, H), np.float32)
    pc.forward(x, y3, 1)
    g, v = want[:, H:2 * H] + bias[:H], want[:, 2 * H:] + bias[H:]
    assert _rel(y3, g / (1 + np.exp(-g)) * v) <= 1e-6


def test_route_switch_and_refusals():
    """"auto" on a path without AMX (and "int8") is the int8 route, bit for bit; "bf16"
    differs from it by the activation rounding (int8 per 32 vs bf16: ~1e-3 here); a
    min_rows threshold picks by the call's rows only on AMX; bad routes are refused."""
    rng = np.random.default_rng(3)
    N, K, M = 20, 256, 7
    part = random_part(N, K, rng)
    pool = _kernels.ThreadPool(1)
    x = rng.standard_normal((M, K)).astype(np.float32)
    ys = {}
    for route in ("auto", "int8", "bf16"):
        core = _kernels.linear_attach_nvfp4([part], N, K, None, 0, "ref", pool)
        _kernels.linear_nvfp4_route(core, route, 1000)
        ys[route] = np.empty((M, N), np.float32)
        core.forward(x, ys[route], 0)
    np.testing.assert_array_equal(ys["auto"], ys["int8"])
    assert 1e-5 < _rel(ys["bf16"], ys["int8"]) < 3e-2
    with pytest.raises(H3ValueError, match="route"):
        _kernels.linear_nvfp4_route(core, "fp8")
    with pytest.raises(ValueError, match="min_rows"):
        _kernels.linear_nvfp4_route(core, "auto", -1)
    dense = _kernels.LinearCore(np.ones((4, 32), np.float32), weights="fp32", isa="ref", pool=pool)
    with pytest.raises(ValueError, match="not an NVFP4"):
        _kernels.linear_nvfp4_route(dense, "bf16")


def test_env_route_parse():
    """H3CY_NVFP4_ROUTE's values (h3cy._config.nvfp4_route, applied by
    h3cy.weights.linears to each NVFP4 linear); a bad one names the variable."""
    from h3cy import _config
    assert _config.nvfp4_route("auto") == ("auto", None)
    assert _config.nvfp4_route("int8") == ("int8", None)
    assert _config.nvfp4_route("bf16") == ("bf16", None)
    assert _config.nvfp4_route("auto:256") == ("auto", 256)
    for bad in ("vnni", "auto:x", "bf16:4", "auto:-1"):
        with pytest.raises(H3ValueError, match="H3CY_NVFP4_ROUTE"):
            _config.nvfp4_route(bad)
