"""Loop and hook overhead of h3cy.denoise: a DiT with realistic block shapes but few
blocks, wall time of denoise vs the sum of its forwards, and with no-op hooks.

    python bench/loop_overhead.py [--blocks 2] [--steps 3] [--weights int8] [--threads 2]
"""
import argparse
import time

import numpy as np

import h3cy
from h3cy.model import DiT
from h3cy._synthetic import SyntheticSource


def main():
    p = argparse.ArgumentParser()
    p.add_argument("--blocks", type=int, default=2)
    p.add_argument("--steps", type=int, default=3)
    p.add_argument("--weights", default="int8")
    p.add_argument("--threads", type=int, default=None)
    a = p.parse_args()
    dit = DiT(SyntheticSource(shared=True, num_layers=a.blocks, num_refiner_layers=1),
              weights=a.weights, threads=a.threads)
    g = h3cy.Geometry(512, 512, 22)
    pe = np.random.default_rng(0).standard_normal((6, 5120), dtype=np.float32)
    fwd = dit.forward
    spent = []

    def timed_forward(*args, **kw):
        t0 = time.perf_counter()
        out = fwd(*args, **kw)
        spent.append(time.perf_counter() - t0)
        return out
    dit.forward = timed_forward
    h3cy.denoise(dit, pe, g, steps=1, seed=0)          # warm-up: AdaLN tables, workspaces
    rows = []
    for name, kw in (("no hooks", {}),
                     ("no-op on_step + on_progress", dict(on_step=lambda st: None,
                                                          on_progress=lambda d, t, ph: None))):
        spent.clear()
        t0 = time.perf_counter()
        h3cy.denoise(dit, pe, g, steps=a.steps, seed=0, **kw)
        wall = time.perf_counter() - t0
        rows.append((name, wall, sum(spent)))
    print(f"{a.blocks} full-size blocks, {a.weights}, threads {dit.threads}, S=1872, {a.steps} steps")
    print(f"{'run':32s} {'wall s':>8s} {'forwards s':>11s} {'overhead':>9s}")
    for name, wall, fw in rows:
        print(f"{name:32s} {wall:8.2f} {fw:11.2f} {100 * (wall - fw) / fw:8.2f}%")


if __name__ == "__main__":
    main()
