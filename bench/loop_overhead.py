"""Loop and hook overhead of h3cy.denoise, for the Python loop (H3CY_LOOP_PYTHON=1) and the
Cython loop, with a DiT of realistic block shapes but few blocks.

- Python loop: wall time of denoise vs the sum of its DiT.forward calls (timed by wrapping
  forward, which only the Python loop calls).
- Cython loop: wall time vs the time the loop itself spent inside its denoiser evaluations
  (``dit.loop_stats["eval_seconds"]``: projections, blocks, final layer; not the Python
  calls between blocks), and vs the Python loop's forward sum (same work).
- each with no hooks and with no-op on_step + on_progress (hook overhead), and a cancel
  token polled after every block.
- ``--tiny``: also a tiny model at many steps, where the loop's own cost dominates
  (seconds per step of each loop; shows what the per-step Python work costs).

    python bench/loop_overhead.py [--blocks 2] [--steps 3] [--weights int8] [--threads 2]
"""
import argparse
import threading
import time

import numpy as np

import h3cy
from h3cy import _config
from h3cy.models.dit import DiT
from synthetic import SyntheticSource


def measure(dit, pe, g, steps, main_thread=True, reps=2):
    """Alternate the loops (python, cython, python, ...) so that a change of machine load
    hits both; returns {loop: [(run, wall, eval)]} summed over the repetitions."""
    fwd = DiT.forward
    spent = []

    def timed_forward(*args, **kw):
        t0 = time.perf_counter()
        r = fwd(dit, *args, **kw)
        spent.append(time.perf_counter() - t0)
        return r
    for flag in (True, False):                          # warm-up: AdaLN tables, workspaces
        _config._ENV_LOOP_PYTHON = flag
        h3cy.denoise(dit, pe, g, steps=1, seed=0)
    acc = {"python": {}, "cython": {}}
    for _ in range(reps):
        for loop in ("python", "cython"):
            _config._ENV_LOOP_PYTHON = loop == "python"
            if loop == "python":
                dit.forward = timed_forward
            for name, wall in _run_each(dit, pe, g, steps, main_thread, spent):
                ev = sum(spent) if loop == "python" else dit.loop_stats["eval_seconds"]
                assert dit.loop_stats["loop"] == loop
                w0, e0 = acc[loop].get(name, (0.0, 0.0))
                acc[loop][name] = (w0 + wall, e0 + ev)
            if loop == "python":
                del dit.forward
    _config._ENV_LOOP_PYTHON = False
    return {loop: [(name, w, e) for name, (w, e) in runs.items()] for loop, runs in acc.items()}


def _run_each(dit, pe, g, steps, main_thread, spent):
    for name, kw in (("no hooks", {}),
                     ("no-op on_step+on_progress+cancel",
                      dict(on_step=lambda st: None, on_progress=lambda d, t, ph: None,
                           cancel=h3cy.CancelToken()))):
        spent.clear()
        box = {}

        def go():
            t0 = time.perf_counter()
            h3cy.denoise(dit, pe, g, steps=steps, seed=0, **kw)
            box["wall"] = time.perf_counter() - t0
        if main_thread:
            go()
        else:
            th = threading.Thread(target=go)
            th.start()
            th.join()
        yield name, box["wall"]


def report(title, res):
    print(title)
    print(f"  {'loop':7s} {'run':34s} {'wall s':>9s} {'eval s':>9s} {'overhead':>9s}")
    for loop, rows in res.items():
        for name, wall, fw in rows:
            print(f"  {loop:7s} {name:34s} {wall:9.3f} {fw:9.3f} {100 * (wall - fw) / fw:8.3f}%")
    for loop, rows in res.items():
        o0 = (rows[0][1] - rows[0][2]) / rows[0][2]
        o1 = (rows[1][1] - rows[1][2]) / rows[1][2]
        print(f"  hook overhead ({loop}): {100 * (o1 - o0):+.3f}% (overhead with hooks - without)")
    py, cy = res["python"], res["cython"]
    print(f"  eval time cython / python (same work, alternated runs): "
          f"{cy[0][2] / py[0][2]:.4f} (no hooks), {cy[1][2] / py[1][2]:.4f} (hooks)")


def main():
    p = argparse.ArgumentParser()
    p.add_argument("--blocks", type=int, default=2)
    p.add_argument("--steps", type=int, default=3)
    p.add_argument("--weights", default="int8")
    p.add_argument("--threads", type=int, default=None)
    p.add_argument("--tiny", action="store_true")
    p.add_argument("--reps", type=int, default=2)
    p.add_argument("--worker-thread", action="store_true", help="run denoise off the main thread")
    a = p.parse_args()
    main_thread = not a.worker_thread
    where = "main thread" if main_thread else "worker thread"
    if a.tiny:
        cfg = dict(num_attention_heads=2, attention_head_dim=16, hidden_size=32, num_layers=4,
                   num_refiner_layers=1, ffn_dim=48, in_channels=24, audio_in_channels=32,
                   patch_size=[1, 2, 2], text_dim=64, freq_dim=16, time_embed_hidden_dim=40,
                   time_embed_dim=20, rope_freq_dim=2)
        dit = DiT(SyntheticSource(config=dict(SyntheticSource().config, **cfg), shared=True),
                  weights="fp32", threads=a.threads)
        g = h3cy.Geometry(64, 64, 22)
        pe = np.random.default_rng(0).standard_normal((6, 64), dtype=np.float32)
        res = measure(dit, pe, g, 1000, main_thread, a.reps)
        report(f"tiny model (hidden 32, 4 blocks), fp32, threads {dit.threads}, S={h3cy.Layout(g, 6).S}, "
               f"1000 steps, {where}", res)
        for loop, rows in res.items():
            print(f"  {loop}: {1e3 * rows[0][1] / (1000 * a.reps):.3f} ms per step (no hooks)")
        return
    dit = DiT(SyntheticSource(shared=True, num_layers=a.blocks, num_refiner_layers=1),
              weights=a.weights, threads=a.threads)
    g = h3cy.Geometry(512, 512, 22)
    pe = np.random.default_rng(0).standard_normal((6, 5120), dtype=np.float32)
    res = measure(dit, pe, g, a.steps, main_thread, a.reps)
    report(f"{a.blocks} full-size blocks, {a.weights}, threads {dit.threads}, S=1872, {a.steps} steps, "
           f"{where}", res)


if __name__ == "__main__":
    main()
