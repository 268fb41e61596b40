"""Tiny random MiniMax-H3 audio VAEs (diffusers ``AutoencoderKLMiniMaxH3Audio``) saved as
the loaders see them.

Each config keeps the real structure at small widths: several upsampling stages with
rates 5 and 2 (kernels 9 and 4, as released), three AMP blocks per stage with kernels
3 / 7 / 11 and dilations 1 / 3 / 5, weight-normed convolutions and the Kaiser-sinc
resampler buffers.  The random init is made less trivial than torch's: every
``weight_g`` is rescaled (so folding g / ||v|| matters) and the SnakeBeta ``alpha`` /
``beta`` (zeros at init) are drawn at random.

``build(cfg_name, root)`` writes

  diffusers/  save_pretrained: config.json + diffusion_pytorch_model.safetensors (float32,
              with decoder.*.weight_g / weight_v and *.upsample.filter /
              *.downsample.lowpass.filter, as in the release)
  release/    the FL2VA/audio_vae layout: the release's config.json (class
              MiniMaxH3AudioVAE; latent statistics, sample_rate and source_safetensors_path
              only) + model.safetensors with the same tensor names

and returns (model, folders).  ``reference_decode(model, latent)`` is the diffusers
pipeline's audio decode (de-normalise, decode, [2, 1, S] -> [2, S]) under torch.no_grad.
"""
import json
import os

import numpy as np

TINY_AUDIO_CONFIGS = {
    # hop 20: decoder 5 x 2 x 2 (kernels 9, 4, 4), encoder 2 x 2 x 5
    "a": dict(encoder_dim=4, encoder_rates=[2, 2, 5], latent_dim=16, latent_channels=8,
              num_attention_heads=2, decoder_dim=64, decoder_rates=[5, 2, 2],
              decoder_kernel_sizes=[9, 4, 4], resblock_kernel_sizes=[3, 7, 11],
              resblock_dilation_sizes=[[1, 3, 5], [1, 3, 5], [1, 3, 5]], sampling_rate=8000),
    # hop 40, 4 stages down to 4 channels (C = 4 exercises masked SIMD lanes everywhere)
    "b": dict(encoder_dim=4, encoder_rates=[2, 2, 2, 5], latent_dim=24, latent_channels=8,
              num_attention_heads=2, decoder_dim=64, decoder_rates=[2, 5, 2, 2],
              decoder_kernel_sizes=[4, 9, 4, 4], resblock_kernel_sizes=[3, 7, 11],
              resblock_dilation_sizes=[[1, 3, 5], [1, 3, 5], [1, 3, 5]], sampling_rate=16000),
}


def make_model(name, seed=0):
    import torch
    from diffusers import AutoencoderKLMiniMaxH3Audio
    cfg = dict(TINY_AUDIO_CONFIGS[name])
    rng = np.random.default_rng(seed)
    C = cfg["latent_channels"]
    cfg["latents_mean"] = [float(v) for v in rng.normal(0, 0.3, C)]
    cfg["latents_std"] = [float(v) for v in rng.uniform(0.8, 2.5, C)]
    torch.manual_seed(seed)
    model = AutoencoderKLMiniMaxH3Audio(**cfg).eval()
    with torch.no_grad():
        for pname, p in model.named_parameters():
            if pname.endswith("weight_g"):
                p.mul_(torch.empty_like(p).uniform_(0.5, 1.5))
            elif pname.endswith(".act.alpha") or pname.endswith(".act.beta"):
                p.normal_(0.0, 0.4)
        if name == "a":   # loud enough that the final clamp(-1, 1) engages
            model.decoder.conv_post.weight_g.mul_(4.0)
    return model


def build(name, root, seed=0):
    """Write both layouts of tiny config ``name`` under root; returns (model, folders)."""
    from safetensors.torch import save_file
    model = make_model(name, seed)
    dif = os.path.join(root, "diffusers")
    rel = os.path.join(root, "release")
    model.save_pretrained(dif)
    os.makedirs(rel, exist_ok=True)
    state = {k: v.detach().contiguous() for k, v in model.state_dict().items()}
    save_file(state, os.path.join(rel, "model.safetensors"))
    cfg = model.config
    with open(os.path.join(rel, "config.json"), "w") as f:
        json.dump({"_class_name": "MiniMaxH3AudioVAE", "output_channel": 2,
                   "sample_rate": cfg.sampling_rate, "source_config_path": "config.yaml",
                   "source_safetensors_path": "model.safetensors",
                   "latent_channels": cfg.latent_channels,
                   "latents_mean": list(cfg.latents_mean), "latents_std": list(cfg.latents_std)}, f)
    return model, {"diffusers": dif, "release": rel}


def reference_decode(model, latent):
    """The diffusers pipeline's audio decode of normalised latents [B, C, A] -> [B, S]."""
    import torch
    with torch.no_grad():
        lat = torch.from_numpy(np.ascontiguousarray(latent, dtype=np.float32))
        mean = torch.tensor(model.config.latents_mean).view(1, -1, 1)
        std = torch.tensor(model.config.latents_std).view(1, -1, 1)
        wave = model.decode(lat * std + mean, return_dict=False)[0]
    return wave[:, 0, :].float().numpy()
