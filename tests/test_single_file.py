"""Single-file transformers (Comfy-Org's repacks): detection, configuration from the tensor
shapes, stacked QKV, the ``model.diffusion_model.`` prefix, the pruned "curve form" AdaLN
-- each against diffusers or against the same model read from the release's folders."""
import hashlib
import json
import os
import subprocess
import sys

import numpy as np
import pytest
import torch

import h3cy
from h3cy.errors import CheckpointError
from h3cy.models.dit import adaln_curve_input
from h3cy.weights.single_file import detect
from _compare import assert_close, assert_nontrivial
from test_dit_parity import packed_inputs, reference_forward
from test_pipeline import F, H, W
from _comfy_files import (COMFY_PREFIX, audio_vae_file, dit_state, save, text_encoder_file,
                          video_vae_file)

GRID = 1025


def _curve_table(t, grid=GRID):
    """SiLU(time_embedder(t_j)) on t_j = j / (grid - 1): the AdaLN input curve of the
    diffusers model itself, at full rank -- a curve-form file exact on the grid."""
    from diffusers import MiniMaxH3Transformer3DModel
    m = MiniMaxH3Transformer3DModel.from_pretrained(t.diffusers_fp32, torch_dtype=torch.float32).eval()
    tj = torch.arange(grid, dtype=torch.float32) / (grid - 1)
    with torch.no_grad():
        return torch.nn.functional.silu(m.time_embedder(m.time_proj(tj)))


def _curvedit_state(t, table, adaln_dtype=torch.float32):
    sd = {k: v for k, v in dit_state(t).items() if not k.startswith("time_embedder.")}
    sd["adaln_t_table"] = table.float()
    for k in list(sd):
        if "adaln_proj.linear" in k:
            sd[k] = sd[k].to(adaln_dtype)
    return sd


def test_released_configs_are_shipped_unchanged():
    folder = os.path.join(os.path.dirname(h3cy.__file__), "data", "configs")
    src = open(os.path.join(folder, "SOURCE.md")).read()
    for name in ("transformer", "text_encoder", "video_vae", "audio_vae"):
        digest = hashlib.sha256(open(os.path.join(folder, name + ".json"), "rb").read()).hexdigest()
        assert f"`{name}.json` {digest}" in src, name
    from h3cy.weights.released import released_config
    assert released_config("transformer")["hidden_size"] == 5376


@pytest.mark.parametrize("prefix", ["", COMFY_PREFIX])
@pytest.mark.parametrize("weights", ["fp32", "bf16", "int8"])
def test_comfy_file_equals_the_release_folders(tiny_dit_factory, tmp_path, prefix, weights):
    """The same model as the release's sharded, per-head interleaved folder and as a Comfy
    single file (stacked QKV, no config, with or without ComfyUI's prefix): identical."""
    t = tiny_dit_factory("b")
    path = save(dit_state(t), tmp_path / "dit.safetensors", prefix)
    inputs = packed_inputs(t.config, seed=11)
    want = h3cy.DiT.from_pretrained(t.original, weights=weights, threads=2).forward(**inputs)
    dit = h3cy.DiT.from_pretrained(path, weights=weights, threads=2)
    got = dit.forward(**inputs)
    for g, w in zip(got, want):
        assert np.array_equal(g, w)
    for k, v in t.config.items():     # every size read back from the shapes
        assert dit.config[k] == v, k


def test_comfy_file_matches_diffusers(tiny_dit_factory, tmp_path):
    t = tiny_dit_factory("c")
    path = save(dit_state(t), tmp_path / "dit.safetensors", COMFY_PREFIX)
    inputs = packed_inputs(t.config, seed=12)
    # the file holds the released dtype mix (bf16 blocks): diffusers on those values, in float32
    want_v, want_a = reference_forward(t.diffusers_bf16, torch.float32, inputs)
    got_v, got_a = h3cy.DiT.from_pretrained(path, weights="fp32", threads=2).forward(**inputs)
    # observed max-rel ~3e-7; a wrong QKV row order gives O(1)
    assert_close(got_v, want_v, max_rel_tol=1e-4, what="video")
    assert_close(got_a, want_a, max_rel_tol=1e-4, what="audio")


def test_detect_says_what_it_found_and_assumed(tiny_dit_factory, tmp_path):
    t = tiny_dit_factory("a")
    path = save(dit_state(t), tmp_path / "dit.safetensors", COMFY_PREFIX)
    k = detect(path)
    assert (k.component, k.naming, k.prefix, k.qkv_layout, k.adaln) == (
        "transformer", "original", COMFY_PREFIX, "stacked", "full")
    assert not k.quantised and set(k.dtypes) == {"F32", "BF16"}
    assert any("stacked" in a for a in k.assumed)
    other = save({"x": torch.zeros(2)}, tmp_path / "other.safetensors")
    with pytest.raises(CheckpointError, match="not a MiniMax-H3 component"):
        detect(other)
    with pytest.raises(CheckpointError, match="not a MiniMax-H3 component"):
        h3cy.DiT.from_pretrained(other)


def test_info_prints_kind_config_and_memory(tiny_dit_factory, tmp_path):
    t = tiny_dit_factory("a")
    path = save(dit_state(t), tmp_path / "dit.safetensors")
    env = dict(os.environ, PYTHONPATH=os.pathsep.join(
        [os.path.dirname(os.path.dirname(h3cy.__file__)), os.environ.get("PYTHONPATH", "")]))
    r = subprocess.run([sys.executable, "-m", "h3cy", "info", path], capture_output=True, text=True, env=env)
    assert r.returncode == 0, r.stderr
    out = r.stdout
    for want in ("component : transformer", "qkv rows  : stacked", "quantised : none",
                 f"num_layers={t.config['num_layers']}", f"hidden_size={t.config['hidden_size']}",
                 "int8", "bf16"):
        assert want in out, (want, out)


def test_inconsistent_tensors_are_refused_by_name(tiny_dit_factory, tmp_path):
    t = tiny_dit_factory("b")
    sd = dit_state(t)
    bad = dict(sd)
    bad["blocks.1.mlp.fc2.weight"] = sd["blocks.1.mlp.fc2.weight"][:, :-8]
    with pytest.raises(CheckpointError, match=r"blocks\.1\.mlp\.fc2\.weight.*shape.*inferred from the tensor"):
        h3cy.DiT.from_pretrained(save(bad, tmp_path / "a.safetensors"))
    bad = {k: v for k, v in sd.items() if k != "blocks.0.attn.q_norm.weight"}
    with pytest.raises(CheckpointError, match=r"blocks\.0\.attn\.q_norm\.weight"):
        h3cy.DiT.from_pretrained(save(bad, tmp_path / "b.safetensors"))
    bad = dict(sd)
    bad["blocks.0.attn.qkv_proj.weight"] = sd["blocks.0.attn.qkv_proj.weight"][:-1]
    with pytest.raises(CheckpointError, match=r"blocks\.0\.attn\.qkv_proj\.weight"):
        h3cy.DiT.from_pretrained(save(bad, tmp_path / "c.safetensors"))


def test_quantised_tensors_are_named_not_run(tiny_dit_factory, tmp_path):
    """A format h3cy cannot run yet fails naming the layer and the format -- never a silent
    fallback (int8_tensorwise runs as stored: tests/test_comfy_int8.py)."""
    t = tiny_dit_factory("a")
    sd = dit_state(t)
    w = sd["blocks.0.mlp.fc2.weight"].float()
    sd["blocks.0.mlp.fc2.weight"] = torch.zeros((w.shape[0], w.shape[1] // 2), dtype=torch.uint8)
    sd["blocks.0.mlp.fc2.weight_scale"] = torch.ones(w.shape[0], w.shape[1] // 16)
    blob = json.dumps({"format": "nvfp4", "full_precision_matrix_mult": True}).encode()
    sd["blocks.0.mlp.fc2.comfy_quant"] = torch.tensor(list(blob), dtype=torch.uint8)
    path = save(sd, tmp_path / "q.safetensors")
    k = detect(path)
    assert k.quant == {"nvfp4": 1} and k.quant_tensors == {"blocks.0.mlp.fc2": "nvfp4"}
    with pytest.raises(CheckpointError, match=r"blocks\.0\.mlp\.fc2.*nvfp4.*not supported"):
        h3cy.DiT.from_pretrained(path)


@pytest.mark.parametrize("weights", ["fp32", "bf16"])
def test_curve_form_on_the_grid_equals_diffusers(tiny_dit_factory, tmp_path, weights):
    """A curve-form file whose table samples the model's own AdaLN input curve at full rank
    is the full model at grid timesteps."""
    t = tiny_dit_factory("a")
    path = save(_curvedit_state(t, _curve_table(t)), tmp_path / "curve.safetensors", COMFY_PREFIX)
    assert detect(path).adaln == "curve"
    inputs = packed_inputs(t.config, seed=13)
    inputs["timestep"] = np.array([896, 307], np.float32) / np.float32(GRID - 1)   # on the grid
    dit = h3cy.DiT.from_pretrained(path, weights=weights, threads=2)
    assert dit.config["adaln_curve_grid"] == GRID and dit.time_1 is None
    got_v, got_a = dit.forward(**inputs)
    if weights == "fp32":
        want_v, want_a = reference_forward(t.diffusers_bf16, torch.float32, inputs)
        # observed max-rel 5e-7 (the table row is the reference's own SiLU(temb)); reading
        # the row one grid step off gives 7e-4, a missing or extra SiLU O(1)
        assert_close(got_v, want_v, max_rel_tol=1e-4, what="video")
        assert_close(got_a, want_a, max_rel_tol=1e-4, what="audio")
    else:
        want = h3cy.DiT.from_pretrained(t.original, weights="bf16", threads=2).forward(**inputs)
        # bf16 mode: the curve's projections run in float32 on the bf16-rounded table row,
        # the full model's in bf16 on its bf16-rounded SiLU(temb): the same products; observed
        # identical on AVX2 (summation order may differ on other paths), a wrong row gives 7e-4
        assert_close(got_v, want[0], max_rel_tol=1e-5, what="video")
        assert_close(got_a, want[1], max_rel_tol=1e-5, what="audio")


def test_curve_form_between_grid_points_is_the_lerp(tiny_dit_factory, tmp_path):
    t = tiny_dit_factory("a")
    table = _curve_table(t, grid=17).numpy()
    path = save(_curvedit_state(t, torch.from_numpy(table)), tmp_path / "curve.safetensors")
    dit = h3cy.DiT.from_pretrained(path, weights="fp32", threads=2)
    from h3cy.weights.safetensors import SafetensorsFile
    with SafetensorsFile(path) as f:     # the curve file's projections are float32
        W = f.get("blocks.0.adaln_proj.linear.weight").astype(np.float64)
        b = f.get("blocks.0.adaln_proj.linear.bias").astype(np.float64)
    H = t.config["hidden_size"]
    for tv in (0.0, 0.3, 0.51, 0.999, 1.0, 1.7, -0.2):
        pos = min(max(tv, 0.0), 1.0) * 16
        i0 = min(int(np.floor(pos)), 15)
        c = table[i0] + (pos - i0) * (table[i0 + 1] - table[i0])
        m = (W @ c + b).reshape(3, 6, H)
        shift_msa = dit.adaln_tables(np.float32(tv))[0][0][0]
        np.testing.assert_allclose(shift_msa, m[:, 0], rtol=1e-5, atol=1e-6, err_msg=str(tv))
        np.testing.assert_allclose(adaln_curve_input(table, tv), c, rtol=1e-6, atol=1e-7)


def test_rank8_curve_file_as_published_loads_and_runs(tiny_dit_factory, tmp_path):
    """The published files' shape: an F32 [1025, 8] table and F16 rank-8 projections."""
    t = tiny_dit_factory("a")
    rng = np.random.default_rng(3)
    H, A = t.config["hidden_size"], 6 * 3 * t.config["hidden_size"]
    sd = {k: v for k, v in dit_state(t).items() if not k.startswith("time_embedder.")}
    sd["adaln_t_table"] = torch.from_numpy(rng.standard_normal((GRID, 8)).astype(np.float32))
    for k in [k for k in sd if k.endswith("adaln_proj.linear.weight")]:
        n = A if k.startswith("blocks.") else 2 * H
        sd[k] = torch.from_numpy((0.1 * rng.standard_normal((n, 8))).astype(np.float16))
        sd[k[:-len("weight")] + "bias"] = torch.from_numpy((0.1 * rng.standard_normal(n)).astype(np.float16))
    path = save(sd, tmp_path / "rank8.safetensors", COMFY_PREFIX)
    dit = h3cy.DiT.from_pretrained(path, weights="int8", threads=2)
    assert dit.config["time_embed_dim"] == 8
    inputs = packed_inputs(t.config, seed=14)
    v1, a1 = dit.forward(**inputs)
    inputs["timestep"] = inputs["timestep"] * np.float32(0.5)
    v2, _ = dit.forward(**inputs)
    assert_nontrivial(v1)
    assert np.all(np.isfinite(v1)) and np.all(np.isfinite(a1)) and not np.array_equal(v1, v2)


# -- the text encoder ----------------------------------------------------------------------
TE_IDS = [32, 2518, 38835, 11435, 1526, 11794]


@pytest.mark.parametrize("weights", ["bf16", "int8"])
def test_comfy_text_encoder_file_equals_the_folder(tiny_te, tmp_path, weights):
    path = text_encoder_file(tiny_te, tmp_path / "te.safetensors")
    k = detect(path)
    assert (k.component, k.naming) == ("text_encoder", "comfy")
    want = h3cy.TextEncoder.from_pretrained(tiny_te, weights=weights).encode(TE_IDS)
    enc = h3cy.TextEncoder.from_pretrained(path, weights=weights)
    assert enc.files == [path]
    assert np.array_equal(enc.encode(TE_IDS), want)


def test_comfy_text_encoder_file_errors_name_the_tensor(tiny_te, tmp_path):
    path = text_encoder_file(tiny_te, tmp_path / "a.safetensors", layers=40)
    with pytest.raises(CheckpointError, match="40 layers.*at least 50"):
        h3cy.TextEncoder.from_pretrained(path)
    path = text_encoder_file(tiny_te, tmp_path / "b.safetensors", drop=["model.layers.3.mlp.up_proj.weight"])
    with pytest.raises(CheckpointError, match=r"layers\.3\.mlp\.up_proj"):
        h3cy.TextEncoder.from_pretrained(path)
    with pytest.raises(CheckpointError, match="holds the transformer"):
        h3cy.TextEncoder.from_pretrained(save({"video_patch_proj.weight": torch.zeros(2, 2),
                                                "audio_patch_proj.weight": torch.zeros(2, 2)},
                                               tmp_path / "dit.safetensors"))


# -- the pipeline from files ---------------------------------------------------------------
def test_load_from_single_files_equals_the_folder(tiny_pipeline, tiny_dit_factory, tmp_path):
    """h3cy.load with ComfyUI's files: a folder with file overrides, or no folder at all
    (files and component folders only, the tokenizer from the package): the same video."""
    tp = tiny_pipeline
    dit = save(dit_state(tiny_dit_factory("p")), tmp_path / "dit.safetensors", COMFY_PREFIX)
    te = text_encoder_file(os.path.join(tp.diffusers, "text_encoder"), tmp_path / "te.safetensors")
    kw = dict(prompt="a red fox in the snow", width=W, height=H, frames=F, steps=2, output="latent", seed=3)
    # the release folder's transformer holds the same (bf16-mix) values as the Comfy file
    want = h3cy.load(tp.release, weights="fp32").generate(**kw)
    mixed = h3cy.load(tp.diffusers, weights="fp32", dit=dit, text_encoder=te)
    assert mixed.folder.paths["transformer"] == dit and mixed.folder.layout == "diffusers"
    only = h3cy.load(weights="fp32", dit=dit, text_encoder=te, video_vae=os.path.join(tp.diffusers, "vae"),
                     audio_vae=os.path.join(tp.diffusers, "audio_vae"))
    assert only.folder.layout == "files"
    for pipe in (mixed, only):
        got = pipe.generate(**kw)
        assert np.array_equal(got.video_latent, want.video_latent)
        assert np.array_equal(got.audio_latent, want.audio_latent)
    with pytest.raises(CheckpointError, match="missing component.*video_vae=FILE"):
        h3cy.load(dit=dit, text_encoder=te)
    with pytest.raises(CheckpointError, match="no such transformer file"):
        h3cy.load(tp.diffusers, dit=str(tmp_path / "nope.safetensors"))


def test_cli_generates_from_single_files(tiny_pipeline, tiny_dit_factory, tmp_path):
    tp = tiny_pipeline
    dit = save(dit_state(tiny_dit_factory("p")), tmp_path / "dit.safetensors")
    te = text_encoder_file(os.path.join(tp.diffusers, "text_encoder"), tmp_path / "te.safetensors")
    lat = tmp_path / "lat.npz"
    env = dict(os.environ, PYTHONPATH=os.pathsep.join(
        [os.path.dirname(os.path.dirname(h3cy.__file__)), os.environ.get("PYTHONPATH", "")]))
    r = subprocess.run([sys.executable, "-m", "h3cy", "generate", "--dit", dit, "--text-encoder", te,
                        "--video-vae", os.path.join(tp.diffusers, "vae"),
                        "--audio-vae", os.path.join(tp.diffusers, "audio_vae"), "-p", "A red fox",
                        "--width", "64", "--height", "64", "--steps", "2", "--weights", "fp32",
                        "--latent-out", str(lat), "-q"], capture_output=True, text=True, env=env, timeout=300)
    assert r.returncode == 0, r.stderr
    want = h3cy.load(tp.release, weights="fp32").generate(prompt="A red fox", width=64, height=64,
                                                           steps=2, output="latent")
    with np.load(lat) as z:
        assert np.array_equal(z["video_latent"], want.video_latent)
        assert np.array_equal(z["audio_latent"], want.audio_latent)


# -- the video VAE -------------------------------------------------------------------------
def test_comfy_video_vae_file_equals_the_folder(vae_released_head, tmp_path):
    vae = vae_released_head
    latent = np.random.default_rng(5).standard_normal((24, 7, 4, 6)).astype(np.float32)
    want = h3cy.VideoDecoder.from_pretrained(vae.original, weights="fp32").decode(latent)
    path = video_vae_file(vae, tmp_path / "vae.safetensors")
    assert detect(path).component == "video_vae"
    dec = h3cy.VideoDecoder.from_pretrained(path, weights="fp32")
    assert (dec.config["heads"], dec.config["num_layers"]) == (1, vae.config["decoder_num_layers"])
    assert np.array_equal(dec.decode(latent), want)
    # the published file is F16: the same decoder to half-precision weight rounding
    half = h3cy.VideoDecoder.from_pretrained(video_vae_file(vae, tmp_path / "vae16.safetensors", torch.float16),
                                             weights="fp32").decode(latent)
    # observed max |diff| 7e-4 of the [0, 1] pixel range; a wrong row order gives > 0.1
    assert np.max(np.abs(half - want)) < 2e-2


def test_comfy_video_vae_file_errors(tiny_vae, tmp_path):
    path = video_vae_file(tiny_vae, tmp_path / "vae.safetensors")      # head width 16, not the released 64
    with pytest.raises(CheckpointError, match="not a multiple of the released head_dim 64"):
        h3cy.VideoDecoder.from_pretrained(path)
    with pytest.raises(CheckpointError, match="holds the video_vae, not the transformer"):
        h3cy.DiT.from_pretrained(path)


# -- the audio VAE -------------------------------------------------------------------------
def test_comfy_audio_vae_file_matches_the_folder(tiny_pipeline, tmp_path):
    folder = os.path.join(tiny_pipeline.diffusers, "audio_vae")
    path = audio_vae_file(folder, tmp_path / "audio_vae.safetensors")
    assert detect(path).component == "audio_vae"
    C = json.load(open(os.path.join(folder, "config.json")))["latent_channels"]
    lat = np.random.default_rng(6).standard_normal((2, C, 9)).astype(np.float32)
    ref = h3cy.AudioDecoder.from_pretrained(folder)
    dec = h3cy.AudioDecoder.from_pretrained(path)
    for k in ("decoder_rates", "decoder_kernel_sizes", "resblock_kernel_sizes", "latent_dim", "decoder_dim"):
        assert dec.config[k] == ref.config[k], k
    # torch folds the weight norm in float32, h3cy in float64: observed max-rel ~1e-6;
    # a weight taken as v without g, or a missed stage, gives O(1)
    assert_close(dec.decode(lat), ref.decode(lat), max_rel_tol=1e-4, what="audio")


def test_every_component_from_a_single_file(comfy_files):
    """Four Comfy-Org files and the package's tokenizer make the same video and sound as the
    same components read from their folders."""
    kw = dict(prompt="a red fox in the snow", width=W, height=H, frames=F, steps=2, seed=3)
    want = h3cy.load(weights="bf16", **comfy_files["reference"]).generate(**kw)
    got = h3cy.load(weights="bf16", **{c: comfy_files[c] for c in ("dit", "text_encoder", "video_vae",
                                                                   "audio_vae")}).generate(**kw)
    assert np.array_equal(got.video_latent, want.video_latent)
    assert np.array_equal(got.frames, want.frames)
    # the audio decoder's weights are folded by torch in float32 here: observed max-rel ~1e-6
    assert_close(got.audio, want.audio, max_rel_tol=1e-4, what="audio")


def test_weights_auto_is_the_default_and_runs_float_files_int8(comfy_files):
    pipe = h3cy.load(dit=comfy_files["dit"], text_encoder=comfy_files["text_encoder"],
                     video_vae=comfy_files["video_vae"], audio_vae=comfy_files["audio_vae"])
    assert pipe.weights == "int8" and pipe.vae_weights == "fp32"
    # every component loader defaults to "auto": int8 for the transformer and the text
    # encoder, fp32 (as released) for the two decoders
    assert h3cy.DiT.from_pretrained(comfy_files["dit"]).weights == "int8"
    assert h3cy.TextEncoder.from_pretrained(comfy_files["text_encoder"]).weights == "int8"
    assert h3cy.VideoDecoder.from_pretrained(comfy_files["video_vae"]).weights == "fp32"
    assert h3cy.AudioDecoder.from_pretrained(comfy_files["audio_vae"]).weights == "fp32"
    assert h3cy.VideoDecoder.from_pretrained(comfy_files["video_vae"], weights="int8").weights == "int8"
    with pytest.raises(h3cy.H3Error, match="or 'auto'"):
        h3cy.DiT.from_pretrained(comfy_files["dit"], weights="int3")


def test_unaligned_and_truncated_single_files(tiny_dit_factory, tmp_path):
    """Some repacks put tensors at offsets that are no multiple of their element size: read
    correctly (an aligned copy per such tensor). A truncated file is a CheckpointError."""
    import struct
    t = tiny_dit_factory("a")
    path = save(dit_state(t), tmp_path / "aligned.safetensors")
    blob = open(path, "rb").read()
    (n,) = struct.unpack("<Q", blob[:8])
    hb = blob[8:8 + n].rstrip(b" ")
    hb += b" " * ((1 - (8 + len(hb))) % 8)          # the data section starts at an odd offset
    odd = tmp_path / "unaligned.safetensors"
    odd.write_bytes(struct.pack("<Q", len(hb)) + hb + blob[8 + n:])
    from h3cy.weights.safetensors import SafetensorsFile
    with SafetensorsFile(str(odd)) as f:
        assert all(i.offset % 2 == 1 for i in f.tensors.values())
    inputs = packed_inputs(t.config, seed=15)
    want = h3cy.DiT.from_pretrained(path, weights="bf16").forward(**inputs)
    got = h3cy.DiT.from_pretrained(str(odd), weights="bf16").forward(**inputs)
    for g, w in zip(got, want):
        assert np.array_equal(g, w)
    cut = tmp_path / "truncated.safetensors"
    cut.write_bytes(blob[:-100])
    with pytest.raises(CheckpointError, match="truncated.safetensors"):
        h3cy.DiT.from_pretrained(str(cut))
