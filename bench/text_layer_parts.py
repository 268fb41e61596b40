"""Where one full-size Qwen3-VL-32B text layer's time goes: each of its GEMMs (h3cy.ops.Linear
as the layer holds them) and its causal GQA attention timed alone, beside the whole layer and
torch's bf16 F.linear on the same shapes, same threads.  Medians of --reps.

    PYTHONPATH=$PWD python3 bench/text_layer_parts.py --threads 16 --L 32 128 512 --weights int8
"""
import argparse
import os
import sys

import numpy as np

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from text_layer_table import HD, HEADS, KV, h3cy_layer, h3cy_run, layer_input, layer_weights, timeit  # noqa: E402


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--threads", type=int, default=2)
    ap.add_argument("--L", type=int, nargs="+", default=[32, 128, 512])
    ap.add_argument("--weights", default="int8")
    ap.add_argument("--reps", type=int, default=5)
    a = ap.parse_args()
    import h3cy
    t = layer_weights()
    enc, layer = h3cy_layer(t, a.weights, a.threads)
    try:
        import torch
        torch.set_num_threads(a.threads)
    except ImportError:
        torch = None
    att = h3cy.ops.Attention(causal=True, threads=a.threads)
    print(f"# {a.weights}, {a.threads} threads, isa {enc.isa}; seconds (median of {a.reps})")
    print(f"{'L':>5s} {'part':>10s} {'N':>6s} {'K':>6s} {'h3cy':>9s} {'torch bf16':>11s} {'ratio':>6s}")
    rng = np.random.default_rng(1)
    for L in a.L:
        total = 0.0
        for name, lin in layer.linears.items():
            N, K = lin.N, lin.K
            x = rng.standard_normal((L, K), dtype=np.float32)
            # into a kept output, as the layer's GEMMs write (not a fresh [L, N] array per call)
            out = np.empty((L, N), np.float32)
            th = timeit(lambda: lin(x, out=out), a.reps)
            total += th
            tt = float("nan")
            if torch is not None:
                w = torch.randn(N, K, dtype=torch.bfloat16) * 0.02
                xt = torch.from_numpy(x).to(torch.bfloat16)
                with torch.inference_mode():
                    tt = timeit(lambda: torch.nn.functional.linear(xt, w), a.reps)
            print(f"{L:5d} {name:>10s} {N:6d} {K:6d} {th:9.4f} {tt:11.4f} {tt / th:6.2f}", flush=True)
        q = rng.standard_normal((L, HEADS, HD), dtype=np.float32)
        k = rng.standard_normal((L, KV, HD), dtype=np.float32)
        v = rng.standard_normal((L, KV, HD), dtype=np.float32)
        ta = timeit(lambda: att(q, k, v), a.reps)
        total += ta
        print(f"{L:5d} {'attention':>10s} {'':6s} {'':6s} {ta:9.4f}")
        tl = timeit(h3cy_run(t, a.weights, a.threads, layer_input(L)), a.reps)
        print(f"{L:5d} {'sum':>10s} {'':6s} {'':6s} {total:9.4f}   whole layer {tl:.4f}", flush=True)


if __name__ == "__main__":
    main()
