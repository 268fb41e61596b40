"""One full-size ViT decoder block of the video VAE (dim 2048, 32 heads x 64, FFN 8192, 1797
tokens = one 256-px tile of a 7-latent clip), random weights: h3cy fp32 / bf16 / int8 beside
diffusers' MiniMaxH3VideoTransformerBlock on torch fp32 (the baseline) and bf16, same inputs.
x324 = a 512x512x22 decode (9 tiles x 1 clip x 36 blocks).  The table with extrapolation and
the peak-RSS runs: bench/video_vae.py.

    pytest bench/test_bench_video_vae.py --benchmark-json=bench/results/video_vae_block.json
"""
import os
import sys

import numpy as np
import pytest

sys.path.insert(0, os.path.dirname(__file__))
import video_vae as vv  # noqa: E402


@pytest.fixture(scope="module")
def folder():
    return vv.write_checkpoint(os.path.join(vv.ROOT, "vae_1layer"), 1)


@pytest.fixture(scope="module")
def want(folder, torch_mod):
    return vv.torch_block_timer(folder, "fp32")()


@pytest.mark.parametrize("mode", ["fp32", "bf16", "int8"])
def test_h3cy_vit_block(benchmark, folder, want, mode):
    run, dec = vv.h3cy_block_timer(folder, mode)
    # agreement before timing: observed rel L2 of the update 7e-7 fp32, 5e-3 bf16, 3e-2 int8
    assert vv.rel(run(), want) < {"fp32": 1e-5, "bf16": 2e-2, "int8": 6e-2}[mode]
    benchmark.group = f"vit_block[S={vv.TOK}]"
    benchmark.extra_info.update(role=f"h3cy {mode}", impl=f"h3cy {mode} ({dec.isa})")
    benchmark.pedantic(run, rounds=2, warmup_rounds=0)


@pytest.mark.parametrize("dtype", ["fp32", "bf16"])
def test_diffusers_vit_block(benchmark, folder, want, dtype, torch_mod):
    run = vv.torch_block_timer(folder, dtype)
    benchmark.group = f"vit_block[S={vv.TOK}]"
    benchmark.extra_info.update(role="baseline" if dtype == "fp32" else f"diffusers {dtype}",
                                impl=f"diffusers vit block {dtype} (torch)")
    benchmark.pedantic(run, rounds=2, warmup_rounds=1)
