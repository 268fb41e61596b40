"""The bound on any GGUF GEMM whose AMX tile products run one weight segment deep and whose
per-segment fold runs in AVX-512 (csrc/gguf_amx.c is one): docs/gguf.md's table, computed
from measured numbers only.

Inputs: the vector instruction rate of the machine (bench/results/cpu_peaks_*.txt: the
`vfmadd231ps zmm` line, GFLOP/s / 32 = zmm instructions a second over all threads) and
h3cy's int8 / int4 GFLOP/s at the same shapes (bench/results/gguf_vs_ggml_*.md rows).
The fold costs 3 vector instructions per row, segment and 16 columns (vcvtdq2ps, vmulps,
vfmadd by the activation scale) or 4 for types with a min (+ vfmadd of the min), as
compiled (objdump of gguf_amx.c's v32_0 / v32_1); a segment is 2 * 16 * seg operations.
"Serial" adds the tile products without overlap, at 16 cycles a tdpbssd whatever its depth
(Intel's figure for full tiles, not measured here) and the clock the FMA peak implies at
one zmm FMA a cycle.

    python3 bench/gguf_amx_bound.py [--peaks bench/results/cpu_peaks_spr16.txt]
                                    [--table bench/results/gguf_vs_ggml_spr16.md]
"""
import argparse
import re

FOLD = {"Q8_0, Q4_0, Q5_0": (32, 3), "Q4_K, Q5_K, Q4_1, Q5_1": (32, 4), "Q6_K, Q3_K": (16, 3), "Q2_K": (16, 4)}
GROUPS = {2048: ("qkv", "down"), 128: ("te_q", "te_up")}


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--peaks", default="bench/results/cpu_peaks_spr16.txt")
    ap.add_argument("--table", default="bench/results/gguf_vs_ggml_spr16.md")
    ap.add_argument("--threads", type=int, default=16)
    args = ap.parse_args()
    fma = float(re.search(r"vfmadd231ps zmm\)\s+\d+ threads:\s+([\d.]+)", open(args.peaks).read()).group(1))
    rate = fma / 32  # G zmm instructions a second, all threads
    clock = rate / args.threads  # GHz at one a cycle per core
    tile = {32: 16 * 16 * 32 * 2 / 16 * clock * args.threads, 16: 16 * 16 * 16 * 2 / 16 * clock * args.threads}
    print(f"# vector rate {rate:.1f} G zmm instr/s ({args.peaks}); tile products {tile[32] / 1e3:.1f} / "
          f"{tile[16] / 1e3:.1f} TOP/s at seg 32 / 16 (16 cycles a tdpbssd at {clock:.2f} GHz)")
    print("| types | seg | fold instr. | ops / instr. | fold bound (TOP/s) | + tile products serial |")
    print("|---|---|---|---|---|---|")
    bound = {}
    for types, (seg, n) in FOLD.items():
        f = 2 * 16 * seg / n * rate
        s = 1 / (1 / f + 1 / tile[seg])
        bound[types.split(",")[0]] = (f, s)
        print(f"| {types} | {seg} | {n} | {2 * 16 * seg / n:.0f} | {f / 1e3:.1f} | {s / 1e3:.1f} |")
    # h3cy int8 / int4 GFLOP/s per shape from the table's rows (the Q8_0 row of each shape)
    rates = {}
    for line in open(args.table):
        c = [x.strip() for x in line.split("|")[1:-1]]
        if len(c) == 11 and c[2] == "Q8_0":
            name, dims = c[0].split()
            N, K = (int(v) for v in dims.split("x"))
            rates[name] = (2 * int(c[1]) * N * K, float(c[8]), float(c[9]))
    print("\n| M | h3cy int8 (GFLOP/s) | Q8_0 bound / int8 (serial) | h3cy int4 | Q4_K bound / int4 (serial) |")
    print("|---|---|---|---|---|")
    for M, shapes in GROUPS.items():
        if not all(s in rates for s in shapes):
            continue
        flops = sum(rates[s][0] for s in shapes)
        i8 = flops / sum(rates[s][0] / rates[s][1] for s in shapes)
        i4 = flops / sum(rates[s][0] / rates[s][2] for s in shapes)
        q8, q4 = bound["Q8_0"], bound["Q4_K"]
        each8 = ", ".join(f"{s} {q8[0] / rates[s][1]:.2f} ({q8[1] / rates[s][1]:.2f})" for s in shapes)
        each4 = ", ".join(f"{s} {q4[0] / rates[s][2]:.2f} ({q4[1] / rates[s][2]:.2f})" for s in shapes)
        print(f"| {M} | {i8:.0f} | {q8[0] / i8:.2f} ({q8[1] / i8:.2f}); {each8} | {i4:.0f} | "
              f"{q4[0] / i4:.2f} ({q4[1] / i4:.2f}); {each4} |")


if __name__ == "__main__":
    main()
