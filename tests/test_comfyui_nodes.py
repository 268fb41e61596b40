"""The ComfyUI node pack (comfyui_h3/) without a ComfyUI checkout.

The pack is imported the way ComfyUI 0.3.64 imports a custom-node folder (spec from its
``__init__.py``, so relative imports resolve), with the stand-ins of tests/comfy_stubs/ as
``comfy`` / ``folder_paths`` / ``comfy_api``.  Nodes run through ``EXECUTE_NORMALIZED`` as
ComfyUI calls them, on h3cy's tiny demo model (real h3cy, real weights files).
"""
import builtins
import importlib.util
import logging
import os
import sys

import numpy as np
import pytest

import torch  # noqa: E402  (the pack hands tensors to ComfyUI; torch is a test extra)

import h3cy  # noqa: E402
import h3cy.demo  # noqa: E402

HERE = os.path.dirname(os.path.abspath(__file__))
STUBS = os.path.join(HERE, "comfy_stubs")
PACK = os.path.join(os.path.dirname(HERE), "comfyui_h3", "__init__.py")
STUB_MODULES = ("comfy", "folder_paths", "comfy_api")
NODE_IDS = ["H3cyModelLoader", "H3cyFilesLoader", "H3cyLoRA", "H3cyTextEncode", "H3cySampler", "H3cyDecode",
            "H3cyGenerate"]
SMALL = dict(width=64, height=64, frames=22, seconds=0.0, steps=2, seed=7, reuse=1, layers=0)


def _drop_modules(prefixes):
    for name in list(sys.modules):
        if any(name == p or name.startswith(p + ".") for p in prefixes):
            del sys.modules[name]


def _import_pack(name, block=()):
    """Import the pack as ComfyUI does; ``block`` names modules whose import must fail."""
    real_import = builtins.__import__

    def guarded(n, globals=None, locals=None, fromlist=(), level=0):
        if level == 0 and any(n == b or n.startswith(b + ".") for b in block):
            raise ImportError(f"No module named {n!r} (blocked by the test)")
        return real_import(n, globals, locals, fromlist, level)

    spec = importlib.util.spec_from_file_location(name, PACK)
    mod = importlib.util.module_from_spec(spec)
    sys.modules[name] = mod
    builtins.__import__ = guarded
    try:
        spec.loader.exec_module(mod)
    finally:
        builtins.__import__ = real_import
    return mod


@pytest.fixture(scope="module")
def comfy_env(tmp_path_factory):
    """Stand-in ComfyUI modules on sys.path with a fresh models/ folder."""
    base = tmp_path_factory.mktemp("comfy")
    os.environ["COMFY_STUB_BASE"] = str(base)
    _drop_modules(STUB_MODULES)
    sys.path.insert(0, STUBS)
    import comfy.model_management
    import comfy.utils
    import folder_paths
    assert folder_paths.__file__.startswith(STUBS)
    yield {"base": base, "folder_paths": folder_paths, "mm": comfy.model_management, "utils": comfy.utils}
    sys.path.remove(STUBS)
    _drop_modules(STUB_MODULES + ("comfyui_h3_under_test", "comfyui_h3_classic", "comfyui_h3_noh3cy"))
    os.environ.pop("COMFY_STUB_BASE", None)


@pytest.fixture(scope="module")
def pack(comfy_env):
    mod = _import_pack("comfyui_h3_under_test")
    yield mod
    sys.modules[mod.__name__ + ".nodes_load"]._CACHE.release()


@pytest.fixture(scope="module")
def demo_root(tmp_path_factory, comfy_env):
    """h3cy's tiny random model, placed in models/h3/demo."""
    root = h3cy.demo.build_demo_model(str(tmp_path_factory.mktemp("h3cy-demo")))
    h3dir = os.path.join(comfy_env["folder_paths"].models_dir, "h3")
    os.makedirs(h3dir, exist_ok=True)
    os.symlink(root, os.path.join(h3dir, "demo"))
    return root


@pytest.fixture
def schemas(pack):
    return {c.GET_SCHEMA().node_id: c for c in pack.NODE_CLASSES}


@pytest.fixture
def nodes(pack, comfy_env, demo_root):
    comfy_env["utils"].set_progress_bar_global_hook(None)
    comfy_env["mm"].interrupt_current_processing(False)
    yield {c.GET_SCHEMA().node_id: c for c in pack.NODE_CLASSES}
    comfy_env["utils"].set_progress_bar_global_hook(None)
    comfy_env["mm"].interrupt_current_processing(False)


def run(cls, **kw):
    """What ComfyUI's executor does with a v3 node: normalise execute's return."""
    return cls.EXECUTE_NORMALIZED(**kw).args


def load(nodes, weights="fp32", model="demo"):
    return run(nodes["H3cyModelLoader"], model=model, weights=weights, threads=0, streaming="off")[0]


# ---------------------------------------------------------------------------------------------
# registration and schemas
# ---------------------------------------------------------------------------------------------
def test_v3_entrypoint_registers_seven_prefixed_nodes(pack):
    import asyncio
    assert not hasattr(pack, "NODE_CLASS_MAPPINGS")     # else ComfyUI ignores comfy_entrypoint
    ext = asyncio.run(pack.comfy_entrypoint())
    from comfy_api.latest import ComfyExtension, io
    assert isinstance(ext, ComfyExtension)
    classes = asyncio.run(ext.get_node_list())
    ids = [c.GET_SCHEMA().node_id for c in classes]
    assert ids == NODE_IDS
    assert all(issubclass(c, io.ComfyNode) for c in classes)
    assert not any(i.startswith("MiniMaxH3") for i in ids)


EXPECTED_INPUTS = {
    "H3cyModelLoader": [("model", "COMBO", None), ("weights", "COMBO", "auto"), ("threads", "INT", 0),
                        ("streaming", "COMBO", "auto")],
    "H3cyFilesLoader": [("dit", "COMBO", None), ("text_encoder", "COMBO", None), ("video_vae", "COMBO", None),
                        ("audio_vae", "COMBO", None), ("weights", "COMBO", "auto"), ("threads", "INT", 0),
                        ("streaming", "COMBO", "auto")],
    "H3cyLoRA": [("model", "H3_MODEL", None), ("lora", "COMBO", None), ("strength", "FLOAT", 1.0)],
    "H3cyTextEncode": [("model", "H3_MODEL", None), ("prompt", "STRING", ""), ("first_frame", "IMAGE", None),
                       ("last_frame", "IMAGE", None)],
    "H3cySampler": [("model", "H3_MODEL", None), ("conditioning", "H3_CONDITIONING", None),
                    ("width", "INT", 512), ("height", "INT", 512), ("frames", "INT", 22), ("seconds", "FLOAT", 0.0),
                    ("steps", "INT", 20), ("seed", "INT", 42), ("reuse", "INT", 1), ("layers", "INT", 0),
                    ("sampler", "COMBO", "euler"), ("preset", "COMBO", "none")],
    "H3cyDecode": [("model", "H3_MODEL", None), ("latent", "LATENT", None)],
    "H3cyGenerate": [("model", "H3_MODEL", None), ("prompt", "STRING", ""), ("width", "INT", 512),
                     ("height", "INT", 512), ("frames", "INT", 22), ("seconds", "FLOAT", 0.0), ("steps", "INT", 20),
                     ("seed", "INT", 42), ("reuse", "INT", 1), ("layers", "INT", 0),
                     ("sampler", "COMBO", "euler"), ("preset", "COMBO", "none"), ("first_frame", "IMAGE", None),
                     ("last_frame", "IMAGE", None)],
}
EXPECTED_OUTPUTS = {"H3cyModelLoader": ["H3_MODEL"], "H3cyFilesLoader": ["H3_MODEL"], "H3cyLoRA": ["H3_MODEL"],
                    "H3cyTextEncode": ["H3_CONDITIONING"],
                    "H3cySampler": ["LATENT"], "H3cyDecode": ["IMAGE", "AUDIO"], "H3cyGenerate": ["IMAGE", "AUDIO"]}


@pytest.mark.parametrize("node_id", NODE_IDS)
def test_node_schema(schemas, node_id):
    cls = schemas[node_id]
    schema = cls.GET_SCHEMA()
    got = [(i.id, i.get_io_type(), getattr(i, "default", None)) for i in schema.inputs]
    assert got == EXPECTED_INPUTS[node_id]
    assert list(cls.RETURN_TYPES) == EXPECTED_OUTPUTS[node_id]
    assert schema.category == "h3cy" and schema.display_name.startswith("H3 ")
    info = cls.INPUT_TYPES()["required"]                  # what /object_info sends the frontend
    if "seed" in info:
        assert info["seed"][1]["control_after_generate"] is True
        assert info["seed"][1]["max"] == 0xFFFFFFFFFFFFFFFF
        assert info["width"][1]["step"] == 32 and info["width"][1]["min"] == 64
    if "prompt" in info:
        assert info["prompt"][1]["multiline"] is True
    # the keyframe IMAGE inputs are optional: a text-only graph leaves them unconnected
    keyframes = [i.id for i in schema.inputs if i.id in ("first_frame", "last_frame")]
    assert all(i.optional == (i.id in keyframes) for i in schema.inputs)
    assert set(cls.INPUT_TYPES().get("optional", {})) == set(keyframes)


def test_loader_lists_models_and_registers_h3_folder(nodes, comfy_env):
    fp = comfy_env["folder_paths"]
    assert os.path.join(fp.models_dir, "h3") in fp.get_folder_paths("h3")
    opts = nodes["H3cyModelLoader"].INPUT_TYPES()["required"]["model"][1]["options"]
    assert "demo" in opts
    assert set(nodes["H3cyModelLoader"].INPUT_TYPES()["required"]["weights"][1]["options"]) == \
        {"auto", "int8", "int4", "bf16", "fp16", "fp32"}


def test_classic_fallback_without_v3(comfy_env, pack):
    mod = _import_pack("comfyui_h3_classic", block=("comfy_api",))
    assert not hasattr(mod, "comfy_entrypoint")
    assert sorted(mod.NODE_CLASS_MAPPINGS) == sorted(NODE_IDS)
    for node_id, cls in mod.NODE_CLASS_MAPPINGS.items():
        types = cls.INPUT_TYPES()
        items = list(types["required"].items()) + list(types.get("optional", {}).items())
        got = [(k, "COMBO" if isinstance(v[0], list) else v[0], v[1].get("default")) for k, v in items]
        assert got == EXPECTED_INPUTS[node_id]
        assert set(types.get("optional", {})) <= {"first_frame", "last_frame"}
        assert list(cls.RETURN_TYPES) == EXPECTED_OUTPUTS[node_id]
        assert callable(getattr(cls(), cls.FUNCTION))
        assert mod.NODE_DISPLAY_NAME_MAPPINGS[node_id].startswith("H3 ")


def test_missing_h3cy_loads_and_says_how_to_install(comfy_env, pack, caplog):
    saved = {k: v for k, v in sys.modules.items() if k == "h3cy" or k.startswith("h3cy.")}
    _drop_modules(("h3cy",))
    try:
        with caplog.at_level(logging.WARNING, logger="comfyui_h3"):
            mod = _import_pack("comfyui_h3_noh3cy", block=("h3cy",))
        msgs = [r.getMessage() for r in caplog.records if r.name == "comfyui_h3"]
        assert len(msgs) == 1 and "pip install h3cy" in msgs[0]
        assert [c.GET_SCHEMA().node_id for c in mod.NODE_CLASSES] == NODE_IDS      # workflows still open
        missing = sys.modules["comfyui_h3_noh3cy._h3"].H3cyMissing
        with pytest.raises(missing, match="pip install h3cy"):
            run(mod.NODE_CLASSES[0], model="demo", weights="int8", threads=0, streaming="auto")
        with pytest.raises(missing, match="pip install h3cy"):
            run(mod.NODE_CLASSES[NODE_IDS.index("H3cyGenerate")], model=None, prompt="x", **SMALL)
    finally:
        _drop_modules(("h3cy",))
        sys.modules.update(saved)


# ---------------------------------------------------------------------------------------------
# execute on the tiny model
# ---------------------------------------------------------------------------------------------
@pytest.fixture(scope="module")
def reference(demo_root):
    """The same request through h3cy's own API (what the nodes must reproduce)."""
    pipe = h3cy.load(demo_root, weights="fp32", streaming=False)
    res = pipe.generate("a fox in snow", width=64, height=64, frames=22, steps=2, seed=7)
    return res


def _check_image_audio(images, audio, frames, height, width):
    assert isinstance(images, torch.Tensor) and images.dtype == torch.float32
    assert tuple(images.shape) == (frames, height, width, 3)
    assert float(images.min()) >= 0.0 and float(images.max()) <= 1.0
    assert float(images.std()) > 0.0                       # not a blank frame stack
    assert set(audio) == {"waveform", "sample_rate"} and audio["sample_rate"] == 32000
    wave = audio["waveform"]
    assert isinstance(wave, torch.Tensor) and wave.dtype == torch.float32
    assert tuple(wave.shape) == (1, 2, round(frames * 32000 / 24))
    assert float(wave.abs().max()) <= 1.0 and float(wave.abs().max()) > 0.0


def test_four_node_chain_matches_h3cy(nodes, reference):
    model = load(nodes)
    (cond,) = run(nodes["H3cyTextEncode"], model=model, prompt="a fox in snow")
    assert cond.embeds.dtype == np.float32 and cond.embeds.ndim == 2 and not cond.embeds.flags.writeable
    (latent,) = run(nodes["H3cySampler"], model=model, conditioning=cond, **SMALL)
    T, h, w = reference.video_latent.shape[1:]
    assert tuple(latent["samples"].shape) == (1, 24, T, h, w) and latent["samples"].dtype == torch.float32
    assert tuple(latent["audio_samples"].shape) == (1,) + reference.audio_latent.shape
    assert latent["audio_samples"].dtype == torch.float32
    assert latent["h3_geometry"] == {"width": 64, "height": 64, "frames": 22, "fps": 24}
    np.testing.assert_array_equal(latent["samples"][0].numpy(), reference.video_latent)
    images, audio = run(nodes["H3cyDecode"], model=model, latent=latent)
    _check_image_audio(images, audio, 22, 64, 64)
    np.testing.assert_array_equal((images.numpy() * 255).round().astype(np.uint8), reference.frames)
    np.testing.assert_array_equal(audio["waveform"][0].numpy(), np.clip(reference.audio_for_video(), -1, 1))


def test_generate_node_equals_chain(nodes, reference):
    images, audio = run(nodes["H3cyGenerate"], model=load(nodes), prompt="a fox in snow", **SMALL)
    _check_image_audio(images, audio, 22, 64, 64)
    np.testing.assert_array_equal((images.numpy() * 255).round().astype(np.uint8), reference.frames)


def test_text_encode_uses_prompt_cache(nodes, comfy_env):
    import uuid
    model = load(nodes)
    prompt = f"a lighthouse at dusk {uuid.uuid4().hex}"          # new to the on-disk cache
    seen = []
    comfy_env["utils"].set_progress_bar_global_hook(lambda v, t, p, node_id=None: seen.append(v))
    (first,) = run(nodes["H3cyTextEncode"], model=model, prompt=prompt)
    n_first = len(seen)
    seen.clear()
    (second,) = run(nodes["H3cyTextEncode"], model=model, prompt=prompt)
    assert n_first > 1 and seen == [1000]          # per-layer progress, then one cache hit
    np.testing.assert_array_equal(first.embeds, second.embeds)
    assert not np.shares_memory(first.embeds, second.embeds)


def test_seconds_overrides_frames(nodes):
    kw = dict(SMALL, seconds=1.5, frames=22)
    images, audio = run(nodes["H3cyGenerate"], model=load(nodes), prompt="x", **kw)
    assert images.shape[0] == h3cy.Geometry.from_seconds(1.5, 64, 64).frames == 39


def test_two_runs_give_independent_objects(nodes):
    model = load(nodes)
    a_img, a_aud = run(nodes["H3cyGenerate"], model=model, prompt="rain on a roof", **SMALL)
    b_img, b_aud = run(nodes["H3cyGenerate"], model=model, prompt="rain on a roof", **SMALL)
    assert torch.equal(a_img, b_img) and torch.equal(a_aud["waveform"], b_aud["waveform"])
    assert not np.shares_memory(a_img.numpy(), b_img.numpy())
    assert not np.shares_memory(a_aud["waveform"].numpy(), b_aud["waveform"].numpy())
    keep = b_img.clone()
    a_img.fill_(0.5)
    a_aud["waveform"].zero_()
    assert torch.equal(b_img, keep) and float(b_aud["waveform"].abs().max()) > 0
    (cond,) = run(nodes["H3cyTextEncode"], model=model, prompt="rain on a roof")
    (l1,) = run(nodes["H3cySampler"], model=model, conditioning=cond, **SMALL)
    (l2,) = run(nodes["H3cySampler"], model=model, conditioning=cond, **SMALL)
    assert not np.shares_memory(l1["samples"].numpy(), l2["samples"].numpy())
    l1["samples"].zero_()                                  # a downstream node mutating its input
    i2, _ = run(nodes["H3cyDecode"], model=model, latent=l2)
    assert torch.equal(i2, keep)


def test_model_cache_reuses_and_reloads(nodes, pack):
    cache = sys.modules[pack.__name__ + ".nodes_load"]._CACHE
    m1 = load(nodes)
    p1, n = m1.pipeline(), cache.loads
    m2 = load(nodes)
    assert m2.pipeline() is p1 and cache.loads == n               # same (path, mode): reused
    m3 = load(nodes, weights="bf16")
    p3 = m3.pipeline()
    assert p3 is not p1 and p3.weights == "bf16" and cache.loads == n + 1
    assert cache.pipe is p3                                       # only one pipeline kept
    assert m1.pipeline() is not p1 and m1.pipeline().weights == "fp32"   # a stale handle reopens
    assert cache.loads == n + 2


def test_loader_auto_follows_the_stored_measurement(nodes, pack, monkeypatch, tmp_path):
    """weights=auto in the loader node: the pipeline runs what this CPU's stored GEMM
    measurement (h3cy selfcheck) says is faster, per component (#23)."""
    from h3cy import _config
    from h3cy.ops import measurement
    monkeypatch.setattr(_config, "_ENV_CACHE_DIR", str(tmp_path))
    cache = sys.modules[pack.__name__ + ".nodes_load"]._CACHE
    isa = h3cy.ops.active_isa()
    try:
        for seconds, want in (({"fp32": 3.0, "bf16": 1.0, "int8": 2.0, "int4": 1.5}, "bf16"),
                              ({"fp32": 3.0, "bf16": 2.0, "int8": 1.0, "int4": 0.9}, "int8")):
            rec = dict(measurement.measurement_key(isa), seconds=seconds)
            measurement.save_measurement(rec)
            cache.release()                       # the node keeps one pipeline per (model, mode)
            model = load(nodes, weights="auto")
            assert model.pipeline().component_weights == {"text_encoder": want, "transformer": want}
    finally:
        cache.release()


def test_progress_moves_per_block_across_phases(nodes, comfy_env):
    seen = []
    comfy_env["utils"].set_progress_bar_global_hook(lambda v, t, p, node_id=None: seen.append((v, t)))
    run(nodes["H3cyGenerate"], model=load(nodes), prompt="progress please", **SMALL)
    values = [v for v, _ in seen]
    assert values == sorted(values) and values[-1] == seen[-1][1] == 4000     # 4 phases x 1000
    assert len(seen) >= 2 * 2 + 3                  # >= 2 blocks x 2 steps in denoise, plus other phases
    assert len({v // 1000 for v in values}) >= 3   # the bar moved in several phases


def test_lock_held_while_generating(nodes, comfy_env):
    model = load(nodes)
    held = []
    comfy_env["utils"].set_progress_bar_global_hook(lambda v, t, p, node_id=None: held.append(model.lock.locked()))
    run(nodes["H3cyGenerate"], model=model, prompt="lock", **SMALL)
    assert held and all(held)
    assert not model.lock.locked()


@pytest.mark.parametrize("how", ["bar_raises", "interrupt_flag"])
def test_cancel_mid_run_then_next_run_works(nodes, comfy_env, how):
    mm, utils = comfy_env["mm"], comfy_env["utils"]
    model = load(nodes)
    calls = []

    def hook(value, total, preview, node_id=None):
        calls.append(value)
        if len(calls) == 3:
            if how == "bar_raises":          # ComfyUI's hook raises once the user pressed cancel
                raise mm.InterruptProcessingException()
            mm.interrupt_current_processing(True)      # only the flag: h3cy's cancel check sees it

    utils.set_progress_bar_global_hook(hook)
    with pytest.raises(mm.InterruptProcessingException):
        run(nodes["H3cyGenerate"], model=model, prompt="cancel me", **SMALL)
    assert 3 <= len(calls) <= 4 and calls[-1] < 4000      # stopped mid-run, within one block
    assert not mm.processing_interrupted()                 # ComfyUI's flag is consumed, as it does
    assert not model.lock.locked()
    utils.set_progress_bar_global_hook(None)
    images, audio = run(nodes["H3cyGenerate"], model=model, prompt="cancel me", **SMALL)
    _check_image_audio(images, audio, 22, 64, 64)


def test_clear_errors(nodes):
    model = load(nodes)
    with pytest.raises(h3cy.H3Error, match="nearest legal: 96"):
        run(nodes["H3cyGenerate"], model=model, prompt="x", **dict(SMALL, width=100))
    with pytest.raises(FileNotFoundError, match="models/h3"):
        run(nodes["H3cyModelLoader"], model="(no MiniMax-H3 model found: put one in models/h3/)",
            weights="int8", threads=0, streaming="auto")
    with pytest.raises(FileNotFoundError, match="is not in ComfyUI's model folders"):
        run(nodes["H3cyModelLoader"], model="gone", weights="int8", threads=0, streaming="auto")
    with pytest.raises(ValueError, match="H3 Sampler"):
        run(nodes["H3cyDecode"], model=model, latent={"samples": torch.zeros(1, 4, 8, 8)})


def test_other_model_folders(nodes, comfy_env, demo_root, pack):
    """A whole model in diffusion_models/, and Comfy-style split components."""
    fp = comfy_env["folder_paths"]
    dm = os.path.join(fp.models_dir, "diffusion_models")
    os.makedirs(dm, exist_ok=True)
    os.symlink(demo_root, os.path.join(dm, "whole"))
    fl = os.path.join(demo_root, "FL2VA")
    os.makedirs(os.path.join(fp.models_dir, "diffusion_models"), exist_ok=True)
    os.symlink(os.path.join(fl, "transformer"), os.path.join(dm, "tiny"))
    te = os.path.join(fp.models_dir, "text_encoders", "tiny")       # text encoder + tokenizer/ inside
    os.makedirs(te)
    for n in os.listdir(os.path.join(fl, "text_encoder")):
        os.symlink(os.path.join(fl, "text_encoder", n), os.path.join(te, n))
    os.symlink(os.path.join(fl, "tokenizer"), os.path.join(te, "tokenizer"))
    vae = os.path.join(fp.models_dir, "vae", "tiny")
    os.makedirs(vae)
    for c in ("video_vae", "audio_vae"):
        os.symlink(os.path.join(fl, c), os.path.join(vae, c))
    opts = nodes["H3cyModelLoader"].INPUT_TYPES()["required"]["model"][1]["options"]
    assert {"demo", "diffusion_models/whole", "split/tiny"} <= set(opts)
    m = load(nodes, model="split/tiny")
    assert m.pipeline().folder.layout == "release"
    images, _ = run(nodes["H3cyGenerate"], model=m, prompt="a fox in snow", **SMALL)
    ref = run(nodes["H3cyGenerate"], model=load(nodes, model="diffusion_models/whole"), prompt="a fox in snow",
              **SMALL)[0]
    assert torch.equal(images, ref)


def test_files_loader_lists_comfyui_folders_and_generates(nodes, comfy_env, comfy_files):
    """ComfyUI users' own downloads: the four single files in models/diffusion_models,
    text_encoders and vae (a subfolder too) appear in the files loader and make what
    h3cy.load makes from the same files."""
    fp = comfy_env["folder_paths"]
    where = {"dit": ("diffusion_models", ""), "text_encoder": ("text_encoders", ""),
             "video_vae": ("vae", ""), "audio_vae": ("vae", "minimax")}
    picks = {}
    for role, (folder, sub) in where.items():
        d = os.path.join(fp.models_dir, folder, sub)
        os.makedirs(d, exist_ok=True)
        name = os.path.basename(comfy_files[role])
        os.symlink(comfy_files[role], os.path.join(d, name))
        picks[role] = os.path.join(sub, name) if sub else name
    info = nodes["H3cyFilesLoader"].INPUT_TYPES()["required"]
    for role, name in picks.items():
        assert name in info[role][1]["options"], (role, info[role][1]["options"])
    model = run(nodes["H3cyFilesLoader"], weights="fp32", threads=0, streaming="off", **picks)[0]
    assert model.pipeline().folder.layout == "files"
    images, audio = run(nodes["H3cyGenerate"], model=model, prompt="a fox in snow", **SMALL)
    want = h3cy.load(weights="fp32", streaming=False, **{r: comfy_files[r] for r in picks}).generate(
        prompt="a fox in snow", width=64, height=64, frames=22, steps=2, seed=7)
    assert np.array_equal(images.numpy(), want.frames * np.float32(1.0 / 255.0))
    # a file of the wrong kind, or one h3cy cannot read, fails in the loader in one line
    wrong = dict(picks, dit=picks["text_encoder"])
    with pytest.raises(FileNotFoundError, match="not in ComfyUI's diffusion_models"):
        run(nodes["H3cyFilesLoader"], weights="fp32", threads=0, streaming="off", **wrong)
    os.symlink(comfy_files["text_encoder"], os.path.join(fp.models_dir, "diffusion_models", "te_here.safetensors"))
    with pytest.raises(ValueError, match="diffusion model: te_here.safetensors cannot be used: .*holds the text_encoder, not the transformer"):
        run(nodes["H3cyFilesLoader"], weights="fp32", threads=0, streaming="off", **dict(picks, dit="te_here.safetensors"))


def test_example_workflows_ship_in_api_format_too(pack):
    """Scripts drive ComfyUI through the API format: every example workflow has its
    ``*_api.json`` twin, equal to the frontend's conversion of the UI workflow against the
    pack's own node schemas (so a renamed input or a reordered widget shows up here)."""
    import glob
    import json
    from _comfy_api import object_info, to_api
    info = object_info(pack.NODE_CLASSES)
    ui = sorted(p for p in glob.glob(os.path.join(os.path.dirname(PACK), "workflows", "*.json"))
                if not p.endswith("_api.json"))
    assert len(ui) >= 2
    for path in ui:
        with open(path) as f:
            want = to_api(json.load(f), info)
        with open(path[:-len(".json")] + "_api.json") as f:
            assert json.load(f) == want, path
        for node in want.values():                  # links point at existing nodes
            if node["class_type"].startswith("H3cy"):     # every input of a pack node has a value
                assert set(node["inputs"]) == set(info[node["class_type"]]["input"]["required"]), path
            for v in node["inputs"].values():
                if isinstance(v, list):
                    assert v[0] in want


def test_a_corrupt_file_fails_in_the_loader(nodes, comfy_env, comfy_files, tmp_path):
    """A truncated file is named by the loader node, not by whichever node reads it first."""
    fp = comfy_env["folder_paths"]
    d = os.path.join(fp.models_dir, "diffusion_models")
    os.makedirs(d, exist_ok=True)
    blob = open(comfy_files["dit"], "rb").read()
    with open(os.path.join(d, "cut_dit.safetensors"), "wb") as f:
        f.write(blob[:-4096])
    picks = {"dit": "cut_dit.safetensors", "text_encoder": os.path.basename(comfy_files["text_encoder"]),
             "video_vae": os.path.basename(comfy_files["video_vae"]),
             "audio_vae": os.path.join("minimax", os.path.basename(comfy_files["audio_vae"]))}
    for role, folder in (("text_encoder", "text_encoders"), ("video_vae", "vae")):
        p = os.path.join(fp.models_dir, folder, picks[role])
        if not os.path.exists(p):
            os.makedirs(os.path.dirname(p), exist_ok=True)
            os.symlink(comfy_files[role], p)
    p = os.path.join(fp.models_dir, "vae", picks["audio_vae"])
    if not os.path.exists(p):
        os.makedirs(os.path.dirname(p), exist_ok=True)
        os.symlink(comfy_files["audio_vae"], p)
    with pytest.raises(ValueError, match="diffusion model: cut_dit.safetensors cannot be used: .*cut_dit"):
        run(nodes["H3cyFilesLoader"], weights="fp32", threads=0, streaming="off", **picks)


def test_weight_caches_stay_out_of_comfyui_folders(nodes, comfy_env, demo_root):
    """int8 caches of a model in ComfyUI's (writable) models folder go to h3cy's cache
    folder: models folders are often shared or read-only."""
    import shutil
    fp = comfy_env["folder_paths"]
    mine = os.path.join(fp.models_dir, "h3", "writable")
    shutil.copytree(demo_root, mine)
    m = load(nodes, weights="int8", model="writable")
    before = set(os.listdir(h3cy.cache_dir()))
    run(nodes["H3cyGenerate"], model=m, prompt="a fox in snow", **SMALL)
    written = [os.path.join(r, n) for r, _, ns in os.walk(mine) for n in ns if ".h3w" in n]
    assert written == []
    assert any(n.startswith("h3cy-int8-") for n in set(os.listdir(h3cy.cache_dir())) - before)


# ---------------------------------------------------------------------------------------------
# H3 LoRA and the sampler choice
# ---------------------------------------------------------------------------------------------
def _kohya_lora(root, out, seed, r=2):
    """A random kohya-layout LoRA (``<module>.lora_down/up.weight`` + ``alpha``) on every
    block's attention output and FFN down projection of the model at ``root``."""
    import json

    from safetensors import safe_open
    from safetensors.numpy import save_file
    t = os.path.join(root, "FL2VA", "transformer")
    with open(os.path.join(t, "model.safetensors.index.json")) as f:
        where = json.load(f)["weight_map"]
    rng = np.random.default_rng(seed)
    tensors = {}
    for name, shard in sorted(where.items()):
        if name.startswith("blocks.") and name.endswith(("attn.out_proj.weight", "mlp.fc2.weight")):
            with safe_open(os.path.join(t, shard), "np") as f:
                n, k = f.get_slice(name).get_shape()
            m = name[:-len(".weight")]
            tensors[m + ".lora_down.weight"] = rng.standard_normal((r, k)).astype(np.float32) * 0.3
            tensors[m + ".lora_up.weight"] = rng.standard_normal((n, r)).astype(np.float32) * 0.3
            tensors[m + ".alpha"] = np.array(float(r), np.float32)
    assert tensors
    save_file(tensors, str(out))
    return str(out)


@pytest.fixture(scope="module")
def loras(comfy_env, demo_root):
    d = os.path.join(comfy_env["folder_paths"].models_dir, "loras", "turbo")
    os.makedirs(d, exist_ok=True)
    return {"a": _kohya_lora(demo_root, os.path.join(d, "a.safetensors"), seed=1),
            "b": _kohya_lora(demo_root, os.path.join(d, "b.safetensors"), seed=2)}


@pytest.fixture(scope="module")
def lora_reference(demo_root, loras):
    """h3cy's own results for the LoRA sets the node tests build (latents, 2 steps)."""
    kw = dict(width=64, height=64, frames=22, steps=2, seed=7, output="latent")

    def ref(pairs):
        pipe = h3cy.load(demo_root, weights="fp32", streaming=False, loras=pairs)
        return pipe.generate("a fox in snow", **kw).video_latent
    return {"base": ref([]), "a": ref([(loras["a"], 0.8)]),
            "ab": ref([(loras["a"], 0.8), (loras["b"], -0.5)])}


def _latent(nodes, model, **kw):
    (cond,) = run(nodes["H3cyTextEncode"], model=model, prompt="a fox in snow")
    (lat,) = run(nodes["H3cySampler"], model=model, conditioning=cond, **dict(SMALL, **kw))
    return lat["samples"][0].numpy()


def test_lora_node_lists_loras_and_patches_the_shared_pipeline(nodes, pack, loras, lora_reference):
    cache = sys.modules[pack.__name__ + ".nodes_load"]._CACHE
    info = nodes["H3cyLoRA"].INPUT_TYPES()["required"]
    assert {"turbo/a.safetensors", "turbo/b.safetensors"} <= set(info["lora"][1]["options"])
    base = load(nodes)
    pipe, n = base.pipeline(), cache.loads
    (with_a,) = run(nodes["H3cyLoRA"], model=base, lora="turbo/a.safetensors", strength=0.8)
    (with_ab,) = run(nodes["H3cyLoRA"], model=with_a, lora="turbo/b.safetensors", strength=-0.5)
    assert base.loras == () and len(with_a.loras) == 1 and len(with_ab.loras) == 2   # inputs unchanged
    assert len({base.key, with_a.key, with_ab.key}) == 3 and base.lock is with_ab.lock
    # each handle gets its own LoRA set on the one pipeline: the base is never copied or reloaded
    for handle, want in ((with_ab, "ab"), (base, "base"), (with_a, "a"), (with_ab, "ab"), (base, "base")):
        assert np.array_equal(_latent(nodes, handle), lora_reference[want]), want
        assert handle.pipeline() is pipe
    assert cache.loads == n
    assert pipe.loras == {}                          # the base handle left no LoRA behind
    # a strength change alone re-weights without re-reading the files
    patches = cache.patches
    (weak,) = run(nodes["H3cyLoRA"], model=base, lora="turbo/a.safetensors", strength=0.0)    # loads a
    run(nodes["H3cyLoRA"], model=base, lora="turbo/a.safetensors", strength=0.8)[0].pipeline()
    weak.pipeline()
    assert cache.patches == patches + 1 and pipe.loras == {"0:a.safetensors": 0.0}
    assert np.array_equal(_latent(nodes, weak), lora_reference["base"])     # strength 0 = the base


def test_lora_node_errors(nodes, comfy_env, demo_root, tmp_path):
    from safetensors.numpy import save_file
    base = load(nodes)
    with pytest.raises(FileNotFoundError, match="not in ComfyUI's loras folders"):
        run(nodes["H3cyLoRA"], model=base, lora="gone.safetensors", strength=1.0)
    with pytest.raises(FileNotFoundError, match="models/loras"):
        run(nodes["H3cyLoRA"], model=base, lora="(no .safetensors in models/loras/)", strength=1.0)
    bad = os.path.join(comfy_env["folder_paths"].models_dir, "loras", "bad.safetensors")
    save_file({"blocks.77.mlp.fc2.lora_down.weight": np.zeros((2, 128), np.float32),
               "blocks.77.mlp.fc2.lora_up.weight": np.zeros((64, 2), np.float32)}, bad)
    with pytest.raises(h3cy.CheckpointError, match="blocks.77.mlp.fc2"):       # in the LoRA node
        run(nodes["H3cyLoRA"], model=base, lora="bad.safetensors", strength=1.0)
    assert base.pipeline().loras == {}               # nothing half-applied
    with pytest.raises(TypeError, match="H3_MODEL"):
        run(nodes["H3cyLoRA"], model="x", lora="bad.safetensors", strength=1.0)


def test_sampler_choice_and_preset(nodes, demo_root):
    model = load(nodes)
    pipe = h3cy.load(demo_root, weights="fp32", streaming=False)
    kw = dict(width=64, height=64, frames=22, seed=7, output="latent")
    res = pipe.generate("a fox in snow", steps=2, sampler="res_multistep", **kw).video_latent
    assert np.array_equal(_latent(nodes, model, sampler="res_multistep"), res)
    assert not np.array_equal(res, pipe.generate("a fox in snow", steps=2, **kw).video_latent)
    # a preset replaces the steps and sampler widgets
    with pytest.warns(RuntimeWarning, match="no LoRA"):
        want = pipe.generate("a fox in snow", preset="turbo4", **kw).video_latent
    with pytest.warns(RuntimeWarning, match="no LoRA"):
        got = _latent(nodes, model, steps=13, sampler="res_multistep", preset="turbo4")
    assert np.array_equal(got, want)
    images, _ = run(nodes["H3cyGenerate"], model=model, prompt="a fox in snow",
                    **dict(SMALL, sampler="res_multistep", preset="none"))
    assert tuple(images.shape) == (22, 64, 64, 3)
    with pytest.raises(ValueError, match="sampler must be one of"):
        _latent(nodes, model, sampler="dpmpp_2m")


# ---------------------------------------------------------------------------------------------
# previews (ComfyUI's mechanism: ProgressBar.update_absolute(value, total, ("JPEG", image, size)))
# ---------------------------------------------------------------------------------------------
def test_sampler_sends_step_previews_through_the_progress_bar(nodes, comfy_env, reference, monkeypatch):
    from PIL import Image
    import comfy.cli_args as cli
    from h3cy.preview import preview_image
    model = load(nodes)
    (cond,) = run(nodes["H3cyTextEncode"], model=model, prompt="a fox in snow")
    seen = []
    comfy_env["utils"].set_progress_bar_global_hook(lambda v, t, p, node_id=None: seen.append((v, t, p)))
    (latent,) = run(nodes["H3cySampler"], model=model, conditioning=cond, **SMALL)
    assert seen and all(p is None for _, _, p in seen)            # ComfyUI's default: --preview-method none

    monkeypatch.setattr(cli.args, "preview_method", cli.LatentPreviewMethod.Auto)
    seen.clear()
    (latent2,) = run(nodes["H3cySampler"], model=model, conditioning=cond, **SMALL)
    np.testing.assert_array_equal(latent2["samples"].numpy(), latent["samples"].numpy())   # unchanged result
    previews = [(v, t, p) for v, t, p in seen if p is not None]
    assert len(previews) == SMALL["steps"]
    for v, t, p in previews:
        fmt, img, size = p
        assert fmt == "JPEG" and isinstance(img, Image.Image) and img.mode == "RGB" and size == 512
        assert t == 1000 and 0 < v <= 1000
    # the last step's clean estimate is the final latent: 7 latent frames of 4x4 as a 3x3 sheet
    # (14 px with the gaps), each latent pixel enlarged 8x
    sheet = preview_image(latent2["samples"][0].numpy(), "sheet")
    assert sheet.shape == (14, 14, 3)
    np.testing.assert_array_equal(np.asarray(previews[-1][2][1]), sheet.repeat(8, 0).repeat(8, 1))

    monkeypatch.setattr(cli.args, "preview_size", 64)              # --preview-size bounds the image
    seen.clear()
    images, _ = run(nodes["H3cyGenerate"], model=model, prompt="a fox in snow", **SMALL)
    previews = [p for _, _, p in seen if p is not None]
    assert len(previews) == SMALL["steps"] and previews[-1][1].size == (56, 56) and previews[-1][2] == 64
    np.testing.assert_array_equal((images.numpy() * 255).round().astype(np.uint8), reference.frames)


def test_taesd_previews_use_taeh3_from_vae_approx(nodes, comfy_env, monkeypatch):
    from safetensors.numpy import save_file
    import comfy.cli_args as cli
    from h3cy import taeh3
    from h3cy.preview import preview_image
    model = load(nodes)
    (cond,) = run(nodes["H3cyTextEncode"], model=model, prompt="a fox in snow")
    seen = []
    comfy_env["utils"].set_progress_bar_global_hook(lambda v, t, p, node_id=None: seen.append(p))
    monkeypatch.setattr(cli.args, "preview_method", cli.LatentPreviewMethod.TAESD)
    (latent,) = run(nodes["H3cySampler"], model=model, conditioning=cond, **SMALL)
    previews = [p for p in seen if p is not None]                 # no taeh3 file: latent2rgb, as ComfyUI
    z = latent["samples"][0].numpy()
    np.testing.assert_array_equal(np.asarray(previews[-1][1]), preview_image(z, "sheet").repeat(8, 0).repeat(8, 1))

    rng = np.random.default_rng(0)
    state = {k: (rng.standard_normal(s) * 0.05).astype(np.float32) for k, s in taeh3.expected_keys().items()}
    folder = os.path.join(comfy_env["folder_paths"].models_dir, "vae_approx")
    os.makedirs(folder, exist_ok=True)
    path = os.path.join(folder, "taeh3.safetensors")
    save_file(state, path)
    try:
        seen.clear()
        (latent2,) = run(nodes["H3cySampler"], model=model, conditioning=cond, **SMALL)
        previews = [p for p in seen if p is not None]
        assert len(previews) == SMALL["steps"]
        tae = taeh3.TAEH3Decoder(state, space_upscale=False, time_upscale=False)
        img = preview_image(latent2["samples"][0].numpy(), "first", tae=tae)   # 4x4 latent -> 8x8
        assert img.shape == (8, 8, 3)
        np.testing.assert_array_equal(np.asarray(previews[-1][1]), img.repeat(8, 0).repeat(8, 1))
    finally:
        os.remove(path)


def test_files_loader_lists_and_runs_gguf_files(nodes, comfy_env, comfy_files, tiny_dit_factory, tmp_path):
    """GGUF downloads kept where ComfyUI-GGUF users keep them (models/unet) appear in the files
    loader beside the .safetensors ones, and a GGUF of float tensors makes the same video as
    the safetensors file it was written from."""
    import torch
    from _comfy_files import dit_state
    from _gguf_files import write_gguf
    fp = comfy_env["folder_paths"]
    tensors = []
    for name, v in dit_state(tiny_dit_factory("p")).items():
        if v.dtype == torch.bfloat16:
            tensors.append((name, "BF16", tuple(v.shape), v.view(torch.int16).numpy().view(np.uint16)))
        else:
            tensors.append((name, "F32", tuple(v.shape), v.float().numpy()))
    d = os.path.join(fp.models_dir, "unet", "gguf")
    os.makedirs(d, exist_ok=True)
    write_gguf(os.path.join(d, "h3_dit-F32.gguf"), tensors)
    picks = {"dit": os.path.join("gguf", "h3_dit-F32.gguf")}
    for role, folder in (("text_encoder", "text_encoders"), ("video_vae", "vae"), ("audio_vae", "vae")):
        p = os.path.join(fp.models_dir, folder, "gg_" + os.path.basename(comfy_files[role]))
        os.makedirs(os.path.dirname(p), exist_ok=True)
        if not os.path.exists(p):
            os.symlink(comfy_files[role], p)
        picks[role] = os.path.basename(p)
    info = nodes["H3cyFilesLoader"].INPUT_TYPES()["required"]
    assert picks["dit"] in info["dit"][1]["options"]
    assert not any(o.endswith(".gguf") for o in info["video_vae"][1]["options"])   # VAEs: no GGUF sets
    model = run(nodes["H3cyFilesLoader"], weights="fp32", threads=0, streaming="off", **picks)[0]
    images, _ = run(nodes["H3cyGenerate"], model=model, prompt="a fox in snow", **SMALL)
    want = h3cy.load(weights="fp32", streaming=False, **{r: comfy_files[r] for r in picks}).generate(
        prompt="a fox in snow", width=64, height=64, frames=22, steps=2, seed=7)
    assert np.array_equal(images.numpy(), want.frames * np.float32(1.0 / 255.0))


def test_gguf_folder_keys_registered_as_comfyui_gguf_does(pack, comfy_env, tmp_path):
    """Without ComfyUI-GGUF, importing the pack registers its ``unet_gguf`` / ``clip_gguf``
    keys the way ComfyUI-GGUF does (the base folder's own path list, the .gguf extension);
    a key already there (ComfyUI-GGUF's, extra_model_paths.yaml's) is kept, and the files
    loader lists and resolves the .gguf files under it, also outside models/."""
    import numpy as np
    from _gguf_files import random_blocks, write_gguf
    fp = comfy_env["folder_paths"]
    nl = sys.modules[pack.__name__ + ".nodes_load"]
    table = fp.folder_names_and_paths
    for key, base in (("unet_gguf", "diffusion_models"), ("clip_gguf", "text_encoders")):
        assert table[key][0] is table[base][0] and table[key][1] == {".gguf"}
    # a clip_gguf key with a folder of its own (as extra_model_paths.yaml may set it)
    saved = table.pop("clip_gguf")
    try:
        extra = tmp_path / "elsewhere"
        extra.mkdir()
        table["clip_gguf"] = ([str(extra)], {".gguf"})
        nl.register_gguf_folders()
        assert table["clip_gguf"][0] == [str(extra)]          # kept as it was
        q = random_blocks("Q8_0", 64, 32, np.random.default_rng(0))
        write_gguf(extra / "qwen3vl-Q8_0.gguf", [("token_embd.weight", "Q8_0", (64, 32), q),
                                                 ("blk.0.attn_q.weight", "Q8_0", (64, 32), q)],
                   [("general.architecture", 8, "qwen3vl")])
        assert "qwen3vl-Q8_0.gguf" in nl.file_options("text_encoders", gguf=True)
        assert "qwen3vl-Q8_0.gguf" not in nl.file_options("text_encoders")
        assert nl.check_file("text_encoder", "qwen3vl-Q8_0.gguf") == str(extra / "qwen3vl-Q8_0.gguf")
        # each role looks in its own folders: not a diffusion model
        with pytest.raises(FileNotFoundError, match="not in ComfyUI's diffusion_models folders"):
            nl.check_file("dit", "qwen3vl-Q8_0.gguf")
    finally:
        table["clip_gguf"] = saved
