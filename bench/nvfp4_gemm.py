"""NVFP4 (Comfy's ``nvfp4`` text encoder files, run as stored: the codes widened to int8 in
registers' reach, csrc/gemm_nvfp4.c) against h3cy's own int4 and int8 and torch, on the
same weights (the NVFP4 tensors' dequantisation), at the MiniMax-H3 DiT shapes and the
Qwen3-VL-32B text encoder's (hidden 5120, intermediate 25600, 64 query / 8 key-value heads
of 128), M = 2048 and M = 128 rows: best of N calls per implementation in alternated
rounds, ms and ratios of medians (the issue's target: NVFP4 >= 0.8 x h3cy int4).

    python3 bench/nvfp4_gemm.py [--threads 2] [--rounds 3] [--calls 3] [--m 2048,128]
                                [--shapes te_q,te_kv,te_o,te_up,te_down,qkv,out,up,down] [--no-torch]
                                [--cpu-time]
"""
import argparse
import os
import sys
import warnings

import numpy as np

import h3cy
from h3cy import _kernels

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from convrot_gemm import SHAPES as DIT_SHAPES, add_shape_args, add_timing_args, machine_line, time_row  # noqa: E402

# (N, K): the text encoder's (released config: text_config of the FL2VA text encoder) and the DiT's
SHAPES = {"te_q": (64 * 128, 5120), "te_kv": (8 * 128, 5120), "te_o": (5120, 64 * 128),
          "te_up": (25600, 5120), "te_down": (5120, 25600), **DIT_SHAPES}


# relative L2 of each h3cy mode against float64 on the same weights (observed on the 2-core
# AVX2 box at M = 128: nvfp4 5.4e-3, int8 1.4e-2, int4 0.15)
BOUND = {"h3cy nvfp4": 2e-2, "h3cy int8": 3e-2, "h3cy int4": 0.25}


def random_nvfp4(N, K, rng):
    """(codes, blocked scales, scale_2): random valid tensors as Comfy's files store them
    (every code byte random, block scales normal e4m3 in [0x30, 0x4f]); the speed does not
    depend on the values."""
    codes = rng.integers(0, 256, (N, K // 2), dtype=np.uint8)
    R, C = -(-N // 128) * 128, -(-(K // 16) // 4) * 4
    scales = rng.integers(0x30, 0x50, R * C, dtype=np.uint8)
    return codes, scales, 1.0 / 256


def linears(N, K, threads, rng):
    """{name: Linear} over the same weight W (the NVFP4 tensors' dequantisation), and W."""
    pool = _kernels.ThreadPool(threads)
    part = random_nvfp4(N, K, rng)
    core = _kernels.linear_attach_nvfp4([part + (None,)], N, K, None, 0, h3cy.ops.active_isa(), pool)
    nv = h3cy.ops.Linear.from_core(core, "int8", pool)
    nv._keep = part
    w = core.dequantized()
    lins = {"h3cy nvfp4": nv,
            "h3cy int4": h3cy.ops.Linear(w, weights="int4", group_size=128, threads=pool),
            "h3cy int8": h3cy.ops.Linear(w, weights="int8", threads=pool)}
    return lins, w


def main():
    ap = argparse.ArgumentParser()
    add_timing_args(ap)
    add_shape_args(ap, SHAPES)
    ap.add_argument("--cpu-time", action="store_true", help="CPU seconds of the process instead of wall time "
                    "(steadier on a shared machine)")
    args = ap.parse_args()
    warnings.simplefilter("ignore", RuntimeWarning)
    rng = np.random.default_rng(0)
    print(machine_line(args, "median CPU ms" if args.cpu_time else "median ms"))
    print("| shape | M | h3cy nvfp4 | h3cy int4 | h3cy int8 | torch fp32 | torch int8dyn | nvfp4 / int4 speed | "
          "nvfp4 / int8 | nvfp4 / torch fp32 |")
    print("|---|---|---|---|---|---|---|---|---|---|")
    for name in args.shapes.split(","):
        N, K = SHAPES[name]
        lins, w = linears(N, K, args.threads, rng)
        for M in args.m:
            x = rng.standard_normal((M, K), dtype=np.float32)
            # agreement before timing: the same product, to each mode's rounding (int4 re-rounds
            # the E2M1 values to 16 levels per 128 inputs: ~0.15)
            rows = slice(0, 8)
            ref = x[rows].astype(np.float64) @ w.T.astype(np.float64)
            for k, lin in lins.items():
                e = np.linalg.norm(lin(x)[rows] - ref) / np.linalg.norm(ref)
                assert e < BOUND[k], (k, e)
            t, r = time_row(lins, x, w, args)
            print(f"| {name} {N}x{K} | {M} | {t('h3cy nvfp4')} | {t('h3cy int4')} | {t('h3cy int8')} | "
                  f"{t('torch fp32')} | {t('torch int8dyn')} | {r('h3cy nvfp4', 'h3cy int4')} | "
                  f"{r('h3cy nvfp4', 'h3cy int8')} | {r('h3cy nvfp4', 'torch fp32')} |", flush=True)
        del lins, w


if __name__ == "__main__":
    main()
