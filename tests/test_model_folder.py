"""Model-folder discovery (both layouts), component sizes from headers, and `h3cy info`'s
answers on incomplete or wrong folders."""
import json
import os
import subprocess
import sys

import numpy as np
import pytest

from h3cy import CheckpointError
from h3cy.weights.st_write import save_file
from h3cy.weights.model_folder import find_model


def _component(d, tensors, config=None, bf16=()):
    os.makedirs(d, exist_ok=True)
    with open(os.path.join(d, "config.json"), "w") as f:
        json.dump(config or {}, f)
    save_file(os.path.join(d, "model.safetensors"), tensors, bf16=bf16)


def _tokenizer(d):
    os.makedirs(d, exist_ok=True)
    for n in ("vocab.json", "merges.txt", "tokenizer_config.json"):
        with open(os.path.join(d, n), "w") as f:
            f.write("{}" if n.endswith(".json") else "")


def _release(root, skip=()):
    fl = os.path.join(root, "FL2VA")
    z = np.zeros
    parts = {
        "text_encoder": {"model.language_model.embed_tokens.weight": z((10, 4), np.float32),
                         "model.language_model.layers.0.mlp.up_proj.weight": z((8, 4), np.float32),
                         "model.language_model.layers.60.mlp.up_proj.weight": z((8, 4), np.float32)},
        "transformer": {"blocks.0.mlp.fc2.weight": z((4, 6), np.float32)},
        "video_vae": {"decoder.proj_out.weight": z((6, 4), np.float32),
                      "encoder.conv.weight": z((100, 4), np.float32)},
        "audio_vae": {"decoder.conv_post.weight_v": z((1, 8, 7), np.float32)},
    }
    for c, t in parts.items():
        if c not in skip:
            _component(os.path.join(fl, c), t, {"text_config": {"hidden_size": 4}} if c == "text_encoder" else {})
    if "tokenizer" not in skip:
        _tokenizer(os.path.join(fl, "tokenizer"))
    with open(os.path.join(fl, "model_index.json"), "w") as f:
        json.dump({"video_vae": ["diffusers", "MiniMaxH3VideoVAE"]}, f)
    return fl


def test_release_root_and_fl2va_folder(tmp_path):
    fl = _release(tmp_path)
    for p in (tmp_path, fl):
        mf = find_model(p)
        assert mf.layout == "release" and mf.root == fl and mf.missing == []
        assert mf.paths["video_vae"].endswith("video_vae")
    s = find_model(tmp_path).sizes()
    # text layers >= 50 and the VAE encoder are not counted: t2va never reads them
    assert s["text_encoder"]["params"] == 10 * 4 + 8 * 4
    assert s["video_vae"]["params"] == 24
    assert s["audio_vae"]["params"] == 56


def test_diffusers_layout(tmp_path):
    for c, sub in (("transformer", "transformer"), ("text_encoder", "text_encoder"), ("vae", "vae"),
                   ("audio_vae", "audio_vae")):
        _component(tmp_path / sub, {"w": np.zeros((2, 2), np.float32)})
    _tokenizer(tmp_path / "tokenizer")
    (tmp_path / "model_index.json").write_text(json.dumps({"vae": ["diffusers", "AutoencoderKLMiniMaxH3"]}))
    mf = find_model(tmp_path)
    assert mf.layout == "diffusers" and mf.missing == []
    assert mf.paths["video_vae"] == os.path.join(str(tmp_path), "vae")


def test_missing_component_is_named(tmp_path):
    _release(tmp_path, skip=("audio_vae",))
    mf = find_model(tmp_path)
    assert mf.missing == ["audio_vae"]
    with pytest.raises(CheckpointError, match="audio_vae"):
        mf.require()


def test_not_a_model_folder(tmp_path):
    with pytest.raises(CheckpointError, match="no such model folder"):
        find_model(tmp_path / "nope")
    (tmp_path / "x").mkdir()
    with pytest.raises(CheckpointError, match="not a MiniMax-H3 model folder"):
        find_model(tmp_path / "x")


def _cli(*args):
    return subprocess.run([sys.executable, "-m", "h3cy.cli", *args], capture_output=True, text=True,
                          timeout=120)


def test_info_names_a_missing_component(tmp_path):
    _release(tmp_path, skip=("video_vae",))
    r = _cli("info", str(tmp_path))
    assert r.returncode == 1
    assert "video_vae" in r.stdout and "MISSING" in r.stdout


def test_info_on_a_complete_folder_recommends_a_mode(tmp_path):
    _release(tmp_path)
    r = _cli("info", str(tmp_path))
    assert r.returncode == 0, r.stderr
    assert "layout  : release" in r.stdout and "recommended: --weights" in r.stdout


def test_bad_model_path_is_one_line_and_exit_2(tmp_path):
    for cmd in (["info", str(tmp_path / "missing")],
                ["generate", "-m", str(tmp_path / "missing"), "-p", "x", "-o", str(tmp_path / "o.mp4")]):
        r = _cli(*cmd)
        assert r.returncode == 2, (cmd, r.stderr)
        lines = [line for line in r.stderr.splitlines() if line.strip()]
        assert len(lines) == 1 and lines[0].startswith("h3cy: error:"), r.stderr


def test_transformer_fp32_and_bf16_cost_what_the_matrices_cost_on_disk(tmp_path):
    """The DiT multiplies bf16/fp32 checkpoint tensors in place (fp32 mode widens bf16 in
    the kernel): over a bf16 checkpoint both modes need 2 bytes per matrix parameter; over
    a float32 one fp32 needs 4 and bf16 (converted) 2; int8 ~1 either way."""
    from h3cy.ops.bf16 import f32_to_bf16_bits
    fl = _release(tmp_path)
    tr = os.path.join(fl, "transformer")
    for name in os.listdir(tr):
        os.remove(os.path.join(tr, name))
    w = np.ones((64, 32), np.float32)
    _component(tr, {"blocks.0.mlp.fc2.weight": f32_to_bf16_bits(w), "norm.weight": np.ones(32, np.float32)},
               bf16=("blocks.0.mlp.fc2.weight",))
    mf = find_model(tmp_path)
    other = 32 * 4
    assert mf.resident_bytes("transformer", "fp32") == 64 * 32 * 2 + other
    assert mf.resident_bytes("transformer", "bf16") == 64 * 32 * 2 + other
    assert mf.resident_bytes("transformer", "int8") < 64 * 32 * 1.1 + other
    _component(tr, {"blocks.0.mlp.fc2.weight": w, "norm.weight": np.ones(32, np.float32)})
    mf = find_model(tmp_path)
    assert mf.resident_bytes("transformer", "fp32") == 64 * 32 * 4 + other
    assert mf.resident_bytes("transformer", "bf16") == 64 * 32 * 2 + other
