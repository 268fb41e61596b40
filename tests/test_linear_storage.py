"""Linear storage export / attach (the basis of weight cache files and zero-copy bf16
checkpoints), and conversion errors at creation."""
import numpy as np
import pytest

import h3cy
from h3cy import _kernels
from h3cy.errors import H3ValueError
from conftest import isa_params


def _aligned_copy(buf):
    raw = np.empty(buf.nbytes + 64, np.uint8)
    off = (-raw.ctypes.data) % 64
    out = raw[off:off + buf.nbytes]
    out[:] = buf
    return out


@pytest.mark.parametrize("isa", isa_params())
@pytest.mark.parametrize("mode", ["fp32", "bf16", "fp16", "int8", "int4"])
def test_export_attach_round_trip_is_bit_identical(isa, mode, rng):
    w = rng.standard_normal((70, 300), dtype=np.float32)
    b = rng.standard_normal(70, dtype=np.float32)
    x = rng.standard_normal((9, 300), dtype=np.float32)
    lin = h3cy.ops.Linear(w, bias=b, weights=mode, isa=isa, threads=2)
    layout, wbytes, sbytes = lin._c.export()
    assert layout["N"] == 70 and layout["K"] == 300 and wbytes.nbytes == layout["w_bytes"]
    wa = _aligned_copy(wbytes)
    core = _kernels.linear_attach(layout, wa, None if sbytes is None else sbytes.view(np.float32),
                                  b, isa, lin._pool)
    got = np.empty((9, 70), np.float32)
    core.forward(x, got, 0)
    np.testing.assert_array_equal(got, lin(x))
    # attached storage is used in place: changing it changes the result
    if mode in ("int8", "int4"):
        wa[:] = 0x88 if mode == "int4" else 0x80   # every weight zero in the offset encoding
        core.forward(x, got, 0)
        np.testing.assert_array_equal(got, np.broadcast_to(b, got.shape))


def test_attach_rejects_foreign_layouts(rng):
    w = rng.standard_normal((40, 64), dtype=np.float32)
    lin = h3cy.ops.Linear(w, weights="int8", isa="ref")
    layout, wbytes, sbytes = lin._c.export()
    sc = sbytes.view(np.float32)
    wa = _aligned_copy(wbytes)
    pool = lin._pool
    bad = dict(layout, nr=layout["nr"] * 2)
    with pytest.raises(ValueError, match="nr="):
        _kernels.linear_attach(bad, wa, sc, None, "ref", pool)
    with pytest.raises(ValueError):
        _kernels.linear_attach(dict(layout, w_bytes=layout["w_bytes"] - 1), wa[:-1], sc, None, "ref", pool)
    with pytest.raises(ValueError, match="scales"):
        _kernels.linear_attach(layout, wa, None, None, "ref", pool)
    raw = np.empty(wbytes.nbytes + 64, np.uint8)
    off = (-raw.ctypes.data) % 64 + 1
    with pytest.raises(ValueError, match="aligned"):
        _kernels.linear_attach(layout, raw[off:off + wbytes.nbytes], sc, None, "ref", pool)


def test_fp16_overflow_is_an_error_not_inf():
    w = np.array([[70000.0, 1.0], [2.0, 3.0]], np.float32)
    with pytest.raises(H3ValueError, match="overflows float16"):
        h3cy.ops.Linear(w, weights="fp16", isa="ref")
    w[0, 0] = 65504.0   # the largest float16 is fine
    y = h3cy.ops.Linear(w, weights="fp16", isa="ref")(np.array([[1.0, 0.0]], np.float32))
    assert y[0, 0] == 65504.0


def _bf16_bits(x):
    from h3cy.ops.bf16 import f32_to_bf16_bits
    return f32_to_bf16_bits(np.ascontiguousarray(x, np.float32))


def _float_layout(N, K, dt, pair=0, **kw):
    esz = 2 if dt == np.uint16 else 4
    return dict(wtype=1 if dt == np.uint16 else 0, group_size=0, act_group=0, pair=pair, nr=0,
                N=N, K=K, Kp=K, w_bytes=N * K * esz, s_bytes=0, **kw)


@pytest.mark.parametrize("isa", isa_params())
@pytest.mark.parametrize("dtype", ["fp32", "bf16"])
@pytest.mark.parametrize("M", [1, 3, 70])
def test_attach_parts_equals_the_fused_weight(isa, dtype, M, rng):
    """Rows held in three separate tensors (the diffusers layout's to_q/to_k/to_v) give
    bit for bit the product of the fused [q; k; v] weight; parts of 40 rows are not a
    multiple of any panel width, so a tile that straddled two parts would read the
    wrong rows."""
    q, k, v = (rng.standard_normal((40, 96), dtype=np.float32) for _ in range(3))
    if dtype == "bf16":
        q, k, v = (_bf16_bits(t) for t in (q, k, v))
    fused = np.concatenate([q, k, v])
    b = rng.standard_normal(120, dtype=np.float32)
    x = rng.standard_normal((M, 96), dtype=np.float32)
    pool = h3cy.ops.ThreadPool(2)
    lay = _float_layout(120, 96, fused.dtype)
    want = np.empty((M, 120), np.float32)
    _kernels.linear_attach(lay, fused, None, b, isa, pool).forward(x, want, 0)
    got = np.empty((M, 120), np.float32)
    core = _kernels.linear_attach(lay, [q, k, v], None, b, isa, pool)
    core.forward(x, got, 0)
    np.testing.assert_array_equal(got, want)
    ref = x.astype(np.float64) @ h3cy.ops.Linear(fused, weight_dtype=dtype, weights=dtype, isa="ref")._c.dequantized().T.astype(np.float64) + b
    assert np.abs(got - ref).max() <= 1e-4 * np.abs(ref).max() * (100 if isa == "amx" and dtype == "bf16" else 1)
    # used in place: editing one part changes only its columns
    v[:] = 0
    core.forward(x, got, 0)
    np.testing.assert_array_equal(got[:, :80], want[:, :80])
    np.testing.assert_array_equal(got[:, 80:], np.broadcast_to(b[80:], (M, 40)))


@pytest.mark.parametrize("isa", isa_params())
@pytest.mark.parametrize("M", [1, 33])
def test_attach_parts_swiglu_pair_from_swapped_halves(isa, M, rng):
    """A [value; gate] tensor (the diffusers SwiGLU layout) attached as parts [gate half,
    value half] is the [gate; value] pair linear, SwiGLU epilogue included."""
    stored = _bf16_bits(rng.standard_normal((2 * 56, 64), dtype=np.float32))   # [value; gate]
    value, gate = stored[:56], stored[56:]
    pool = h3cy.ops.ThreadPool(2)
    lay = _float_layout(112, 64, np.uint16, pair=1)
    x = rng.standard_normal((M, 64), dtype=np.float32)
    want = np.empty((M, 56), np.float32)
    SWIGLU = 1   # H3_EPI_SWIGLU
    _kernels.linear_attach(lay, np.concatenate([gate, value]), None, None, isa, pool).forward(x, want, SWIGLU)
    got = np.empty((M, 56), np.float32)
    _kernels.linear_attach(lay, [gate, value], None, None, isa, pool).forward(x, got, SWIGLU)
    np.testing.assert_array_equal(got, want)
    both = np.empty((M, 112), np.float32)
    _kernels.linear_attach(lay, [gate, value], None, None, isa, pool).forward(x, both, 0)
    g, v = both[:, :56], both[:, 56:]
    np.testing.assert_allclose(got, g / (1 + np.exp(-g)) * v, rtol=1e-5, atol=1e-5)


def test_attach_parts_rejects_bad_parts(rng):
    pool = h3cy.ops.ThreadPool(1)
    a = _bf16_bits(rng.standard_normal((8, 16), dtype=np.float32))
    lay = _float_layout(24, 16, np.uint16)
    with pytest.raises(ValueError, match="equal size"):
        _kernels.linear_attach(lay, [a, a, a[:4]], None, None, "ref", pool)
    with pytest.raises(ValueError, match="1 to 3 parts"):
        _kernels.linear_attach(_float_layout(32, 16, np.uint16), [a] * 4, None, None, "ref", pool)
    with pytest.raises(ValueError, match="pair"):
        _kernels.linear_attach(dict(lay, pair=1, N=24), [a, a, a], None, None, "ref", pool)
    with pytest.raises(ValueError, match="bytes"):
        _kernels.linear_attach(_float_layout(32, 16, np.uint16), [a, a], None, None, "ref", pool)
    core = _kernels.linear_attach(lay, [a, a, a], None, None, "ref", pool)
    with pytest.raises(ValueError, match="separate parts"):
        core.export()


@pytest.mark.parametrize("isa", isa_params())
def test_f32_exact_bf16_weights_keep_float32_inputs(isa, rng):
    """fp32 mode over bf16 tensors: the widened weights meet float32 inputs exactly.
    Without f32_exact, AMX (and VDPBF16PS with bf16_inputs) would round x to bf16 --
    a relative error ~4e-3, against ~1e-7 for float32 products."""
    w = _bf16_bits(rng.standard_normal((64, 256), dtype=np.float32))
    x = rng.standard_normal((40, 256), dtype=np.float32)
    core = _kernels.linear_attach(_float_layout(64, 256, np.uint16, f32_exact=1), w, None, None,
                                  isa, h3cy.ops.ThreadPool(2))
    assert not core.bf16_activations
    got = np.empty((40, 64), np.float32)
    core.forward(x, got, 0)
    wf = h3cy.ops.Linear(w, weight_dtype="bf16", weights="bf16", isa="ref")._c.dequantized()
    ref = x.astype(np.float64) @ wf.T.astype(np.float64)
    assert np.abs(got - ref).max() <= 1e-5 * np.abs(ref).max()


def test_linear_in_place_modes_and_refusals(rng):
    """h3cy.weights.linears.linear_in_place: bf16 and fp32 modes use bf16 tensors (and fp32 mode
    float32 ones) as stored, also in parts; everything else is refused (None), so the
    caller converts."""
    from h3cy.weights.linears import linear_in_place
    pool = h3cy.ops.ThreadPool(1)
    a = rng.standard_normal((16, 32), dtype=np.float32)
    b16 = _bf16_bits(a)
    x = rng.standard_normal((5, 32), dtype=np.float32)
    want = x.astype(np.float64) @ h3cy.ops.Linear(b16, weight_dtype="bf16", weights="bf16", isa="ref")._c.dequantized().T
    for mode in ("fp32", "bf16"):
        lin = linear_in_place(b16, mode, "ref", pool)
        assert lin is not None and lin._c.storage[0] is b16
        if mode == "fp32":
            assert not lin._c.bf16_activations      # f32_exact: x is never rounded
        tol = 1e-5 if mode == "fp32" else 1e-2    # bf16 mode rounds x to bf16 first
        assert np.abs(lin(x) - want).max() <= tol * np.abs(want).max(), mode
    lin = linear_in_place([b16[:8], b16[8:]], "fp32", "ref", pool)
    np.testing.assert_array_equal(lin(x), linear_in_place(b16, "fp32", "ref", pool)(x))
    assert linear_in_place(a, "fp32", "ref", pool)._c.storage[0] is a
    assert linear_in_place(a, "bf16", "ref", pool) is None            # float32 -> bf16 converts
    for mode in ("fp16", "int8", "int4"):
        assert linear_in_place(b16, mode, "ref", pool) is None
    assert linear_in_place([b16[:8], a[8:]], "fp32", "ref", pool) is None          # mixed dtypes
    assert linear_in_place([b16[:4]] * 4, "fp32", "ref", pool) is None             # > 3 parts
    assert linear_in_place(np.asfortranarray(b16), "bf16", "ref", pool) is None    # not C-contiguous


def test_joined_rows_never_mixes_bf16_bits_with_float_values(rng):
    """The converting modes join a weight's parts; bf16 parts (uint16 bits) beside a float32
    one are widened first, so the joined weight holds values, not bit patterns."""
    from h3cy.weights.linears import joined_rows
    from h3cy.ops.bf16 import bf16_bits_to_f32
    b = (rng.standard_normal((3, 8), dtype=np.float32).view(np.uint32) >> 16).astype(np.uint16)
    f = rng.standard_normal((3, 8), dtype=np.float32)
    got = joined_rows([b, f])
    assert got.dtype == np.float32
    np.testing.assert_array_equal(got, np.concatenate([bf16_bits_to_f32(b), f]))
    assert joined_rows([b, b]).dtype == np.uint16          # same dtype: joined as stored
    assert joined_rows(f) is f and joined_rows([f]) is f
