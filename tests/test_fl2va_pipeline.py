"""The whole fl2va request end to end: h3cy's ``pipe.generate(first_frame=, last_frame=)``
against diffusers 0.42.1's modular pipeline (``MiniMaxH3Blocks``, tests/_ref_fl2va_pipeline.py)
on the same tiny random components (a Qwen3-VL text encoder with a vision tower, the
transformer, an encodable video VAE, the audio VAE), saved with save_pretrained and loaded by
h3cy from the folder, with the same video, audio, posterior and condition noise handed to
both.  First frame only, last frame only and both; compared: the keyframes on the canvas, the
prompt states and their tags, the condition latents, the per-step row timesteps, the final
latents and the decoded frames.  Each part has its own reference test
(tests/test_vision_tower.py, tests/test_video_encoder.py, tests/test_fl2va_denoise.py); this
one checks that they compose as the reference's blocks do."""
import numpy as np
import pytest

import h3cy
from _compare import assert_close, assert_nontrivial, max_rel
from _ref_fl2va import condition_noise
from test_fl2va_generate import keyed_pipeline, monkeypatch_module  # noqa: F401  (fixtures)

PROMPT = "a red fox runs through the snow"
# the reference generates 5 s at least: 124 frames -> 37 latent frames; a 96x64 canvas (not
# square, so a transposed canvas shows) -> 4x6 latents
WIDTH, HEIGHT, FRAMES = 96, 64, 124
STEPS, SEED = 3, 5
EFFECT_TOL = 1e-3
CASES = {"first": (True, False), "last": (False, True), "both": (True, True)}


@pytest.fixture(scope="module")
def reference(keyed_pipeline):
    import _ref_fl2va_pipeline
    return _ref_fl2va_pipeline.load(keyed_pipeline.diffusers)


def _keyframes():
    """Two PIL pictures of other aspect ratios than the canvas (so both the stretch and the
    cover-crop resample): smooth gradients plus noise, so the encoders see structure."""
    from PIL import Image
    rng = np.random.default_rng(3)

    def pic(h, w):
        y, x = np.mgrid[0:h, 0:w]
        base = np.stack([x * 255 / w, y * 255 / h, (x + y) * 127 / (h + w)], -1)
        return Image.fromarray(np.clip(base + rng.normal(0, 25, (h, w, 3)), 0, 255).astype(np.uint8))
    return pic(90, 120), pic(120, 100)


def _noise(g):
    from _tiny_dit import TINY_CONFIGS
    rng = np.random.default_rng(8)
    return (rng.standard_normal((24, g.T, g.h, g.w)).astype(np.float32),
            rng.standard_normal((2, TINY_CONFIGS["p"]["audio_in_channels"], g.A)).astype(np.float32))


@pytest.fixture(scope="module")
def h3pipe(keyed_pipeline, tmp_path_factory):
    """h3cy's pipeline on the same folder, fp32, its components kept between the cases."""
    pipe = h3cy.load(keyed_pipeline.diffusers, weights="fp32", keep_loaded=True,
                     cache_dir=str(tmp_path_factory.mktemp("fl2va_pipeline_cache")))
    yield pipe
    pipe.release()


def _record(pipe, monkeypatch):
    """What h3cy's pipeline hands from phase to phase: generate calls these methods in turn,
    wrapped here on the instance -> {name: (args, kwargs, result)}."""
    seen = {}
    for name in ("encode", "encode_keyframes", "denoise"):
        def wrapped(*a, _method=getattr(pipe, name), _name=name, **k):
            out = _method(*a, **k)
            seen[_name] = (a, k, out)
            return out
        monkeypatch.setattr(pipe, name, wrapped)
    return seen


def _fp16_steps(got, want, latents_std):
    """|got - want| in units of the float16 step of the un-normalised latent (the latent is
    rounded to float16 before it is normalised by ``latents_std``)."""
    std = np.asarray(latents_std, np.float32)[:, None, None, None]
    step = np.spacing(np.abs(want * std).astype(np.float16)).astype(np.float32) / std
    return np.abs(got - want) / step


@pytest.mark.parametrize("case", list(CASES))
def test_generate_matches_diffusers_fl2va_pipeline(h3pipe, reference, monkeypatch, case):
    import _ref_fl2va_pipeline
    a, b = _keyframes()
    first, last = (a if CASES[case][0] else None), (b if CASES[case][1] else None)
    g = h3cy.Geometry(WIDTH, HEIGHT, FRAMES)
    video, audio = _noise(g)
    ref = _ref_fl2va_pipeline.run(reference, PROMPT, first, last, video, audio, SEED, STEPS, WIDTH, HEIGHT, FRAMES)
    n = len(ref.anchors)
    assert ref.anchors == (("first",) * CASES[case][0] + ("last",) * CASES[case][1])
    # the reference's draws: the posterior under a fresh seed-42 generator per keyframe, the
    # condition noise from the request's generator
    post = [_ref_fl2va_pipeline.posterior_noise((24, 1, g.h, g.w))] * n
    cnoise = condition_noise(ref.condition_latents, SEED)

    seen = _record(h3pipe, monkeypatch)
    held = []
    got = h3pipe.generate(PROMPT, first_frame=first, last_frame=last, width=WIDTH, height=HEIGHT, frames=FRAMES,
                          steps=STEPS, noise=(video, audio), posterior_noise=post, condition_noise=cnoise,
                          on_step=lambda st: held.append([z.copy() for _, z in st.conditions]))
    # 1. the keyframes on the canvas, as the text step and the VAE encoder read them: exact
    frames = seen["encode_keyframes"][0][0]
    assert len(frames) == n
    for x, y in zip(frames, ref.keyframes):
        assert x.shape == (HEIGHT, WIDTH, 3) and np.array_equal(x, y)
    # 2. the prompt states and their per-row tags.  Observed max rel 8e-7 (fp32 GEMM order);
    # the vision rows dropped or encoded as text move them by > 1e-2 (test_vision_tower.py)
    pe, tags = seen["encode"][2]
    assert_nontrivial(ref.prompt_embeds)
    assert_close(pe, ref.prompt_embeds, max_rel_tol=1e-4, what="prompt states")
    assert tags.dtype == np.int64 and np.array_equal(tags, ref.tags)
    runs = np.flatnonzero(np.diff(np.r_[1, tags]) == -1)     # where a vision block (tag 0) starts
    assert len(runs) == n and np.count_nonzero(tags == 0) > 2 * n
    # 3. the condition latents: rounded to float16 before normalising, so where h3cy's
    # mean + std*noise (~1e-6 from torch's) straddles a float16 rounding boundary it lands
    # one float16 step away.  Observed: 1 value of 576 per keyframe one step off (max rel
    # 9e-5), the rest within 1e-6; a wrong pixel fit, tile or normalisation moves most of
    # them by many steps (test_video_encoder.py)
    lat = seen["encode_keyframes"][2]
    std = h3pipe._loaded["video_encoder"].latents_std
    for z, w in zip(lat, ref.condition_latents):
        assert_nontrivial(w)
        assert z.shape == w.shape == (24, 1, g.h, g.w)
        assert np.all(_fp16_steps(z, w, std) <= 1.01)
        assert np.count_nonzero(np.abs(z - w) > 1e-6) <= 0.01 * z.size
    # ... held at 0.999 z + 0.001 n with the reference's condition noise (its rows are the
    # reference's latents held with this noise: the draw is reproduced), every step
    from h3cy.sampling.conditions import hold
    from h3cy.sampling.layout import patchify
    assert np.array_equal(np.concatenate([patchify(hold(w, c)) for w, c in zip(ref.condition_latents, cnoise)]),
                          ref.condition_rows)
    assert len(held) == STEPS
    for step in held:
        assert all(np.array_equal(h, hold(z, c)) for h, z, c in zip(step, lat, cnoise))
    # 4. the per-step row timesteps, exactly: the same denoise, recorded on the Python loop
    # (a wrapped forward), which gives the Cython loop's bits (tests/test_fl2va_denoise.py)
    dit = h3pipe._loaded["transformer"]
    calls = []
    forward = dit.forward

    def recording(xv, xa, pe_, timestep, tidx, *a, **k):
        calls.append((np.array(timestep), np.array(tidx)))
        return forward(xv, xa, pe_, timestep, tidx, *a, **k)
    assert dit.loop_stats["loop"] == "cython"             # generate ran the default loop
    dit.forward = recording          # a replaced forward runs the Python loop
    try:
        again = h3cy.denoise(dit, pe, g, steps=STEPS, noise=(video, audio), text_tags=tags,
                             conditions=seen["denoise"][1]["conditions"], condition_noise=cnoise)
    finally:
        del dit.forward
    assert dit.loop_stats["loop"] == "python"
    assert np.array_equal(again[0], got.video_latent) and np.array_equal(again[1], got.audio_latent)
    assert len(calls) == len(ref.forwards) == len(ref.plan) == STEPS
    for i, ((t, ti), (rt, rti), (pt, pti)) in enumerate(zip(calls, ref.forwards, ref.plan)):
        assert t.dtype == np.float32 and np.array_equal(t, rt) and np.array_equal(t, pt), f"step {i}: {t} != {rt}"
        assert np.array_equal(ti, rti) and np.array_equal(ti, pti), f"step {i}: timestep indices differ"
    assert np.any(calls[0][0] == np.float32(0.999))
    # 5. the final latents.  Observed max rel <= 9e-7 (video and audio)
    assert_nontrivial(ref.video)
    assert_close(got.video_latent, ref.video, max_rel_tol=1e-4, what="video latents")
    assert_close(got.audio_latent, ref.audio, max_rel_tol=1e-4, what="audio latents")
    # ... and the conditions' own effect, against the same run without them: on this tiny
    # random model they move the latents by only ~6e-3 (max rel), so a bug there could hide
    # inside 1e-4 of the whole (the two keyframes swapped: 6e-5 of the whole).  Their effect
    # matches within 1e-3: observed <= 1.5e-4; swapped keyframes 6.8e-3, the posterior drawn
    # by h3cy's own generator instead of the reference's 3.5e-2, the vision rows tagged as
    # text > 10
    plain = h3cy.denoise(dit, pe, g, steps=STEPS, noise=(video, audio), text_tags=tags)
    assert max_rel(got.video_latent - plain[0], ref.video - plain[0]) <= EFFECT_TOL
    assert max_rel(got.audio_latent - plain[1], ref.audio - plain[1]) <= EFFECT_TOL
    # 6. the decoded frames, uint8 within 1 (rounding of x*255 where the float frames differ
    # by ~1e-6).  Observed: max 1 on ~40 of 2.3M values (2e-5); wrong latents or a wrong
    # decode move most pixels by more
    assert got.frames.shape == ref.frames.shape == (FRAMES, HEIGHT, WIDTH, 3)
    d = np.abs(got.frames.astype(np.int16) - ref.frames.astype(np.int16))
    assert d.max() <= 1 and np.count_nonzero(d) <= 1e-3 * d.size, (int(d.max()), int(np.count_nonzero(d)))
    assert ref.frames.std() > 5            # a picture, not a flat frame
