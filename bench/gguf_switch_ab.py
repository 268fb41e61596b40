"""One of the GGUF GEMM's run-time switches A/B in one process: a linear made with the switch
at value A and one at value B (h3cy._config's H3CY_GGUF_* variables, read at each linear
made), with h3cy int8 (and int4 for the 4-bit types) on the same weights beside them.  Every
round calls each linear in turn (best of a few calls), so a shared host's drift hits all alike;
the ratios are medians of the per-round ratios.

    PYTHONPATH=$PWD python3 bench/gguf_switch_ab.py [--switch Q8D] [--a 0] [--b 1] [--types Q8_0]
        [--threads 1,16] [--rounds 7] [--n 7168] [--k 5376] [--ms 2048,128] [--isa amx]

--switch Q8D, --a 0 --b 1 (the defaults): Q8_0 on the 'amx' path over decoded panels (0) and
with the file's blocks in place on the tiles (1, csrc/gguf_q8d_amx.c); --isa another path with
--b 2 runs the route there on its scalar kernel, a smoke test of this script off AMX.
--switch PF --a 0 --b 2: the next K block's weights left to the hardware (0) or prefetched (2; 1, the
default, prefetches off the amx path only).
--switch GROUP / KQ likewise (see h3cy._config)."""
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
from h3cy.weights.linears import int4_group  # noqa: E402

SWITCHES = ("Q8D", "PF", "GROUP", "KQ")


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--switch", default="Q8D", choices=SWITCHES)
    ap.add_argument("--a", default="0")
    ap.add_argument("--b", default="1")
    ap.add_argument("--types", default="Q8_0")
    ap.add_argument("--threads", default="1,16")
    ap.add_argument("--rounds", type=int, default=7)
    ap.add_argument("--n", type=int, default=7168)
    ap.add_argument("--k", type=int, default=5376)
    ap.add_argument("--ms", default="2048,128")
    ap.add_argument("--isa", default="amx")
    args = ap.parse_args()
    if args.isa not in h3cy.ops.available_isas():
        print(f"this CPU runs {h3cy.ops.available_isas()}, not {args.isa}")
        return 2
    N, K, var = args.n, args.k, "_ENV_GGUF_" + args.switch
    rng = np.random.default_rng(0)
    print(f"# {h3cy.ops.measurement.cpu_model()}; N {N} K {K}, path {args.isa}; H3CY_GGUF_{args.switch} "
          f"{args.a} (A) against {args.b} (B); {args.rounds} rounds")
    for tname in args.types.split(","):
        b = random_blocks(tname, N, K, rng)
        for nth in (int(v) for v in args.threads.split(",")):
            pool = _kernels.ThreadPool(nth)
            lins, saved = {}, getattr(_config, var)
            for name, v in (("A", args.a), ("B", args.b)):
                setattr(_config, var, v)
                lins[name] = gguf_linear(b, tname, N, K, args.isa, pool)
            setattr(_config, var, saved)
            if args.switch == "Q8D" and lins["A"]._c.gguf_q8d == lins["B"]._c.gguf_q8d:
                print(f"the {args.isa} path takes the Q8_0 route in both (or neither) here (--b 2 off AMX)")
                return 2
            base = "int4" if tname in ("Q4_K", "Q4_0", "IQ4_XS", "IQ4_NL") else "int8"
            kw = {"group_size": int4_group(K)} if base == "int4" else {}   # the models' group (128 here)
            lins[base] = h3cy.ops.Linear(lins["A"]._c.dequantized(), weights=base, isa=args.isa, threads=pool, **kw)
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
                r = t["A"] / t["B"]
                print(f"{tname} threads {nth:2d} M {M:4d}: GFLOP/s (best) A {gf / t['A'].min():6.0f}, B "
                      f"{gf / t['B'].min():6.0f}, {base} {gf / t[base].min():6.0f} | B / A {np.median(r):.3f} "
                      f"(rounds {r.min():.2f}-{r.max():.2f}); / {base}: B {np.median(t[base] / t['B']):.3f}, "
                      f"A {np.median(t[base] / t['A']):.3f}", flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
