"""Tiny random MiniMax-H3 video VAEs (``AutoencoderKLMiniMaxH3``) saved in both layouts h3cy reads.

The released geometry is kept where the decoder's tiling and chunking depend on it (24 latent
channels, spatial x16, temporal x4, clip_length 17, token_drop 3, rope_dim_ratio 0.75, 256-px tiles);
the widths are tiny (hidden 32 = 2 heads x 16, so 12 of 16 channels rotate) and the encoder is a
4-level 8-channel toy.  Every parameter is random (``scale1``/``scale2`` are zero at init, which would
make the blocks no-ops), so swapped halves or rows show up in the output.

Folders (``TinyVae`` attributes):

  diffusers     save_pretrained: config.json + diffusion_pytorch_model.safetensors (float32)
  original      the release layout (FL2VA/video_vae): wrapper config.json (latents_mean/std, tiling),
                source/config.json (vit_decoder_kwargs ...), source/model.safetensors with original names:
                decoder.x_embedder, fused per-head-interleaved attn.to_qkv, attn.to_out, ff.w1 = [gate; up],
                ff.w2, encoder CompVis names, and the unused decoder.mask_token

diffusers' video-VAE converter lives in its repository's scripts/, not in the wheel, so the inversion is
checked against the spec's row formula (§6.2: fused row r -> head r // 3D, part (r % 3D) // D) and the
[gate; up] swap element by element instead of by running the converter.
"""
import json
import os
from dataclasses import dataclass

import numpy as np

LATENTS_MEAN = [0.858090341091156, -0.9606591463088989, 1.0661640167236328, -0.5090325474739075,
                -0.2727581858634949, -1.3675414323806763, -0.2553254961967468, -0.26907554268836975,
                -0.5376840829849243, -0.0464097298681736, 0.6657370328903198, 0.19690127670764923,
                -0.5460608005523682, -0.4035342037677765, -0.23683024942874908, 0.25928452610969543,
                -0.30133944749832153, 0.211341992020607, -1.1206848621368408, 0.3581933379173279,
                -0.04225143790245056, 0.2604829967021942, 0.22864092886447906, 0.7056031823158264]
LATENTS_STD = [1.2223774194717407, 1.2767263650894165, 1.6831774711608887, 1.7549455165863037,
               1.5636216402053833, 2.194143533706665, 0.9653137922286987, 1.0569885969161987,
               0.841948926448822, 0.7729952931404114, 1.8955937623977661, 0.946841835975647,
               0.7996809482574463, 0.44988900423049927, 0.7197399735450745, 0.6936293244361877,
               2.961095094680786, 2.7694199085235596, 3.0496184825897217, 2.1088054180145264,
               3.276226282119751, 3.1627357006073, 2.2816812992095947, 2.6127843856811523]

TINY_VAE = dict(block_out_channels=[8, 8, 8, 8], layers_per_block=1, spatial_downsample_factors=[2, 2, 2, 2],
                temporal_downsample_factors=[1, 2, 2, 1], norm_num_groups=4, decoder_num_layers=2,
                decoder_num_attention_heads=2, decoder_attention_head_dim=16, decoder_ffn_mult=4,
                latents_mean=LATENTS_MEAN, latents_std=LATENTS_STD)


@dataclass
class TinyVae:
    config: dict
    diffusers: str
    original: str


def _randomise(model, torch):
    """Random values of a sensible scale for each kind of parameter."""
    g = torch.Generator().manual_seed(20260)
    with torch.no_grad():
        for name, p in model.named_parameters():
            r = torch.randn(p.shape, generator=g)
            if name.endswith("scale1") or name.endswith("scale2"):
                p.copy_(r * 0.5)
            elif "norm" in name and name.endswith("weight"):
                p.copy_(1.0 + 0.2 * r)
            elif name.endswith("bias"):
                p.copy_(0.1 * r)
            elif name.endswith("register_tokens"):
                p.copy_(r)
            else:
                fan_in = int(np.prod(p.shape[1:])) if p.ndim > 1 else 1
                p.copy_(r / np.sqrt(fan_in))


def original_name(dname):
    """Original release key of a diffusers key (to_q/to_k/to_v all map to the fused to_qkv)."""
    name = dname
    if name.startswith("encoder.down_blocks."):
        level, rest = name[len("encoder.down_blocks."):].split(".", 1)
        rest = rest.replace("resnets.", "block.", 1).replace("conv_shortcut.", "nin_shortcut.", 1)
        rest = rest.replace("downsamplers.0.", "downsample.", 1)
        name = f"encoder.down.{level}.{rest}"
    name = name.replace("decoder.proj_in.", "decoder.x_embedder.")
    name = name.replace(".attn.to_out.0.", ".attn.to_out.")
    name = name.replace(".ff.net.0.proj.", ".ff.w1.").replace(".ff.net.2.", ".ff.w2.")
    for p in "qkv":
        name = name.replace(f".attn.to_{p}.", ".attn.to_qkv.")
    return name


def original_state_dict(sd, heads, head_dim):
    """diffusers state dict (torch) -> original release state dict (torch)."""
    import torch
    out = {}
    for k, v in sd.items():
        if ".attn.to_k." in k or ".attn.to_v." in k:
            continue
        ok = original_name(k)
        if ".attn.to_q." in k:
            q, kk, vv = (sd[k.replace(".to_q.", f".to_{p}.")] for p in "qkv")
            tail = q.shape[1:]
            v = torch.stack([x.reshape(heads, head_dim, *tail) for x in (q, kk, vv)], dim=1)
            v = v.reshape(3 * heads * head_dim, *tail)
        elif ".ff.net.0.proj." in k:
            up, gate = v.chunk(2, dim=0)           # diffusers SwiGLU reads [up; gate]
            v = torch.cat([gate, up], dim=0)       # the original w1 is [gate; up]
        out[ok] = v.contiguous().clone()
    out["decoder.mask_token"] = torch.zeros(1, 1, sd["decoder.proj_in.weight"].shape[0])
    return out


def _check_row_formula(osd, sd, heads, D):
    """Spec §6.2 by hand on block 0: fused row r is to_<(r % 3D) // D> row (r // 3D)·D + r % D;
    w1 = [gate; up] where diffusers' net.0.proj = [up; gate]."""
    for suffix in ("weight", "bias"):
        fused = osd[f"decoder.transformer_blocks.0.attn.to_qkv.{suffix}"].numpy()
        parts = [sd[f"decoder.transformer_blocks.0.attn.to_{p}.{suffix}"].numpy() for p in "qkv"]
        for r in range(fused.shape[0]):
            h, part, d = r // (3 * D), (r % (3 * D)) // D, r % D
            assert np.array_equal(fused[r], parts[part][h * D + d]), (suffix, r)
        w1 = osd[f"decoder.transformer_blocks.0.ff.w1.{suffix}"].numpy()
        proj = sd[f"decoder.transformer_blocks.0.ff.net.0.proj.{suffix}"].numpy()
        F = w1.shape[0] // 2
        assert np.array_equal(w1[:F], proj[F:]) and np.array_equal(w1[F:], proj[:F])
        assert not np.array_equal(w1, proj)


def build(root, **overrides):
    """The tiny VAE (TINY_VAE, with ``overrides`` of its keys) in both layouts under root."""
    import torch
    from diffusers import AutoencoderKLMiniMaxH3
    from safetensors.torch import save_file

    cfg = dict(TINY_VAE, **overrides)
    torch.manual_seed(0)
    model = AutoencoderKLMiniMaxH3(**cfg).eval()
    _randomise(model, torch)
    diff = os.path.join(root, "diffusers")
    model.save_pretrained(diff)
    sd = model.state_dict()
    heads, D = cfg["decoder_num_attention_heads"], cfg["decoder_attention_head_dim"]
    osd = original_state_dict(sd, heads, D)
    _check_row_formula(osd, sd, heads, D)
    orig = os.path.join(root, "original")
    os.makedirs(os.path.join(orig, "source"))
    save_file(osd, os.path.join(orig, "source", "model.safetensors"), metadata={"format": "pt"})
    with open(os.path.join(orig, "config.json"), "w") as f:
        json.dump({"_class_name": "MiniMaxH3VideoVAE", "source_path": "source",
                   "source_safetensors_path": "model.safetensors", "vae_clip_length": 17, "vae_token_drop": 3,
                   "vae_tile_size": 256, "vae_tile_overlap_min": 64, "latent_channels": 24,
                   "latents_mean": LATENTS_MEAN, "latents_std": LATENTS_STD}, f, indent=2)
    with open(os.path.join(orig, "source", "config.json"), "w") as f:
        json.dump({"z_channels": 24, "out_ch": 3, "space_down": cfg["spatial_downsample_factors"],
                   "time_down": cfg["temporal_downsample_factors"],
                   "vit_decoder_kwargs": {"num_layers": cfg["decoder_num_layers"], "heads": heads,
                                          "dim_head": D, "rope_theta": 100.0, "rope_dim_ratio": 0.75,
                                          "norm_type": "rms_norm", "qk_norm_type": "rms_norm",
                                          "qk_norm_affine": False, "ffn_activation_fn": "silu",
                                          "ffn_use_gated": True}}, f, indent=2)
    return TinyVae(cfg, diff, orig)


def reference_decode(folder, latent, dtype="fp32", tiling=True):
    """diffusers: de-normalise, vae.decode, to [0, 1] pixels -> (F, H, W, 3) float32 numpy."""
    import torch
    from diffusers import AutoencoderKLMiniMaxH3
    td = torch.bfloat16 if dtype == "bf16" else torch.float32
    vae = AutoencoderKLMiniMaxH3.from_pretrained(folder, torch_dtype=td).eval()
    if not tiling:
        vae.disable_tiling()
    z = torch.from_numpy(np.ascontiguousarray(latent, np.float32))[None]
    mean = torch.tensor(vae.config.latents_mean).view(1, -1, 1, 1, 1)
    std = torch.tensor(vae.config.latents_std).view(1, -1, 1, 1, 1)
    with torch.no_grad():
        video = vae.decode(z * std + mean, return_dict=False)[0]
    pm = torch.tensor([0.485, 0.456, 0.406]).view(1, -1, 1, 1, 1)
    ps = torch.tensor([0.229, 0.224, 0.225]).view(1, -1, 1, 1, 1)
    video = (video.float() * ps + pm).clamp(0, 1)
    return video[0].permute(1, 2, 3, 0).contiguous().numpy()


# The encodable tiny VAE: widths h3cy's encoder tests use, and GroupNorm groups that divide
# them (the released 32 do not divide 8); test_video_encoder.py and the fl2va tests share it.
ENC_LEVELS, ENC_GROUPS = [8, 16, 16, 24], 4
_plain_build = build     # the fl2va tests monkeypatch build() with build_encodable


def build_encodable(root):
    """build() with ENC_LEVELS / ENC_GROUPS, the original layout's source config naming the
    groups too (h3cy reads them there)."""
    tv = _plain_build(root, block_out_channels=ENC_LEVELS, norm_num_groups=ENC_GROUPS)
    spath = os.path.join(tv.original, "source", "config.json")
    with open(spath) as f:
        src = json.load(f)
    src["norm_num_groups"] = ENC_GROUPS
    with open(spath, "w") as f:
        json.dump(src, f)
    return tv
