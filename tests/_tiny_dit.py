"""Tiny random MiniMax-H3 transformers saved in every checkpoint layout h3cy reads.

For each config in TINY_CONFIGS (fixed seed) ``TinyDit`` holds the diffusers parameters and these
folders, each with its config.json:

  diffusers_fp32          save_pretrained, one diffusion_pytorch_model.safetensors, all float32
  diffusers_fp32_sharded  save_pretrained(max_shard_size=...), index + >= 2 shards
  diffusers_bf16          released dtype mix (float32 for diffusers' _keep_in_fp32_modules, bfloat16
                          elsewhere), as save_pretrained writes a model loaded with torch_dtype=bf16
  diffusers_allbf16       model.to(bfloat16).save_pretrained: every tensor bfloat16
  original                the release layout (FL2VA/transformer): original names, fused per-head
                          interleaved attn.qkv_proj, mlp.fc1 = [gate; value], rope.inv_freq, sharded
                          into 3 model-0000i-of-00003.safetensors + model.safetensors.index.json,
                          original config spelling; released dtype mix
  original_single         original names in one model.safetensors with stacked [q; k; v] qkv_proj
                          (the re-published single-file layout)

The original-layout state dicts are built by inverting diffusers'
``convert_minimax_h3_transformer_checkpoint_to_diffusers``; ``build`` checks the inversion by running
the converter forward and comparing every tensor bit for bit, and checks spec §4.2's row formula and
the SwiGLU half swap on one tensor element by element.

Tests use the session fixture ``tiny_dit_factory`` (tests/conftest.py)::

    def test_x(tiny_dit_factory):
        t = tiny_dit_factory("a")
"""
import copy
import json
import os
from dataclasses import dataclass, field

import numpy as np

TINY_CONFIGS = {
    # heads x head_dim, 6 * rope_freq_dim <= head_dim; hidden != inner in every config
    "a": dict(num_attention_heads=2, attention_head_dim=16, hidden_size=32, num_layers=1, num_refiner_layers=1,
              ffn_dim=48, in_channels=4, audio_in_channels=8, patch_size=[1, 2, 2], text_dim=24, freq_dim=16,
              time_embed_hidden_dim=40, time_embed_dim=20, rope_freq_dim=2),
    "b": dict(num_attention_heads=4, attention_head_dim=24, hidden_size=64, num_layers=3, num_refiner_layers=2,
              ffn_dim=96, in_channels=4, audio_in_channels=8, patch_size=[1, 2, 2], text_dim=40, freq_dim=32,
              time_embed_hidden_dim=48, time_embed_dim=24, rope_freq_dim=4),
    "c": dict(num_attention_heads=3, attention_head_dim=32, hidden_size=48, num_layers=2, num_refiner_layers=2,
              ffn_dim=40, in_channels=4, audio_in_channels=8, patch_size=[1, 2, 2], text_dim=32, freq_dim=16,
              time_embed_hidden_dim=32, time_embed_dim=16, rope_freq_dim=4),
    # the pipeline tests' transformer: real latent widths (24 video channels; 8 audio channels to
    # match the tiny audio VAE) and text_dim 64 to match the tiny text encoder
    "p": dict(num_attention_heads=2, attention_head_dim=16, hidden_size=32, num_layers=2, num_refiner_layers=1,
              ffn_dim=48, in_channels=24, audio_in_channels=8, patch_size=[1, 2, 2], text_dim=64, freq_dim=16,
              time_embed_hidden_dim=40, time_embed_dim=20, rope_freq_dim=2),
}
KEEP_FP32 = ("proj_in", "audio_proj_in", "time_embedder", "proj_out", "audio_proj_out", "rope")

# diffusers' rename dict, original -> diffusers (copied from the converter so the inverse below is
# checked against the real converter, not against itself)
_TOP_LEVEL = [  # (original prefix, diffusers prefix), matched at the start of the key
    ("video_patch_proj.", "proj_in."), ("audio_patch_proj.", "audio_proj_in."),
    ("condition_proj.", "context_embedder."), ("time_embedder.proj_in.", "time_embedder.linear_1."),
    ("time_embedder.proj_out.", "time_embedder.linear_2."), ("final_layer.norm.", "norm_out.norm."),
    ("final_layer.adaln_proj.linear.", "norm_out.linear."), ("final_layer.video_out.", "proj_out."),
    ("final_layer.audio_out.", "audio_proj_out."),
]
_IN_BLOCK = [(".attn.q_norm.", ".attn.norm_q."), (".attn.k_norm.", ".attn.norm_k."),
             (".attn.out_proj.", ".attn.to_out.0."), (".mlp.fc1.", ".ff.net.0.proj."), (".mlp.fc2.", ".ff.net.2.")]


def original_name(dname):
    """Original release key of a diffusers key (to_q/to_k/to_v all map to the fused qkv_proj)."""
    for o, d in _TOP_LEVEL:
        if dname.startswith(d):
            return o + dname[len(d):]
    if dname.startswith("transformer_blocks."):
        name = "blocks." + dname[len("transformer_blocks."):]
    elif dname.startswith("token_refiner.refiner_blocks."):
        name = "token_refiner.blocks." + dname[len("token_refiner.refiner_blocks."):]
    else:
        return dname  # token_refiner.final_norm.weight
    for o, d in _IN_BLOCK:
        name = name.replace(d, o)
    for p in ("q", "k", "v"):
        name = name.replace(f".attn.to_{p}.weight", ".attn.qkv_proj.weight")
    return name


def to_numpy(t):
    """torch tensor -> numpy, bf16 as uint16 bits (what h3cy returns)."""
    import torch
    t = t.detach().cpu().contiguous()
    if t.dtype == torch.bfloat16:
        return t.view(torch.int16).numpy().view(np.uint16).copy()
    return t.numpy().copy()


def original_state_dict(sd, config, qkv_layout="interleaved"):
    """Invert diffusers' converter: diffusers state dict (torch) -> original release state dict."""
    import torch
    heads, hd, F = config["num_attention_heads"], config["attention_head_dim"], config["ffn_dim"]
    out = {}
    for k, v in sd.items():
        if ".attn.to_k." in k or ".attn.to_v." in k:
            continue
        ok = original_name(k)
        if ".attn.to_q." in k:
            q, kk, vv = (sd[k.replace(".to_q.", f".to_{p}.")] for p in "qkv")
            if qkv_layout == "interleaved":
                v = torch.stack([x.reshape(heads, hd, -1) for x in (q, kk, vv)], dim=1).reshape(3 * heads * hd, -1)
            else:
                v = torch.cat([q, kk, vv], dim=0)
        elif ".ff.net.0.proj." in k:
            value, gate = v[:F], v[F:]           # diffusers SwiGLU reads [value; gate]
            v = torch.cat([gate, value], dim=0)  # the original fc1 is [gate; value]
        out[ok] = v.contiguous().clone()
    rfd = config["rope_freq_dim"]
    out["rope.inv_freq"] = 1.0 / (config.get("rope_theta", 10000.0) ** (
        torch.arange(0, 2 * rfd, 2, dtype=torch.float32) / (2 * rfd)))
    return out


def original_config(config):
    """Original-spelling config.json (as FL2VA/transformer/config.json), no rope_theta."""
    c = config
    return {
        "_class_name": "MiniMaxH3DiTModel", "_diffusers_version": "0.32.2",
        "hidden_size": c["hidden_size"], "num_layers": c["num_layers"],
        "token_refiner_num_layers": c["num_refiner_layers"], "num_attention_heads": c["num_attention_heads"],
        "attention_head_dim": c["attention_head_dim"], "ffn_hidden_size": c["ffn_dim"],
        "latents_dim": c["in_channels"], "audio_latents_dim": c["audio_in_channels"],
        "patch_size": list(c["patch_size"]), "text_dim": c["text_dim"], "timestep_input_dim": c["freq_dim"],
        "time_embed_hidden_size": c["time_embed_hidden_dim"], "time_embed_dim": c["time_embed_dim"],
        "adaln_out_features": 18 * c["hidden_size"], "final_adaln_out_features": 2 * c["hidden_size"],
        "rope_inv_freq_len": c["rope_freq_dim"], "norm_eps": 1e-5, "qk_norm_eps": 1e-5, "final_norm_eps": 1e-5,
    }


def write_original(folder, osd, config, shards):
    """Write an original-layout folder: ``shards`` files (+ index when > 1) and the original config."""
    from safetensors.torch import save_file
    os.makedirs(folder, exist_ok=True)
    with open(os.path.join(folder, "config.json"), "w") as f:
        json.dump(original_config(config), f, indent=2)
    keys = list(osd)
    if shards == 1:
        save_file(osd, os.path.join(folder, "model.safetensors"), metadata={"format": "pt"})
        return
    weight_map, total = {}, 0
    for i in range(shards):
        name = f"model-{i + 1:05d}-of-{shards:05d}.safetensors"
        part = {k: osd[k] for k in keys[i::shards]}       # interleave so blocks straddle shards
        save_file(part, os.path.join(folder, name), metadata={"format": "pt"})
        for k, v in part.items():
            weight_map[k] = name
            total += v.numel() * v.element_size()
    with open(os.path.join(folder, "model.safetensors.index.json"), "w") as f:
        json.dump({"metadata": {"total_size": total}, "weight_map": dict(sorted(weight_map.items()))}, f, indent=2)


@dataclass
class TinyDit:
    name: str
    config: dict                                   # diffusers config kwargs
    params: dict = field(default_factory=dict)     # diffusers name -> float32 ndarray
    params_bf16: dict = field(default_factory=dict)  # released mix: float32 or uint16 (bf16 bits)
    params_allbf16: dict = field(default_factory=dict)
    diffusers_fp32: str = ""
    diffusers_fp32_sharded: str = ""
    diffusers_bf16: str = ""
    diffusers_allbf16: str = ""
    original: str = ""
    original_single: str = ""


def _keep(name):
    return any(m in name.split(".") for m in KEEP_FP32)


def random_model(cfg, seed):
    """diffusers' MiniMaxH3Transformer3DModel(**cfg) in eval mode with every parameter drawn
    from N(0, 0.5^2) (norm weights too, so swaps and slices are visible), seeded."""
    import torch
    from diffusers import MiniMaxH3Transformer3DModel
    torch.manual_seed(seed)
    model = MiniMaxH3Transformer3DModel(**cfg).eval()
    with torch.no_grad():
        for p in model.parameters():
            p.copy_(torch.randn_like(p) * 0.5)
    return model


def build(name, root):
    """Build every folder of config ``name`` under ``root`` and check the layout inversion."""
    import torch
    from diffusers import MiniMaxH3Transformer3DModel
    from diffusers.loaders.single_file_utils import convert_minimax_h3_transformer_checkpoint_to_diffusers

    cfg = TINY_CONFIGS[name]
    model = random_model(cfg, 1000 + ord(name))
    t = TinyDit(name, dict(cfg))
    t.params = {k: to_numpy(v) for k, v in model.state_dict().items()}

    t.diffusers_fp32 = os.path.join(root, "diffusers_fp32")
    model.save_pretrained(t.diffusers_fp32)
    t.diffusers_fp32_sharded = os.path.join(root, "diffusers_fp32_sharded")
    total = sum(v.nbytes for v in t.params.values())
    model.save_pretrained(t.diffusers_fp32_sharded, max_shard_size=max(total // 3, 4096))

    # released mix: what from_pretrained(torch_dtype=bf16) holds (keep-in-fp32 modules, matched per
    # dotted component, stay float32 with their original values)
    mixed = copy.deepcopy(model)
    for pname, p in mixed.named_parameters():
        if not _keep(pname):
            p.data = p.data.to(torch.bfloat16)
    t.diffusers_bf16 = os.path.join(root, "diffusers_bf16")
    mixed.save_pretrained(t.diffusers_bf16)
    msd = mixed.state_dict()
    # the emulation above is what diffusers itself does when loading with torch_dtype=bfloat16
    loaded = MiniMaxH3Transformer3DModel.from_pretrained(t.diffusers_fp32, torch_dtype=torch.bfloat16).state_dict()
    assert set(loaded) == set(msd)
    for k, v in msd.items():
        assert loaded[k].dtype == v.dtype and torch.equal(loaded[k], v), k
    t.params_bf16 = {k: to_numpy(v) for k, v in msd.items()}

    allbf16 = copy.deepcopy(model)   # model.to(bf16), without diffusers' keep-in-fp32 warning
    for p in allbf16.parameters():
        p.data = p.data.to(torch.bfloat16)
    t.diffusers_allbf16 = os.path.join(root, "diffusers_allbf16")
    allbf16.save_pretrained(t.diffusers_allbf16)
    t.params_allbf16 = {k: to_numpy(v) for k, v in allbf16.state_dict().items()}

    # the release layout, checked by converting back with diffusers' own converter
    for layout, shards, attr in (("interleaved", 3, "original"), ("stacked", 1, "original_single")):
        osd = original_state_dict(msd, cfg, layout)
        back = convert_minimax_h3_transformer_checkpoint_to_diffusers(
            {k: v.clone() for k, v in osd.items()}, config=cfg, qkv_layout=layout)
        assert set(back) == set(msd), set(back) ^ set(msd)
        for k, v in msd.items():
            assert back[k].dtype == v.dtype and torch.equal(back[k], v), k
        folder = os.path.join(root, attr)
        write_original(folder, osd, cfg, shards)
        setattr(t, attr, folder)
        if layout == "interleaved":
            _check_row_formula(osd, msd, cfg)
    return t


def _check_row_formula(osd, msd, cfg):
    """Spec §4.2 by hand on block 0: qkv row h*3D + part*D + d is to_<part> row h*D + d; fc1 = [gate; value]."""
    heads, D, F = cfg["num_attention_heads"], cfg["attention_head_dim"], cfg["ffn_dim"]
    qkv = to_numpy(osd["blocks.0.attn.qkv_proj.weight"])
    parts = [to_numpy(msd[f"transformer_blocks.0.attn.to_{p}.weight"]) for p in "qkv"]
    for r in range(qkv.shape[0]):
        h, part, d = r // (3 * D), (r % (3 * D)) // D, r % D
        assert np.array_equal(qkv[r], parts[part][h * D + d]), r
    fc1 = to_numpy(osd["blocks.0.mlp.fc1.weight"])
    proj = to_numpy(msd["transformer_blocks.0.ff.net.0.proj.weight"])
    assert np.array_equal(fc1[:F], proj[F:])   # gate
    assert np.array_equal(fc1[F:], proj[:F])   # value
    assert not np.array_equal(fc1, proj)


# the 8-block model of the streaming memory tests (~5.8 MB of bf16 weights a block)
MEDIUM_STREAMING_CONFIG = dict(num_attention_heads=4, attention_head_dim=64, hidden_size=512, num_layers=8,
                               num_refiner_layers=1, ffn_dim=1536, in_channels=4, audio_in_channels=8,
                               patch_size=[1, 2, 2], text_dim=64, freq_dim=32, time_embed_hidden_dim=64,
                               time_embed_dim=32, rope_freq_dim=4)


def write_medium_streaming_model(folder):
    """Write MEDIUM_STREAMING_CONFIG's random model in the release layout (every bf16 weight
    maps zero-copy, so streaming can page it) into ``folder``; returns the config."""
    import torch
    from diffusers import MiniMaxH3Transformer3DModel
    cfg = dict(MEDIUM_STREAMING_CONFIG)
    torch.manual_seed(0)
    m = MiniMaxH3Transformer3DModel(**cfg).eval()
    for n, p in m.named_parameters():
        if not any(k in n.split(".") for k in ("proj_in", "audio_proj_in", "time_embedder",
                                                 "proj_out", "audio_proj_out")):
            p.data = p.data.to(torch.bfloat16)
    write_original(folder, original_state_dict(m.state_dict(), cfg, "interleaved"), cfg, shards=2)
    return cfg
