"""LoRA overhead on one full-size block (bench/lora_overhead.py has the table script):
group ``block_lora[S=..]``, baseline = the block without a LoRA, candidates = the same
block with a random rank-64 / rank-128 PEFT LoRA on its attention and FFN linears, run
beside the base or merged into it (merge=True; same base weights and inputs; the LoRA is
loaded on the one DiT and unloaded after).

    H3CY_BENCH_S=1872 pytest bench/test_bench_lora.py --benchmark-json=bench/results/lora.json
    python bench/report.py bench/results/lora.json
"""
import os

import numpy as np
import pytest

from lora_overhead import Block, pairs_bytes, write_lora

SEQS = [int(s) for s in os.environ.get("H3CY_BENCH_S", "1872").split(",")]
MODE = os.environ.get("H3CY_BENCH_LORA_MODE", "int8")
_blocks = {}


def block(S, threads):
    key = (S, threads)
    if key not in _blocks:
        _blocks.clear()
        _blocks[key] = Block(S, MODE, threads)
    return _blocks[key]


@pytest.fixture(scope="module")
def lora_files(tmp_path_factory):
    d = tmp_path_factory.mktemp("lora")
    return {r: write_lora(str(d / f"r{r}.safetensors"), r, seed=r) for r in (64, 128)}


@pytest.mark.parametrize("S", SEQS)
@pytest.mark.parametrize("rank,merge", [(0, False), (64, False), (128, False), (64, True), (128, True)])
def test_block_lora(benchmark, S, rank, merge, threads, lora_files, tmp_path):
    blk = block(S, threads)
    blk.dit._merge_cache_dir = str(tmp_path)        # merged-weight caches: not in ~/.cache
    base = blk.run()
    if rank:
        blk.dit.load_lora(lora_files[rank], name="bench", merge=merge)
        out = blk.run()
        assert np.all(np.isfinite(out)) and not np.array_equal(out, base)
    benchmark.group = f"block_lora[S={S}]"
    role = "baseline" if rank == 0 else f"lora r{rank}" + (" merged" if merge else "")
    benchmark.extra_info.update(role=role, mode=MODE, isa=blk.dit.isa,
                                lora_bytes=pairs_bytes(rank) if rank and not merge else 0)
    try:
        benchmark.pedantic(blk.run, rounds=2, warmup_rounds=0)
    finally:
        if rank:
            blk.dit.unload_lora("bench")
            assert np.array_equal(blk.run(), base)
