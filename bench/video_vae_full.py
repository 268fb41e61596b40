"""A whole 512x512x22 video decode at the released decoder size (36 blocks, dim 2048, random
weights): seconds and peak RSS for h3cy per weights mode and for diffusers'
AutoencoderKLMiniMaxH3 on torch CPU, each in a fresh process, same latent, same threads.

    H3CY_THREADS=16 python bench/video_vae_full.py [--modes fp32,bf16,int8] [--torch fp32]

(~10 GB checkpoint written once under $H3CY_BENCH_DIR; on 2 cores a full decode takes
~20 minutes per row, so this is meant for the 16-core machine.)
"""
import argparse
import json
import os
import subprocess
import sys
import time

import numpy as np

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, HERE)
from video_vae import ROOT, write_checkpoint  # noqa: E402

CHILD = r"""
import json, os, sys, time
import numpy as np
impl, mode, folder = sys.argv[1], sys.argv[2], sys.argv[3]
threads = int(os.environ.get("H3CY_THREADS", "2"))
lat = np.random.default_rng(0).standard_normal((24, 7, 32, 32)).astype(np.float32)
t0 = time.perf_counter()
if impl == "h3cy":
    import h3cy
    dec = h3cy.VideoDecoder.from_pretrained(folder, weights=mode, threads=threads)
    load = time.perf_counter() - t0
    t0 = time.perf_counter()
    px = dec.decode(lat)
    isa = dec.isa
else:
    import torch
    torch.set_num_threads(threads)
    from diffusers import AutoencoderKLMiniMaxH3
    vae = AutoencoderKLMiniMaxH3.from_pretrained(
        folder, torch_dtype=torch.bfloat16 if mode == "bf16" else torch.float32).eval()
    load = time.perf_counter() - t0
    t0 = time.perf_counter()
    with torch.no_grad():
        v = vae.decode(torch.from_numpy(lat)[None], return_dict=False)[0]
    pm = torch.tensor([0.485, 0.456, 0.406]).view(1, -1, 1, 1, 1)
    ps = torch.tensor([0.229, 0.224, 0.225]).view(1, -1, 1, 1, 1)
    px = (v.float() * ps + pm).clamp(0, 1)[0].permute(1, 2, 3, 0).numpy()
    isa = "torch " + torch.__version__
dt = time.perf_counter() - t0
peak = [int(l.split()[1]) for l in open("/proc/self/status") if l.startswith("VmHWM:")][0]
np.save(sys.argv[4], px[::7, ::8, ::8])          # a sample of the frames for the error column
print(json.dumps(dict(load=load, seconds=dt, peak_mib=peak / 1024, isa=isa, frames=px.shape[0])))
"""


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--modes", default="fp32,bf16,int8")
    ap.add_argument("--torch", default="fp32")
    ap.add_argument("--layers", type=int, default=36, help="decoder blocks (36 as released)")
    a = ap.parse_args()
    folder = write_checkpoint(os.path.join(ROOT, f"vae_{a.layers}layer"), a.layers)
    rows = []
    runs = [("diffusers", m) for m in a.torch.split(",") if m] + [("h3cy", m) for m in a.modes.split(",") if m]
    for impl, mode in runs:
        sample = os.path.join(ROOT, f"sample_{impl}_{mode}.npy")
        out = subprocess.run([sys.executable, "-c", CHILD, impl, mode, folder, sample], capture_output=True,
                             text=True, env=dict(os.environ, PYTHONWARNINGS="ignore"))
        if out.returncode:
            print(out.stderr[-2000:])
            continue
        r = json.loads(out.stdout.strip().splitlines()[-1])
        r.update(impl=impl, mode=mode, sample=sample)
        rows.append(r)
    ref = next((r for r in rows if r["impl"] == "diffusers" and r["mode"] == "fp32"), None)
    want = np.load(ref["sample"]).astype(np.float64) if ref else None
    thr = os.environ.get("H3CY_THREADS", "2")
    print(f"# whole decode 512x512x22 (T=7, 3x3 tiles x 1 clip x {a.layers} blocks), dim 2048, random weights, "
          f"{thr} threads")
    print(f"{'implementation':26s} {'load s':>7s} {'decode s':>9s} {'x torch fp32':>12s} {'peak RSS MiB':>13s} "
          f"{'max|d| vs torch fp32':>21s}")
    for r in rows:
        got = np.load(r["sample"]).astype(np.float64)
        err = float(np.max(np.abs(got - want))) if want is not None else float("nan")
        speed = ref["seconds"] / r["seconds"] if ref else float("nan")
        name = f"{r['impl']} {r['mode']} ({r['isa']})"
        print(f"{name:26s} {r['load']:7.1f} {r['seconds']:9.1f} {speed:12.2f} {r['peak_mib']:13.0f} {err:21.2e}")


if __name__ == "__main__":
    main()
