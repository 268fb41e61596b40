"""The GGUF GEMM's AMX tile kernel (csrc/gguf_amx.c) on an AMX machine: first a self-check,
then its speed beside the AVX-512 VNNI kernel it replaces and h3cy's own int8 / int4 (AMX).

1. Bits: for every type the GGUF GEMM runs (Q8_0, Q4_0, Q4_1, Q5_0, Q5_1, Q2_K, Q3_K, Q4_K,
   Q5_K, Q6_K), random blocks, N = 37 (two full 16-column panels and a partial one), K = 768
   (a full and a partial 512-input K block), M = 1, 15, 17, 130, 300 (tiles of 16 rows, the
   rows past them, more than one 256-row block), 1 and --threads threads: the amx path's
   output equals the ref path's and the avx512 path's bit for bit (the GGUF contract:
   docs/gguf.md, "one float order so every path equals ref bit for bit"), except Q4_K and
   Q5_K, which the amx path runs in their integer super-block order (csrc/gguf_kq_amx.c):
   within 1e-6 of the largest output.  An assertion names the first type / M that differs.
2. Speed: GFLOP/s (2 M N K / median wall time, alternated rounds) of the GGUF linears on AMX
   tiles (isa "amx") and on AVX-512 VNNI (isa "avx512"; the amx path runs the tiles for the
   32-value types, VNNI for the 16-value ones), with
   h3cy int8 and int4 (group 128) on the same weights (the first type's dequantisation), at
   the DiT's qkv and down (M = 2048) and the text encoder's te_q and te_up (M = 128).  Every
   timed GGUF pair is also checked equal bit for bit (AMX vs AVX-512) on the full output.

    python3 bench/gguf_amx_check.py --threads 16 [--rounds 3] [--calls 3] [--types ...]
                                    [--shapes qkv,down,te_q,te_up] [--json OUT] [--check-only]
                                    [--isas amx,avx512]

Needs a CPU with AMX (and Linux's tile permission): elsewhere it says so and exits 2.
--isas names the two paths compared (tiles, VNNI); another pair (e.g. avx2,avx2, with
--m-scale to shrink the shapes) only smoke-tests this script on a machine without AMX.
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
from h3cy.weights.gguf import TYPE_IDS

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from convrot_gemm import add_timing_args, alternated_ms  # noqa: E402
from gguf_gemm import random_blocks  # noqa: E402
from nvfp4_gemm import SHAPES  # noqa: E402

ALL_TYPES = ("Q8_0", "Q4_0", "Q4_1", "Q5_0", "Q5_1", "Q2_K", "Q3_K", "Q4_K", "Q5_K", "Q6_K", "IQ4_NL", "IQ4_XS")
SPEED_TYPES = ("Q8_0", "Q6_K", "Q5_K", "Q4_K", "Q3_K")
# run on the amx path in the K-quants' integer super-block order (csrc/gguf_kq_amx.c): checked
# against ref to 1e-6 of the largest output, not bit for bit
KQ_TYPES = ("Q4_K", "Q5_K")
DIT = ("qkv", "out", "up", "down")


def gguf_linear(blocks, type_name, N, K, isa, pool):
    core = _kernels.linear_attach_gguf([blocks], [TYPE_IDS[type_name]], N, K, None, 0, isa, pool)
    lin = h3cy.ops.Linear.from_core(core, "int8", pool)
    lin._keep = blocks
    return lin


def bits(y):
    return np.ascontiguousarray(y).view(np.uint32)


def check_bits(threads, rng, isas):
    """Part 1: amx == ref == avx512 (isas) bit for bit; returns the number of comparisons."""
    N, K, n = 37, 768, 0
    pools = {t: _kernels.ThreadPool(t) for t in sorted({1, threads})}
    for t in ALL_TYPES:
        blocks = random_blocks(t, N, K, rng)
        for M in (1, 15, 17, 130, 300):
            x = (rng.standard_normal((M, K)) * rng.uniform(0.1, 10.0, size=(M, 1))).astype(np.float32)
            want = bits(gguf_linear(blocks, t, N, K, "ref", pools[1])(x))
            for nth, pool in pools.items():
                for isa in isas:
                    y = gguf_linear(blocks, t, N, K, isa, pool)(x)
                    if isa == "amx" and t in KQ_TYPES:  # their own order (csrc/gguf_impl.h)
                        yr = want.view(np.float32)
                        err = np.abs(y - yr).max() / np.abs(yr).max()
                        assert err <= 1e-6, f"{t} M={M} threads={nth} amx: {err:.3g} from ref (bound 1e-6)"
                        n += 1
                        continue
                    got = bits(y)
                    bad = np.flatnonzero(got != want)
                    assert bad.size == 0, (f"{t} M={M} threads={nth} isa={isa}: {bad.size} of {want.size} "
                                           f"outputs differ from ref (first at row {bad[0] // N}, col {bad[0] % N})")
                    n += 1
        print(f"# bits: {t} {' == '.join(isas)} == ref at M = 1, 15, 17, 130, 300, N = {N}, K = {K}", flush=True)
    return n


def main():
    ap = argparse.ArgumentParser()
    add_timing_args(ap)
    ap.add_argument("--types", default=",".join(SPEED_TYPES))
    ap.add_argument("--shapes", default="qkv,down,te_q,te_up", help="of " + ",".join(SHAPES))
    ap.add_argument("--json", default=None, help="write the speed rows here")
    ap.add_argument("--check-only", action="store_true", help="part 1 only")
    ap.add_argument("--isas", default="amx,avx512", help="the tile path and the VNNI path")
    ap.add_argument("--m-scale", type=float, default=1.0, help="rows and N scaled by this (smoke runs)")
    args = ap.parse_args()
    warnings.simplefilter("ignore", RuntimeWarning)
    isas = args.isas.split(",")
    if any(i not in h3cy.ops.available_isas() for i in isas):
        print("this machine cannot run the amx path (no AMX, or no tile permission): nothing to check")
        return 2
    feats = [f for f in h3cy.ops.cpu_features() if f.startswith(("avx", "amx"))]
    print(f"# {args.threads} threads; CPU features {' '.join(feats)}")
    rng = np.random.default_rng(0)
    t0 = time.perf_counter()
    n = check_bits(args.threads, rng, isas)
    print(f"# bits: ok, {n} comparisons ({time.perf_counter() - t0:.1f} s)")
    if args.check_only:
        return 0
    types = args.types.split(",")
    pool = _kernels.ThreadPool(args.threads)
    print(f"# speed: GFLOP/s of medians (wall, best of {args.calls} calls, {args.rounds} alternated rounds); "
          "amx = GGUF on AMX tiles, vnni = GGUF on AVX-512 VNNI (the amx path's default for Q2_K, Q3_K, "
          "Q6_K; tiles for the rest), int8/int4 = h3cy's on AMX")
    print("| shape | M | type | GGUF amx | GGUF vnni | amx / vnni | h3cy int8 | h3cy int4 | amx / int8 | amx / int4 |")
    print("|---|---|---|---|---|---|---|---|---|---|")
    rows = []
    for name in args.shapes.split(","):
        N, K = SHAPES[name]
        M = 2048 if name in DIT else 128
        M, N = max(1, int(M * args.m_scale)), max(16, int(N * args.m_scale) // 16 * 16)
        x = rng.standard_normal((M, K), dtype=np.float32)
        out = np.empty((M, N), np.float32)
        lins, w = {}, None
        for t in types:
            blocks = random_blocks(t, N, K, rng)
            lins[t, "amx"] = gguf_linear(blocks, t, N, K, isas[0], pool)
            lins[t, "vnni"] = gguf_linear(blocks, t, N, K, isas[1], pool)
            ya, yv = lins[t, "amx"](x), lins[t, "vnni"](x)
            if isas[0] == "amx" and t in KQ_TYPES:
                err = np.abs(ya - yv).max() / np.abs(yv).max()
                assert err <= 1e-6, f"{name} {t}: AMX {err:.3g} from AVX-512 (bound 1e-6)"
            else:
                assert np.array_equal(bits(ya), bits(yv)), \
                    f"{name} {t}: AMX and AVX-512 differ at {np.count_nonzero(bits(ya) != bits(yv))} outputs"
            if w is None:
                w = lins[t, "amx"]._c.dequantized()  # int8/int4 run the first type's weights
        lins["int8"] = h3cy.ops.Linear(w, weights="int8", isa=isas[0], threads=pool)
        lins["int4"] = h3cy.ops.Linear(w, weights="int4", group_size=128, isa=isas[0], threads=pool)
        runs = {k: (lambda lin=lin: lin(x, out=out)) for k, lin in lins.items()}
        med = alternated_ms(runs, args.rounds, args.calls)
        gf = {k: 2.0 * M * N * K / (v * 1e-3) / 1e9 for k, v in med.items()}
        for t in types:
            a, v = gf[t, "amx"], gf[t, "vnni"]
            print(f"| {name} {N}x{K} | {M} | {t} | {a:.0f} | {v:.0f} | {a / v:.2f} | {gf['int8']:.0f} | "
                  f"{gf['int4']:.0f} | {a / gf['int8']:.2f} | {a / gf['int4']:.2f} |", flush=True)
            rows.append({"shape": name, "N": N, "K": K, "M": M, "type": t, "threads": args.threads,
                         "gflops": {"amx": a, "vnni": v, "int8": gf["int8"], "int4": gf["int4"]}})
        del lins, w
    if args.json:
        with open(args.json, "w") as f:
            json.dump({"cpu_features": h3cy.ops.cpu_features(), "rows": rows}, f, indent=1)
    return 0


if __name__ == "__main__":
    sys.exit(main())
