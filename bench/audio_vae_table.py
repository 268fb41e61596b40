"""Seconds and peak RSS of a full-size audio VAE decode (random weights, the released
architecture), one fresh process per row: h3cy fp32 / bf16 / int8 and diffusers on torch
CPU fp32, 1 s (A = 40) and 10 s (A = 400) of stereo audio, H3CY_BENCH_THREADS threads
(default 2).  Rows run in the order given; torch at A = 400 runs once (it takes minutes on
2 cores), the rest report the best of --reps runs.

    python bench/audio_vae_table.py [--reps 3] [--lengths 40,400] [--out bench/results/audio_vae_table_2threads.md]
"""
import argparse
import json
import os
import subprocess
import sys
import time

HERE = os.path.dirname(os.path.abspath(__file__))

CHILD = r"""
import json, os, sys, time
sys.path.insert(0, {here!r})
impl, mode, A, reps, threads = {impl!r}, {mode!r}, {A}, {reps}, {threads}
from audio_vae_model import folder, latents, torch_decode, torch_model
lat = latents(A)
t0 = time.perf_counter()
if impl == "torch":
    import torch
    torch.set_num_threads(threads)
    m = torch_model()
    run = lambda: torch_decode(m, lat)
else:
    import h3cy
    d = h3cy.AudioDecoder.from_pretrained(folder(), weights=mode, threads=threads)
    run = lambda: d.decode(lat)
load = time.perf_counter() - t0
times = []
for _ in range(reps):
    t = time.perf_counter(); y = run(); times.append(time.perf_counter() - t)
import numpy as np
np.save(os.path.join({tmp!r}, f"{{impl}}_{{mode}}_{{A}}.npy"), y)
# VmHWM, not ru_maxrss: Linux carries ru_maxrss over fork + exec from the parent
with open("/proc/self/status") as f:
    hwm = [int(l.split()[1]) for l in f if l.startswith("VmHWM")][0]
print(json.dumps(dict(load=load, times=times, rss_mb=hwm / 1024)))
"""


def run(impl, mode, A, reps, threads, tmp):
    code = CHILD.format(here=HERE, impl=impl, mode=mode, A=A, reps=reps, threads=threads, tmp=tmp)
    env = dict(os.environ, OMP_NUM_THREADS=str(threads), PYTHONWARNINGS="ignore")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, env=env)
    if out.returncode:
        raise RuntimeError(out.stderr[-2000:])
    return json.loads(out.stdout.strip().splitlines()[-1])


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--reps", type=int, default=3)
    ap.add_argument("--lengths", default="40,400")
    ap.add_argument("--modes", default="fp32,bf16,int8")
    ap.add_argument("--out", default=None)
    a = ap.parse_args()
    threads = int(os.environ.get("H3CY_BENCH_THREADS", "2"))
    import tempfile

    import numpy as np
    sys.path.insert(0, HERE)
    from audio_vae_model import folder
    folder()
    tmp = tempfile.mkdtemp()
    lines = [f"# audio VAE decode, full size, random weights, {threads} threads "
             f"({time.strftime('%Y-%m-%d %H:%M')}, load avg {os.getloadavg()[0]:.1f} at start)", "",
             "| A (audio) | implementation | decode s (best) | all runs s | x torch fp32 | peak RSS MB | max rel vs torch |",
             "|---|---|---|---|---|---|---|"]
    for A in [int(x) for x in a.lengths.split(",")]:
        rows = [("torch", "fp32")] + [("h3cy", m) for m in a.modes.split(",")]
        res = {}
        for impl, mode in rows:
            reps = 1 if (impl == "torch" and A > 100) else a.reps
            res[impl, mode] = run(impl, mode, A, reps, threads, tmp)
            print(impl, mode, A, res[impl, mode], flush=True)
        want = np.load(os.path.join(tmp, f"torch_fp32_{A}.npy"))
        base = min(res["torch", "fp32"]["times"])
        for (impl, mode), r in res.items():
            got = np.load(os.path.join(tmp, f"{impl}_{mode}_{A}.npy"))
            err = float(np.abs(got - want).max() / np.abs(want).max())
            best = min(r["times"])
            lines.append(f"| {A} ({A / 40:g} s) | {'diffusers torch' if impl == 'torch' else 'h3cy'} {mode} | "
                         f"{best:.2f} | {', '.join(f'{t:.2f}' for t in r['times'])} | {base / best:.2f} | "
                         f"{r['rss_mb']:.0f} | {err:.1e} |")
    text = "\n".join(lines) + "\n"
    print(text)
    if a.out:
        with open(a.out, "w") as f:
            f.write(text)


if __name__ == "__main__":
    main()
