"""Check one ISA path against the scalar reference and time it, on a machine of choice.

    python bench/check_isa.py amx [--threads 16] [--full]

For every weights mode: awkward shapes vs the `ref` path (int modes must be bit-identical,
float modes close), then (with --full) GFLOP/s at the H3 DiT shapes with M = 2048 beside
numpy and, when importable, torch F.linear in fp32 and bf16.  Prints a table; exits 1 on
any mismatch.  Used for the AMX path, which this project's own CI machine lacks.
"""
import argparse
import sys
import time

import numpy as np

import h3cy


def best_time(fn, repeat=3):
    fn()
    t = float("inf")
    for _ in range(repeat):
        t0 = time.perf_counter()
        fn()
        t = min(t, time.perf_counter() - t0)
    return t


def check(isa, threads):
    rng = np.random.default_rng(0)
    bad = 0
    for (M, N, K) in [(1, 5, 7), (3, 17, 33), (17, 40, 100), (64, 33, 129), (257, 70, 300),
                      (40, 64, 1024), (100, 96, 640)]:
        w = rng.standard_normal((N, K), dtype=np.float32)
        x = rng.standard_normal((M, K), dtype=np.float32)
        want64 = x.astype(np.float64) @ w.astype(np.float64).T
        for mode, kw in [("fp32", {}), ("bf16", {}), ("fp16", {}), ("int8", {}),
                         ("int8", {"act_group": 64}), ("int4", {"group_size": 64}),
                         ("int4", {"group_size": 128}), ("int4", {"group_size": 32})]:
            a = h3cy.ops.Linear(w, weights=mode, isa=isa, threads=threads, **kw)
            r = h3cy.ops.Linear(w, weights=mode, isa="ref", threads=1, **kw)
            ya, yr = a(x), r(x)
            if mode.startswith("int"):
                ok = np.array_equal(ya, yr)
                err = float(np.max(np.abs(ya - yr)))
            else:
                err = float(np.linalg.norm(ya - yr) / np.linalg.norm(yr))
                ok = err < (1e-2 if mode == "bf16" else 1e-5)
            e64 = float(np.linalg.norm(ya - want64) / np.linalg.norm(want64))
            if not ok:
                bad += 1
            print(f"{'ok ' if ok else 'BAD'} {isa} {mode:5s} {str(kw):22s} M={M:4d} N={N:4d} "
                  f"K={K:5d} vs-ref {err:.2e} vs-f64 {e64:.2e}")
    return bad


def full(isa, threads):
    try:
        import torch
        torch.set_num_threads(threads)
    except ImportError:
        torch = None
    M = 2048
    for (N, K) in [(7168, 5376), (5376, 7168), (28672, 5376), (5376, 14336)]:
        rng = np.random.default_rng(0)
        w = (rng.standard_normal((N, K), dtype=np.float32) * 0.02).astype(np.float32)
        x = rng.standard_normal((M, K), dtype=np.float32)
        flop = 2.0 * M * N * K
        rows = [("numpy fp32", best_time(lambda: x @ w.T))]
        if torch is not None:
            tw, tx = torch.from_numpy(w), torch.from_numpy(x)
            rows.append(("torch fp32", best_time(lambda: torch.nn.functional.linear(tx, tw))))
            tb, xb = tw.bfloat16(), tx.bfloat16()
            rows.append(("torch bf16", best_time(lambda: torch.nn.functional.linear(xb, tb))))
        out = np.empty((M, N), np.float32)
        for mode, kw in [("fp32", {}), ("bf16", {}), ("int8", {}), ("int4", {"group_size": 128})]:
            lin = h3cy.ops.Linear(w, weights=mode, isa=isa, threads=threads, **kw)
            rows.append((f"h3cy {mode} ({isa})", best_time(lambda: lin(x, out=out))))
        base = dict(rows).get("torch bf16", rows[0][1])
        print(f"\nW[{N},{K}] M={M} threads={threads}")
        for name, t in rows:
            print(f"  {name:24s} {t:8.4f} s {flop / t / 1e9:9.1f} GFLOP/s  {base / t:5.2f}x torch-bf16")


def main():
    p = argparse.ArgumentParser()
    p.add_argument("isa")
    p.add_argument("--threads", type=int, default=h3cy.get_num_threads())
    p.add_argument("--full", action="store_true")
    a = p.parse_args()
    print("available:", h3cy.ops.available_isas(), "features:", " ".join(h3cy.ops.cpu_features()))
    bad = check(a.isa, a.threads)
    if a.full:
        full(a.isa, a.threads)
    print(f"\n{'FAILED: %d mismatches' % bad if bad else 'all ok'}")
    return 1 if bad else 0


if __name__ == "__main__":
    sys.exit(main())
