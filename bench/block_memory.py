"""Peak resident memory and time of one full-size H3 block per weights mode, each in a
fresh process (so the peaks do not mix), plus the extrapolation to a full forward (50
blocks) and to 20 steps.

    python bench/block_memory.py [--S 2048] [--threads 2] [--modes bf16,int8,int4]
"""
import argparse
import json
import resource
import subprocess
import sys
import time

CHILD = r"""
import json, resource, sys, time
import numpy as np
sys.path.insert(0, "bench")
from test_bench_block import block_inputs, h3cy_block
mode, S, threads = sys.argv[1], int(sys.argv[2]), int(sys.argv[3])
rss0 = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss
t0 = time.perf_counter(); d = h3cy_block(mode, threads); load = time.perf_counter() - t0
h0, rows, tables, pos = block_inputs(S)
ang = (pos[:, :, None] * d.inv_freq[None, None, :]).reshape(S, -1).astype(np.float32)
cos, sin = np.cos(ang).astype(np.float32), np.sin(ang).astype(np.float32)
best = 1e9
for _ in range(2):
    h = h0.copy(); t0 = time.perf_counter(); d._run_core(d.blocks[0], h, rows, tables, cos, sin)
    best = min(best, time.perf_counter() - t0)
rss = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss
w = sum(l.weight_bytes for l in (d.blocks[0].qkv, d.blocks[0].out, d.blocks[0].up, d.blocks[0].down))
print(json.dumps(dict(mode=mode, S=S, threads=threads, isa=d.isa, load_s=load, block_s=best,
                      peak_rss_gb=rss / 1e6, weights_gb=w / 1e9)))
"""


def main():
    p = argparse.ArgumentParser()
    p.add_argument("--S", type=int, default=2048)
    p.add_argument("--threads", type=str, default="2")
    p.add_argument("--modes", default="bf16,int8,int4,fp16,fp32")
    a = p.parse_args()
    print(f"{'mode':6s} {'thr':>4s} {'isa':8s} {'block s':>8s} {'x50 fwd s':>10s} {'x20 steps min':>14s} "
          f"{'peak RSS GB':>12s} {'block weights GB':>17s}")
    for threads in a.threads.split(","):
        for mode in a.modes.split(","):
            out = subprocess.run([sys.executable, "-c", CHILD, mode, str(a.S), threads],
                                 capture_output=True, text=True)
            if out.returncode:
                print(mode, "failed:", out.stderr[-500:])
                continue
            r = json.loads(out.stdout.strip().splitlines()[-1])
            print(f"{r['mode']:6s} {r['threads']:4d} {r['isa']:8s} {r['block_s']:8.3f} {50 * r['block_s']:10.1f} "
                  f"{50 * 20 * r['block_s'] / 60:14.1f} {r['peak_rss_gb']:12.2f} {r['weights_gb']:17.2f}",
                  flush=True)


if __name__ == "__main__":
    main()
