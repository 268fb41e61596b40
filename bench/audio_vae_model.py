"""The full-size MiniMax-H3 audio VAE decoder with random weights (the released config:
decoder_dim 1024, rates 5,5,2,2,2,2,2, kernels 9,9,4,4,4,4,4, AMP kernels 3/7/11), shared by
bench/test_bench_audio_vae.py and bench/audio_vae_table.py.

``folder()`` writes (once, under H3CY_BENCH_DIR or the temp dir) an audio_vae folder with
the decoder tensors only (config.json + diffusion_pytorch_model.safetensors, ~260 MB fp32,
weight_g / weight_v and resampler filters as in the release); ``torch_model()`` loads the
same weights into diffusers' AutoencoderKLMiniMaxH3Audio (encoder left at its init)."""
import json
import os
import tempfile

import numpy as np

CONFIG = os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "tests", "data", "h3_schema",
                      "audio_vae", "config.json")   # the release's config (tests/data/h3_schema/SOURCE.md)
DEFAULT_CONFIG = dict(encoder_dim=64, encoder_rates=[2, 4, 4, 5, 5], latent_dim=2048, latent_channels=32,
                      num_attention_heads=8, decoder_dim=1024, decoder_rates=[5, 5, 2, 2, 2, 2, 2],
                      decoder_kernel_sizes=[9, 9, 4, 4, 4, 4, 4], resblock_kernel_sizes=[3, 7, 11],
                      resblock_dilation_sizes=[[1, 3, 5]] * 3, sampling_rate=32000)


def config():
    if os.path.isfile(CONFIG):
        with open(CONFIG) as f:
            return {k: v for k, v in json.load(f).items() if not k.startswith("_")}
    rng = np.random.default_rng(0)
    return dict(DEFAULT_CONFIG, latents_mean=list(rng.normal(0, 0.3, 32)),
                latents_std=list(rng.uniform(1.4, 3.3, 32)))


def folder():
    root = os.path.join(os.environ.get("H3CY_BENCH_DIR", tempfile.gettempdir()), "h3cy_bench_audio_vae")
    weights = os.path.join(root, "diffusion_pytorch_model.safetensors")
    if not os.path.isfile(weights):
        import torch
        from diffusers import AutoencoderKLMiniMaxH3Audio
        from safetensors.torch import save_file
        os.makedirs(root, exist_ok=True)
        torch.manual_seed(0)
        cfg = config()
        m = AutoencoderKLMiniMaxH3Audio(**cfg).eval()
        sd = {k: v.contiguous() for k, v in m.state_dict().items()
              if k.startswith("decoder.") or k.startswith("dec_in_proj.")}
        save_file(sd, weights + ".tmp")
        with open(os.path.join(root, "config.json"), "w") as f:
            json.dump(dict(cfg, _class_name="AutoencoderKLMiniMaxH3Audio"), f)
        os.replace(weights + ".tmp", weights)
    return root


def torch_model():
    import torch
    from diffusers import AutoencoderKLMiniMaxH3Audio
    from safetensors.torch import load_file
    path = folder()
    with open(os.path.join(path, "config.json")) as f:
        cfg = {k: v for k, v in json.load(f).items() if not k.startswith("_")}
    m = AutoencoderKLMiniMaxH3Audio(**cfg).eval()
    missing, unexpected = m.load_state_dict(load_file(os.path.join(path, "diffusion_pytorch_model.safetensors")),
                                            strict=False)
    assert not unexpected and all(not k.startswith(("decoder.", "dec_in_proj.")) for k in missing)
    return m


def latents(A, seed=0):
    return np.random.default_rng(seed).standard_normal((2, 32, A)).astype(np.float32)


def torch_decode(model, lat):
    """The pipeline's audio decode: de-normalise, decode, [2, 1, S] -> [2, S]."""
    import torch
    with torch.no_grad():
        mean = torch.tensor(model.config.latents_mean).view(1, -1, 1)
        std = torch.tensor(model.config.latents_std).view(1, -1, 1)
        return model.decode(torch.from_numpy(lat) * std + mean, return_dict=False)[0][:, 0].numpy()
