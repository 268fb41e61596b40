"""h3cy.load / Pipeline.generate end to end on a tiny model in both folder layouts, against a
reference made of diffusers' pieces (its denoising loop, AutoencoderKLMiniMaxH3,
AutoencoderKLMiniMaxH3Audio); plus phases, progress, cancel, caching and memory rules."""
import os
import threading

import av
import numpy as np
import pytest

import h3cy
from h3cy import pipeline as pipeline_mod
from h3cy.sampling.layout import unpack_audio, unpatchify
from _compare import assert_close, assert_nontrivial, max_rel
from conftest import isa_params
from _ref_denoise import reference_loop
from _tiny_audio_vae import reference_decode as audio_reference
from _tiny_vae import reference_decode as video_reference

# 320x64 px: two spatial tiles; 39 frames: T = 12 latents, two temporal clips
W, H, F, STEPS = 320, 64, 39, 3


def _inputs(tp, seed=0, L=5):
    g = h3cy.Geometry(W, H, F)
    cfg = tp.dit.config
    rng = np.random.default_rng(seed)
    pe = rng.standard_normal((L, cfg["text_dim"])).astype(np.float32)
    video = rng.standard_normal((cfg["in_channels"], g.T, g.h, g.w)).astype(np.float32)
    audio = rng.standard_normal((2, cfg["audio_in_channels"], g.A)).astype(np.float32)
    return g, pe, video, audio


@pytest.fixture(scope="module")
def references(tiny_pipeline):
    """Per layout: diffusers' latents, float pixels and waveform for the same inputs."""
    tp = tiny_pipeline
    g, pe, video, audio = _inputs(tp)
    out = {}
    # the release transformer is stored in the released bf16 mix: its reference is the same
    # bits loaded by diffusers (diffusers_bf16), computed in float32
    for layout, folder in (("diffusers", tp.dit.diffusers_fp32), ("release", tp.dit.diffusers_bf16)):
        vrows, arows = reference_loop(folder, g, pe, video, audio, STEPS)
        vlat = unpatchify(vrows, g.T, g.h, g.w)
        alat = unpack_audio(arows, channels=2)
        out[layout] = dict(video_latent=vlat, audio_latent=alat,
                           pixels=video_reference(tp.vae.diffusers, vlat, "fp32"),
                           audio=audio_reference(tp.audio_model, alat))
    return out


def _pipe(tp, layout, **kw):
    kw.setdefault("weights", "fp32")
    kw.setdefault("streaming", False)
    return h3cy.load(getattr(tp, layout), **kw)


@pytest.mark.parametrize("layout", ["diffusers", "release"])
def test_generate_equals_diffusers_pieces(tiny_pipeline, references, layout):
    tp = tiny_pipeline
    want = references[layout]
    g, pe, video, audio = _inputs(tp)
    pipe = _pipe(tp, layout)
    assert pipe.folder.layout == layout
    res = pipe.generate(prompt_embeds=pe, noise=(video, audio), width=W, height=H, frames=F, steps=STEPS)
    for k in ("video_latent", "audio_latent", "pixels", "audio"):
        assert_nontrivial(want[k])
    # observed max-rel: latents 4.5e-7, waveform 7e-6, pixels ~1e-6; the other layout's
    # weights (bf16-rounded) already give 3e-3, a wrong Euler sign or tile blend > 1e-2
    assert_close(res.video_latent, want["video_latent"], max_rel_tol=1e-4, what="video latent")
    assert_close(res.audio_latent, want["audio_latent"], max_rel_tol=1e-4, what="audio latent")
    assert_close(res.audio, want["audio"], max_rel_tol=1e-4, what="waveform")
    assert res.frames.dtype == np.uint8 and res.frames.shape == (F, H, W, 3)
    # float pixels (before uint8) from the pipeline's own latents, and the uint8 frames
    dec = h3cy.VideoDecoder.from_pretrained(pipe.folder.paths["video_vae"])
    pixels = dec.decode(res.video_latent)
    assert_close(pixels, want["pixels"], max_rel_tol=1e-4, what="pixels")
    np.testing.assert_array_equal(res.frames, h3cy.to_uint8(pixels))
    diff = np.abs(res.frames.astype(int) - h3cy.to_uint8(want["pixels"]).astype(int))
    assert diff.max() <= 1
    assert res.fps == 24 and res.sample_rate == tp.audio_model.config.sampling_rate
    assert res.geometry.frames == F


@pytest.mark.parametrize("isa", isa_params())
def test_generate_on_every_isa_path(tiny_pipeline, references, isa):
    """The whole pipeline (transformer, both decoders) on each path this CPU runs, against
    diffusers' pieces, with the bounds of test_generate_equals_diffusers_pieces."""
    tp = tiny_pipeline
    want = references["diffusers"]
    g, pe, video, audio = _inputs(tp)
    pipe = _pipe(tp, "diffusers", isa=isa)
    res = pipe.generate(prompt_embeds=pe, noise=(video, audio), width=W, height=H, frames=F, steps=STEPS)
    assert_close(res.video_latent, want["video_latent"], max_rel_tol=1e-4, what=f"video latent {isa}")
    assert_close(res.audio, want["audio"], max_rel_tol=1e-4, what=f"waveform {isa}")
    diff = np.abs(res.frames.astype(int) - h3cy.to_uint8(want["pixels"]).astype(int))
    assert diff.max() <= 1


def test_latent_output_then_decode_equals_generate(tiny_pipeline, references):
    tp = tiny_pipeline
    g, pe, video, audio = _inputs(tp)
    pipe = _pipe(tp, "diffusers")
    lat = pipe.generate(prompt_embeds=pe, noise=(video, audio), width=W, height=H, frames=F, steps=STEPS,
                        output="latent")
    assert lat.frames is None and lat.audio is None
    full = pipe.decode(lat.video_latent, lat.audio_latent)
    want = references["diffusers"]
    assert max_rel(full.audio, want["audio"]) <= 1e-4
    streamed, order = [], []
    part = pipe.decode(lat.video_latent, lat.audio_latent,
                       on_frames=lambda fr, i: (order.append("frames"), streamed.append((i, fr))),
                       on_audio=lambda a, sr: order.append(("audio", a.shape, sr)))
    assert part.frames is None
    assert order[0] == ("audio", full.audio.shape, full.sample_rate) and order[1:] == ["frames"] * 3
    assert [i for i, _ in streamed] == [0, 17, 34]
    np.testing.assert_array_equal(np.concatenate([fr for _, fr in streamed]), full.frames)


def test_mp4_of_a_generation(tiny_pipeline, tmp_path):
    tp = tiny_pipeline
    g, pe, video, audio = _inputs(tp)
    res = _pipe(tp, "release").generate(prompt_embeds=pe, noise=(video, audio), width=W, height=H, frames=F,
                                        steps=1)
    path = res.save(tmp_path / "t.mp4")
    with av.open(os.fspath(path)) as c:
        v, a = c.streams.video[0], c.streams.audio[0]
        assert (v.width, v.height, v.average_rate) == (W, H, 24)
        assert a.rate == res.sample_rate and a.channels == 2
        assert abs(float(a.duration * a.time_base) - F / 24) <= 1024 / res.sample_rate + 1e-3
        assert sum(1 for _ in c.decode(video=0)) == F
    assert len(res.save_frames(tmp_path / "frames")) == F
    assert os.path.getsize(res.save_audio(tmp_path / "t.wav")) > 44


def test_phases_progress_and_prompt_cache(tiny_pipeline, tmp_path, monkeypatch):
    tp = tiny_pipeline
    pipe = _pipe(tp, "release", cache_dir=str(tmp_path))
    seen = []
    res = pipe.generate("A red fox walks through snow", width=64, height=64, steps=2,
                        on_progress=lambda d, t, p: seen.append((p, d, t)))
    phases = list(dict.fromkeys(p for p, _, _ in seen))
    assert phases == ["encode", "denoise", "decode_audio", "decode_video"]
    for ph in phases:
        done = [d for p, d, t in seen if p == ph]
        total = {t for p, d, t in seen if p == ph}
        assert len(total) == 1 and done == sorted(done) and done[-1] == total.pop(), ph
    assert res.frames.shape == (22, 64, 64, 3)
    # second run: the prompt cache answers; the text encoder is never built
    monkeypatch.setattr(h3cy.TextEncoder, "from_pretrained",
                        classmethod(lambda *a, **k: pytest.fail("text encoder loaded on a cache hit")))
    res2 = pipe.generate("A red fox walks through snow", width=64, height=64, steps=2)
    np.testing.assert_array_equal(res2.frames, res.frames)
    np.testing.assert_array_equal(pipe.encode("A red fox walks through snow").shape[1], tp.dit.config["text_dim"])


def _count_builds(monkeypatch):
    counts = {}
    real = pipeline_mod.Pipeline._build

    def counting(self, component):
        counts[component] = counts.get(component, 0) + 1
        return real(self, component)
    monkeypatch.setattr(pipeline_mod.Pipeline, "_build", counting)
    return counts


def test_components_released_after_each_phase_or_kept(tiny_pipeline, monkeypatch):
    tp = tiny_pipeline
    g, pe, video, audio = _inputs(tp)
    kw = dict(prompt_embeds=pe, noise=(video, audio), width=W, height=H, frames=F, steps=1)
    counts = _count_builds(monkeypatch)
    pipe = _pipe(tp, "diffusers")
    pipe.generate(**kw)
    pipe.generate(**kw)
    assert counts == {"transformer": 2, "audio_vae": 2, "video_vae": 2}
    assert set(pipe._loaded) <= {"tokenizer"}
    counts.clear()
    kept = _pipe(tp, "diffusers", keep_loaded=True)
    a = kept.generate(**kw)
    b = kept.generate(**kw)
    assert counts == {"transformer": 1, "audio_vae": 1, "video_vae": 1}
    np.testing.assert_array_equal(a.frames, b.frames)
    kept.release()
    assert kept._loaded == {}


@pytest.mark.parametrize("phase", ["encode", "denoise", "decode_audio", "decode_video"])
def test_cancel_in_every_phase_then_reusable(tiny_pipeline, tmp_path, phase):
    tp = tiny_pipeline
    pipe = _pipe(tp, "release", cache_dir=str(tmp_path))
    tok = h3cy.CancelToken()

    def progress(done, total, ph):
        if ph == phase:
            tok.cancel()
    kw = dict(width=64, height=64, steps=2)
    with pytest.raises(h3cy.Cancelled):
        pipe.generate("a prompt for cancelling", on_progress=progress, cancel=tok, **kw)
    again = pipe.generate("a prompt for cancelling", **kw)
    ref = _pipe(tp, "release", cache_dir=str(tmp_path / "other")).generate("a prompt for cancelling", **kw)
    np.testing.assert_array_equal(again.frames, ref.frames)


def test_callback_exception_propagates_unchanged(tiny_pipeline):
    tp = tiny_pipeline
    g, pe, video, audio = _inputs(tp)
    boom = RuntimeError("user interrupt")

    def progress(done, total, ph):
        if ph == "decode_video":
            raise boom
    pipe = _pipe(tp, "diffusers")
    with pytest.raises(RuntimeError) as e:
        pipe.generate(prompt_embeds=pe, noise=(video, audio), width=W, height=H, frames=F, steps=1,
                      on_progress=progress)
    assert e.value is boom
    pipe.generate(prompt_embeds=pe, noise=(video, audio), width=W, height=H, frames=F, steps=1)


def test_one_generation_at_a_time(tiny_pipeline):
    tp = tiny_pipeline
    g, pe, video, audio = _inputs(tp)
    pipe = _pipe(tp, "diffusers")
    started, release = threading.Event(), threading.Event()

    def slow(done, total, ph):
        started.set()
        release.wait(30)
    t = threading.Thread(target=pipe.generate, kwargs=dict(prompt_embeds=pe, noise=(video, audio), width=W,
                                                           height=H, frames=F, steps=1, on_progress=slow))
    t.start()
    assert started.wait(30)
    with pytest.raises(h3cy.Busy):
        pipe.generate(prompt_embeds=pe, width=W, height=H, frames=F, steps=1, blocking=False)
    release.set()
    t.join(60)
    assert not t.is_alive()


def test_streaming_auto_follows_available_memory(tiny_pipeline, monkeypatch):
    pipe = _pipe(tiny_pipeline, "diffusers", streaming="auto")
    monkeypatch.setattr(pipeline_mod, "available_memory", lambda: 10)
    assert pipe.streaming_for("transformer") is True
    monkeypatch.setattr(pipeline_mod, "available_memory", lambda: 1 << 40)
    assert pipe.streaming_for("transformer") is False
    assert _pipe(tiny_pipeline, "diffusers", streaming=True).streaming_for("text_encoder") is True


def test_attention_choice_reaches_transformer_and_video_decoder(tiny_pipeline):
    pipe = _pipe(tiny_pipeline, "diffusers", weights="int8", vae_weights="int8")
    assert pipe._build("transformer").attn_bf16 and pipe._build("video_vae").attn_bf16
    pipe = _pipe(tiny_pipeline, "diffusers", weights="int8", vae_weights="int8", attention="fp32")
    assert not pipe._build("transformer").attn_bf16 and not pipe._build("video_vae").attn_bf16


def test_bad_arguments(tiny_pipeline, tmp_path):
    tp = tiny_pipeline
    pipe = _pipe(tp, "diffusers")
    pe = np.zeros((3, tp.dit.config["text_dim"]), np.float32)
    for kw, match in ((dict(prompt="x", prompt_embeds=pe), "exactly one"), (dict(), "exactly one"),
                      (dict(prompt_embeds=pe, frames=22, seconds=1.0), "not both"),
                      (dict(prompt_embeds=pe, output="gif"), "output"),
                      (dict(prompt_embeds=pe, width=100), "multiple of 32"),
                      (dict(prompt=""), "empty")):
        with pytest.raises(h3cy.H3Error, match=match):
            pipe.generate(**kw)
    with pytest.raises(h3cy.H3Error, match="weights"):
        h3cy.load(tp.diffusers, weights="int3")
    with pytest.raises(h3cy.H3Error, match="attention must be one of"):
        h3cy.load(tp.diffusers, attention="half")
    with pytest.raises(h3cy.CheckpointError, match="no such model folder"):
        h3cy.load(tmp_path / "nothing")


def test_load_checks_configs_across_components(tiny_pipeline, tmp_path):
    """h3cy.load reads each component's config with that component's parser and fails at
    once, naming the problem, when the text encoder's width is not the transformer's
    text_dim or a config is bad (not after minutes of encoding)."""
    import json
    import shutil
    d = tmp_path / "mismatch"
    shutil.copytree(tiny_pipeline.diffusers, d)
    cpath = d / "transformer" / "config.json"
    cfg = json.loads(cpath.read_text())
    cpath.write_text(json.dumps(dict(cfg, text_dim=cfg["text_dim"] + 8)))
    with pytest.raises(h3cy.CheckpointError, match="hidden_size .* is not the transformer's text_dim"):
        h3cy.load(d)
    cpath.write_text(json.dumps({k: v for k, v in cfg.items() if k != "ffn_dim"}))
    with pytest.raises(h3cy.CheckpointError, match="ffn_dim"):
        h3cy.load(d)
    cpath.write_text(json.dumps(cfg))
    h3cy.load(d)                                   # the same folder, repaired, opens


def test_each_config_is_parsed_once(tiny_pipeline, monkeypatch):
    """Opening a folder and building its components parses each config.json once; the
    components get copies (a caller changing its dict changes nobody else's)."""
    from h3cy.weights import files
    parsed = []
    real = files._parse

    def counting(raw):
        parsed.append(raw)
        return real(raw)
    monkeypatch.setattr(files, "_parse", counting)
    monkeypatch.setattr(files, "_JSON_CACHE", {})
    pipe = h3cy.load(tiny_pipeline.diffusers, weights="fp32", keep_loaded=True)
    pipe.generate(prompt="a fox", width=W, height=H, frames=F, steps=1, output="latent")
    # the text encoder's and the transformer's configs: each read by the load's cross-check
    # and again when the component is built (latent output: no decoder is built)
    assert len(parsed) == 2 and parsed[0] != parsed[1], parsed
    a = files.load_json(os.path.join(tiny_pipeline.diffusers, "transformer", "config.json"), "config")
    a["text_dim"] = -1
    b = files.load_json(os.path.join(tiny_pipeline.diffusers, "transformer", "config.json"), "config")
    assert b["text_dim"] > 0


def test_load_checks_every_components_headers(tiny_pipeline, tmp_path):
    """A truncated weights file fails h3cy.load naming the file (headers only, no data
    read), not a later phase that happens to read it first."""
    import shutil
    d = tmp_path / "broken"
    shutil.copytree(tiny_pipeline.release, d, symlinks=False)
    shards = sorted((d / "FL2VA" / "transformer").glob("model-*.safetensors"))
    with open(shards[-1], "r+b") as f:
        f.truncate(os.path.getsize(shards[-1]) - 64)
    with pytest.raises(h3cy.CheckpointError, match=shards[-1].name):
        h3cy.load(d)


def test_cache_dir_false_writes_no_file(tiny_pipeline, tmp_path, monkeypatch):
    """cache_dir=False: a converting mode (int8) and a prompt leave no cache file anywhere
    (the checkpoint folder, H3CY_CACHE_DIR), and the result equals a cached load's."""
    tp = tiny_pipeline
    home = tmp_path / "cache_root"
    monkeypatch.setenv("H3CY_CACHE_DIR", str(home))
    folder = tmp_path / "model"
    import shutil
    shutil.copytree(tp.release, folder)
    before = {p for p in folder.rglob("*")}
    pipe = h3cy.load(str(folder), weights="int8", streaming=False, cache_dir=False)
    res = pipe.generate("A red fox walks through snow", width=64, height=64, steps=2)
    assert {p for p in folder.rglob("*")} == before, "a file was written next to the checkpoint"
    assert not home.exists() or not any(home.rglob("*")), "a file was written under H3CY_CACHE_DIR"
    cached = h3cy.load(str(folder), weights="int8", streaming=False, cache_dir=str(tmp_path / "c"))
    res2 = cached.generate("A red fox walks through snow", width=64, height=64, steps=2)
    assert any((tmp_path / "c").rglob("*.h3w")), "the comparison load should have cached"
    np.testing.assert_array_equal(res.frames, res2.frames)
