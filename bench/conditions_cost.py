"""What keyframe conditions cost in h3cy.denoise: seconds per denoiser evaluation of a
first/last-frame request (I2VA with one keyframe, FL2VA with two) over a text-only one
(T2VA) at the same geometry, beside the packed rows' ratio, in the Cython loop, on
full-size blocks (synthetic weights of the released shapes; ``--blocks`` of the 50).

Each keyframe adds one latent frame of rows ((h/2)·(w/2), 256 at 512²) after the text; the
blocks' GEMMs grow with the rows and attention with their square, so the time ratio should
sit between rows(I2VA)/rows(T2VA) and its square.  Runs alternate (T2VA, I2VA, FL2VA, ...)
so that a change of machine load hits all three; the time is the Cython loop's own
time inside the evaluations (``loop_stats["eval_seconds"]`` / evaluations), the minimum of
``--reps``.

    python bench/conditions_cost.py [--blocks 2] [--steps 2] [--weights int8] [--threads 16]
        [--width 512 --height 512 --frames 22]

On the shared 2-core box the numbers are noise; the meaningful run is on a 16-core machine.
"""
import argparse
import platform

import numpy as np

import h3cy
from h3cy.models.dit import DiT
from synthetic import SyntheticSource


def main():
    p = argparse.ArgumentParser()
    p.add_argument("--blocks", type=int, default=2)
    p.add_argument("--steps", type=int, default=2)
    p.add_argument("--weights", default="int8")
    p.add_argument("--threads", type=int, default=None)
    p.add_argument("--reps", type=int, default=3)
    p.add_argument("--width", type=int, default=512)
    p.add_argument("--height", type=int, default=512)
    p.add_argument("--frames", type=int, default=22)
    a = p.parse_args()
    dit = DiT(SyntheticSource(shared=True, num_layers=a.blocks, num_refiner_layers=1),
              weights=a.weights, threads=a.threads)
    g = h3cy.Geometry(a.width, a.height, a.frames)
    L = 40
    rng = np.random.default_rng(0)
    pe = rng.standard_normal((L, dit.config["text_dim"]), dtype=np.float32)
    tags = np.ones(L, np.int64)
    C = dit.config["in_channels"]
    z = [rng.standard_normal((C, 1, g.h, g.w), dtype=np.float32) for _ in range(2)]
    cases = {"T2VA": None, "I2VA": [(0, z[0])], "FL2VA": [(0, z[0]), (-1, z[1])]}
    rows = {k: h3cy.Layout(g, L, condition_frames=[0, g.T - 1][:0 if c is None else len(c)]).S
            for k, c in cases.items()}
    h3cy.denoise(dit, pe, g, steps=1, seed=0, text_tags=tags, conditions=cases["FL2VA"])    # warm-up
    best = {k: float("inf") for k in cases}
    for _ in range(a.reps):
        for k, c in cases.items():
            h3cy.denoise(dit, pe, g, steps=a.steps, seed=0, text_tags=tags, conditions=c)
            st = dit.loop_stats            # time inside the evaluations (not the per-call setup)
            assert st["loop"] == "cython"
            best[k] = min(best[k], st["eval_seconds"] / st["evaluations"])
    print(f"# {platform.processor() or platform.machine()}, ISA {h3cy.ops.active_isa()}, threads {dit.threads}, "
          f"{a.blocks} full-size blocks, {a.weights}, {g.width}x{g.height}x{g.frames}, L={L}, "
          f"min of {a.reps} runs of {a.steps} steps")
    print("| request | rows S | s / evaluation | time / T2VA | rows / T2VA |")
    print("|---|---|---|---|---|")
    for k in cases:
        print(f"| {k} | {rows[k]} | {best[k]:.3f} | {best[k] / best['T2VA']:.3f} | {rows[k] / rows['T2VA']:.3f} |")


if __name__ == "__main__":
    main()
