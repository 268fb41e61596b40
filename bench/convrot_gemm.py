"""int8 "convrot" (Comfy's rotated int8 files: x rotated by the block Hadamard, G = 256,
then quantised per row, then h3cy's int8 GEMM) against h3cy's own int8 and torch, at the
MiniMax-H3 DiT shapes, M = 2048 and M = 128 rows: best of N calls per implementation in
alternated rounds, ms and ratios of medians.

    python3 bench/convrot_gemm.py [--threads 2] [--rounds 3] [--calls 3] [--m 2048,128] [--shapes qkv,out]
                                  [--no-torch] [--error [--no-speed]]

Then ``--error``: does the rotation lower the error of h3cy's own int8 mode?  Weights and
activations with outlier input channels (a few columns ~30x the rest, as DiT and LLM
activations have), relative L2 against float64, for int8 with whole-row activation scales,
int8 with 1024-channel activation groups (the DiT FFN-down default), and both rotated.
"""
import argparse
import os
import sys
import time
import warnings

import numpy as np

import h3cy

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from text_layer_ab import best_of  # noqa: E402


def add_timing_args(ap):
    """The arguments every GEMM table here takes: threads, alternated rounds, calls per round."""
    ap.add_argument("--threads", type=int, default=2)
    ap.add_argument("--rounds", type=int, default=3)
    ap.add_argument("--calls", type=int, default=3)


def add_shape_args(ap, shapes):
    """--m (rows, comma-separated), --shapes (of ``shapes``), --no-torch."""
    ap.add_argument("--m", type=lambda s: [int(v) for v in s.split(",")], default=[2048, 128])
    ap.add_argument("--shapes", default=",".join(shapes), help="of " + ",".join(shapes))
    ap.add_argument("--no-torch", action="store_true")


def machine_line(args, unit="median ms"):
    """The table's first line: threads, h3cy's path and this CPU's features that decide it."""
    feats = [f for f in h3cy.ops.cpu_features() if f.startswith("avx") or f in ("asimddp", "amx_int8")]
    return (f"# {args.threads} threads, isa {h3cy.ops.active_isa()} ({' '.join(feats)}), best of {args.calls} "
            f"calls per round, {args.rounds} alternated rounds; {unit}")


def time_row(lins, x, w, args):
    """Each linear on x (and torch's products of w, unless --no-torch), alternated (CPU
    seconds of the process where args has cpu_time set, else wall time); returns
    (t, r): t(name) its median ms as text, r(a, b) the speed of a over b ('-' if absent)."""
    out = np.empty((x.shape[0], w.shape[0]), np.float32)
    runs = {k: (lambda lin=lin: lin(x, out=out)) for k, lin in lins.items()}
    if not args.no_torch:
        runs.update(torch_runs(w, x, args.threads))
    clock = time.process_time if getattr(args, "cpu_time", False) else time.perf_counter
    med = alternated_ms(runs, args.rounds, args.calls, clock=clock)
    t = lambda k: f"{med[k]:.1f}" if k in med else "-"  # noqa: E731
    r = lambda a, b: f"{med[b] / med[a]:.2f}" if a in med and b in med else "-"  # noqa: E731
    return t, r


def alternated_ms(runs, rounds, calls, clock=time.perf_counter):
    """{name: median ms}: every run once per round (best of `calls` after a warm-up), in
    `rounds` alternated rounds, so a machine whose speed drifts still gives fair ratios
    (clock: best_of's)."""
    res = {k: [] for k in runs}
    for _ in range(rounds):
        for k, fn in runs.items():
            fn()
            res[k].append(best_of(fn, calls, clock=clock))
    return {k: float(np.median(v)) * 1e3 for k, v in res.items()}

SHAPES = {"qkv": (7168, 5376), "out": (5376, 7168), "up": (28672, 5376), "down": (5376, 14336)}
GROUP = 256


def convrot_weights(w, group=GROUP):
    """Comfy's recipe in numpy: W H per group, per-row scale amax/127, rounded."""
    N, K = w.shape
    wr = h3cy.ops.hadamard(np.ascontiguousarray(w, np.float32), group)
    s = (np.abs(wr).max(axis=1) / np.float32(127)).astype(np.float32)
    q = np.clip(np.rint(wr / s[:, None]), -127, 127).astype(np.int8)
    return q, s


def torch_runs(w, x, threads):
    try:
        import torch
    except ImportError:
        return {}
    torch.set_num_threads(threads)
    N, K = w.shape
    tw, tx = torch.from_numpy(w), torch.from_numpy(x)
    lin = torch.nn.Linear(K, N, bias=False)
    with torch.no_grad():
        lin.weight.copy_(tw)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        q = torch.ao.quantization.quantize_dynamic(torch.nn.Sequential(lin), {torch.nn.Linear}, dtype=torch.qint8)

    def fp32():
        with torch.inference_mode():
            torch.nn.functional.linear(tx, tw)

    def int8dyn():
        with torch.inference_mode():
            q(tx)
    return {"torch fp32": fp32, "torch int8dyn": int8dyn}


def speed(args):
    rng = np.random.default_rng(0)
    print(machine_line(args))
    print("| shape | M | h3cy int8 | convrot int8 | torch fp32 | torch int8dyn | convrot / int8 speed | "
          "convrot / torch fp32 | convrot / torch int8dyn |")
    print("|---|---|---|---|---|---|---|---|---|")
    for name, (N, K) in SHAPES.items():
        if name not in args.shapes.split(","):
            continue
        w = rng.standard_normal((N, K), dtype=np.float32) * 0.02
        q, s = convrot_weights(w)
        lins = {"h3cy int8": h3cy.ops.Linear(w, weights="int8", threads=args.threads),
                "convrot int8": h3cy.ops.Linear.from_int8(q, s, rot_group=GROUP, threads=args.threads)}
        for M in args.m:
            x = rng.standard_normal((M, K), dtype=np.float32)
            # agreement before timing (the rotation's result is the same product)
            ref = x.astype(np.float64) @ w.T.astype(np.float64) if M <= 128 else None
            if ref is not None:
                for k, lin in lins.items():
                    e = np.linalg.norm(lin(x) - ref) / np.linalg.norm(ref)
                    assert e < 3e-2, (k, e)
            t, r = time_row(lins, x, w, args)
            print(f"| {name} {N}x{K} | {M} | {t('h3cy int8')} | {t('convrot int8')} | {t('torch fp32')} | "
                  f"{t('torch int8dyn')} | {r('convrot int8', 'h3cy int8')} | {r('convrot int8', 'torch fp32')} | "
                  f"{r('convrot int8', 'torch int8dyn')} |", flush=True)


def outlier_case(rng, N, K, M, n_out=8, scale=30.0):
    """w, x with n_out outlier input channels (x's columns scale x larger; w's ~3x)."""
    cols = rng.choice(K, n_out, replace=False)
    w = rng.standard_normal((N, K), dtype=np.float32) * 0.02
    w[:, cols] *= 3.0
    x = rng.standard_normal((M, K), dtype=np.float32)
    x[:, cols] *= scale
    return w, x


def error(args):
    rng = np.random.default_rng(1)
    print(f"# relative L2 vs float64 of y = x W^T; {args.error_cases} cases per row; int8 activation "
          "scales per whole row (row) or per 1024 channels (ag1024); rot: rotated by H_256 first")
    print("| case | int8 row | int8 row + rot | int8 ag1024 | int8 ag1024 + rot |")
    print("|---|---|---|---|---|")
    cases = [("no outliers", 0, 1.0), ("8 outlier channels x10", 8, 10.0), ("8 outlier channels x30", 8, 30.0),
             ("8 outlier channels x100", 8, 100.0), ("64 outlier channels x30", 64, 30.0)]
    N, K, M = 1024, 14336, 64          # the FFN down-projection's K, where int8 uses act groups
    for label, n_out, scale in cases:
        errs = {k: [] for k in ("row", "row+rot", "ag", "ag+rot")}
        for _ in range(args.error_cases):
            w, x = outlier_case(rng, N, K, M, n_out or 1, scale if n_out else 1.0)
            ref = x.astype(np.float64) @ w.T.astype(np.float64)
            for k, kw in (("row", {}), ("row+rot", {"rot_group": GROUP}), ("ag", {"act_group": 1024}),
                          ("ag+rot", {"act_group": 1024, "rot_group": GROUP})):
                y = h3cy.ops.Linear(w, weights="int8", threads=args.threads, **kw)(x)
                errs[k].append(np.linalg.norm(y - ref) / np.linalg.norm(ref))
        m = {k: f"{np.mean(v):.2e}" for k, v in errs.items()}
        print(f"| {label} | {m['row']} | {m['row+rot']} | {m['ag']} | {m['ag+rot']} |", flush=True)


def main():
    ap = argparse.ArgumentParser()
    add_timing_args(ap)
    add_shape_args(ap, SHAPES)
    ap.add_argument("--no-speed", action="store_true")
    ap.add_argument("--error", action="store_true")
    ap.add_argument("--error-cases", type=int, default=3)
    args = ap.parse_args()
    warnings.simplefilter("ignore", RuntimeWarning)
    if not args.no_speed:
        speed(args)
    if args.error:
        error(args)


if __name__ == "__main__":
    main()
