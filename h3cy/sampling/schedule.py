"""Sigma schedules and the Euler step of MiniMax-H3's sampler, bit-exact with diffusers'
``MiniMaxH3Scheduler`` (float32, spec §5).

``steps`` counts denoiser evaluations (h3.c's meaning): diffusers'
``num_inference_steps = steps + 1`` (its grid includes the terminal 0).
"""
import numpy as np

from ..errors import H3ValueError

_f32 = np.float32


def _linspace_1_0(n):
    """torch.linspace(1.0, 0.0, n, float32) as torch 2.13's x86 AVX2/AVX-512 CPU kernel
    computes it (spec §5.1): step = fl32(-1/(n-1)); the first half is fma(step, i, 1)
    (one rounding), the second half -fl32(step * (n-1-i))."""
    if n == 1:
        return np.ones(1, _f32)
    step = _f32(-1.0) / _f32(n - 1)
    i = np.arange(n)
    out = np.empty(n, _f32)
    h = n // 2
    # step (24-bit significand) * i (< 2^24) is exact in float64, and so is + 1.0 here:
    # one rounding to float32 = the fused multiply-add
    out[:h] = (np.float64(step) * i[:h] + 1.0).astype(_f32)
    out[h:] = -(_f32(step) * (n - 1 - i[h:]).astype(_f32))
    return out


def shifted_sigmas(num_points, shift):
    """diffusers MiniMaxH3Scheduler.set_timesteps(num_points) sigmas (float32, ending at 0)."""
    base = _linspace_1_0(num_points)
    s = _f32(shift)
    a = (s * base).astype(_f32)
    b = ((s - _f32(1.0)) * base).astype(_f32)
    c = (_f32(1.0) + b).astype(_f32)
    sig = (a / c).astype(_f32)
    keep = np.ones(sig.shape[0], bool)           # unique_consecutive
    keep[1:] = sig[1:] != sig[:-1]
    return sig[keep]


class Schedule:
    """Video and audio sigma grids of one request, each strictly decreasing to 0.

    Parameters
    ----------
    video_sigmas : array of shape (steps+1,) or (steps+1, T)
        A per-latent-frame schedule gives each latent frame its own column.
    audio_sigmas : array of shape (steps+1,)
    """

    def __init__(self, video_sigmas, audio_sigmas):
        v = np.asarray(video_sigmas, _f32)
        a = np.asarray(audio_sigmas, _f32)
        if a.ndim != 1 or v.ndim not in (1, 2) or v.shape[0] != a.shape[0] or a.shape[0] < 2:
            raise H3ValueError(f"video_sigmas {v.shape} and audio_sigmas {a.shape} must have the same "
                               "number (>= 2) of grid points")
        for name, s in (("video_sigmas", v), ("audio_sigmas", a)):
            if not np.all(np.isfinite(s)) or np.any(s[-1] != 0) or not np.all(s[1:] < s[:-1]):
                raise H3ValueError(f"{name} must be finite, strictly decreasing and end at 0")
        self.video_sigmas = v
        self.audio_sigmas = a

    @property
    def steps(self):
        """Number of denoiser evaluations."""
        return self.audio_sigmas.shape[0] - 1

    @classmethod
    def shifted(cls, steps, video_shift=12.0, audio_shift=3.0):
        """The released schedule: diffusers' grids for num_inference_steps = steps + 1."""
        if isinstance(steps, bool) or not isinstance(steps, (int, np.integer)) or steps < 1:
            raise H3ValueError(f"steps must be a positive int, got {steps!r}")
        for name, s in (("video_shift", video_shift), ("audio_shift", audio_shift)):
            if not (np.isfinite(s) and s > 0):
                raise H3ValueError(f"{name} must be positive, got {s!r}")
        v = shifted_sigmas(steps + 1, video_shift)
        a = shifted_sigmas(steps + 1, audio_shift)
        if v.shape != a.shape or v.shape[0] != steps + 1:
            raise H3ValueError(f"the shifted grid collapsed duplicate sigmas for steps={steps}")
        return cls(v, a)

    @staticmethod
    def timesteps(sigmas):
        """t = fl32(1 - sigma) for every grid point but the last (diffusers' timesteps)."""
        s = np.asarray(sigmas, _f32)
        return (_f32(1.0) - s[:-1]).astype(_f32)


def clean_estimate(x, v, t):
    """x0 = fl32(x + fl32(fl32(1 - t) * v)): the data-ward velocity's clean sample."""
    t = np.asarray(t, _f32)
    sft = (_f32(1.0) - t).astype(_f32)
    return (np.asarray(x, _f32) + (sft * np.asarray(v, _f32)).astype(_f32)).astype(_f32)


def euler_blend(x, x0, sigma, sigma_next, out=None):
    """x' = fl32(fl32(r * x) + fl32(fl32(1 - r) * x0)), r = fl32(sigma_next / sigma)."""
    x = np.asarray(x, _f32)
    sig, sn = np.asarray(sigma, _f32), np.asarray(sigma_next, _f32)
    r = (sn / sig).astype(_f32)
    one_r = (_f32(1.0) - r).astype(_f32)
    res = ((r * x).astype(_f32) + (one_r * x0).astype(_f32)).astype(_f32)
    if out is not None:
        out[...] = res
        return out
    return res


def euler_step(x, v, t, sigma, sigma_next, out=None):
    """diffusers MiniMaxH3Scheduler.step in float32, separately rounded (spec §5.3):

        sft = fl32(1 - t); x0 = fl32(x + fl32(sft * v)); r = fl32(sigma_next / sigma)
        x' = fl32(fl32(r * x) + fl32(fl32(1 - r) * x0))

    x, v : float32 arrays of one shape; t, sigma, sigma_next : float32 scalars, or arrays
    broadcasting against x (per-frame schedules).  Returns x' (``out`` may be x)."""
    return euler_blend(x, clean_estimate(x, v, t), sigma, sigma_next, out=out)
