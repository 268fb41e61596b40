"""The RES second-order multistep sampler as ComfyUI runs it for MiniMax-H3.

ComfyUI (``comfy/k_diffusion/sampling.py``, ``sample_res_multistep`` -> ``res_multistep``
with ``eta=0``, ``cfg_pp=False``; followed at Comfy-Org/ComfyUI a125cd84) steps one latent on
one sigma grid.  For H3 that grid is the video's, and the audio latent is carried as
ComfyUI's ``ModelSamplingAV`` carries it: ``c_a = x_a * sigma_v / sigma_a``, whose
"denoised" is ``k * x0_a`` with ``k = audio_scale = shift_video / shift_audio`` (for the
shifted schedules ``sigma/(1 - sigma)`` of video and audio differ by exactly that factor,
so ``c_a`` is a flow-matching state on the video clock).  Each evaluation converts back to
``x_a = c_a * sigma_a / sigma_v`` for the transformer.  For Euler this equals stepping each
modality on its own schedule; for res_multistep it does not.

Per step i with ``sigma = sigma_v[i]``, ``sigma' = sigma_v[i+1]``, denoised ``D`` (the clean
estimates ``x0_v`` and ``k * x0_a``):

* first step, or ``sigma' == 0``: Euler, ``c' = c + (c - D) / sigma * (sigma' - sigma)``;
* else, with ``t(s) = -log s``, ``h = t(sigma') - t(sigma)``,
  ``c2 = (t(sigma_v[i-1]) - t(sigma)) / h``, ``phi1(x) = expm1(x) / x``,
  ``phi2(x) = (phi1(x) - 1) / x``, ``b1 = phi1(-h) - phi2(-h) / c2``, ``b2 = phi2(-h) / c2``:
  ``c' = exp(-h) c + h (b1 D + b2 D_prev)``.

The coefficients are computed in float64 (as Python floats, like ComfyUI's scalar sigmas
on the CPU), the latents in float32.

A per-latent-frame schedule (video sigmas of shape (steps+1, T); ComfyUI has none) steps
each latent frame with the coefficients of its own sigma column, and carries the audio on
latent frame 0's column (the clock whose timestep the text rows take).  Columns are
strictly decreasing to 0, so every frame takes its Euler first and last steps together,
and a schedule whose columns are all equal gives the one-grid result bit for bit.
"""
import math

import numpy as np

from ..errors import H3ValueError

SAMPLERS = ("euler", "res_multistep")


def audio_scale(video_sigmas, audio_sigmas):
    """``k = shift_video / shift_audio`` as the grids imply it: ``(s_v / (1 - s_v)) /
    (s_a / (1 - s_a))`` at the first point strictly inside (0, 1); 1.0 when there is none
    (steps = 1: the only step is Euler to sigma 0, where k cancels)."""
    for v, a in zip(np.asarray(video_sigmas, np.float64), np.asarray(audio_sigmas, np.float64)):
        if 0.0 < v < 1.0 and 0.0 < a < 1.0:
            return (v / (1.0 - v)) / (a / (1.0 - a))
    return 1.0


def res_coefficients(s, s_next, s_prev):
    """(exp(-h), h*b1, h*b2) of the second-order step from ``s`` to ``s_next`` after one
    from ``s_prev`` (float64, as ComfyUI computes them)."""
    t, t_next, t_prev = -math.log(s), -math.log(s_next), -math.log(s_prev)
    h = t_next - t
    c2 = (t_prev - t) / h
    phi1 = math.expm1(-h) / -h
    phi2 = (phi1 - 1.0) / -h
    b1, b2 = phi1 - phi2 / c2, phi2 / c2
    return math.exp(-h), h * b1, h * b2


class ResMultistep:
    """The sampler's state across steps: the latents at the start of the step and the
    previous step's denoised pair (``old_d_v``, ``old_d_a``: ComfyUI's ``old_denoised``,
    the audio's in the carried form ``k * x0_a``).  ``update`` replaces an Euler-stepped
    pair of latents in place by the res_multistep step; ``keep`` records the latents the
    next step starts from (after the step hook, whose in-place edits count)."""

    def __init__(self, video_sigmas, audio_sigmas, video, audio):
        self.sv = np.asarray(video_sigmas, np.float64)
        self.sa = np.asarray(audio_sigmas, np.float64)
        if self.sv.ndim not in (1, 2):
            raise H3ValueError(f"video sigmas must be (steps+1,) or (steps+1, T), got {self.sv.shape}")
        self.per_frame = self.sv.ndim == 2
        self.clock = self.sv[:, 0] if self.per_frame else self.sv     # the audio's video clock
        self.k = audio_scale(self.clock, self.sa)
        self.keep(video, audio)
        self.old_d_v = self.old_d_a = None

    def keep(self, video, audio):
        """The latents the next step starts from (copies: the loop overwrites its arrays)."""
        self.x_v = np.array(video, np.float32, copy=True)
        self.x_a = np.array(audio, np.float32, copy=True)

    def _frames(self, values):
        """Per-frame float32 coefficients, shaped to broadcast over (C, T, h, w)."""
        return np.asarray(values, np.float32).reshape(1, -1, 1, 1)

    def update(self, i, video, audio, x0_v, x0_a):
        """Step i: from the latents before it (kept here) and the clean estimates, write the
        res_multistep result into ``video`` / ``audio`` (the loop's arrays)."""
        s, s_next = float(self.clock[i]), float(self.clock[i + 1])
        sa, sa_next = float(self.sa[i]), float(self.sa[i + 1])
        f32 = np.float32
        c_v = self.x_v
        c_a = (self.x_a * f32(s / sa)).astype(f32)
        d_v = np.asarray(x0_v, f32)
        d_a = (np.asarray(x0_a, f32) * f32(self.k)).astype(f32)
        if self.per_frame:
            fs, fn = self.sv[i], self.sv[i + 1]
            sv_i, dt_v = self._frames(fs), self._frames([f32(b - a) for a, b in zip(fs, fn)])
        else:
            sv_i, dt_v = f32(s), f32(s_next - s)
        # every column reaches 0 at the last point only (strictly decreasing grids)
        if s_next == 0.0 or self.old_d_v is None:
            dt = f32(s_next - s)
            n_v = (c_v + (c_v - d_v) / sv_i * dt_v).astype(f32)
            n_a = (c_a + (c_a - d_a) / f32(s) * dt).astype(f32)
        else:
            e, hb1, hb2 = res_coefficients(s, s_next, float(self.clock[i - 1]))
            if self.per_frame:
                cf = [res_coefficients(a, b, p) for a, b, p in zip(self.sv[i], self.sv[i + 1], self.sv[i - 1])]
                ev, hb1v, hb2v = (self._frames([c[j] for c in cf]) for j in range(3))
            else:
                ev, hb1v, hb2v = f32(e), f32(hb1), f32(hb2)
            n_v = (ev * c_v + (hb1v * d_v + hb2v * self.old_d_v)).astype(f32)
            n_a = (f32(e) * c_a + (f32(hb1) * d_a + f32(hb2) * self.old_d_a)).astype(f32)
        self.old_d_v, self.old_d_a = d_v.copy(), d_a.copy()
        video[...] = n_v
        audio[...] = (n_a * f32(sa_next / s_next)) if s_next > 0.0 else (n_a / f32(self.k))
