"""sampler="res_multistep" against a numpy transcription of ComfyUI's algorithm
(comfy/k_diffusion/sampling.py: sample_res_multistep -> res_multistep(eta=0, cfg_pp=False),
Comfy-Org/ComfyUI a125cd84), with the audio latent carried as ComfyUI's ModelSamplingAV
carries it (x_a * sigma_v / sigma_a, denoised scaled by audio_scale = shift_v / shift_a).
The model is h3cy's own fp32 DiT.forward (itself checked against diffusers in
test_dit_parity.py), so this test pins the sampler, not the transformer."""
import math

import numpy as np
import pytest

import h3cy
from h3cy.errors import H3ValueError
from h3cy.sampling.layout import Layout, pack_audio, patchify, unpack_audio, unpatchify
from _compare import assert_close, rel_l2


def comfy_res_multistep(model, x, sigmas, after=None):
    """ComfyUI's res_multistep with eta=0 (sigma_down = sigma_next, sigma_up = 0), written
    out in float64 numpy.  model(x, sigma) -> denoised.  ``after(i, x)`` -> x: an edit
    between steps (what an on_step hook writes into the latents)."""
    sigma_fn = lambda t: math.exp(-t)
    t_fn = lambda s: -math.log(s)
    phi1_fn = lambda t: math.expm1(t) / t
    phi2_fn = lambda t: (phi1_fn(t) - 1.0) / t
    old_sigma_down = old_denoised = None
    for i in range(len(sigmas) - 1):
        denoised = model(x, i)
        sigma_down = sigmas[i + 1]
        if sigma_down == 0 or old_denoised is None:
            d = (x - denoised) / sigmas[i]
            x = x + d * (sigma_down - sigmas[i])
        else:
            t, t_old, t_next, t_prev = t_fn(sigmas[i]), t_fn(old_sigma_down), t_fn(sigma_down), t_fn(sigmas[i - 1])
            h = t_next - t
            c2 = (t_prev - t_old) / h
            phi1_val, phi2_val = phi1_fn(-h), phi2_fn(-h)
            b1 = phi1_val - phi2_val / c2
            b2 = phi2_val / c2
            x = sigma_fn(h) * x + h * (b1 * denoised + b2 * old_denoised)
        old_denoised = denoised
        old_sigma_down = sigma_down
        if after is not None:
            x = after(i, x)
    return x


def reference(dit, pe, g, steps, noise, shift_v=12.0, shift_a=3.0, edit_video=None):
    sched = h3cy.Schedule.shifted(steps, video_shift=shift_v, audio_shift=shift_a)
    sv = sched.video_sigmas.astype(np.float64)
    sa = sched.audio_sigmas.astype(np.float64)
    k = shift_v / shift_a                           # ModelSamplingAV.audio_scale
    lay = Layout(g, pe.shape[0])
    nv = noise[0].size

    def model(x, i):
        xv = x[:nv].reshape(noise[0].shape).astype(np.float32)
        xa = (x[nv:] * sa[i] / sv[i]).reshape(noise[1].shape).astype(np.float32)
        tv, ta = np.float32(1.0 - np.float32(sv[i])), np.float32(1.0 - np.float32(sa[i]))
        ts, ti = lay.step_timesteps(tv, ta)
        vr, ar = dit.forward(patchify(xv), pack_audio(xa), pe, ts, ti, lay.token_tags,
                             lay.position_ids, lay.video_indices, lay.audio_indices, lay.text_indices)
        vv = unpatchify(vr, g.T, g.h, g.w).astype(np.float64)
        va = unpack_audio(ar).astype(np.float64)
        # diffusers' convention x0 = x + (1 - t) v = x + sigma v, per modality
        return np.concatenate([(xv + sv[i] * vv).ravel(), k * (xa + sa[i] * va).ravel()])

    def after(i, x):
        x = x.copy()
        x[:nv] = edit_video(i, x[:nv].reshape(noise[0].shape)).ravel()
        return x

    x = comfy_res_multistep(model, np.concatenate([noise[0].ravel(), noise[1].ravel()]).astype(np.float64),
                            list(sv), after=after if edit_video else None)
    return x[:nv].reshape(noise[0].shape), (x[nv:] / k).reshape(noise[1].shape)


@pytest.fixture(scope="module")
def setup(tiny_dit_factory):
    t = tiny_dit_factory("p")
    dit = h3cy.DiT.from_pretrained(t.diffusers_fp32, weights="fp32", threads=2)
    rng = np.random.default_rng(5)
    pe = rng.standard_normal((4, t.config["text_dim"])).astype(np.float32)
    g = h3cy.Geometry(width=64, height=64, frames=22)
    from h3cy.sampling.sampler import initial_noise
    noise = initial_noise(g, 7, t.config["in_channels"], t.config["audio_in_channels"])
    return dit, pe, g, noise


@pytest.mark.parametrize("steps", [1, 2, 3, 5])
def test_res_multistep_matches_comfyui_algorithm(setup, steps):
    dit, pe, g, noise = setup
    want_v, want_a = reference(dit, pe, g, steps, noise)
    got_v, got_a = h3cy.denoise(dit, pe, g, steps=steps, noise=noise, sampler="res_multistep")
    # observed max-rel ~1e-6 (float32 latents vs the float64 transcription); a wrong
    # coefficient or the audio carried without sigma_v/sigma_a gives > 1e-2 at steps >= 3
    assert_close(got_v, want_v, max_rel_tol=1e-5, what="video")
    assert_close(got_a, want_a, max_rel_tol=1e-5, what="audio")
    eu_v, eu_a = h3cy.denoise(dit, pe, g, steps=steps, noise=noise)
    if steps >= 3:
        assert rel_l2(got_v, eu_v) > 1e-4      # it is not Euler


def test_res_multistep_shifts_and_both_loops(setup, monkeypatch):
    dit, pe, g, noise = setup
    want_v, want_a = reference(dit, pe, g, 4, noise, shift_v=6.0, shift_a=3.0)
    kw = dict(steps=4, noise=noise, sampler="res_multistep", shift_video=6.0, shift_audio=3.0)
    calls = []
    got = h3cy.denoise(dit, pe, g, on_step=lambda s: calls.append(float(s.video_latent.ravel()[0])), **kw)
    assert dit.loop_stats["loop"] == "cython"
    assert_close(got[0], want_v, max_rel_tol=1e-5, what="video")
    assert_close(got[1], want_a, max_rel_tol=1e-5, what="audio")
    assert calls[-1] == float(got[0].ravel()[0])           # the hook sees the res_multistep latents
    from h3cy import _config
    monkeypatch.setattr(_config, "_ENV_LOOP_PYTHON", True)
    py = h3cy.denoise(dit, pe, g, **kw)
    assert dit.loop_stats["loop"] == "python"
    assert np.array_equal(py[0], got[0]) and np.array_equal(py[1], got[1])


def test_euler_default_unchanged_and_bad_arguments(setup):
    dit, pe, g, noise = setup
    a = h3cy.denoise(dit, pe, g, steps=3, noise=noise)
    b = h3cy.denoise(dit, pe, g, steps=3, noise=noise, sampler="euler", shift_video=12.0, shift_audio=3.0)
    assert np.array_equal(a[0], b[0]) and np.array_equal(a[1], b[1])
    with pytest.raises(H3ValueError, match="sampler"):
        h3cy.denoise(dit, pe, g, steps=2, sampler="dpm")
    with pytest.raises(H3ValueError, match="not both"):
        h3cy.denoise(dit, pe, g, steps=2, schedule=h3cy.Schedule.shifted(2), shift_video=6.0)


def test_presets_fill_what_the_call_leaves_out(tiny_pipeline, recwarn):
    import warnings
    tp = tiny_pipeline
    pipe = h3cy.load(tp.diffusers, weights="fp32", streaming=False, keep_loaded=True)
    pe = np.random.default_rng(1).standard_normal((4, tp.dit.config["text_dim"])).astype(np.float32)
    kw = dict(prompt_embeds=pe, width=64, height=64, frames=22, seed=3, output="latent")
    with warnings.catch_warnings(record=True) as w:
        warnings.simplefilter("always")
        a = pipe.generate(preset="turbo4", **kw).video_latent
        pipe.generate(preset="turbo4", steps=1, **kw)
    assert sum("turbo" in str(x.message) for x in w) == 1            # warned once
    b = pipe.generate(steps=4, shift_video=6.0, shift_audio=3.0, **kw).video_latent
    assert np.array_equal(a, b)
    q = pipe.generate(preset="quality", steps=2, sampler="res_multistep", **kw).video_latent
    r = pipe.generate(steps=2, sampler="res_multistep", **kw).video_latent
    assert np.array_equal(q, r)                                      # explicit keywords win
    with pytest.raises(H3ValueError, match="preset"):
        pipe.generate(preset="fast", **kw)


# -- per-latent-frame schedules, the history on StepState, in-place edits --------------------
def per_frame_schedule(steps, T, shift_a=3.0):
    """Video column f shifted by 12 * 0.8**f (frame 0: 12, the audio's clock), audio by 3."""
    cols = [h3cy.Schedule.shifted(steps, video_shift=12.0 * 0.8 ** f, audio_shift=shift_a).video_sigmas
            for f in range(T)]
    return h3cy.Schedule(np.stack(cols, axis=1), h3cy.Schedule.shifted(steps, audio_shift=shift_a).audio_sigmas)


def reference_per_frame(dit, pe, g, sched, noise, k):
    """ComfyUI's res_multistep step (eta=0) applied per latent frame with that frame's
    sigma column, in float64; the audio carried on frame 0's column (x_a * s_v0 / s_a)."""
    sv, sa = sched.video_sigmas.astype(np.float64), sched.audio_sigmas.astype(np.float64)
    n, lay = sched.steps, Layout(g, pe.shape[0])
    frame = np.repeat(np.arange(g.T), (g.h // 2) * (g.w // 2))
    col = lambda a: a[None, :, None, None]
    xv = noise[0].astype(np.float64)
    xa = noise[1].astype(np.float64) * sv[0, 0] / sa[0]
    old = None
    for i in range(n):
        tv = (np.float32(1.0) - sched.video_sigmas[i]).astype(np.float32)
        ta = np.float32(1.0) - sched.audio_sigmas[i]
        row_t = np.empty(lay.S, np.float32)
        row_t[lay.text_indices], row_t[lay.video_indices], row_t[lay.audio_indices] = tv[0], tv[frame], ta
        ts, ti = np.unique(row_t, return_inverse=True)
        x_a = (xa * sa[i] / sv[i, 0]).astype(np.float32)
        vr, ar = dit.forward(patchify(xv.astype(np.float32)), pack_audio(x_a), pe, ts, ti.astype(np.int64),
                             lay.token_tags, lay.position_ids, lay.video_indices, lay.audio_indices,
                             lay.text_indices)
        dv = xv.astype(np.float32) + col(sv[i]) * unpatchify(vr, g.T, g.h, g.w).astype(np.float64)
        da = k * (x_a + sa[i] * unpack_audio(ar).astype(np.float64))
        if i == n - 1 or old is None:
            xv = xv + (xv - dv) / col(sv[i]) * col(sv[i + 1] - sv[i])
            xa = xa + (xa - da) / sv[i, 0] * (sv[i + 1, 0] - sv[i, 0])
        else:
            t, tn, tp = -np.log(sv[i]), -np.log(sv[i + 1]), -np.log(sv[i - 1])
            h = tn - t
            c2 = (tp - t) / h
            phi1 = np.expm1(-h) / -h
            phi2 = (phi1 - 1.0) / -h
            b1, b2 = phi1 - phi2 / c2, phi2 / c2
            xv = col(np.exp(-h)) * xv + col(h) * (col(b1) * dv + col(b2) * old[0])
            xa = np.exp(-h[0]) * xa + h[0] * (b1[0] * da + b2[0] * old[1])
        old = (dv, da)
    return xv, xa / k


def test_res_multistep_per_frame_schedule(setup, monkeypatch):
    dit, pe, g, noise = setup
    # all columns equal: the one-grid result, bit for bit
    one = h3cy.denoise(dit, pe, g, steps=4, noise=noise, sampler="res_multistep")
    flat = h3cy.Schedule.shifted(4)
    tiled = h3cy.Schedule(np.repeat(flat.video_sigmas[:, None], g.T, axis=1), flat.audio_sigmas)
    same = h3cy.denoise(dit, pe, g, schedule=tiled, noise=noise, sampler="res_multistep")
    assert np.array_equal(same[0], one[0]) and np.array_equal(same[1], one[1])
    # columns with their own shifts: each frame on its own column, vs the float64 transcription
    sched = per_frame_schedule(4, g.T)
    want_v, want_a = reference_per_frame(dit, pe, g, sched, noise, k=4.0)
    got = h3cy.denoise(dit, pe, g, schedule=sched, noise=noise, sampler="res_multistep")
    assert dit.loop_stats["loop"] == "cython"
    # observed max-rel ~1e-6, as the one-grid test; one frame stepped on frame 0's column
    # instead of its own gives > 1e-3
    assert_close(got[0], want_v, max_rel_tol=1e-5, what="video")
    assert_close(got[1], want_a, max_rel_tol=1e-5, what="audio")
    assert rel_l2(got[0], one[0]) > 1e-3
    from h3cy import _config
    monkeypatch.setattr(_config, "_ENV_LOOP_PYTHON", True)
    py = h3cy.denoise(dit, pe, g, schedule=sched, noise=noise, sampler="res_multistep")
    assert dit.loop_stats["loop"] == "python"
    assert np.array_equal(py[0], got[0]) and np.array_equal(py[1], got[1])


@pytest.mark.parametrize("loop", ["cython", "python"])
def test_history_on_step_state_and_in_place_edits(setup, monkeypatch, loop):
    from h3cy import _config
    monkeypatch.setattr(_config, "_ENV_LOOP_PYTHON", loop == "python")
    from h3cy.sampling.res_multistep import audio_scale
    dit, pe, g, noise = setup
    sched = h3cy.Schedule.shifted(4)
    k = np.float32(audio_scale(sched.video_sigmas, sched.audio_sigmas))     # ~ 12 / 3
    seen = []

    def look(s):
        seen.append((s.video_denoised_prev, s.audio_denoised_prev))
        np.testing.assert_array_equal(s.video_denoised_prev, s.video_x0)
        np.testing.assert_array_equal(s.audio_denoised_prev, (s.audio_x0 * k).astype(np.float32))
    base = h3cy.denoise(dit, pe, g, steps=4, noise=noise, sampler="res_multistep", on_step=look)
    assert dit.loop_stats["loop"] == loop and len(seen) == 4
    eu = []
    h3cy.denoise(dit, pe, g, steps=2, noise=noise, on_step=lambda s: eu.append(s.video_denoised_prev))
    assert eu == [None, None]

    # an edit of the latents in the hook counts for the next res_multistep step
    def halve(s):
        if s.step == 1:
            s.video_latent *= np.float32(0.5)
    got = h3cy.denoise(dit, pe, g, steps=4, noise=noise, sampler="res_multistep", on_step=halve)
    want_v, _ = reference(dit, pe, g, 4, noise, edit_video=lambda i, x: x * 0.5 if i == 1 else x)
    assert_close(got[0], want_v, max_rel_tol=1e-5, what="video")

    # and an edit of the history: zeroing old_denoised after step 1 changes what follows
    def forget(s):
        if s.step == 1:
            s.video_denoised_prev[...] = 0.0
    other = h3cy.denoise(dit, pe, g, steps=4, noise=noise, sampler="res_multistep", on_step=forget)
    assert rel_l2(other[0], base[0]) > 1e-3
