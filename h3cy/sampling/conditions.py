"""Keyframe conditions of a first/last-frame request (diffusers 0.42.1, MiniMax-H3 ``fl2va``).

A condition is a clean video latent of one frame, ``(C, 1, h, w)`` (what the video VAE's
encoder hands the DiT for a keyframe), anchored at the first or the last latent frame.  The
released model reads it slightly noised and holds it there for the whole run:

* once, before the loop: ``z_held = 0.999 * z + (1 - 0.999) * n`` in float32, each product
  and the sum rounded (diffusers' ``MiniMaxH3Scheduler.scale_noise`` at ``t = 0.999``), with
  one standard-normal ``n`` per condition drawn in the order the conditions are given;
* every step: its rows sit after the text rows (:class:`h3cy.Layout`), carry the timestep
  ``max(t_video, 0.999)`` and are never written -- the sampler updates the generated rows
  only.

Condition noise is an argument so a test can hand h3cy the reference's torch draws; without
it, it comes from the request's seed: the third child of ``SeedSequence(seed)`` (the first two
are the video and audio noise of :func:`h3cy.initial_noise`) -> PCG64 -> one
``standard_normal(float32)`` draw per condition, in order.
"""
import numpy as np

from ..errors import H3ValueError

# the timestep a keyframe is noised to and held at (diffusers' keyframe_noise_aug)
CONDITION_T = np.float32(0.999)
FIRST, LAST = "first", "last"


def anchor_frame(frame, T):
    """The latent frame a condition's ``frame`` names: 0 (or -T) is the first, -1 (or T-1)
    the last.  The released model anchors keyframes at those two ends only."""
    if isinstance(frame, bool) or not isinstance(frame, (int, np.integer)):
        raise H3ValueError(f"a condition's frame must be an int (0 = first, -1 = last), got {frame!r}")
    f = int(frame)
    if not -T <= f < T:
        raise H3ValueError(f"condition frame {f} is out of range for {T} latent frames "
                           "(0 = first, -1 = last)")
    f %= T
    if f not in (0, T - 1):
        raise H3ValueError(f"condition frame {frame} is neither the first (0) nor the last (-1) latent "
                           "frame; MiniMax-H3 anchors keyframes at those two ends only")
    return f


def check_conditions(conditions, geometry, channels):
    """``[(frame, latent), ...]`` -> ``(frames, latents)``: the anchored latent frames (0 or
    T-1) and each latent as a float32 ``(channels, 1, h, w)`` array, in the order given (the
    packed order).  A leading batch axis of 1 is accepted."""
    g = geometry
    if isinstance(conditions, (str, bytes)) or not hasattr(conditions, "__iter__"):
        raise H3ValueError(f"conditions must be a list of (frame, latent) pairs, got {type(conditions).__name__}")
    frames, latents = [], []
    for k, item in enumerate(conditions):
        if not isinstance(item, (tuple, list)) or len(item) != 2:
            raise H3ValueError(f"condition {k} must be a (frame, latent) pair, got {type(item).__name__}")
        f = anchor_frame(item[0], g.T)
        if f in frames:
            raise H3ValueError(f"two conditions anchor latent frame {f}; give each end at most once")
        z = np.asarray(item[1], np.float32)
        if z.ndim == 5 and z.shape[0] == 1:
            z = z[0]
        want = (channels, 1, g.h, g.w)
        if z.shape != want:
            raise H3ValueError(f"condition {k} (frame {item[0]}) latent must be {want} (channels, 1 frame, "
                               f"the geometry's latent h, w), got {np.shape(item[1])}")
        if not np.all(np.isfinite(z)):
            raise H3ValueError(f"condition {k} latent holds NaN or Inf")
        frames.append(f)
        latents.append(z)
    return tuple(frames), latents


def condition_noise_from_seed(seed, shapes):
    """One standard-normal float32 array per shape, drawn in order from the third child of
    ``SeedSequence(seed)`` (see the module docstring)."""
    if isinstance(seed, bool) or not isinstance(seed, (int, np.integer)) or seed < 0:
        raise H3ValueError(f"seed must be a non-negative int, got {seed!r}")
    gen = np.random.Generator(np.random.PCG64(np.random.SeedSequence(int(seed)).spawn(3)[2]))
    return [gen.standard_normal(s, dtype=np.float32) for s in shapes]


def hold(latent, noise):
    """The condition as the DiT reads it: fl32(fl32(t*z) + fl32(fl32(1-t)*n)), t = 0.999."""
    t = CONDITION_T
    one_t = np.float32(np.float32(1.0) - t)
    z = np.asarray(latent, np.float32)
    return ((t * z).astype(np.float32) + (one_t * np.asarray(noise, np.float32)).astype(np.float32)
            ).astype(np.float32)


def held_conditions(latents, condition_noise, seed):
    """The held (noised) latents of the checked ``latents``: with ``condition_noise`` (one
    array per condition, same shapes; a leading batch axis of 1 accepted) or drawn from
    ``seed``."""
    if condition_noise is None:
        noise = condition_noise_from_seed(seed, [z.shape for z in latents])
    else:
        if isinstance(condition_noise, np.ndarray) or not hasattr(condition_noise, "__len__"):
            raise H3ValueError("condition_noise must be a list with one array per condition")
        if len(condition_noise) != len(latents):
            raise H3ValueError(f"condition_noise has {len(condition_noise)} arrays for {len(latents)} conditions")
        noise = []
        for k, (n, z) in enumerate(zip(condition_noise, latents)):
            n = np.asarray(n, np.float32)
            if n.ndim == 5 and n.shape[0] == 1:
                n = n[0]
            if n.shape != z.shape:
                raise H3ValueError(f"condition_noise[{k}] must be {z.shape}, got {np.shape(condition_noise[k])}")
            noise.append(n)
    return [hold(z, n) for z, n in zip(latents, noise)]


def condition_timestep(t_video):
    """The timestep of a condition row at a step whose video timestep is ``t_video``:
    ``max(t_video, 0.999)`` in float32 (elementwise for per-frame values)."""
    return np.maximum(np.asarray(t_video, np.float32), CONDITION_T)
