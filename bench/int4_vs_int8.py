"""int8 vs int4 (group 128) GEMM at the DiT shapes, M = 2048: best of 5 calls in 3 alternated
rounds, so a machine whose speed drifts still gives a fair ratio.

    python3 bench/int4_vs_int8.py [threads]
"""
import sys, time
import numpy as np
import h3cy
th = int(sys.argv[1]) if len(sys.argv) > 1 else 16
SH = {"qkv": (7168, 5376), "out": (5376, 7168), "up": (28672, 5376), "down": (5376, 14336)}
rng = np.random.default_rng(0)
for name, (N, K) in SH.items():
    w = (rng.standard_normal((N, K), dtype=np.float32) * 0.02)
    x = rng.standard_normal((2048, K), dtype=np.float32)
    lins = {m: h3cy.ops.Linear(w, weights=m, threads=th, **({"group_size": 128} if m == "int4" else {})) for m in ("int8", "int4")}
    out = np.empty((2048, N), np.float32)
    res = {m: [] for m in lins}
    for r in range(3):
        for m, lin in lins.items():
            lin(x, out=out)
            ts = []
            for _ in range(5):
                t = time.perf_counter(); lin(x, out=out); ts.append(time.perf_counter() - t)
            res[m].append(min(ts))
    fl = 2.0 * 2048 * N * K
    print(f"{name:5s} {lins['int8'].isa} int8 " + " ".join(f"{t*1e3:.1f}" for t in res["int8"]) +
          " ms | int4 " + " ".join(f"{t*1e3:.1f}" for t in res["int4"]) +
          f" ms | int4/int8 speed {min(res['int8'])/min(res['int4']):.2f}  int8 {fl/min(res['int8'])*1e-9:.0f} GOP/s", flush=True)
