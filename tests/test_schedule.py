"""Schedules and the Euler step, bit for bit against diffusers' MiniMaxH3Scheduler."""
import numpy as np
import pytest
import torch

from h3cy.errors import H3ValueError
from h3cy.sampling.schedule import Schedule, euler_step, shifted_sigmas


def _ref_scheduler(shift, num_points):
    from diffusers import MiniMaxH3Scheduler
    s = MiniMaxH3Scheduler(shift=shift)
    s.set_timesteps(num_points)
    return s


@pytest.mark.parametrize("shift", [12.0, 3.0, 11.0, 2.0, 1.0])
def test_sigma_grids_equal_diffusers_bitwise(shift):
    for n in list(range(2, 80)) + [100, 129, 200, 257, 500, 1001]:
        want = _ref_scheduler(shift, n).sigmas.numpy()
        got = shifted_sigmas(n, shift)
        assert got.dtype == np.float32 and got.shape == want.shape, n
        assert np.array_equal(got.view(np.uint32), want.view(np.uint32)), f"shift {shift} n {n}"


def test_shifted_schedule_steps_meaning_and_timesteps():
    s = Schedule.shifted(19)
    assert s.steps == 19 and s.video_sigmas.shape == (20,)
    ref = _ref_scheduler(12.0, 20)
    assert np.array_equal(Schedule.timesteps(s.video_sigmas), ref.timesteps.numpy())
    ref_a = _ref_scheduler(3.0, 20)
    assert np.array_equal(s.audio_sigmas, ref_a.sigmas.numpy())


def test_euler_step_equals_diffusers_bitwise(rng):
    for shift in (12.0, 3.0):
        ref = _ref_scheduler(shift, 50)
        sig = ref.sigmas.numpy()
        x = rng.standard_normal((37, 96)).astype(np.float32)
        for i, t in enumerate(ref.timesteps):
            v = rng.standard_normal(x.shape).astype(np.float32)
            want = ref.step(torch.from_numpy(v), t, torch.from_numpy(x), return_dict=False)[0].numpy()
            got = euler_step(x, v, t.item(), sig[i], sig[i + 1])
            assert np.array_equal(got.view(np.uint32), want.view(np.uint32)), f"shift {shift} step {i}"
            x = got


def test_bad_schedules_raise():
    with pytest.raises(H3ValueError):
        Schedule([1.0, 0.5, 0.6, 0.0], [1.0, 0.7, 0.3, 0.0])      # not decreasing
    with pytest.raises(H3ValueError):
        Schedule([1.0, 0.5, 0.1], [1.0, 0.5, 0.0])                # video does not end at 0
    with pytest.raises(H3ValueError):
        Schedule([1.0, 0.0], [1.0, 0.5, 0.0])                     # lengths differ
    for bad in (0, -3, 2.5, True):
        with pytest.raises(H3ValueError):
            Schedule.shifted(bad)
    with pytest.raises(H3ValueError):
        Schedule.shifted(10, video_shift=0.0)
