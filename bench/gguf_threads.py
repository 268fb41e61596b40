"""The GGUF linear's speed by thread count, beside h3cy's int8 and int4 (group 128) on the same weights: where the
driver stops scaling, and the AMX tile kernel against the VNNI one in the driver (not alone).

    PYTHONPATH=$PWD python3 bench/gguf_threads.py [--threads 1,4,16] [--types Q8_0,Q4_K]
        [--isas amx,avx512] [--m 2048] [--n 7168] [--k 5376] [--calls 5]

Per thread count and type: random valid blocks, one linear per --isas path (the kernel that
path's C library runs for the type: on "amx" the tile kernel for every type), GFLOP/s of the
best of --calls calls (wall), and per thread.  Build with CFLAGS=-DH3_PN_PROFILE to have each
GGUF call print its phase times (workspace, quantiser, products) to stderr."""
import argparse
import os
import sys
import time

import numpy as np

import h3cy
from h3cy import _kernels

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from gguf_amx_check import gguf_linear  # noqa: E402
from gguf_gemm import random_blocks  # noqa: E402


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--threads", default="1,4,16")
    ap.add_argument("--types", default="Q8_0")
    ap.add_argument("--isas", default="amx,avx512")
    ap.add_argument("--m", type=int, default=2048)
    ap.add_argument("--n", type=int, default=7168)
    ap.add_argument("--k", type=int, default=5376)
    ap.add_argument("--calls", type=int, default=5)
    args = ap.parse_args()
    isas = args.isas.split(",")
    if any(i not in h3cy.ops.available_isas() for i in isas):
        print(f"this CPU runs {h3cy.ops.available_isas()}, not all of {isas}")
        return 2
    rng = np.random.default_rng(0)
    M, N, K = args.m, args.n, args.k
    x = rng.standard_normal((M, K), dtype=np.float32)
    out = np.empty((M, N), np.float32)
    print(f"# {h3cy.ops.measurement.cpu_model()}; M {M} N {N} K {K}; best of {args.calls} calls, wall")
    for nth in (int(v) for v in args.threads.split(",")):
        pool = _kernels.ThreadPool(nth)
        lins = {}
        for t in args.types.split(","):
            b = random_blocks(t, N, K, rng)
            for isa in isas:
                lins[f"{t} {isa}"] = gguf_linear(b, t, N, K, isa, pool)
        w = next(iter(lins.values()))._c.dequantized()
        lins["int8"] = h3cy.ops.Linear(w, weights="int8", isa=isas[0], threads=pool)
        lins["int4"] = h3cy.ops.Linear(w, weights="int4", group_size=128, isa=isas[0], threads=pool)
        for name, lin in lins.items():
            best = 1e9
            for _ in range(args.calls):
                t0 = time.perf_counter()
                lin(x, out=out)
                best = min(best, time.perf_counter() - t0)
            g = 2 * M * N * K / best / 1e9
            print(f"threads {nth:2d} {name:12s} {g:7.0f} GFLOP/s ({g / nth:5.0f} a thread)", flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
