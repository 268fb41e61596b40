"""pipe.generate(first_frame=, last_frame=) wires the keyframe phases exactly as their parts
run by hand: prepare_keyframes -> encode_prompt(images=, return_tags=True) ->
encode_image per keyframe -> denoise(text_tags=, conditions=).  Each part is tested against
the reference in its own file (tests/test_vision_tower.py, tests/test_video_encoder.py,
tests/test_fl2va_denoise.py); this checks the composition bit for bit, both folder layouts.

DEPENDS ON h3cy.prepare_keyframes / h3cy.encode_image / h3cy.VideoEncoder (branch wt26a) and
encode_prompt(images=, return_tags=True) with a vision tower in the tiny text encoder
(branch wt25).
"""
import os

import numpy as np
import pytest

import h3cy

PROMPT = "a red fox runs"


@pytest.fixture(scope="module")
def keyed_pipeline(tiny_dit_factory, tmp_path_factory, monkeypatch_module):
    """The tiny pipeline with a vision tower in its text encoder and an encodable video VAE."""
    import _tiny_pipeline
    import _tiny_text_encoder
    import _tiny_vae
    te_build = _tiny_text_encoder.build

    def vae(root, **kw):
        return _tiny_vae.build_encodable(root)
    monkeypatch_module.setattr(_tiny_text_encoder, "build", lambda root, seed=0, vision=False: te_build(root, seed, vision=True))
    monkeypatch_module.setattr(_tiny_vae, "build", vae)
    return _tiny_pipeline.build(tiny_dit_factory("p"), str(tmp_path_factory.mktemp("keyed_pipeline")))


@pytest.fixture(scope="module")
def monkeypatch_module():
    mp = pytest.MonkeyPatch()
    yield mp
    mp.undo()


def _images():
    rng = np.random.default_rng(4)
    return rng.integers(0, 256, (80, 120, 3), dtype=np.uint8), rng.integers(0, 256, (100, 90, 3), dtype=np.uint8)


@pytest.mark.parametrize("case", ["first", "last", "both"])
@pytest.mark.parametrize("layout", ["diffusers", "release"])
def test_generate_with_keyframes_is_its_parts(keyed_pipeline, tmp_path, case, layout):
    first, last = _images()
    kw = {"first": dict(first_frame=first), "last": dict(last_frame=last),
          "both": dict(first_frame=first, last_frame=last)}[case]
    folder = getattr(keyed_pipeline, layout)
    pipe = h3cy.load(folder, weights="fp32", cache_dir=str(tmp_path))
    phases, held = [], []
    got = pipe.generate(PROMPT, width=128, height=96, steps=2, seed=3, output="latent",
                        on_progress=lambda d, t, p: phases.append(p) if not phases or phases[-1] != p else None,
                        on_step=lambda st: held.append([f for f, _ in st.conditions]), **kw)
    assert phases == ["vision", "encode", "encode_video", "denoise"]
    assert held[0] == {"first": [0], "last": [6], "both": [0, 6]}[case]
    # by hand
    frames, anchors, (w, h) = h3cy.prepare_keyframes(kw.get("first_frame"), kw.get("last_frame"), 128, 96)
    g = h3cy.Geometry(w, h, 22)
    paths = pipe.folder.paths           # this layout's components
    te = h3cy.TextEncoder.from_pretrained(paths["text_encoder"], weights="fp32")
    tok = h3cy.Tokenizer.from_pretrained(paths["tokenizer"])
    pe, tags = h3cy.encode_prompt(te, PROMPT, tokenizer=tok, images=frames, return_tags=True, cache_dir=False)
    assert (tags == 0).sum() > 0 and (tags == 1).sum() > 0
    enc = h3cy.VideoEncoder.from_pretrained(paths["video_vae"])
    conds = [(0 if a == "first" else -1, h3cy.encode_image(enc, f, g)) for a, f in zip(anchors, frames)]
    dit = h3cy.DiT.from_pretrained(paths["transformer"], weights="fp32")
    want = h3cy.denoise(dit, pe, g, steps=2, seed=3, text_tags=tags, conditions=conds)
    assert np.array_equal(got.video_latent, want[0]) and np.array_equal(got.audio_latent, want[1])
    plain = h3cy.denoise(dit, pe, g, steps=2, seed=3, text_tags=tags)
    assert not np.array_equal(plain[0], want[0])


def test_posterior_noise_and_bad_keyframes(keyed_pipeline, tmp_path):
    first, last = _images()
    pipe = h3cy.load(keyed_pipeline.diffusers, weights="fp32", cache_dir=str(tmp_path))
    g = h3cy.Geometry(96, 64, 22)
    rng = np.random.default_rng(0)
    noise = [rng.standard_normal((24, 1, 4, 6)).astype(np.float32) for _ in range(2)]
    got = pipe.generate(PROMPT, first_frame=first, last_frame=last, width=96, height=64, steps=1, output="latent",
                        posterior_noise=noise)
    frames, _, _ = h3cy.prepare_keyframes(first, last, 96, 64)
    enc = h3cy.VideoEncoder.from_pretrained(pipe.folder.paths["video_vae"])
    held = []
    pipe.generate(PROMPT, first_frame=first, last_frame=last, width=96, height=64, steps=1, output="latent",
                  posterior_noise=noise, on_step=lambda st: held.extend(z for _, z in st.conditions))
    from h3cy.sampling.conditions import condition_noise_from_seed, hold
    cn = condition_noise_from_seed(42, [(24, 1, 4, 6)] * 2)
    for f, n, c, z in zip(frames, noise, cn, held):
        assert np.array_equal(z, hold(h3cy.encode_image(enc, f, g, posterior_noise=n), c))
    assert got.video_latent.shape == (24, 7, 4, 6)
    # bad input fails before any model loads, with a clear error
    with pytest.raises(h3cy.H3Error, match="uint8"):
        pipe.generate(PROMPT, first_frame=np.zeros((8, 8, 3), np.float32), steps=1)
    with pytest.raises(FileNotFoundError):
        pipe.generate(PROMPT, last_frame=str(tmp_path / "missing.png"), steps=1)
    with pytest.raises(h3cy.H3Error, match="without a keyframe"):
        pipe.generate(PROMPT, posterior_noise=noise, steps=1)
    with pytest.raises(h3cy.H3Error, match="one array per keyframe"):
        pipe.generate(PROMPT, first_frame=first, posterior_noise=noise, width=96, height=64, steps=1)


# -- ComfyUI: the nodes' IMAGE inputs (the pack under ComfyUI's stand-ins, tests/test_comfyui_nodes.py)
from test_comfyui_nodes import comfy_env, pack, run  # noqa: E402,F401  (fixtures)


@pytest.fixture(scope="module")
def keyed_nodes(pack, comfy_env, keyed_pipeline):
    h3dir = os.path.join(comfy_env["folder_paths"].models_dir, "h3")
    os.makedirs(h3dir, exist_ok=True)
    os.symlink(keyed_pipeline.diffusers, os.path.join(h3dir, "keyed"))
    comfy_env["utils"].set_progress_bar_global_hook(None)
    comfy_env["mm"].interrupt_current_processing(False)
    return {c.GET_SCHEMA().node_id: c for c in pack.NODE_CLASSES}


def _image(a):
    import torch
    return torch.from_numpy(a.astype(np.float32) / 255.0)[None]       # IMAGE [1, H, W, 3] in 0..1


def test_comfyui_generate_and_encode_take_keyframes(keyed_nodes, keyed_pipeline, tmp_path):
    first, last = _images()
    model = run(keyed_nodes["H3cyModelLoader"], model="keyed", weights="fp32", threads=0, streaming="off")[0]
    small = dict(width=96, height=64, frames=22, seconds=0.0, steps=2, seed=7, reuse=1, layers=0)
    images, audio = run(keyed_nodes["H3cyGenerate"], model=model, prompt=PROMPT, first_frame=_image(first),
                        last_frame=_image(last), **small)
    pipe = h3cy.load(keyed_pipeline.diffusers, weights="fp32", cache_dir=str(tmp_path))
    want = pipe.generate(PROMPT, first_frame=first, last_frame=last, width=96, height=64, steps=2, seed=7)
    # IMAGE in 0..1 -> uint8 is exact for 8-bit sources
    assert np.array_equal(np.rint(images.numpy() * 255).astype(np.uint8), want.frames)
    # H3 Text Encode: the conditioning carries the keyframes on the first one's canvas and the tags
    cond = run(keyed_nodes["H3cyTextEncode"], model=model, prompt=PROMPT, last_frame=_image(last))[0]
    frames, anchors, canvas = h3cy.prepare_keyframes(None, last)
    assert cond.anchors == anchors == ("last",) and cond.canvas == canvas
    assert np.array_equal(cond.keyframes[0], frames[0])
    assert cond.tags.shape == (cond.embeds.shape[0],) and (cond.tags == 0).any()
