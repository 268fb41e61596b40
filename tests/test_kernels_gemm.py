"""GEMM kernels (h3cy.ops.Linear) on every ISA path, against float64 numpy.

Float modes (fp32/bf16/fp16) are checked against ``x @ lin.dequantized().T`` in float64,
i.e. against the weight the kernel really multiplies by, so only the float32
accumulation error is left.  Integer modes are checked twice: against float64 with a
bound derived from the activation quantisation, and bit for bit against the ``ref`` path
(the scalar oracle), which every SIMD path must reproduce exactly.
"""
import numpy as np
import pytest

import h3cy
from h3cy.errors import H3ValueError, UnsupportedCPUError
from h3cy.ops import Linear

from _compare import assert_close, assert_nontrivial, rel_l2
from conftest import HOST_ISAS, isa_params

MS = (1, 3, 17, 64, 257)
# (N, K): N, K not multiples of 16; (5, 3) has K < 8 and N < NR of every table;
# K = 300 spans two float K blocks (kc = 256)
FLOAT_SHAPES = ((70, 100), (5, 3), (33, 300))
# K = 1100 spans several int K blocks (int8: 2 x 576; int4 g32: 1024 + 128)
INT_SHAPES = ((70, 100), (5, 3), (40, 1100))
# (weights, group_size, act_group)
INT_MODES = (("int8", None, None), ("int8", None, 64), ("int4", 32, None), ("int4", 64, None),
             ("int4", 128, None), ("int4", 32, 64), ("int4", 64, 128))
INT_IDS = [f"{w}-g{g}-a{a}" for w, g, a in INT_MODES]
GUARD = np.float32(-7777.25)


def _data(rng, N, K, M):
    w = rng.standard_normal((N, K), dtype=np.float32) * 0.1
    x = rng.standard_normal((M, K), dtype=np.float32)
    x[:, 0] *= 8.0  # an outlier channel, as in real activations
    return w, x


def _guarded_out(M, N):
    """A C-contiguous (M, N) view with a guard row before and after it."""
    big = np.full((M + 2, N), GUARD, np.float32)
    return big, big[1:M + 1]


def _check_guards(big):
    assert np.all(big[0] == GUARD) and np.all(big[-1] == GUARD), "wrote outside the output"


def _f64(a):
    return np.asarray(a, np.float64)


def _x_used(x, lin):
    """The activations the kernel multiplies: x itself, except where the linear reports
    bf16 activations (AMX's bf16 tiles round x to nearest even, as torch's bf16 linear)."""
    if lin.activation_dtype == "bfloat16":
        from h3cy.ops.bf16 import round_bf16
        return round_bf16(x)
    return x


# ---------------------------------------------------------------- float modes

@pytest.mark.parametrize("isa", isa_params())
@pytest.mark.parametrize("mode", ["fp32", "bf16", "fp16"])
def test_float_modes_match_float64(isa, mode, rng):
    for N, K in FLOAT_SHAPES:
        w, x = _data(rng, N, K, max(MS))
        lin1 = Linear(w, weights=mode, isa=isa, threads=1)
        lin2 = Linear(w, weights=mode, isa=isa, threads=2)
        assert lin1.isa == isa and lin2.isa == isa
        wd = lin1.dequantized()
        for M in MS:
            xm = np.ascontiguousarray(x[:M])
            want = _f64(_x_used(xm, lin1)) @ _f64(wd).T
            assert_nontrivial(want)
            big, out = _guarded_out(M, N)
            got = lin1(xm, out=out)
            assert got is out
            _check_guards(big)
            # float32 accumulation over K <= 300: observed rel L2 <= 2e-7, max rel <= 1e-6;
            # a wrong panel/tail (dropped k or column) gives > 1e-2
            assert_close(got, want, rel_l2_tol=2e-6, max_rel_tol=1e-5, what=f"{mode} {isa} M={M} N={N} K={K}")
            # each output element is computed by one thread in a fixed order
            np.testing.assert_array_equal(lin2(xm), got)


def test_float_storage_is_the_rounded_weight(rng):
    w = rng.standard_normal((37, 45), dtype=np.float32)
    np.testing.assert_array_equal(Linear(w, weights="fp32", isa="ref").dequantized(), w)
    np.testing.assert_array_equal(Linear(w, weights="fp16", isa="ref").dequantized(),
                                  w.astype(np.float16).astype(np.float32))
    bits = w.view(np.uint32).astype(np.uint64)
    bf = ((bits + 0x7FFF + ((bits >> 16) & 1)) >> 16).astype(np.uint16)  # round to nearest even
    want = (bf.astype(np.uint32) << 16).view(np.float32)
    np.testing.assert_array_equal(Linear(w, weights="bf16", isa="ref").dequantized(), want)
    # bf16 source bits are stored as given
    lin = Linear(bf, weights="bf16", weight_dtype="bf16", isa="ref")
    np.testing.assert_array_equal(lin.dequantized(), want)


# ---------------------------------------------------------------- int modes

def _act_quant_error(x, wd, act_group):
    """Error of y_int vs x @ wd.T from rounding x to int8 steps s = amax/127, per (m, n):
    the worst case (half a step per element) and the variance (s^2/12 per element)."""
    M, K = x.shape
    ag = act_group or K
    worst = np.zeros((M, wd.shape[0]))
    var = np.zeros((M, wd.shape[0]))
    w64 = _f64(wd)
    for k0 in range(0, K, ag):
        step = np.max(np.abs(_f64(x[:, k0:k0 + ag])), axis=1) / 127.0
        worst += 0.5 * step[:, None] * np.abs(w64[:, k0:k0 + ag]).sum(axis=1)[None, :]
        var += (step ** 2 / 12.0)[:, None] * (w64[:, k0:k0 + ag] ** 2).sum(axis=1)[None, :]
    return worst, var


@pytest.mark.parametrize("isa", isa_params())
@pytest.mark.parametrize("wmode,gs,ag", INT_MODES, ids=INT_IDS)
def test_int_modes_match_float64_and_ref_bit_for_bit(isa, wmode, gs, ag, rng):
    for N, K in INT_SHAPES:
        if ag and K < 8:
            continue
        w, x = _data(rng, N, K, max(MS))
        kw = dict(weights=wmode, group_size=gs, act_group=ag)
        lin = Linear(w, isa=isa, threads=1, **kw)
        lin2 = Linear(w, isa=isa, threads=2, **kw)
        ref = Linear(w, isa="ref", threads=1, **kw)
        assert lin.isa == isa
        wd = lin.dequantized()
        np.testing.assert_array_equal(wd, ref.dequantized())
        for M in MS:
            xm = np.ascontiguousarray(x[:M])
            want = _f64(xm) @ _f64(wd).T
            assert_nontrivial(want)
            big, out = _guarded_out(M, N)
            got = lin(xm, out=out)
            _check_guards(big)
            assert np.all(np.isfinite(got))
            # every element within the worst case of the activation rounding (+ float32
            # slack), a hard bound; observed up to 0.94 of it when K = 3 (few terms)
            worst, var = _act_quant_error(xm, wd, ag)
            err = np.abs(_f64(got) - want)
            bound = worst * 1.001 + 1e-5 * np.abs(want).max()
            assert np.all(err <= bound), f"{wmode} g{gs} a{ag} {isa} M={M}: err {err.max():.3g}"
            # and statistically: the L2 error is what uniform rounding predicts (observed
            # ratio 0.65-1.07; a wrong scale or offset gives >> 2)
            if M * N >= 200:
                predicted = np.sqrt(var.sum()) / np.linalg.norm(want)
                assert rel_l2(got, want) <= 2.0 * predicted + 1e-6
            np.testing.assert_array_equal(got, ref(xm), err_msg=f"{isa} differs from ref")
            np.testing.assert_array_equal(lin2(xm), got, err_msg="thread count changed the result")


def _quant_np(w, qmax, group):
    """Symmetric quantisation as gemm_weights.c's pack_int does it, in float32 numpy."""
    N, K = w.shape
    out = np.empty_like(w)
    for k0 in range(0, K, group):
        blk = w[:, k0:k0 + group]
        amax = np.max(np.abs(blk), axis=1, keepdims=True)
        with np.errstate(divide="ignore"):
            inv = np.where(amax > 0, np.float32(qmax) / amax, np.float32(0)).astype(np.float32)
        scale = (amax / np.float32(qmax)).astype(np.float32)
        q = np.clip(np.rint(blk * inv), -qmax, qmax).astype(np.float32)
        out[:, k0:k0 + group] = q * scale
    return out


@pytest.mark.parametrize("isa", isa_params())
def test_weight_quantisation_formula(isa, rng):
    w = rng.standard_normal((37, 150), dtype=np.float32)
    w[3] = 0.0  # an all-zero row keeps scale 0
    np.testing.assert_array_equal(Linear(w, weights="int8", isa=isa).dequantized(),
                                  _quant_np(w, 127, 150))
    for gs in (32, 64, 128):
        np.testing.assert_array_equal(Linear(w, weights="int4", group_size=gs, isa=isa).dequantized(),
                                      _quant_np(w, 7, gs))
    assert Linear(w, weights="int4", isa=isa).group_size == 64
    # subnormal rows (127/amax overflows) still quantise to finite weights, never NaN
    w[5, :40] = 1e-44
    w[5, 40:] = 0.0
    for mode in ("int8", "int4"):
        lin = Linear(w, weights=mode, isa=isa)
        assert np.all(np.isfinite(lin.dequantized()))
        assert np.all(np.isfinite(lin(np.ones((2, 150), np.float32))))


@pytest.mark.parametrize("isa", isa_params())
@pytest.mark.parametrize("wmode", ["int8", "int4"])
def test_int_activation_edge_rows(isa, wmode, rng):
    """A zero row gives zeros; a NaN or Inf in a row makes that row NaN on every path
    (never silently zeroed); other rows are unaffected."""
    w, x = _data(rng, 40, 70, 6)
    x[1] = 0.0
    x[2, 5] = np.nan
    x[4, 9] = np.inf
    lin = Linear(w, weights=wmode, isa=isa)
    got = lin(x)
    assert np.all(got[1] == 0.0)
    assert np.all(np.isnan(got[2])) and np.all(np.isnan(got[4]))
    assert np.all(np.isfinite(got[[0, 3, 5]]))
    np.testing.assert_array_equal(got, Linear(w, weights=wmode, isa="ref")(x))


# ---------------------------------------------------------------- epilogues

EPI_MODES = ["fp32", "bf16", "int8", "int4"]


@pytest.mark.parametrize("isa", isa_params())
@pytest.mark.parametrize("mode", EPI_MODES)
def test_bias_swiglu_residual(isa, mode, rng):
    H, K, M = 37, 90, 19
    w, x = _data(rng, 2 * H, K, M)
    b = rng.standard_normal(2 * H, dtype=np.float32)
    lin = Linear(w, bias=b, weights=mode, isa=isa, pair=True, threads=2)
    plain = Linear(w, weights=mode, isa=isa, pair=True, threads=2)
    y = lin(x)
    # bias is added in float32 after the product
    np.testing.assert_array_equal(y, plain(x) + b)
    assert_close(y, _f64(_x_used(x, lin)) @ _f64(lin.dequantized()).T + b,
                 rel_l2_tol=2e-2 if "int" in mode else 2e-6)

    big, out = _guarded_out(M, H)
    s = lin.swiglu(x, out=out)
    _check_guards(big)
    g, v = _f64(y[:, :H]), _f64(y[:, H:])
    # float32 silu vs float64: observed max rel ~2e-7 of max|want|
    assert_close(s, g / (1 + np.exp(-g)) * v, max_rel_tol=5e-6, what="swiglu")

    resid = rng.standard_normal((M, 2 * H), dtype=np.float32)
    gate = rng.standard_normal((3, 2 * H), dtype=np.float32)
    rows = (np.arange(M) % 3).astype(np.int32)
    # resid + gate * y with separately rounded float32 operations: exact
    np.testing.assert_array_equal(lin.residual(x, resid), resid + y)
    np.testing.assert_array_equal(lin.residual(x, resid, gate=gate, gate_row=rows), resid + gate[rows] * y)
    gfull = rng.standard_normal((M, 2 * H), dtype=np.float32)
    np.testing.assert_array_equal(lin.residual(x, resid, gate=gfull), resid + gfull * y)
    # out may alias resid
    r2 = resid.copy()
    got = lin.residual(x, r2, gate=gate, gate_row=rows, out=r2)
    assert got is r2
    np.testing.assert_array_equal(r2, resid + gate[rows] * y)
    big, out = _guarded_out(M, 2 * H)
    lin.residual(x, resid, gate=gate, gate_row=rows, out=out)
    _check_guards(big)


@pytest.mark.parametrize("isa", isa_params())
@pytest.mark.parametrize("wmode", ["int8", "int4"])
def test_swiglu_epilogue_is_the_same_bits_on_every_path(isa, wmode, rng):
    """The vectorised SwiGLU epilogue (gemm_swiglu.inc) and the reference's lane-by-lane copy
    run the same operations: integer modes stay bit-identical across paths, also where
    exp saturates (|gate| > 88) and in the row tails (H = 53 is no multiple of any width)."""
    H, K, M = 53, 128, 23
    w = rng.standard_normal((2 * H, K), dtype=np.float32)
    b = rng.standard_normal(2 * H, dtype=np.float32)
    x = rng.standard_normal((M, K), dtype=np.float32) * np.float32(6.0)   # gates up to ~±300
    kw = dict(group_size=64) if wmode == "int4" else {}
    lin = Linear(w, bias=b, weights=wmode, isa=isa, pair=True, threads=2, **kw)
    s = lin.swiglu(x)
    np.testing.assert_array_equal(s, Linear(w, bias=b, weights=wmode, isa="ref", pair=True, **kw).swiglu(x))
    y = _f64(lin(x))
    g, v = y[:, :H], y[:, H:]
    assert np.abs(g).max() > 100, "the data should reach exp's clamped range"
    with np.errstate(over="ignore"):
        want = g / (1 + np.exp(-g)) * v
    assert np.isfinite(s).all()
    # float32 silu (h3v_exp, ~2 ulp) vs float64: observed max rel ~3e-7 of max|want|
    assert_close(s, want, max_rel_tol=5e-6, what="swiglu")


@pytest.mark.parametrize("isa", isa_params())
@pytest.mark.parametrize("wmode", ["int8", "int4"])
def test_int_row_groups_keep_the_bits(isa, wmode, rng):
    """With >= 4 threads and packed A over 2 MB, int modes split the rows over the threads
    too (gemm.c row_groups); every epilogue must give the one-thread bits.  M x Kp here is
    4.2 MB: 2 row groups at 8 threads, 4 at 16."""
    M, K, H = 1040, 4096, 96
    w = rng.standard_normal((2 * H, K), dtype=np.float32)
    b = rng.standard_normal(2 * H, dtype=np.float32)
    x = rng.standard_normal((M, K), dtype=np.float32)
    r = rng.standard_normal((M, 2 * H), dtype=np.float32)
    kw = dict(group_size=64) if wmode == "int4" else {}
    got = {}
    for threads in (1, 8, 16):
        lin = Linear(w, bias=b, weights=wmode, isa=isa, pair=True, threads=threads, **kw)
        got[threads] = (lin(x), lin.swiglu(x), lin.residual(x, r))
    assert_nontrivial(got[1][0])
    for threads in (8, 16):
        for a, one in zip(got[threads], got[1]):
            np.testing.assert_array_equal(a, one)


# ---------------------------------------------------------------- bad input

def test_bad_input_raises():
    rng = np.random.default_rng(0)
    w = rng.standard_normal((8, 16), dtype=np.float32)
    x = rng.standard_normal((3, 16), dtype=np.float32)
    lin = Linear(w, weights="fp32", isa="ref")
    with pytest.raises(H3ValueError):
        Linear(w.astype(np.float64), weights="fp32")
    with pytest.raises(H3ValueError):
        Linear(np.asfortranarray(w), weights="fp32")
    with pytest.raises(H3ValueError):
        Linear(w[0], weights="fp32")
    with pytest.raises(H3ValueError):
        Linear(w, weights="int3")
    with pytest.raises(H3ValueError):
        Linear(w, weights="int4", group_size=48)
    with pytest.raises(H3ValueError):
        Linear(w, weights="int8", group_size=32)
    with pytest.raises(H3ValueError):
        Linear(w, weights="int8", act_group=12)
    with pytest.raises(H3ValueError):
        Linear(w, weights="int4", group_size=64, act_group=32)
    with pytest.raises(H3ValueError):
        Linear(w, weights="fp32", act_group=64)
    with pytest.raises(H3ValueError):
        Linear(w, bias=np.zeros(7, np.float32))
    with pytest.raises(H3ValueError):
        Linear(w, bias=np.zeros(8, np.float64))
    with pytest.raises(H3ValueError):
        Linear(w[:7], pair=True)
    bad = w.copy()
    bad[2, 3] = np.nan
    with pytest.raises(H3ValueError, match=r"\[2, 3\]"):
        Linear(bad, weights="int8")
    with pytest.raises(ValueError):
        Linear(w, isa="sse9")
    for name in ("avx2", "avxvnni", "avx512", "amx", "neon"):
        if name not in HOST_ISAS:
            with pytest.raises(UnsupportedCPUError):
                Linear(w, isa=name)
    with pytest.raises(H3ValueError):
        lin(x.astype(np.float64))
    with pytest.raises(H3ValueError):
        lin(np.asfortranarray(x))
    with pytest.raises(H3ValueError):
        lin(x[:, :15])
    with pytest.raises(H3ValueError):
        lin(x, out=np.empty((3, 9), np.float32))
    with pytest.raises(H3ValueError):
        lin.swiglu(x)
    with pytest.raises(H3ValueError):
        lin.residual(x, np.zeros((3, 7), np.float32))
    with pytest.raises(H3ValueError):
        lin.residual(x, np.zeros((3, 8), np.float32), gate=np.zeros((1, 8), np.float32),
                     gate_row=np.array([0, 1, 0], np.int32))  # row 1 outside the gate table
    with pytest.raises(H3ValueError):
        lin.residual(x, np.zeros((3, 8), np.float32), gate=np.zeros((2, 8), np.float32))  # G < M
    with pytest.raises(H3ValueError):
        lin.residual(x, np.zeros((3, 8), np.float32), gate_row=np.zeros(3, np.int32))
    assert isinstance(H3ValueError("x"), ValueError)
    assert lin(np.zeros((0, 16), np.float32)).shape == (0, 8)


@pytest.mark.parametrize("isa", isa_params())
def test_float_rows_do_not_depend_on_their_tile(isa, rng):
    """Past the small-M GEMV (M > 4), a row's float32 sum is one k loop per K block whatever
    tile it lands in, so short last tiles (AVX-512: 2/4/7-row copies of the 14-row kernel)
    give the rows of a larger call bit for bit."""
    for N, K in ((70, 100), (40, 700)):
        w, x = _data(rng, N, K, 40)
        for weights in ("fp32", "bf16"):
            lin = Linear(w, weights=weights, isa=isa, threads=2)
            y = lin(x)
            for m in (5, 8, 16, 18, 21, 33):
                assert np.array_equal(lin(x[:m]), y[:m]), f"{isa} {weights} K={K}: first {m} rows differ"


@pytest.mark.parametrize("isa", isa_params())
def test_bf16_inputs_option(isa, rng):
    """bf16 weights with bf16-valued inputs may run bf16-pair kernels (VDPBF16PS, AMX):
    the products are exact, so only float32 summation error is left."""
    from h3cy.ops.bf16 import f32_to_bf16_bits, round_bf16
    for N, K in ((70, 100), (5, 3), (33, 700)):
        w, x = _data(rng, N, K, 40)
        x = round_bf16(x)
        lin = Linear(f32_to_bf16_bits(w), weights="bf16", weight_dtype="bf16", isa=isa,
                     threads=2, bf16_inputs=True)
        assert lin.isa == isa
        paired = isa == "amx" or (isa == "avx512" and "avx512_bf16" in h3cy.ops.cpu_features())
        # K = 3 keeps the f32 kernel (a K tail under 16 does not fit the bf16 panels)
        assert lin.activation_dtype == ("bfloat16" if paired and K >= 16 else "float32")
        want = _f64(x) @ _f64(lin.dequantized()).T
        # observed rel-L2 ~1e-7 (exact products, float32 sums); a wrong pair order or
        # panel offset gives > 1e-2
        y = lin(x)
        assert_close(y, want, rel_l2_tol=2e-6, max_rel_tol=1e-5, what=f"{isa} K={K}")
        if paired and isa == "avx512" and K >= 16:
            # VDPBF16PS has no GEMV for small M: a row's sum does not depend on the tile it
            # lands in, so short last tiles (1-7 rows, the smaller row kernels) give the
            # rows of the full call bit for bit (the f32 paths' small-M GEMV sums otherwise)
            for m in (1, 2, 3, 5, 8, 16, 18, 21):
                assert np.array_equal(lin(x[:m]), y[:m]), f"{isa} K={K}: first {m} rows differ"
