"""h3cy int8 vs int4 (group 128) GEMM at the DiT shapes, M = 2048, and, when torch is
installed, torch's int8 dynamic-quantised Linear: best of 5 calls per implementation in
alternated rounds, so that a machine whose speed drifts still gives fair ratios.

    python3 bench/int4_vs_int8.py [--threads 2] [--rounds 3] [--no-torch]
"""
import argparse
import os
import sys
import warnings

import numpy as np

import h3cy

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from text_layer_ab import best_of  # noqa: E402

SHAPES = {"qkv": (7168, 5376), "out": (5376, 7168), "up": (28672, 5376), "down": (5376, 14336)}


def best(fn, n=5):
    fn()  # warm-up: first-touch of the output and workspace
    return best_of(fn, n)


def torch_int8dyn(w, x, threads):
    try:
        import torch
    except ImportError:
        return None
    torch.set_num_threads(threads)
    N, K = w.shape
    lin = torch.nn.Linear(K, N, bias=False)
    with torch.no_grad():
        lin.weight.copy_(torch.from_numpy(w))
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        q = torch.ao.quantization.quantize_dynamic(torch.nn.Sequential(lin), {torch.nn.Linear}, dtype=torch.qint8)
    tx = torch.from_numpy(x)

    def run():
        with torch.inference_mode():
            q(tx)
    return run


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--threads", type=int, default=2)
    ap.add_argument("--rounds", type=int, default=3)
    ap.add_argument("--no-torch", action="store_true")
    args = ap.parse_args()
    rng = np.random.default_rng(0)
    print(f"# M = 2048, {args.threads} threads, best of 5 calls per round, {args.rounds} alternated rounds; ms per round")
    for name, (N, K) in SHAPES.items():
        w = rng.standard_normal((N, K), dtype=np.float32) * 0.02
        x = rng.standard_normal((2048, K), dtype=np.float32)
        out = np.empty((2048, N), np.float32)
        runs = {}
        for m in ("int8", "int4"):
            lin = h3cy.ops.Linear(w, weights=m, threads=args.threads, **({"group_size": 128} if m == "int4" else {}))
            runs[m] = (lambda lin=lin: lin(x, out=out))
        isa = lin.isa
        if not args.no_torch:
            t = torch_int8dyn(w, x, args.threads)
            if t is not None:
                runs["torch int8dyn"] = t
        res = {m: [] for m in runs}
        for _ in range(args.rounds):
            for m, fn in runs.items():
                res[m].append(best(fn))
        med = {m: float(np.median(v)) for m, v in res.items()}
        line = f"{name:5s} {isa:7s} " + " | ".join(f"{m} " + " ".join(f"{t * 1e3:.1f}" for t in v) for m, v in res.items())
        line += f" || int4/int8 speed {med['int8'] / med['int4']:.2f}"
        if "torch int8dyn" in med:
            line += f", int8/torch {med['torch int8dyn'] / med['int8']:.2f}"
        print(line + f", int8 {2.0 * 2048 * N * K / med['int8'] * 1e-9:.0f} GOP/s (ratios of medians)", flush=True)


if __name__ == "__main__":
    main()
