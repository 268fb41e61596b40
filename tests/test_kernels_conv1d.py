"""The audio decoder kernels (csrc/conv.c, csrc/snake*.c) against float64 numpy
references, on every ISA path this host has: channels-last Conv1d (dilation, padding,
residual add), ConvTranspose1d (stride, padding) and the anti-aliased SnakeBeta."""
import numpy as np
import pytest

from h3cy import _kernels
from h3cy.errors import H3ValueError

from _compare import assert_nontrivial, max_rel
from conftest import isa_params

POOLS = {n: _kernels.ThreadPool(n) for n in (1, 2)}


# ---- numpy references (float64) --------------------------------------------------------
def conv1d_ref(x, W, b, dil, pad):
    """torch.nn.functional.conv1d on channels-last x [T, Cin], W [Cout, Cin, k]."""
    T, Cin = x.shape
    Cout, _, k = W.shape
    xp = np.zeros((T + 2 * pad, Cin))
    xp[pad:pad + T] = x
    T_out = T + 2 * pad - dil * (k - 1)
    y = np.zeros((T_out, Cout))
    for j in range(k):
        y += xp[j * dil:j * dil + T_out] @ W[:, :, j].astype(np.float64).T
    return y + (0 if b is None else b)


def conv_t_ref(x, W, b, s, pad):
    """torch.nn.functional.conv_transpose1d on channels-last x [T, Cin], W [Cin, Cout, k]."""
    T = x.shape[0]
    _, Cout, k = W.shape
    full = np.zeros(((T - 1) * s + k, Cout))
    for j in range(k):
        full[j:j + (T - 1) * s + 1:s] += x.astype(np.float64) @ W[:, :, j]
    T_out = (T - 1) * s - 2 * pad + k
    return full[pad:pad + T_out] + b


def snake_ref(x, alpha, beta, fu, fd):
    """The spec's Activation1d: replicate pad 5|5, x2 transposed FIR (gain 2, crop 15),
    SnakeBeta, replicate pad 5|6, stride-2 FIR."""
    x = x.astype(np.float64)
    T = x.shape[0]
    xp = np.concatenate([np.repeat(x[:1], 5, 0), x, np.repeat(x[-1:], 5, 0)])
    full = np.zeros(((T + 10 - 1) * 2 + 12, x.shape[1]))
    for j in range(12):
        full[j:j + (T + 10 - 1) * 2 + 1:2] += xp * fu[j]
    u = 2 * full[15:15 + 2 * T]
    v = u + np.sin(np.exp(alpha) * u) ** 2 / (np.exp(beta) + 1e-9)
    vp = np.concatenate([np.repeat(v[:1], 5, 0), v, np.repeat(v[-1:], 6, 0)])
    return sum(vp[j:j + 2 * T:2] * fd[j] for j in range(12))


def kaiser_filter():
    """BigVGAN's 12-tap Kaiser-sinc lowpass (cutoff 0.25, half-width 0.3), sum 1."""
    A = 2.285 * 5 * np.pi * 1.2 + 7.95
    w = np.kaiser(12, 0.1102 * (A - 8.7))
    t = np.arange(-6, 6) + 0.5
    f = 0.5 * w * np.sinc(0.5 * t)
    return (f / f.sum()).astype(np.float32)


def lin(W2, b, isa, pool, weights="fp32"):
    return _kernels.LinearCore(np.ascontiguousarray(W2, dtype=np.float32), 0, b, weights, 0, 0, 0,
                               isa, pool)


# ---- Conv1d ------------------------------------------------------------------------------
CONV_CASES = [  # T, Cin, Cout, k, dil, pad, threads
    (1, 3, 5, 1, 1, 0, 1),        # length 1, pointwise
    (1, 8, 8, 3, 1, 1, 2),        # length 1 with padding: only the centre tap sees data
    (4, 5, 7, 11, 5, 25, 2),      # dilation*(k-1) = 50 > length: mostly padding
    (7, 4, 3, 3, 3, 0, 1),        # no padding, output shorter than input
    (37, 17, 19, 7, 3, 9, 2),     # odd sizes, not multiples of any vector width
    (300, 24, 128, 3, 1, 1, 2),   # wide: the GEMM splits columns (BY_COLS)
    (5000, 8, 8, 11, 1, 5, 2),    # narrow and long: several time chunks per thread (BY_TIME)
]


@pytest.mark.parametrize("isa", isa_params())
@pytest.mark.parametrize("case", CONV_CASES, ids=lambda c: "T{}_Ci{}_Co{}_k{}_d{}_p{}_t{}".format(*c))
def test_conv1d_matches_numpy(isa, case, rng):
    T, Cin, Cout, k, dil, pad, threads = case
    x = rng.standard_normal((T, Cin), dtype=np.float32)
    W = rng.standard_normal((Cout, Cin, k), dtype=np.float32)
    b = rng.standard_normal(Cout, dtype=np.float32)
    want = conv1d_ref(x, W, b, dil, pad)
    assert_nontrivial(want)
    core = lin(W.transpose(0, 2, 1).reshape(Cout, k * Cin), b, isa, POOLS[threads])
    # y lives between NaN guard rows that must come back unchanged
    buf = np.full((want.shape[0] + 2, Cout), np.nan, np.float32)
    y = buf[1:-1]
    _kernels.conv1d(core, x, k, dil, pad, y)
    assert np.isnan(buf[0]).all() and np.isnan(buf[-1]).all()
    # float32 sums of k*Cin <= 385 products: observed <= 6e-7 (a wrong tap or offset gives O(1))
    assert max_rel(y, want) <= 5e-6


@pytest.mark.parametrize("isa", isa_params())
def test_conv1d_residual_add(isa, rng):
    """add=True: y = y + conv(x) (the AMP block's x + convs2(...)), bias before the add."""
    T, C, k = 50, 12, 7
    x = rng.standard_normal((T, C), dtype=np.float32)
    W = rng.standard_normal((C, C, k), dtype=np.float32)
    b = rng.standard_normal(C, dtype=np.float32)
    y0 = rng.standard_normal((T, C), dtype=np.float32) * 10
    y = y0.copy()
    _kernels.conv1d(lin(W.transpose(0, 2, 1).reshape(C, k * C), b, isa, POOLS[2]), x, k, 1, 3, y, True)
    assert max_rel(y, y0 + conv1d_ref(x, W, b, 1, 3)) <= 5e-6   # observed ~2e-7


IN_PLACE_CASES = [  # T, Cin, Cout, k, dil, pad, threads
    (300, 24, 128, 3, 1, 1, 2),    # columns split (BY_COLS), taps in one span
    (600, 32, 300, 5, 2, 4, 2),    # columns split, dilated: each tap its own span
    (5000, 8, 8, 11, 1, 5, 2),     # time chunks per thread (BY_TIME), 8-channel taps
    (2000, 16, 64, 7, 3, 9, 2),    # time chunks, dilated, padding at both ends
    (3, 16, 40, 3, 1, 1, 2),       # 3 rows: the small-M (gemv) path gathers them
    (37, 17, 19, 7, 3, 9, 1),      # odd widths, one thread
]


@pytest.mark.parametrize("isa", isa_params())
@pytest.mark.parametrize("weights", ["fp32", "bf16", "fp16", "int8", "int4"])
def test_conv1d_in_place_rows_are_the_im2col_bits(isa, weights, rng):
    """The GEMM reading the im2col rows in place (the default) gives the bits of the route
    that builds them first (im2col=True, the A/B reference), with and without add."""
    for T, Cin, Cout, k, dil, pad, threads in IN_PLACE_CASES:
        x = rng.standard_normal((T, Cin), dtype=np.float32)
        W = rng.standard_normal((Cout, Cin, k), dtype=np.float32)
        b = rng.standard_normal(Cout, dtype=np.float32)
        core = lin(W.transpose(0, 2, 1).reshape(Cout, k * Cin), b, isa, POOLS[threads], weights)
        To = T + 2 * pad - dil * (k - 1)
        y0 = rng.standard_normal((To, Cout), dtype=np.float32)
        got = {}
        for im2col in (False, True):
            ws = np.empty(_kernels.conv1d_workspace_bytes(core, To, im2col), np.uint8)
            y = np.empty((To, Cout), np.float32)
            _kernels.conv1d(core, x, k, dil, pad, y, False, ws, im2col)
            ya = y0.copy()
            _kernels.conv1d(core, x, k, dil, pad, ya, True, ws, im2col)
            got[im2col] = (y, ya)
        case = (T, Cin, Cout, k, dil, pad)
        assert_nontrivial(got[True][0])
        assert np.array_equal(got[False][0], got[True][0]), case
        assert np.array_equal(got[False][1], got[True][1]), case
        # and both are the convolution (int4's error is its quantisation's)
        tol = {"fp32": 1e-5, "bf16": 2e-2, "fp16": 2e-2, "int8": 5e-2, "int4": 0.3}[weights]
        assert max_rel(got[False][0], conv1d_ref(x, W, b, dil, pad)) <= tol, case


def test_conv1d_workspace_is_smaller_in_place():
    """Reading the rows in place needs no im2col buffer: for a wide layer the workspace
    drops by about the buffer's size (the rows x k*Cin floats of one chunk)."""
    W = np.zeros((512, 11 * 512), np.float32)
    core = lin(W, None, "ref", POOLS[2])
    direct = _kernels.conv1d_workspace_bytes(core, 200)
    built = _kernels.conv1d_workspace_bytes(core, 200, True)
    assert built - direct >= 200 * 11 * 512 * 4


def test_conv1d_low_precision_weights(rng):
    """bf16 / int8 conv weights stay close (the decoder's reduced modes)."""
    T, Cin, Cout, k = 64, 32, 48, 7
    x = rng.standard_normal((T, Cin), dtype=np.float32)
    W = rng.standard_normal((Cout, Cin, k), dtype=np.float32)
    want = conv1d_ref(x, W, None, 1, 3)
    for weights, tol in (("bf16", 1e-2), ("int8", 3e-2)):   # observed 3e-3 / 1.2e-2
        y = np.empty(want.shape, np.float32)
        _kernels.conv1d(lin(W.transpose(0, 2, 1).reshape(Cout, k * Cin), None, "ref", POOLS[2], weights),
                        x, k, 1, 3, y)
        e = max_rel(y, want)
        assert 1e-6 < e <= tol, (weights, e)


def test_conv1d_rejects_bad_geometry(rng):
    W = rng.standard_normal((4, 3 * 5), dtype=np.float32)
    core = lin(W, None, "ref", POOLS[1])
    x = rng.standard_normal((10, 5), dtype=np.float32)
    with pytest.raises(H3ValueError, match="expected"):          # y of the wrong length
        _kernels.conv1d(core, x, 3, 1, 1, np.empty((9, 4), np.float32))
    with pytest.raises(H3ValueError, match="K = 15"):            # K != k * Cin
        _kernels.conv1d(core, x, 2, 1, 0, np.empty((9, 4), np.float32))
    with pytest.raises(H3ValueError, match="output length"):     # T_out < 1
        _kernels.conv1d(core, x[:2], 3, 2, 0, np.empty((0, 4), np.float32))
    with pytest.raises(H3ValueError, match="T >= 1"):
        _kernels.conv1d(core, x[:0], 3, 1, 1, np.empty((0, 4), np.float32))


# ---- ConvTranspose1d -----------------------------------------------------------------------
CONVT_CASES = [  # T, Cin, Cout, k, stride, pad, threads
    (1, 4, 3, 4, 2, 1, 1),        # one input step
    (1, 16, 8, 9, 5, 2, 2),
    (13, 12, 5, 9, 5, 2, 2),      # the release's (rate 5, kernel 9)
    (33, 7, 9, 4, 2, 1, 1),       # (rate 2, kernel 4)
    (10, 3, 4, 3, 1, 0, 2),       # stride 1: a full convolution
    (2000, 16, 512, 9, 5, 2, 2),  # several input chunks (N = 4608 columns)
]


@pytest.mark.parametrize("isa", isa_params())
@pytest.mark.parametrize("case", CONVT_CASES, ids=lambda c: "T{}_Ci{}_Co{}_k{}_s{}_p{}_t{}".format(*c))
def test_conv_transpose1d_matches_numpy(isa, case, rng):
    T, Cin, Cout, k, s, pad, threads = case
    x = rng.standard_normal((T, Cin), dtype=np.float32)
    W = rng.standard_normal((Cin, Cout, k), dtype=np.float32)
    b = rng.standard_normal(Cout, dtype=np.float32)
    want = conv_t_ref(x, W, b, s, pad)
    assert_nontrivial(want)
    core = lin(W.transpose(2, 1, 0).reshape(k * Cout, Cin), None, isa, POOLS[threads])
    buf = np.full((want.shape[0] + 2, Cout), np.nan, np.float32)
    y = buf[1:-1]
    _kernels.conv_transpose1d(core, x, Cout, k, s, pad, b, y)
    assert np.isnan(buf[0]).all() and np.isnan(buf[-1]).all()
    assert max_rel(y, want) <= 5e-6   # observed <= 4e-7


def test_conv_transpose1d_rejects_bad_geometry(rng):
    core = lin(rng.standard_normal((4 * 3, 5), dtype=np.float32), None, "ref", POOLS[1])
    x = rng.standard_normal((6, 5), dtype=np.float32)
    with pytest.raises(H3ValueError, match="N = 12"):            # k * Cout != N
        _kernels.conv_transpose1d(core, x, 4, 4, 2, 1, None, np.empty((12, 4), np.float32))
    with pytest.raises(H3ValueError, match="expected"):           # x has the wrong width
        _kernels.conv_transpose1d(core, x[:, :4].copy(), 3, 4, 2, 1, None, np.empty((12, 3), np.float32))
    with pytest.raises(H3ValueError, match="bias"):
        _kernels.conv_transpose1d(core, x, 3, 4, 2, 1, np.zeros(2, np.float32), np.empty((12, 3), np.float32))


# ---- anti-aliased SnakeBeta -----------------------------------------------------------------
SNAKE_CASES = [(1, 1), (1, 3), (2, 17), (5, 16), (6, 512), (255, 8), (257, 40), (1000, 4), (3000, 33)]


@pytest.mark.parametrize("isa", isa_params())
@pytest.mark.parametrize("T,C", SNAKE_CASES)
def test_snake_aa_matches_numpy(isa, T, C, rng):
    x = rng.standard_normal((T, C), dtype=np.float32) * 3
    alpha = rng.normal(0, 0.5, C).astype(np.float32)
    beta = rng.normal(0, 0.5, C).astype(np.float32)
    f = kaiser_filter()
    fd = (f * rng.uniform(0.9, 1.1, 12)).astype(np.float32)   # distinct filters: catch a swap
    want = snake_ref(x, alpha.astype(np.float64), beta.astype(np.float64), f.astype(np.float64), fd)
    assert_nontrivial(want)
    buf = np.full((T + 2, C), np.nan, np.float32)
    ran = _kernels.snake_aa(x, buf[1:-1], alpha, beta, f, fd, isa, POOLS[2])
    assert ran == _kernels.isa_vector(isa)   # amx runs avx512's vector code, avxvnni avx2's
    assert np.isnan(buf[0]).all() and np.isnan(buf[-1]).all()
    # float32 FIR sums + sinf / the ~2-ulp vector sine: observed <= 4e-7
    assert max_rel(buf[1:-1], want) <= 3e-6


@pytest.mark.parametrize("isa", isa_params(include_ref=False))
def test_snake_aa_simd_matches_ref_on_large_arguments(isa, rng):
    """Arguments alpha*u up to ~1e3 (range reduction of the vector sine)."""
    T, C = 400, 24
    x = rng.standard_normal((T, C), dtype=np.float32) * 50
    alpha = rng.uniform(0, 3, C).astype(np.float32)
    beta = rng.normal(0, 0.5, C).astype(np.float32)
    f = kaiser_filter()
    want, got = np.empty_like(x), np.empty_like(x)
    _kernels.snake_aa(x, want, alpha, beta, f, f, "ref", POOLS[1])
    _kernels.snake_aa(x, got, alpha, beta, f, f, isa, POOLS[2])
    assert_nontrivial(want)
    assert np.abs(got - want).max() <= 2e-4 * np.abs(want).max()   # observed ~1e-6


def test_snake_aa_rejects_bad_shapes(rng):
    x = rng.standard_normal((10, 4), dtype=np.float32)
    a = np.zeros(4, np.float32)
    f = kaiser_filter()
    with pytest.raises(H3ValueError, match="alpha"):
        _kernels.snake_aa(x, np.empty_like(x), a[:3], a, f, f, "ref", POOLS[1])
    with pytest.raises(H3ValueError, match="filter"):
        _kernels.snake_aa(x, np.empty_like(x), a, a, f[:11], f, "ref", POOLS[1])
    with pytest.raises(H3ValueError, match="y has shape"):
        _kernels.snake_aa(x, np.empty((10, 5), np.float32), a, a, f, f, "ref", POOLS[1])
    with pytest.raises(H3ValueError, match="T >= 1"):
        _kernels.snake_aa(x[:0], x[:0].copy(), a, a, f, f, "ref", POOLS[1])
