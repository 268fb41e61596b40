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
