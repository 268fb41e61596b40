"""Q8_0 on the 'amx' path: the tile route over the file's blocks in place (csrc/gguf_q8d_amx.c,
H3CY_GGUF_Q8D=1, the default) against the per-segment tile kernel over decoded panels
(csrc/gguf_amx.c, H3CY_GGUF_Q8D=0), with h3cy int8 on the same weights beside them, in one
process: every round calls each linear in turn (best of a few calls), so a shared host's drift
hits all alike; the ratios are medians of the per-round ratios.

    PYTHONPATH=$PWD python3 bench/gguf_q8d_ab.py [--threads 1,16] [--rounds 7] [--n 7168] [--k 5376]
        [--isa amx]

--isa another path with --force runs the route there on its scalar kernel (H3CY_GGUF_Q8D=2): a
smoke test of this script on a machine without AMX, not a measurement."""
import argparse
import os
import sys
import time

import numpy as np

import h3cy
from h3cy import _config, _kernels

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from gguf_amx_check import gguf_linear  # noqa: E402
from gguf_gemm import random_blocks  # noqa: E402


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--threads", default="1,16")
    ap.add_argument("--rounds", type=int, default=7)
    ap.add_argument("--n", type=int, default=7168)
    ap.add_argument("--k", type=int, default=5376)
    ap.add_argument("--ms", default="2048,128")
    ap.add_argument("--isa", default="amx")
    ap.add_argument("--force", action="store_true")
    args = ap.parse_args()
    if args.isa not in h3cy.ops.available_isas():
        print(f"this CPU runs {h3cy.ops.available_isas()}, not {args.isa}")
        return 2
    N, K = args.n, args.k
    rng = np.random.default_rng(0)
    b = random_blocks("Q8_0", N, K, rng)
    print(f"# {h3cy.ops.measurement.cpu_model()}; Q8_0 N {N} K {K}, path {args.isa}; {args.rounds} rounds")
    for nth in (int(v) for v in args.threads.split(",")):
        pool = _kernels.ThreadPool(nth)
        lins = {}
        for name, q in (("panels", "0"), ("in place", "2" if args.force else "1")):
            _config._ENV_GGUF_Q8D = q
            lins[name] = gguf_linear(b, "Q8_0", N, K, args.isa, pool)
        _config._ENV_GGUF_Q8D = os.environ.get("H3CY_GGUF_Q8D", "").strip()
        if lins["panels"]._c.gguf_q8d or not lins["in place"]._c.gguf_q8d:
            print(f"the {args.isa} path does not take the route here (use --force off AMX)")
            return 2
        lins["int8"] = h3cy.ops.Linear(lins["panels"]._c.dequantized(), weights="int8", isa=args.isa, threads=pool)
        for M in (int(v) for v in args.ms.split(",")):
            x = rng.standard_normal((M, K), dtype=np.float32)
            out = np.empty((M, N), np.float32)
            reps = 2 if M >= 1024 else 6
            t = {k: [] for k in lins}
            for _ in range(args.rounds):
                for k, lin in lins.items():
                    best = 1e9
                    for _ in range(reps):
                        t0 = time.perf_counter()
                        lin(x, out=out)
                        best = min(best, time.perf_counter() - t0)
                    t[k].append(best)
            t = {k: np.array(v) for k, v in t.items()}
            gf = 2 * M * N * K / 1e9
            r = t["panels"] / t["in place"]
            print(f"threads {nth:2d} M {M:4d}: GFLOP/s (best) panels {gf / t['panels'].min():6.0f}, in place "
                  f"{gf / t['in place'].min():6.0f}, int8 {gf / t['int8'].min():6.0f} | in place / panels "
                  f"{np.median(r):.3f} (rounds {r.min():.2f}-{r.max():.2f}); / int8: in place "
                  f"{np.median(t['int8'] / t['in place']):.3f}, panels {np.median(t['int8'] / t['panels']):.3f}",
                  flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
