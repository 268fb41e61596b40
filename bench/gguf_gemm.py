"""GGUF GEMM (the community's quantised H3 files run as stored: each 16-row panel decoded a
K block at a time to int8 beside the per-segment scales, csrc/gemm_gguf.c on the shared
panel driver csrc/gemm_panel.c) against h3cy's own int8 and int4 on the same weights (the
GGUF blocks' dequantisation), at the MiniMax-H3 DiT shapes with M = 2048 rows and the
Qwen3-VL text encoder's with M = 128: best of N calls per implementation in alternated
rounds (convrot_gemm.alternated_ms), GFLOP/s (2 M N K / time) and ratios of medians.  The
issue's targets: Q8_0 within 10% of h3cy int8 (ratio >= 0.9), Q4_K within 15% of int4.

    python3 bench/gguf_gemm.py [--threads 2] [--rounds 3] [--calls 3] [--m 2048]
                               [--types Q8_0,Q6_K,Q5_K,Q4_K,Q3_K] [--shapes qkv,out,up,down,te_q,...]
                               [--json OUT] [--cpu-time]

--cpu-time times CPU seconds of the process (time.process_time: all its threads) instead of
wall time, and reports GFLOP per CPU-second: on a loaded shared box (the 2-core one runs
other jobs) that is the steadier ratio; use it with --threads 1.
--m overrides the rows of every shape (default: 2048 for the DiT's, 128 for the text
encoder's).  The shapes (N, K) come from the released configs, as bench/nvfp4_gemm.py and
bench/convrot_gemm.py copy them: DiT hidden 5376, 56 heads of 128 (q, k, v each
7168 x 5376), FFN 14336 (SwiGLU up 28672 x 5376, down 5376 x 14336); text encoder hidden
5120, 64 query / 8 key-value heads of 128, intermediate 25600.
"""
import argparse
import json
import os
import sys
import time
import warnings

import numpy as np

import h3cy
from h3cy import _kernels
from h3cy.weights.linears import gguf_isa
from h3cy.weights.gguf import GGML_TYPES, TYPE_IDS

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from convrot_gemm import add_timing_args, alternated_ms, machine_line  # noqa: E402
from nvfp4_gemm import SHAPES  # noqa: E402

DIT = ("qkv", "out", "up", "down")
TYPES = ("Q8_0", "Q6_K", "Q5_K", "Q4_K", "Q3_K")
# byte offsets of each type's f16 scale fields in its block (ggml's block structs: Q8_0 d;
# Q6_K d after ql, qh, scales; Q5_K/Q4_K d, dmin first; Q3_K d last)
F16_FIELDS = {"Q8_0": (0,), "Q4_0": (0,), "Q4_1": (0, 2), "Q5_0": (0,), "Q5_1": (0, 2), "Q2_K": (80, 82),
              "Q3_K": (108,), "Q4_K": (0, 2), "Q5_K": (0, 2), "Q6_K": (208,), "IQ4_NL": (0,), "IQ4_XS": (0,)}
# relative L2 against float64 on the same weights at the first 8 rows (observed on the 2-core
# AVX2 box: gguf ~5e-3 (the activation quantisation), int8 ~1.5e-2, int4 ~0.1-0.2 (it
# re-rounds the GGUF values to 16 levels per 128 inputs))
BOUND = {"gguf": 2e-2, "int8": 3e-2, "int4": 0.3}


def random_blocks(type_name, N, K, rng):
    """[N, K / blk * bytes] uint8: random bytes, every f16 scale field finite in
    [0.0025, 0.01]; the speed does not depend on the values."""
    _, blk, nb = GGML_TYPES[TYPE_IDS[type_name]]
    b = rng.integers(0, 256, size=(N, K // blk, nb), dtype=np.uint8)
    for off in F16_FIELDS[type_name]:
        v = rng.uniform(0.0025, 0.01, size=(N, K // blk)).astype(np.float16)
        b[:, :, off:off + 2] = v.view(np.uint8).reshape(N, K // blk, 2)
    return b.reshape(N, -1)


def gguf_linear(type_name, N, K, pool, rng):
    blocks = random_blocks(type_name, N, K, rng)
    isa = gguf_isa(h3cy.ops.active_isa(), [type_name])  # the loader's kernel for this type
    core = _kernels.linear_attach_gguf([blocks], [TYPE_IDS[type_name]], N, K, None, 0, isa, pool)
    lin = h3cy.ops.Linear.from_core(core, "int8", pool)
    lin._keep = blocks
    return lin, core


def main():
    ap = argparse.ArgumentParser()
    add_timing_args(ap)
    ap.add_argument("--m", type=int, default=None, help="rows for every shape (default 2048 DiT, 128 TE)")
    ap.add_argument("--types", default=",".join(TYPES))
    ap.add_argument("--shapes", default="qkv,out,up,down,te_q,te_kv,te_o,te_up,te_down", help="of " + ",".join(SHAPES))
    ap.add_argument("--json", default=None, help="write the rows here")
    ap.add_argument("--cpu-time", action="store_true", help="CPU seconds instead of wall time")
    args = ap.parse_args()
    warnings.simplefilter("ignore", RuntimeWarning)
    rng = np.random.default_rng(0)
    types = args.types.split(",")
    print(machine_line(args, "GFLOP/s of medians" + (" (GFLOP per CPU-second)" if args.cpu_time else "")))
    print("| shape | M | " + " | ".join(types) + " | h3cy int8 | h3cy int4 | " +
          " | ".join(f"{t} / int8" for t in types) + " | " + " | ".join(f"{t} / int4" for t in types) + " |")
    print("|---" * (4 + 3 * len(types)) + "|")
    pool = _kernels.ThreadPool(args.threads)
    rows = []
    for name in args.shapes.split(","):
        N, K = SHAPES[name]
        M = args.m or (2048 if name in DIT else 128)
        x = rng.standard_normal((M, K), dtype=np.float32)
        out = np.empty((M, N), np.float32)
        lins = {}
        w = None
        for t in types:
            lins[t], core = gguf_linear(t, N, K, pool, rng)
            if w is None:
                w = core.dequantized()   # int8/int4 run the first type's weights
        lins["h3cy int8"] = h3cy.ops.Linear(w, weights="int8", threads=pool)
        lins["h3cy int4"] = h3cy.ops.Linear(w, weights="int4", group_size=128, threads=pool)
        # agreement before timing (each GGUF type against its own weights)
        r8 = slice(0, 8)
        for k, lin in lins.items():
            wk = w if k.startswith("h3cy") else lin._c.dequantized()
            ref = x[r8].astype(np.float64) @ wk.T.astype(np.float64)
            e = np.linalg.norm(lin(x)[r8] - ref) / np.linalg.norm(ref)
            assert e < BOUND[k.split()[-1] if k.startswith("h3cy") else "gguf"], (k, e)
        runs = {k: (lambda lin=lin: lin(x, out=out)) for k, lin in lins.items()}
        med = alternated_ms(runs, args.rounds, args.calls, time.process_time if args.cpu_time else time.perf_counter)
        gf = {k: 2.0 * M * N * K / (v * 1e-3) / 1e9 for k, v in med.items()}
        row = {"shape": name, "N": N, "K": K, "M": M, "threads": args.threads, "isa": h3cy.ops.active_isa(),
               "clock": "cpu" if args.cpu_time else "wall", "ms": med, "gflops": gf}
        rows.append(row)
        print(f"| {name} {N}x{K} | {M} | " + " | ".join(f"{gf[t]:.0f}" for t in types) +
              f" | {gf['h3cy int8']:.0f} | {gf['h3cy int4']:.0f} | " +
              " | ".join(f"{gf[t] / gf['h3cy int8']:.2f}" for t in types) + " | " +
              " | ".join(f"{gf[t] / gf['h3cy int4']:.2f}" for t in types) + " |", flush=True)
        del lins, w
    if args.json:
        with open(args.json, "w") as f:
            json.dump({"cpu_features": h3cy.ops.cpu_features(), "rows": rows}, f, indent=1)


if __name__ == "__main__":
    main()
