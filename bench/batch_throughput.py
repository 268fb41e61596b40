"""Throughput of ``h3cy batch`` on Ray: the same small jobs (the demo model, 64x64, 22
frames, 2 steps) through 1 and through 2 one-core actors on a local Ray instance, alternated
(1, 2, 1, 2 ...), and the driver's overhead per job (the job's wall time on the driver
minus the actor's own ``seconds``).

    PYTHONPATH=$PWD python3 bench/batch_throughput.py [--jobs 8] [--rounds 2]

Prints clips per minute for each, the ratio (2 actors / 1 actor) and the overhead.
"""
import argparse
import os
import statistics
import tempfile
import time

import ray

from h3cy import batch


def one(n_actors, jobs, outdir):
    t_start = {}
    overhead = []

    def on_event(ev):
        if ev["event"] == "job_start":
            t_start[ev["id"]] = time.perf_counter()
        elif ev["event"] == "job_end" and ev["status"] == "done":
            overhead.append(time.perf_counter() - t_start[ev["id"]] - ev["seconds"])
    t0 = time.perf_counter()
    man = batch.run(jobs, "demo", outdir, ray="auto", workers=n_actors, weights="fp32", on_event=on_event)
    wall = time.perf_counter() - t0
    assert all(m["status"] == "done" for m in man), man
    return len(jobs) / wall * 60, statistics.median(overhead)


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--jobs", type=int, default=8)
    ap.add_argument("--rounds", type=int, default=2)
    a = ap.parse_args()
    ray.init(num_cpus=2, include_dashboard=False, log_to_driver=False)
    jobs = [{"prompt": "A red fox in the snow", "seed": i, "width": 64, "height": 64, "frames": 22, "steps": 2}
            for i in range(a.jobs)]
    res = {1: [], 2: []}
    with tempfile.TemporaryDirectory() as d:
        for r in range(a.rounds):
            for n in (1, 2):
                res[n].append(one(n, jobs, os.path.join(d, f"{n}-{r}")))   # a fresh OUTDIR: nothing skipped
    for n in (1, 2):
        cpm = statistics.median(x[0] for x in res[n])
        ovh = statistics.median(x[1] for x in res[n])
        print(f"{n} actor{'s' if n > 1 else ' '} x 1 core: {cpm:6.1f} clips/min  (driver overhead per job "
              f"{ovh * 1000:.0f} ms; actor start and model load included in the clips/min)")
    ratio = statistics.median(x[0] for x in res[2]) / statistics.median(x[0] for x in res[1])
    print(f"ratio 2/1 actors: {ratio:.2f}x  ({a.jobs} jobs, {a.rounds} rounds, 64x64x22, 2 steps, demo model)")
    ray.shutdown()


if __name__ == "__main__":
    main()
