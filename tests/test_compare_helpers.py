"""The comparison helpers must reject wrong results, or every parity test is void."""
import numpy as np
import pytest

from _compare import assert_close, assert_nontrivial, rel_l2


def test_assert_close_rejects_perturbed_copy(rng):
    want = rng.standard_normal(1000)
    got = want.copy()
    got[17] += 0.5
    assert_close(want.copy(), want, rel_l2_tol=1e-12, max_rel_tol=1e-12)
    with pytest.raises(AssertionError):
        assert_close(got, want, rel_l2_tol=1e-3)
    with pytest.raises(AssertionError):
        assert_close(got, want, max_rel_tol=1e-3)
    with pytest.raises(AssertionError):
        assert_close(got[:-1], want[:-1].reshape(-1, 1), rel_l2_tol=1.0)


def test_assert_close_rejects_nan(rng):
    want = rng.standard_normal(10)
    got = want.copy()
    got[3] = np.nan
    with pytest.raises(AssertionError):
        assert_close(got, want, rel_l2_tol=1.0)


def test_assert_nontrivial_rejects_zeros():
    with pytest.raises(AssertionError):
        assert_nontrivial(np.zeros(5))
    assert rel_l2(np.ones(3), np.ones(3)) == 0.0
