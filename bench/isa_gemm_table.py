"""GEMM throughput per ISA path and weights mode beside torch, in one run: the table of
issue #23 (ref / avx2 / avxvnni / avx512 / amx / neon — whichever this CPU runs — for
int8, int4 (group 128), bf16 and fp32 at the DiT's weight shapes, M = 2048 and 128).

Each cell is the best of `--reps` calls after a warm-up, in alternated rounds (every
implementation once per round, `--rounds` rounds, the median of the rounds' bests), so a
machine whose speed drifts still gives fair ratios.  GOP/s counts 2 per multiply-add.
torch columns: F.linear fp32 and bf16, and torch's int8 dynamic-quantised Linear
(fbgemm: u8 x s8 with vpmaddubsw on AVX2, VNNI where the CPU has it).

    python3 bench/isa_gemm_table.py --threads 2 [--isas avx2,avxvnni] [--modes int8,fp32]
        [--m 2048,128] [--shapes qkv,down] [--rounds 3] [--reps 3] [--no-torch | --torch fp32,int8dyn]

The ref path is slow (plain C): it is left out unless --isas names it.
"""
import argparse
import os
import statistics
import sys
import warnings

import numpy as np

import h3cy
from h3cy.ops.measurement import cpu_model
from h3cy.tuning import best_time

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from int4_vs_int8 import SHAPES, torch_int8dyn  # noqa: E402

MODES = ("int8", "int4", "bf16", "fp32")


def torch_runs(w, x, threads):
    """torch F.linear fp32 and bf16, and the int8 dynamic-quantised Linear (int4_vs_int8's)."""
    q = torch_int8dyn(w, x, threads)
    if q is None:
        return {}
    import torch
    tw, tx = torch.from_numpy(w), torch.from_numpy(x)
    tw16, tx16 = tw.to(torch.bfloat16), tx.to(torch.bfloat16)

    def run(f):
        def go():
            with torch.inference_mode():
                f()
        return go
    F = torch.nn.functional
    return {"torch fp32": run(lambda: F.linear(tx, tw)), "torch bf16": run(lambda: F.linear(tx16, tw16)),
            "torch int8dyn": q}


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--threads", type=int, default=2)
    ap.add_argument("--isas", default=None, help="comma list (default: every path this CPU runs but ref)")
    ap.add_argument("--modes", default=",".join(MODES))
    ap.add_argument("--m", default="2048,128")
    ap.add_argument("--shapes", default="qkv,down")
    ap.add_argument("--rounds", type=int, default=3)
    ap.add_argument("--reps", type=int, default=3)
    ap.add_argument("--no-torch", action="store_true")
    ap.add_argument("--torch", default="fp32,bf16,int8dyn",
                    help="torch columns (torch bf16 is very slow on CPUs without bf16 products)")
    args = ap.parse_args()
    isas = args.isas.split(",") if args.isas else [i for i in h3cy.ops.available_isas() if i != "ref"]
    modes = args.modes.split(",")
    warnings.simplefilter("ignore", RuntimeWarning)  # the portable-path notes; the table says it
    print(f"# {cpu_model()}; features: {' '.join(sorted(h3cy.ops.cpu_features()))}")
    print(f"# {args.threads} threads; best of {args.reps} calls, median of {args.rounds} alternated rounds; GOP/s")
    rng = np.random.default_rng(0)
    for Ms in args.m.split(","):
        M = int(Ms)
        for sname in args.shapes.split(","):
            N, K = SHAPES[sname]
            w = rng.standard_normal((N, K), dtype=np.float32) * 0.02
            x = rng.standard_normal((M, K), dtype=np.float32)
            out = np.empty((M, N), np.float32)
            runs = {}
            for isa in isas:
                for mode in modes:
                    kw = {"group_size": 128} if mode == "int4" else {}
                    lin = h3cy.ops.Linear(w, weights=mode, threads=args.threads, isa=isa, **kw)
                    runs[f"{isa} {mode}"] = (lambda lin=lin: lin(x, out=out))
            if not args.no_torch:
                keep = {f"torch {t}" for t in args.torch.split(",")}
                runs.update({k: f for k, f in torch_runs(w, x, args.threads).items() if k in keep})
            for fn in runs.values():
                fn()  # warm-up: first touch of outputs and workspaces
            times = {k: [] for k in runs}
            for _ in range(args.rounds):
                for k, fn in runs.items():
                    times[k].append(best_time(fn, args.reps))
            flop = 2.0 * M * N * K
            print(f"\n## M = {M}, {sname} {N}x{K}\n")
            print("| implementation | GOP/s | x torch int8dyn | x same-path fp32 |")
            print("|---|---|---|---|")
            med = {k: statistics.median(v) for k, v in times.items()}
            for k, t in med.items():
                ti = med.get("torch int8dyn")
                fp = med.get(k.split()[0] + " fp32") if not k.startswith("torch") else None
                print(f"| {k} | {flop / t / 1e9:.1f} | {ti / t if ti else float('nan'):.2f} | "
                      f"{fp / t if fp else float('nan'):.2f} |")
            sys.stdout.flush()


if __name__ == "__main__":
    main()
