"""The video VAE encoder at full size (the released MiniMaxH3VideoEncoder3d: levels 128, 256,
256, 512, 512, 1024, 2 resnets each, + quant_conv; 180M parameters), random weights: h3cy
fp32 beside diffusers' encoder on torch CPU fp32 (the baseline: the release pins the encoder
to fp32) and bf16 (the modules cast by hand, for scale), same input, same thread count.

The unit is one keyframe tile: a single 256x256 frame (the encoder's spatial path, one
256-px tile).  A 512x512 keyframe is 9 such tiles (256-px tiles, 64-px minimum overlap), a
768x1344 one 4 x 7 = 28; a 17-frame clip tile costs ~17 single-frame tiles at the first
levels.  H3CY_BENCH_ENC_SIZE changes the frame size (a multiple of 16, <= 256 for one tile).

torch's bf16 row is opt-in (H3CY_BENCH_TORCH_BF16=1): torch 2.13 has no fast CPU kernel for
bf16 Conv3d and falls back to its slow path, ~60x its fp32 time on this box (one 3x3x3
128->128 conv over a 32x32 frame: 0.19 s fp32, 11 s bf16, 2 threads, AMD EPYC Zen 1, loaded),
so the full-size row takes hours; it says nothing about h3cy.

    H3CY_BENCH_THREADS=2 pytest bench/test_bench_video_encoder.py --benchmark-json=bench/results/video_encoder_2threads.json
    python bench/report.py bench/results/video_encoder_2threads.json
"""
import json
import os

import numpy as np
import pytest

SIZE = int(os.environ.get("H3CY_BENCH_ENC_SIZE", "256"))
ROOT = os.environ.get("H3CY_BENCH_DIR", "/tmp/h3cy_bench_vae")
GROUP = f"video_encoder[1x{SIZE}x{SIZE}]"


@pytest.fixture(scope="module")
def models(torch_mod):
    """(folder, torch encoder, torch quant_conv): the full-size encoder with random weights,
    saved as a diffusers vae/ folder holding only the encoder tensors."""
    torch = torch_mod
    from diffusers.models.autoencoders.autoencoder_kl_minimax_h3 import MiniMaxH3VideoEncoder3d
    from safetensors.torch import save_file
    torch.manual_seed(0)
    enc = MiniMaxH3VideoEncoder3d(in_channels=3, out_channels=48).eval()
    qc = torch.nn.Conv3d(48, 48, kernel_size=1).eval()
    with torch.no_grad():       # norms away from their init, so a swapped scale/shift shows
        for n, p in enc.named_parameters():
            if "norm" in n:
                p.add_(0.1 * torch.randn(p.shape))
    folder = os.path.join(ROOT, "video_encoder_full")
    os.makedirs(folder, exist_ok=True)
    sd = {f"encoder.{k}": v.contiguous() for k, v in enc.state_dict().items()}
    sd.update({f"quant_conv.{k}": v.contiguous() for k, v in qc.state_dict().items()})
    save_file(sd, os.path.join(folder, "diffusion_pytorch_model.safetensors"))
    with open(os.path.join(folder, "config.json"), "w") as f:
        json.dump({"_class_name": "AutoencoderKLMiniMaxH3"}, f)
    return folder, enc, qc


def encoder_flop(size, levels=(128, 256, 256, 512, 512, 1024), spatial=(2, 2, 2, 2, 1, 1), per=2):
    """Multiply-adds x 2 of one frame through the encoder: a frame's causal 3x3x3 conv is
    one 3x3 tap (the others land on the zero frames), 2 * H * W * Cout * 9 * Cin."""
    f, h, cin = 0, size, 3

    def conv(h_out, ci, co, k=9):
        return 2 * h_out * h_out * co * k * ci
    f += conv(h, cin, levels[0])
    cin = levels[0]
    for co, s in zip(levels, spatial):
        for j in range(per):
            f += conv(h, cin, co) + conv(h, co, co) + (conv(h, cin, co, 1) if cin != co else 0)
            cin = co
        if s == 2:
            h = (h + 1) // 2
            f += conv(h, co, co)
    return f + conv(h, cin, 48) + conv(h, 48, 48, 1)


@pytest.fixture(scope="module")
def pixels():
    return np.random.default_rng(1).standard_normal((1, SIZE, SIZE, 3), dtype=np.float32)


def _torch_run(torch, enc, qc, x, dtype):
    e, q = enc, qc
    if dtype == "bf16":
        import copy
        e, q = copy.deepcopy(enc).to(torch.bfloat16), copy.deepcopy(qc).to(torch.bfloat16)
    xt = torch.from_numpy(x).permute(3, 0, 1, 2)[None].contiguous()
    if dtype == "bf16":
        xt = xt.to(torch.bfloat16)

    def run():
        with torch.no_grad():
            return q(e(xt))[0].float().permute(1, 2, 3, 0).numpy()
    return run


@pytest.fixture(scope="module")
def want(models, pixels, torch_mod):
    _, enc, qc = models
    return _torch_run(torch_mod, enc, qc, pixels, "fp32")()


def test_h3cy_video_encoder(benchmark, models, pixels, want, threads):
    import h3cy
    enc = h3cy.VideoEncoder.from_pretrained(models[0], threads=threads)
    x = np.ascontiguousarray(pixels)
    run = lambda: enc.moments(x).transpose(1, 2, 3, 0)  # noqa: E731  (T, h, w, 48) as torch's
    got = run()
    # agreement before timing: observed rel L2 ~1e-6 against torch fp32 (a wrong tap or pad: ~1)
    rel = float(np.linalg.norm(got - want) / np.linalg.norm(want))
    assert rel < 1e-4, rel
    benchmark.group = GROUP
    benchmark.extra_info.update(role="h3cy fp32", impl=f"h3cy fp32 ({enc.isa})", rel_l2=rel,
                                flop=encoder_flop(SIZE))
    benchmark.pedantic(run, rounds=2, warmup_rounds=0)


@pytest.mark.parametrize("dtype", ["fp32", "bf16"])
def test_diffusers_video_encoder(benchmark, models, pixels, want, dtype, torch_mod):
    if dtype == "bf16" and os.environ.get("H3CY_BENCH_TORCH_BF16") != "1":
        pytest.skip("torch bf16 Conv3d runs its slow CPU path (hours at full size): H3CY_BENCH_TORCH_BF16=1")
    _, enc, qc = models
    run = _torch_run(torch_mod, enc, qc, pixels, dtype)
    benchmark.group = GROUP
    benchmark.extra_info.update(role="baseline" if dtype == "fp32" else f"diffusers {dtype}",
                                impl=f"diffusers video encoder {dtype} (torch)", flop=encoder_flop(SIZE))
    benchmark.pedantic(run, rounds=2, warmup_rounds=1)
