"""Where one full-size MiniMax-H3 block's time goes: wall seconds per stage of the C block
driver (norm1, qkv GEMM, q/k prep, attention, out GEMM + gated residual, norm2, up GEMM +
SwiGLU, down GEMM + gated residual), for each weights mode, median over --reps runs.

    python bench/block_profile.py [--S 2048] [--threads 2] [--modes int8,bf16] [--reps 3]

Random weights (synthetic), the block bench's inputs (bench/test_bench_block.py).
The stage clock reads CLOCK_MONOTONIC between stages only (no effect on the result).
"""
import argparse
import os
import sys
import time

import numpy as np

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from h3cy import _kernels                       # noqa: E402
from h3cy.models.dit import DiT                      # noqa: E402
from synthetic import SyntheticSource     # noqa: E402
from test_bench_block import block_inputs       # noqa: E402


def profile(mode, S, threads, reps):
    weights, _, attention = mode.partition(":")      # e.g. int8:fp32 = float32 attention products
    d = DiT(SyntheticSource(num_layers=1, num_refiner_layers=0), weights=weights, threads=threads,
            attention=attention or None)
    h0, rows, tables, pos = block_inputs(S)
    ang = (pos[:, :, None] * d.inv_freq[None, None, :]).reshape(S, -1).astype(np.float32)
    cos, sin = np.cos(ang).astype(np.float32), np.sin(ang).astype(np.float32)
    blk = d.blocks[0]
    need = blk.core.workspace_bytes(S, d.heads, d.rot_dim) + 64
    ws = np.empty(need, np.uint8)
    cfg = d.config
    runs = []
    for r in range(reps + 1):                   # the first run warms pages and workspaces
        st = np.zeros(len(_kernels.DIT_STAGE_NAMES))
        t = time.perf_counter()
        blk.core.forward(h0.copy(), d.heads, d.rot_dim, cfg["norm_eps"], cfg["qk_norm_eps"],
                         int(d.round_bf16), ws, rows, tables, cos, sin, st, int(d.attn_bf16))
        total = time.perf_counter() - t
        if r:
            runs.append(np.concatenate([st, [total]]))
    return d.isa, np.median(np.array(runs), axis=0)


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--S", type=int, default=2048)
    ap.add_argument("--threads", type=int, default=2)
    ap.add_argument("--modes", default="int8,bf16")
    ap.add_argument("--reps", type=int, default=3)
    a = ap.parse_args()
    names = list(_kernels.DIT_STAGE_NAMES) + ["total"]
    print(f"# one full-size block (hidden 5376, 56x128, FFN 14336), S={a.S}, {a.threads} threads, "
          f"median of {a.reps}; seconds per stage (share of the block)")
    print(f"{'mode':9s} {'isa':7s} " + " ".join(f"{n:>15s}" for n in names))
    for mode in a.modes.split(","):
        isa, med = profile(mode, a.S, a.threads, a.reps)
        cells = [f"{v:7.3f} ({100 * v / med[-1]:4.1f}%)" for v in med[:-1]] + [f"{med[-1]:15.3f}"]
        print(f"{mode:9s} {isa:7s} " + " ".join(f"{c:>15s}" for c in cells), flush=True)


if __name__ == "__main__":
    main()
