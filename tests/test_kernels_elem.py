"""Element-wise / row ops and number-format conversions (csrc/elem*.c, h3cy/ops/elem.py).

Every op runs on every ISA path the host has (others are skipped by name) and on 1 and 2
threads, against a float64 numpy reference and against the scalar `ref` path (the C
oracle).  Where the SIMD maths uses the same separately rounded operations as the
reference (RoPE, AdaLN, conversions) the comparison is bit-exact; elsewhere the bound is
stated beside the observed error.  Outputs are written into views of larger buffers so
the guard elements after them can be checked for stray writes.  Each call also proves
which kernels ran: the C entry reports it and the wrapper raises if it is not the path
asked for (see test_path_report_*).
"""
import numpy as np
import pytest

import h3cy
from h3cy import _kernels, ops
from h3cy.errors import H3Error, H3ValueError

from conftest import isa_params
from _compare import assert_nontrivial

ISAS = isa_params()
THREADS = [1, 2]
# (rows, n): rows from {1, 3, 17, 64, 257}; n below, at and off multiples of 16/8/4.
SHAPES = [(1, 5), (3, 16), (17, 37), (64, 100), (257, 130)]  # 257 x 130 > 2 x 8192: threads engage
GUARD = 67
SENTINEL = np.float32(-12345.5)
FLT_MIN = float(np.finfo(np.float32).tiny)


def _guarded(shape, dtype=np.float32, fill=SENTINEL):
    """An output array that is the front of a larger buffer; returns (out, guard view)."""
    size = int(np.prod(shape))
    buf = np.full(size + GUARD, fill, dtype=dtype)
    return buf[:size].reshape(shape), buf[size:]


def _check_guard(guard, fill=SENTINEL):
    assert np.all(guard == fill), "a kernel wrote past the end of its output"


def _rms64(x, w, eps):
    x = x.astype(np.float64)
    y = x / np.sqrt(np.mean(x * x, axis=-1, keepdims=True) + eps)
    return y if w is None else y * w


def _silu64(x):
    x = x.astype(np.float64)
    with np.errstate(over="ignore"):
        return x / (1.0 + np.exp(-x))


def _gelu64(x):
    # 0.5 x (1 + tanh u) == x / (1 + exp(-2u)); the second form has no cancellation for
    # negative x, so it is the exact value to compare against.
    x = x.astype(np.float64)
    u = np.sqrt(2.0 / np.pi) * (x + 0.044715 * x ** 3)
    with np.errstate(over="ignore"):
        return x / (1.0 + np.exp(-2.0 * u))


# ---- RMSNorm -------------------------------------------------------------------------
@pytest.mark.parametrize("isa", ISAS)
@pytest.mark.parametrize("threads", THREADS)
@pytest.mark.parametrize("rows,n", SHAPES)
@pytest.mark.parametrize("weighted", [True, False])
def test_rms_norm(isa, threads, rows, n, weighted, rng):
    x = (rng.standard_normal((rows, n)) * 3 + 0.5).astype(np.float32)
    w = rng.standard_normal(n).astype(np.float32) if weighted else None
    eps = 1e-5
    out, guard = _guarded((rows, n))
    got = ops.rms_norm(x, w, eps=eps, out=out, isa=isa, threads=threads)
    assert got is out
    _check_guard(guard)
    want = _rms64(x, w, eps)
    assert_nontrivial(want)
    # observed max elementwise rel error 1.5e-7 (ref) .. 2.2e-7 (SIMD, n=5120)
    np.testing.assert_allclose(got, want, rtol=6e-7, atol=0)
    # SIMD vs ref: only the order of the sum of squares differs (observed <= 2 ulp)
    ref = ops.rms_norm(x, w, eps=eps, isa="ref", threads=1)
    np.testing.assert_allclose(got, ref, rtol=3e-7, atol=0)


@pytest.mark.parametrize("isa", ISAS)
def test_rms_norm_in_place_nd_and_zero_row(isa, rng):
    x = rng.standard_normal((2, 5, 48)).astype(np.float32)
    x[1, 3] = 0.0                        # zero row: eps keeps it finite (exactly 0)
    want = ops.rms_norm(x, eps=1e-6, isa=isa)
    y = ops.rms_norm(x, eps=1e-6, out=x, isa=isa)
    assert y is x
    np.testing.assert_array_equal(x, want)
    assert np.all(x[1, 3] == 0)


# ---- RoPE ------------------------------------------------------------------------------
def _rope_torch_style(x, cos, sin, rot_dim):
    """torch: x*cos + rotate_half(x)*sin on the first rot_dim channels, in float32."""
    half = rot_dim // 2
    c = np.concatenate([cos, cos], axis=-1)[:, None, :]
    s = np.concatenate([sin, sin], axis=-1)[:, None, :]
    xr = x[..., :rot_dim]
    rot = np.concatenate([-xr[..., half:], xr[..., :half]], axis=-1)
    out = x.copy()
    out[..., :rot_dim] = xr * c + rot * s
    return out


ROPE_CASES = [(1, 1, 4, 2), (3, 2, 10, 6), (17, 3, 40, 32), (64, 4, 64, 64), (257, 2, 72, 70)]


@pytest.mark.parametrize("isa", ISAS)
@pytest.mark.parametrize("threads", THREADS)
@pytest.mark.parametrize("rows,heads,head_dim,rot_dim", ROPE_CASES)
def test_rope(isa, threads, rows, heads, head_dim, rot_dim, rng):
    x0 = rng.standard_normal((rows, heads, head_dim)).astype(np.float32)
    ang = rng.uniform(-np.pi, np.pi, (rows, rot_dim // 2))
    cos, sin = np.cos(ang).astype(np.float32), np.sin(ang).astype(np.float32)
    buf, guard = _guarded(x0.shape)
    buf[...] = x0
    got = ops.rope(buf, cos, sin, rot_dim=rot_dim, isa=isa, threads=threads)
    assert got is buf
    _check_guard(guard)
    # same separately rounded products and sums as torch's formula: bit-exact
    np.testing.assert_array_equal(buf, _rope_torch_style(x0, cos, sin, rot_dim))
    np.testing.assert_array_equal(buf[..., rot_dim:], x0[..., rot_dim:])
    # and the rotation itself vs float64 (observed 1.2e-7 abs on unit-scale inputs)
    h = rot_dim // 2
    x64 = x0.astype(np.float64)
    c64, s64 = cos.astype(np.float64)[:, None], sin.astype(np.float64)[:, None]
    want1 = x64[..., :h] * c64 - x64[..., h:rot_dim] * s64
    want2 = x64[..., h:rot_dim] * c64 + x64[..., :h] * s64
    np.testing.assert_allclose(buf[..., :h], want1, atol=5e-7, rtol=0)
    np.testing.assert_allclose(buf[..., h:rot_dim], want2, atol=5e-7, rtol=0)


def test_rope_default_rot_dim(rng):
    x = rng.standard_normal((3, 2, 8)).astype(np.float32)
    cos = np.ones((3, 4), np.float32)
    sin = np.zeros((3, 4), np.float32)
    y = x.copy()
    ops.rope(y, cos, sin)          # rot_dim = 2 * cos.shape[1] = 8; identity angle
    np.testing.assert_array_equal(y, x)


# ---- SiLU / GELU ---------------------------------------------------------------------
def _act_input(rng, size):
    x = (rng.standard_normal(size) * 5).astype(np.float32)
    special = np.array([0.0, -0.0, 1e-30, -1e-30, 20.0, -20.0, 88.0, -88.0, 100.0, -100.0,
                        1e4, -1e4], np.float32)
    x[: min(size, special.size)] = special[: min(size, special.size)]
    return x


@pytest.mark.parametrize("isa", ISAS)
@pytest.mark.parametrize("threads", THREADS)
@pytest.mark.parametrize("rows,n", SHAPES)
def test_silu(isa, threads, rows, n, rng):
    x = _act_input(rng, rows * n).reshape(rows, n)
    out, guard = _guarded((rows, n))
    got = ops.silu(x, out=out, isa=isa, threads=threads)
    _check_guard(guard)
    want = _silu64(x)
    # below FLT_MIN (x < -87) float32 gives -0 where the true value is a denormal, as torch
    nz = np.abs(want) >= FLT_MIN
    rel = np.abs(got[nz] - want[nz]) / np.abs(want[nz])
    assert rel.max() <= 4e-7, rel.max()  # observed 1.6e-7 (ref, libm), 2.0e-7 (SIMD h3v_exp)
    assert np.all(np.abs(got[~nz]) <= FLT_MIN)
    ref = ops.silu(x, isa="ref")
    np.testing.assert_allclose(got, ref, rtol=4e-7, atol=1e-37)


@pytest.mark.parametrize("isa", ISAS)
@pytest.mark.parametrize("threads", THREADS)
@pytest.mark.parametrize("rows,n", SHAPES)
def test_gelu_tanh(isa, threads, rows, n, rng):
    x = _act_input(rng, rows * n).reshape(rows, n)
    out, guard = _guarded((rows, n))
    got = ops.gelu_tanh(x, out=out, isa=isa, threads=threads)
    _check_guard(guard)
    want = _gelu64(x)
    # Absolute error on the input's scale: observed 1.23e-7 (ref: torch's formula
    # 0.5x(1+tanh u), whose 1+tanh cancels for x < -3) and 1.18e-7 (SIMD).
    err = np.abs(got - want) / np.maximum(1.0, np.abs(x))
    assert err.max() <= 2.5e-7, err.max()
    if isa != "ref":
        # SIMD computes x*sigmoid(2u): relative error stays small where 1+tanh cancels.
        # observed 9.0e-7 for x > -3 and 1.0e-5 for x > -9 (the error of u, ~|2u| ulp)
        m = (x > -3) & (np.abs(want) >= FLT_MIN)
        rel = np.abs(got[m] - want[m]) / np.abs(want[m])
        assert rel.max() <= 2e-6, rel.max()


def test_gelu_matches_torch_where_available(rng):
    import torch  # a test extra, always installed with the reference implementations
    x = (rng.standard_normal(4099) * 4).astype(np.float32)
    t = torch.nn.functional.gelu(torch.from_numpy(x), approximate="tanh").numpy()
    for isa in ops.available_isas():
        got = ops.gelu_tanh(x, isa=isa)
        # torch shares ref's cancellation; observed |diff| <= 1.1e-7 * max(1, |x|)
        assert np.max(np.abs(got - t) / np.maximum(1, np.abs(x))) <= 3e-7


@pytest.mark.parametrize("isa", ISAS)
@pytest.mark.parametrize("fn", [ops.silu, ops.gelu_tanh])
def test_activation_in_place_and_nan(isa, fn, rng):
    x = _act_input(rng, 77)
    x[40] = np.nan
    want = fn(x, isa=isa)
    y = fn(x, out=x, isa=isa)
    assert y is x
    np.testing.assert_array_equal(x, want)   # NaN compares equal in assert_array_equal
    assert np.isnan(x[40]) and np.isfinite(np.delete(x, 40)).all()


# ---- SwiGLU ----------------------------------------------------------------------------
@pytest.mark.parametrize("isa", ISAS)
@pytest.mark.parametrize("threads", THREADS)
@pytest.mark.parametrize("rows,h", SHAPES)
def test_swiglu(isa, threads, rows, h, rng):
    x = (rng.standard_normal((rows, 2 * h)) * 3).astype(np.float32)
    out, guard = _guarded((rows, h))
    got = ops.swiglu(x, out=out, isa=isa, threads=threads)
    _check_guard(guard)
    want = _silu64(x[:, :h]) * x[:, h:].astype(np.float64)
    assert_nontrivial(want)
    np.testing.assert_allclose(got, want, rtol=5e-7, atol=0)  # observed 2.3e-7
    np.testing.assert_allclose(got, ops.swiglu(x, isa="ref"), rtol=5e-7, atol=0)


@pytest.mark.parametrize("isa", ISAS)
@pytest.mark.parametrize("threads", THREADS)
def test_swiglu_in_place(isa, threads, rng):
    rows, h = 257, 100
    x = rng.standard_normal((rows, 2 * h)).astype(np.float32)
    want = ops.swiglu(x, isa=isa)
    alias = x.reshape(-1)[: rows * h].reshape(rows, h)   # the front of x's own buffer
    ops.swiglu(x, out=alias, isa=isa, threads=threads)
    np.testing.assert_array_equal(alias, want)


# ---- AdaLN modulation ---------------------------------------------------------------
@pytest.mark.parametrize("isa", ISAS)
@pytest.mark.parametrize("threads", THREADS)
@pytest.mark.parametrize("rows,n", SHAPES)
def test_adaln_modulate(isa, threads, rows, n, rng):
    T = 5
    x = rng.standard_normal((rows, n)).astype(np.float32)
    scale = (rng.standard_normal((T, n)) * 0.3).astype(np.float32)
    shift = rng.standard_normal((T, n)).astype(np.float32)
    table = rng.integers(0, T, rows).astype(np.int32)
    table[: min(rows, T)] = np.arange(min(rows, T))          # several distinct rows used
    out, guard = _guarded((rows, n))
    got = ops.adaln_modulate(x, scale, shift, table, out=out, isa=isa, threads=threads)
    _check_guard(guard)
    # x * (1 + scale) + shift, each op rounded to float32 as numpy does: bit-exact
    want = x * (np.float32(1) + scale[table]) + shift[table]
    np.testing.assert_array_equal(got, want)
    # no table: one modulation row for all
    got1 = ops.adaln_modulate(x, scale[2], shift[2], isa=isa, threads=threads)
    np.testing.assert_array_equal(got1, x * (np.float32(1) + scale[2]) + shift[2])
    # in place
    y = x.copy()
    ops.adaln_modulate(y, scale, shift, table, out=y, isa=isa, threads=threads)
    np.testing.assert_array_equal(y, want)


# ---- conversions ---------------------------------------------------------------------
def _bf16_rne(x):
    """Independent numpy f32 -> bf16 bits, round to nearest even; NaN -> quiet, sign kept."""
    u = x.view(np.uint32).astype(np.uint64)
    r = ((u + 0x7FFF + ((u >> 16) & 1)) >> 16).astype(np.uint16)
    q = ((u >> 16) | 0x40).astype(np.uint16)
    return np.where(np.isnan(x), q, r)


def _f32_cases(rng, n_random=20000):
    """Edge cases for narrowing conversions plus random bit patterns."""
    specials = [0.0, -0.0, np.inf, -np.inf, np.nan, -np.nan, 1.0, -1.0, 65504.0, 65519.99,
                65520.0, -65520.0, 65536.0, 1e38, 3.4028235e38, 6e-8, 5.96e-8, 2.98e-8,
                2.9802322e-8, 1e-45, -1e-45, 1.17549435e-38, 6.097555e-05, 6.1035156e-05]
    e = np.array(specials, np.float32)
    # exact ties for f16: normals (rest == 0x1000) with even and odd kept mantissa
    k = np.arange(1, 200, dtype=np.uint32)
    ties16 = ((np.uint32(127 - 15 + 5) << 23) | (k << 13) | np.uint32(0x1000)).view(np.float32)
    # f16 subnormal ties: (j + 0.5) * 2^-24, and the 2^-25 midpoint below the smallest
    sub = ((np.arange(0, 1030) + 0.5) * 2.0 ** -24).astype(np.float32)
    # bf16 ties (low 16 bits == 0x8000) with even/odd kept bits, and near-ties
    hi = rng.integers(0, 1 << 16, 500, dtype=np.uint32) << 16
    tb = np.concatenate([hi | 0x8000, hi | 0x7FFF, hi | 0x8001]).view(np.float32)
    rnd = rng.integers(0, 1 << 32, n_random, dtype=np.uint64).astype(np.uint32).view(np.float32)
    sig = np.array([0x7F800001, 0xFF800001, 0x7FA00000, 0x7FFFFFFF, 0xFFC00000],
                   np.uint32).view(np.float32)                 # signalling/odd NaNs
    x = np.concatenate([e, -e, ties16, -ties16, sub, -sub, tb, rnd, sig])
    return np.ascontiguousarray(x, np.float32)


@pytest.mark.parametrize("isa", ISAS)
@pytest.mark.parametrize("threads", THREADS)
def test_to_bf16_exact(isa, threads, rng):
    x = _f32_cases(rng)
    out, guard = _guarded(x.shape, np.uint16, 0xABCD)
    got = ops.to_bf16(x, out=out, isa=isa, threads=threads)
    _check_guard(guard, 0xABCD)
    np.testing.assert_array_equal(got, _bf16_rne(x))
    np.testing.assert_array_equal(got, ops.to_bf16(x, isa="ref"))  # bit-identical to ref
    try:                                # and torch on the non-NaN values (torch's NaN is 0x7fc0)
        import torch
        m = ~np.isnan(x)
        t = torch.from_numpy(x[m]).to(torch.bfloat16).view(torch.int16).numpy().view(np.uint16)
        np.testing.assert_array_equal(got[m], t)
    except ImportError:
        pass


@pytest.mark.parametrize("isa", ISAS)
@pytest.mark.parametrize("threads", THREADS)
def test_to_f16_exact(isa, threads, rng):
    x = _f32_cases(rng)
    out, guard = _guarded(x.shape, np.float16, np.float16(7.0))
    got = ops.to_f16(x, out=out, isa=isa, threads=threads)
    _check_guard(guard, np.float16(7.0))
    with np.errstate(over="ignore"):
        want = x.astype(np.float16)
    nan = np.isnan(x)
    gb, wb = got.view(np.uint16), want.view(np.uint16)
    np.testing.assert_array_equal(gb[~nan], wb[~nan])            # RNE, inf, subnormals
    assert np.all(np.isnan(got[nan]))
    np.testing.assert_array_equal(gb[nan], (x[nan].view(np.uint32) >> 16 & 0x8000) | 0x7E00)
    np.testing.assert_array_equal(gb, ops.to_f16(x, isa="ref").view(np.uint16))


@pytest.mark.parametrize("isa", ISAS)
@pytest.mark.parametrize("threads", THREADS)
def test_widening_all_bit_patterns(isa, threads):
    bits = np.arange(1 << 16, dtype=np.uint32).astype(np.uint16)
    # bf16 -> f32 is a shift, NaN payloads included
    f = ops.from_bf16(bits, isa=isa, threads=threads)
    np.testing.assert_array_equal(f.view(np.uint32), bits.astype(np.uint32) << 16)
    # f16 -> f32: every value (subnormals included) exactly as numpy; NaN stays NaN
    out, guard = _guarded(bits.shape)
    g = ops.from_f16(bits, out=out, isa=isa, threads=threads)
    _check_guard(guard)
    want = bits.view(np.float16).astype(np.float32)
    nan = np.isnan(want)
    np.testing.assert_array_equal(g.view(np.uint32)[~nan], want.view(np.uint32)[~nan])
    assert np.all(np.isnan(g[nan]))
    np.testing.assert_array_equal(g.view(np.uint32),
                                  ops.from_f16(bits, isa="ref").view(np.uint32))


@pytest.mark.parametrize("isa", ISAS)
@pytest.mark.parametrize("n", [1, 7, 15, 16, 17, 33, 100003])
def test_conversion_lengths_and_cross(isa, n, rng):
    pool = ops.ThreadPool(2)
    x = (rng.standard_normal(n) * 100).astype(np.float32)
    b = ops.to_bf16(x, isa=isa, threads=2)
    np.testing.assert_array_equal(b, _bf16_rne(x))
    h = ops.to_f16(x, isa=isa, threads=2)
    np.testing.assert_array_equal(h, x.astype(np.float16))
    # bf16 <-> f16 directly (C API only): equals going through float32
    bh = np.empty(n, np.float16)
    assert _kernels.elem_convert(b, 1, bh, 2, isa, pool) == ops.elem_kernel_isa(isa)
    np.testing.assert_array_equal(bh.view(np.uint16), ops.to_f16(ops.from_bf16(b)).view(np.uint16))
    hb = np.empty(n, np.uint16)
    _kernels.elem_convert(h, 2, hb, 1, isa, pool)
    np.testing.assert_array_equal(hb, ops.to_bf16(ops.from_f16(h)))


# ---- which path ran -------------------------------------------------------------------
@pytest.mark.parametrize("isa", ISAS)
def test_path_report_from_c(isa, rng):
    """The C entries report the kernel table they ran: the one asked for (amx -> avx512)."""
    want = ops.elem_kernel_isa(isa)
    pool = ops.ThreadPool(1)
    x = rng.standard_normal((3, 20)).astype(np.float32)
    out = np.empty_like(x)
    assert _kernels.elem_rmsnorm(x, None, out, 1e-6, isa, pool) == want
    assert _kernels.elem_activation(x.reshape(-1), out.reshape(-1), 0, isa, pool) == want
    assert _kernels.elem_swiglu(x, np.empty((3, 10), np.float32), isa, pool) == want
    assert _kernels.elem_adaln(x, x[:1], x[:1], None, out, isa, pool) == want
    xr = x.reshape(3, 2, 10).copy()
    assert _kernels.elem_rope(xr, x[:, :4].copy(), x[:, :4].copy(), 8, isa, pool) == want
    assert _kernels.elem_convert(x, 0, np.empty(x.shape, np.uint16), 1, isa, pool) == want
    # zero rows: nothing to do, still validated and reported
    e = np.empty((0, 20), np.float32)
    assert _kernels.elem_rmsnorm(e, None, e, 1e-6, isa, pool) == want


def test_path_report_mismatch_raises(monkeypatch, rng):
    """The wrapper's check is live: a kernel that reports another path is an error."""
    from h3cy.ops import elem as _ops_elem

    class Fake:
        isa_vector = staticmethod(_kernels.isa_vector)

        @staticmethod
        def elem_rmsnorm(*args):
            return "ref"

    monkeypatch.setattr(_ops_elem, "_k", Fake)
    isa = ops.available_isas()[-1]
    x = rng.standard_normal((2, 8)).astype(np.float32)
    if isa == "ref":
        Fake.elem_rmsnorm = staticmethod(lambda *a: "avx2")
    with pytest.raises(H3Error, match="kernels ran"):
        ops.rms_norm(x, isa=isa)


# ---- bad input: H3ValueError (a ValueError), never a crash ------------------------------
def _bad_cases():
    f = np.zeros((4, 8), np.float32)
    c = np.zeros((4, 2), np.float32)
    x3 = np.zeros((4, 2, 8), np.float32)
    s = np.zeros((3, 8), np.float32)
    t = np.zeros(4, np.int32)
    return [
        ("rms dtype", lambda: ops.rms_norm(f.astype(np.float64)), "float32"),
        ("rms noncontig", lambda: ops.rms_norm(np.zeros((4, 16), np.float32)[:, ::2]), "contiguous"),
        ("rms weight len", lambda: ops.rms_norm(f, np.ones(7, np.float32)), "weight has shape"),
        ("rms out shape", lambda: ops.rms_norm(f, out=np.zeros((4, 9), np.float32)), "out has shape"),
        ("rms out readonly", lambda: ops.rms_norm(f, out=np.broadcast_to(f, f.shape)), "."),
        ("rms eps", lambda: ops.rms_norm(f, eps=-1.0), "eps"),
        ("rms isa", lambda: ops.rms_norm(f, isa="sse9"), "unknown ISA"),
        ("rms threads", lambda: ops.rms_norm(f, threads=0), "threads"),
        ("rope odd", lambda: ops.rope(x3, c, c, rot_dim=3), "rot_dim"),
        ("rope big", lambda: ops.rope(x3, np.zeros((4, 5), np.float32),
                                      np.zeros((4, 5), np.float32)), "rot_dim"),
        ("rope cos rows", lambda: ops.rope(x3, c[:3], c[:3]), "cos has shape"),
        ("rope sin shape", lambda: ops.rope(x3, c, np.zeros((4, 3), np.float32)), "sin has shape"),
        ("rope 2d", lambda: ops.rope(f, c, c), "3 dimensions"),
        ("rope dtype", lambda: ops.rope(x3, c.astype(np.float64), c), "float32"),
        ("silu dtype", lambda: ops.silu(f.astype(np.float16)), "float32"),
        ("silu noncontig", lambda: ops.silu(f.T), "contiguous"),
        ("swiglu odd", lambda: ops.swiglu(np.zeros((4, 7), np.float32)), "even"),
        ("swiglu out", lambda: ops.swiglu(f, out=np.zeros((4, 8), np.float32)), "out has shape"),
        ("adaln range", lambda: ops.adaln_modulate(f, s, s, np.array([0, 1, 3, 2], np.int32)),
         r"row_table\[2\] = 3 is out of range \[0, 3\)"),
        ("adaln negative", lambda: ops.adaln_modulate(f, s, s, np.array([0, -1, 0, 0], np.int32)),
         "out of range"),
        ("adaln table dtype", lambda: ops.adaln_modulate(f, s, s, t.astype(np.int64)), "int32"),
        ("adaln table len", lambda: ops.adaln_modulate(f, s, s, t[:3]), "row_table has shape"),
        ("adaln no table", lambda: ops.adaln_modulate(f, s, s), "row_table is required"),
        ("adaln shift", lambda: ops.adaln_modulate(f, s, s[:2], t), "shift has shape"),
        ("adaln n", lambda: ops.adaln_modulate(f, s[:, :7].copy(), s[:, :7].copy(), t),
         "scale has shape"),
        ("to_bf16 dtype", lambda: ops.to_bf16(f.astype(np.float64)), "float32"),
        ("from_bf16 dtype", lambda: ops.from_bf16(f), "uint16"),
        ("to_f16 out", lambda: ops.to_f16(f, out=np.zeros((4, 8), np.float32)), "float16"),
        ("from_f16 noncontig", lambda: ops.from_f16(np.zeros((4, 8), np.float16)[:, ::2]),
         "contiguous"),
    ]


@pytest.mark.parametrize("name,call,msg", _bad_cases(), ids=[c[0] for c in _bad_cases()])
def test_bad_input(name, call, msg):
    with pytest.raises(H3ValueError, match=msg):
        call()
    assert issubclass(H3ValueError, ValueError)


def test_bad_input_reaches_c_validation():
    """The C entries validate on their own (the Python checks are not the only guard)."""
    pool = ops.ThreadPool(2)
    x = np.zeros((4, 2, 8), np.float32)
    c = np.zeros((4, 4), np.float32)
    with pytest.raises(H3ValueError, match=r"rot_dim must be even and in \[2, head_dim = 8\], got 7"):
        _kernels.elem_rope(x, c, c, 7, "ref", pool)
    with pytest.raises(H3ValueError, match="got 10"):
        _kernels.elem_rope(x, c, c, 10, "ref", pool)
    f = np.zeros((4, 8), np.float32)
    with pytest.raises(H3ValueError, match="act must be"):
        _kernels.elem_activation(f.reshape(-1), f.reshape(-1), 5, "ref", pool)
    with pytest.raises(H3ValueError, match="eps"):
        _kernels.elem_rmsnorm(f, None, f, float("nan"), "ref", pool)
    # partial overlap of out and x is refused (only out is x is allowed)
    buf = np.zeros(4 * 8 + 1, np.float32)
    xa, oa = buf[:32].reshape(4, 8), buf[1:].reshape(4, 8)
    with pytest.raises(H3ValueError, match="overlaps"):
        _kernels.elem_rmsnorm(xa, None, oa, 1e-6, "ref", pool)
    with pytest.raises(H3ValueError, match="overlaps"):
        ops.adaln_modulate(xa, np.zeros(8, np.float32), np.zeros(8, np.float32), out=oa)
    with pytest.raises(H3ValueError, match="overlaps"):
        ops.silu(buf[:31], out=buf[1:32])
    s = np.zeros((2, 8), np.float32)
    tab = np.zeros((4, 8), np.float32)
    with pytest.raises(H3ValueError, match="overlaps"):     # out on top of the scale table
        _kernels.elem_adaln(f, tab, tab.copy(), None, tab, "ref", pool)
    with pytest.raises(H3ValueError, match="dtype ids"):
        _kernels.elem_convert(f, 0, f, 7, "ref", pool)
    # the Cython layer checks that its buffers agree before handing C bare pointers
    with pytest.raises(H3ValueError, match="out has shape"):
        _kernels.elem_rmsnorm(f, None, np.zeros((3, 8), np.float32), 1e-6, "ref", pool)
    with pytest.raises(H3ValueError, match="x has shape"):
        _kernels.elem_swiglu(f, np.zeros((4, 3), np.float32), "ref", pool)
    with pytest.raises(H3ValueError, match="row_table has shape"):
        _kernels.elem_adaln(f, s, s, np.zeros(9, np.int32), np.empty_like(f), "ref", pool)
    with pytest.raises(H3ValueError, match="shift has shape"):
        _kernels.elem_adaln(f, s, s[:1], None, np.empty_like(f), "ref", pool)
    with pytest.raises(H3ValueError, match="cos has shape"):
        _kernels.elem_rope(x, c[:3], c[:3], 8, "ref", pool)


def test_unsupported_isa_is_not_a_fallback():
    missing = [n for n in _kernels.ISA_NAMES if n not in ops.available_isas()]
    # x86 and ARM paths exclude each other, so some path is always missing
    assert missing, "every ISA path claims to be available: x86 and NEON cannot both be"
    with pytest.raises(h3cy.UnsupportedCPUError):
        ops.silu(np.zeros(4, np.float32), isa=missing[0])
