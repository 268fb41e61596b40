"""The full-size audio VAE decoder (random weights, the released architecture) decoding
1 s of stereo audio (A = 40 latents; H3CY_BENCH_AUDIO_A for others): h3cy fp32 / bf16 /
int8 beside diffusers' AutoencoderKLMiniMaxH3Audio.decode on torch CPU fp32 (the
baseline), same thread count, same latents; outputs are checked against torch first.
Seconds and peak RSS for 1 s and 10 s are in bench/audio_vae_table.py (fresh process
per row).

    pytest bench/test_bench_audio_vae.py --benchmark-json=bench/results/audio_vae_2threads.json
    python bench/report.py bench/results/audio_vae_2threads.json
"""
import os

import numpy as np
import pytest

import h3cy

from audio_vae_model import folder, latents, torch_decode, torch_model

LENGTHS = [int(a) for a in os.environ.get("H3CY_BENCH_AUDIO_A", "40").split(",")]
MODES = os.environ.get("H3CY_BENCH_MODES", "fp32,bf16,int8").split(",")
_cache = {}


def reference(torch_mod, A):
    if ("torch", A) not in _cache:
        _cache["torch_model"] = _cache.get("torch_model") or torch_model()
        _cache["torch", A] = torch_decode(_cache["torch_model"], latents(A))
    return _cache["torch", A]


@pytest.mark.parametrize("A", LENGTHS)
def test_torch_decode(benchmark, torch_mod, A, threads):
    benchmark.group = f"audio_vae_decode[A={A}]"
    benchmark.extra_info.update(role="baseline", impl="diffusers torch fp32")
    reference(torch_mod, A)
    model, lat = _cache["torch_model"], latents(A)
    benchmark.pedantic(torch_decode, args=(model, lat), rounds=1, iterations=1)


@pytest.mark.parametrize("A", LENGTHS)
@pytest.mark.parametrize("mode", MODES)
def test_h3cy_decode(benchmark, torch_mod, A, mode, threads):
    benchmark.group = f"audio_vae_decode[A={A}]"
    benchmark.extra_info.update(role=mode, impl=f"h3cy {mode}")
    dec = h3cy.AudioDecoder.from_pretrained(folder(), weights=mode, threads=threads)
    lat = latents(A)
    got = dec.decode(lat)
    want = reference(torch_mod, A)
    err = float(np.abs(got - want).max() / np.abs(want).max())
    benchmark.extra_info["max_rel_vs_torch"] = err
    assert err <= (1e-4 if mode == "fp32" else 0.1)
    benchmark.pedantic(dec.decode, args=(lat,), rounds=3, iterations=1)
