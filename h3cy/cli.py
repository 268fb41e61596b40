"""h3cy command line.

    h3cy selfcheck [--threads N] [--isa NAME] [--size M,N,K]

prints the kernel path h3cy selected, the thread count, and a GEMM figure for every
weights mode (checked against numpy first).  Later commands (generate) arrive with
the pipeline.
"""
import argparse
import sys
import time

import numpy as np


def _time(fn, repeat=3):
    fn()
    best = float("inf")
    for _ in range(repeat):
        t0 = time.perf_counter()
        fn()
        best = min(best, time.perf_counter() - t0)
    return best


def selfcheck(args):
    import h3cy
    from h3cy import ops

    threads = args.threads or h3cy.get_num_threads()
    isa = ops.resolve_isa(args.isa)
    print(f"h3cy {h3cy.__version__}")
    print(f"ISA path     : {isa}   (available: {', '.join(ops.available_isas())})")
    print(f"CPU features : {' '.join(ops.cpu_features()) or '-'}")
    print(f"threads      : {threads}")
    M, N, K = args.size
    rng = np.random.default_rng(0)
    w = (rng.standard_normal((N, K), dtype=np.float32) * 0.05).astype(np.float32)
    x = rng.standard_normal((M, K), dtype=np.float32)
    want = x.astype(np.float64) @ w.astype(np.float64).T
    flop = 2.0 * M * N * K
    t_np = _time(lambda: x @ w.T)
    print(f"GEMM M={M} N={N} K={K}: numpy fp32 {flop / t_np / 1e9:8.1f} GFLOP/s")
    ok = True
    bounds = {"fp32": 1e-5, "bf16": 1e-2, "fp16": 2e-3, "int8": 3e-2, "int4": 2e-1}
    for mode in ops.WEIGHT_MODES:
        lin = ops.Linear(w, weights=mode, isa=isa, threads=threads)
        out = np.empty((M, N), np.float32)
        y = lin(x, out=out)
        err = float(np.linalg.norm(y - want) / np.linalg.norm(want))
        good = err <= bounds[mode]
        ok &= good
        t = _time(lambda: lin(x, out=out))
        print(f"  h3cy {mode:5s} {flop / t / 1e9:8.1f} GFLOP/s  ({np.median(t_np) / t:4.2f}x numpy)"
              f"  rel-L2 vs float64 {err:.1e} {'ok' if good else 'FAILED'}")
    print("selfcheck: " + ("ok" if ok else "FAILED"))
    return 0 if ok else 1


def _size(text):
    try:
        m, n, k = (int(v) for v in text.split(","))
    except ValueError:
        raise argparse.ArgumentTypeError("size must be M,N,K (three integers)")
    if min(m, n, k) < 1:
        raise argparse.ArgumentTypeError("size values must be >= 1")
    return m, n, k


def main(argv=None):
    p = argparse.ArgumentParser(prog="h3cy", description="MiniMax-H3 on the CPU")
    sub = p.add_subparsers(dest="cmd", required=True)
    sc = sub.add_parser("selfcheck", help="print the kernel path, threads and GEMM speed")
    sc.add_argument("--threads", type=int, default=None)
    sc.add_argument("--isa", default=None, help="ref, avx2, avx512, amx or neon")
    sc.add_argument("--size", type=_size, default=(512, 2048, 2048), help="M,N,K")
    args = p.parse_args(argv)
    if args.cmd == "selfcheck":
        return selfcheck(args)
    return 2


if __name__ == "__main__":
    sys.exit(main())
