"""Comparison metrics shared by the tests (float64 maths)."""
import numpy as np


def rel_l2(got, want):
    got = np.asarray(got, np.float64)
    want = np.asarray(want, np.float64)
    den = np.linalg.norm(want)
    return float(np.linalg.norm(got - want) / (den if den > 0 else 1.0))


def max_rel(got, want):
    """max |got - want| / max |want|."""
    got = np.asarray(got, np.float64)
    want = np.asarray(want, np.float64)
    den = np.max(np.abs(want))
    return float(np.max(np.abs(got - want)) / (den if den > 0 else 1.0))


def assert_nontrivial(a):
    a = np.asarray(a)
    assert a.size > 0 and np.all(np.isfinite(a)), "reference has NaN/Inf or is empty"
    assert np.any(a != 0), "reference is all zeros: the test would prove nothing"


def assert_close(got, want, *, rel_l2_tol=None, max_rel_tol=None, what=""):
    """Shape, dtype-independent finiteness, then relative-L2 and/or max-relative bounds."""
    got = np.asarray(got)
    want = np.asarray(want)
    assert got.shape == want.shape, f"{what}: shape {got.shape} != {want.shape}"
    assert np.all(np.isfinite(got)), f"{what}: result has NaN/Inf"
    if rel_l2_tol is not None:
        e = rel_l2(got, want)
        assert e <= rel_l2_tol, f"{what}: rel L2 {e:.3g} > {rel_l2_tol:.3g}"
    if max_rel_tol is not None:
        e = max_rel(got, want)
        assert e <= max_rel_tol, f"{what}: max rel {e:.3g} > {max_rel_tol:.3g}"
