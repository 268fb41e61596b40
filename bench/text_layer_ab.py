"""h3cy int8 vs torch bf16 on one full-size Qwen3-VL-32B text layer, alternated: each round
times h3cy (best of 2 calls) and then torch (best of 2 calls), so that both see the same
machine state; prints per-round ratios and the ratio of the medians.  On a shared 2-core
VM torch's bf16 time moves by ~20% from one minute to the next, which a table that times
each implementation once per run turns straight into its ratio.  Each timed call comes
after --settle seconds of sleep: at 16 threads, torch's OpenMP workers still spinning from
its last call (or h3cy's pool from its own) otherwise take cores from the next call.

    PYTHONPATH=$PWD python3 bench/text_layer_ab.py --threads 2 --L 32 128 512 --rounds 7
"""
import argparse
import os
import sys
import time

import numpy as np

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from text_layer_table import h3cy_run, layer_input, layer_weights, torch_layer  # noqa: E402


def best_of(fn, n, settle=0.0, clock=time.perf_counter):
    """The fastest of n timed calls of fn; with settle > 0, sleep that long (untimed) before
    each call, so that the other implementation's idle worker threads have stopped spinning
    (libgomp's after each torch region, h3cy's pool's after each call) and do not take
    cores from the call being timed.  clock: wall time by default; time.process_time gives
    the process's CPU seconds (all its threads), steadier than wall time on a shared box."""
    ts = []
    for _ in range(n):
        if settle:
            time.sleep(settle)
        t0 = clock()
        fn()
        ts.append(clock() - t0)
    return min(ts)


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--threads", type=int, default=2)
    ap.add_argument("--L", type=int, nargs="+", default=[32, 128, 512])
    ap.add_argument("--rounds", type=int, default=7)
    ap.add_argument("--mode", default="int8")
    ap.add_argument("--settle", type=float, default=0.05,
                    help="seconds of sleep before each timed call (0: back to back)")
    a = ap.parse_args()
    import torch
    torch.set_num_threads(a.threads)
    t = layer_weights()
    print(f"# h3cy {a.mode} vs torch bf16, {a.threads} threads, {a.rounds} alternated rounds "
          f"(best of 2 calls each, {a.settle:g} s settle before each call)")
    print(f"{'L':>5} {'h3cy median':>12} {'torch median':>13} {'ratio of medians':>17} {'rounds >= 2x':>13}  per-round ratios")
    for L in a.L:
        x0 = layer_input(L)
        h, tr = h3cy_run(t, a.mode, a.threads, x0), torch_layer(t, x0, "bfloat16")
        h(); tr()
        hs, ts = [], []
        for _ in range(a.rounds):
            hs.append(best_of(h, 2, a.settle))
            ts.append(best_of(tr, 2, a.settle))
        r = np.array(ts) / np.array(hs)
        print(f"{L:>5} {np.median(hs):>11.3f}s {np.median(ts):>12.3f}s {np.median(ts) / np.median(hs):>16.2f}x "
              f"{int((r >= 2).sum()):>7d}/{a.rounds}     " + " ".join(f"{x:.2f}" for x in r), flush=True)
        del h, tr


if __name__ == "__main__":
    main()
