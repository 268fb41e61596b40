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


def comfy_res_multistep(model, x, sigmas):
    """ComfyUI's res_multistep with eta=0 (sigma_down = sigma_next, sigma_up = 0), written
    out in float64 numpy.  model(x, sigma) -> denoised."""
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
    return x


def reference(dit, pe, g, steps, noise, shift_v=12.0, shift_a=3.0):
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

    x = comfy_res_multistep(model, np.concatenate([noise[0].ravel(), noise[1].ravel()]).astype(np.float64),
                            list(sv))
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
