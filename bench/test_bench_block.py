"""One full-size MiniMax-H3 transformer block (hidden 5376, 56 heads x 128, FFN 14336,
random weights), seconds per block, beside diffusers' MiniMaxH3TransformerBlock on torch
CPU in fp32 and bf16, same thread count.  Sequence lengths: 1872 (512x512, 22 frames, a
6-token prompt), 2048, 4096 (H3CY_BENCH_S to choose).  Peak RSS is in bench/block_memory.py
(one fresh process per mode).  Extrapolations: x50 blocks = one forward, x20 steps.
A mode may name the attention products after a colon, e.g. H3CY_BENCH_MODES=int8,int8:fp32
(the int modes take bf16 products by default where the CPU has them; h3cy.ops.attention_bf16).

    pytest bench/test_bench_block.py --benchmark-json=bench/results/block.json
    python bench/report.py bench/results/block.json
"""
import os

import numpy as np
import pytest

from h3cy.models.dit import DiT
from synthetic import SyntheticSource

SEQS = [int(s) for s in os.environ.get("H3CY_BENCH_S", "1872,2048").split(",")]
MODES = os.environ.get("H3CY_BENCH_MODES", "bf16,int8,int4,fp16,fp32").split(",")
HIDDEN, HEADS, D, FFN = 5376, 56, 128, 14336
_models = {}


def block_inputs(S, seed=0):
    rng = np.random.default_rng(seed)
    h = (rng.standard_normal((S, HIDDEN), dtype=np.float32) * 0.5).astype(np.float32)
    tags = np.zeros(S, np.int32)
    tags[:6], tags[6:6 + 40] = 1, 2
    tables = [(rng.standard_normal((3, HIDDEN), dtype=np.float32) * 0.1).astype(np.float32) for _ in range(6)]
    tables[1] += 1.0
    tables[4] += 1.0
    pos = rng.integers(0, 40, (S, 3)).astype(np.float32)
    return h, tags, tuple(tables), pos


def h3cy_block(mode, threads):
    key = (mode, threads)
    if key not in _models:
        _models.clear()
        src = SyntheticSource(num_layers=1, num_refiner_layers=0)
        weights, _, attention = mode.partition(":")
        _models[key] = DiT(src, weights=weights, threads=threads, attention=attention or None)
    return _models[key]


@pytest.mark.parametrize("S", SEQS)
@pytest.mark.parametrize("mode", MODES)
def test_h3cy_block(benchmark, S, mode, threads):
    d = h3cy_block(mode, threads)
    h0, rows, tables, pos = block_inputs(S)
    ang = (pos[:, :, None] * d.inv_freq[None, None, :]).reshape(S, -1).astype(np.float32)
    cos, sin = np.cos(ang).astype(np.float32), np.sin(ang).astype(np.float32)
    blk = d.blocks[0]
    h = h0.copy()
    d._run_core(blk, h, rows, tables, cos, sin)
    assert np.all(np.isfinite(h)) and not np.array_equal(h, h0)
    benchmark.group = f"block[S={S}]"
    benchmark.extra_info.update(role=f"h3cy {mode}", impl=f"h3cy {mode} ({d.isa})",
                                x50_s=None, threads=threads)
    benchmark.pedantic(lambda: d._run_core(blk, h0.copy(), rows, tables, cos, sin), rounds=2,
                       warmup_rounds=0)


@pytest.mark.parametrize("S", SEQS)
@pytest.mark.parametrize("dtype", ["fp32", "bf16"])
def test_diffusers_block(benchmark, S, dtype, torch_mod):
    if torch_mod is None:
        pytest.skip("torch not installed (reference rows only)")
    torch = torch_mod
    from diffusers.models.transformers.transformer_minimax_h3 import (
        MiniMaxH3RotaryPosEmbed, MiniMaxH3TransformerBlock)
    dt = {"fp32": torch.float32, "bf16": torch.bfloat16}[dtype]
    torch.manual_seed(0)
    blk = MiniMaxH3TransformerBlock(HIDDEN, HEADS, D, FFN, 2688, 1e-5, 1e-5).eval().to(dt)
    h0, rows, _, pos = block_inputs(S)
    rope = MiniMaxH3RotaryPosEmbed(16)(torch.from_numpy(pos))
    temb = torch.randn(1, 2688)
    h = torch.from_numpy(h0).to(dt)[None]
    idx = torch.from_numpy(rows.astype(np.int64))
    benchmark.group = f"block[S={S}]"
    benchmark.extra_info.update(role="baseline" if dtype == "bf16" else f"diffusers {dtype}",
                                impl=f"diffusers block {dtype} (torch)")
    with torch.inference_mode():
        benchmark.pedantic(lambda: blk(h, temb, idx, rope), rounds=2, warmup_rounds=1)
