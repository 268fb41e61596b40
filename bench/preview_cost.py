"""What a sampling preview costs beside a denoising step.

1. The preview at full latent size (default 512x512, 22 frames -> latent (24, 7, 32, 32); and
   the largest canvas, 768x1344 at 362 frames): ``StepState.preview()`` (latent->RGB, uint8),
   the contact sheet, the CLI's ``--preview`` PNG (sheet, 4x, zlib), and what the ComfyUI node
   builds (sheet enlarged 8x, PIL image; the server's JPEG encode timed too).  Median of
   ``--reps`` runs each.
2. One denoising step on this machine at a smaller size: ``--blocks`` full-size blocks
   (hidden 5376, synthetic weights, ``--weights``) at ``--width``x``--height``, 22 frames,
   with and without the ``--preview`` hook (alternated runs; wall time per step), and the
   per-step time extrapolated to the 50 blocks.
3. The ratios against the per-step times documented in docs/performance.md.
4. ``--tae``: the taeh3 preview decoder at 512x512, 22 frames (cheap and full modes).

    PYTHONPATH=$PWD python3 bench/preview_cost.py [--reps 200] [--blocks 1] [--width 128 --height 128]
"""
import argparse
import io
import os
import platform
import statistics
import sys
import tempfile
import time

import numpy as np

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))

import h3cy  # noqa: E402
from h3cy import media  # noqa: E402
from h3cy import preview as pv  # noqa: E402
from h3cy.sampling.sampler import StepState  # noqa: E402

# docs/performance.md: a whole 50-block int8 forward at S = 1872 (512x512, 22 frames) on the
# 16-core Sapphire Rapids (AMX) takes 12.9 s (bench/results/amx_scaling_row_groups.txt); on the
# earlier 2-core Zen 4 machine two full-size int8 blocks took 15.7 s for 3 steps at S = 1872
# (bench/results/loop_overhead_2threads.txt) -> 2.62 s per block-step, 131 s per 50-block step.
DOC_STEP_16CORE = 12.9
DOC_STEP_2CORE_ZEN4 = 15.712 / 3 / 2 * 50


def median_time(fn, reps):
    fn()
    ts = []
    for _ in range(reps):
        t0 = time.perf_counter()
        fn()
        ts.append(time.perf_counter() - t0)
    return statistics.median(ts), min(ts)


def cpu_name():
    try:
        with open("/proc/cpuinfo") as f:
            info = f.read()
        name = next(l.split(":", 1)[1].strip() for l in info.splitlines() if l.startswith("model name"))
        flags = next(l.split(":", 1)[1].split() for l in info.splitlines() if l.startswith("flags"))
        isa = [f for f in ("avx2", "avx512f", "avx512_vnni", "avx512_bf16", "amx_tile") if f in flags]
        return f"{name} ({', '.join(isa)}), {os.cpu_count()} CPUs"
    except (OSError, StopIteration):
        return platform.processor()


def preview_costs(g, reps, tmp):
    from PIL import Image
    x0 = np.random.default_rng(0).standard_normal((24, g.T, g.h, g.w), dtype=np.float32)
    st = StepState(video_x0=x0)
    png = os.path.join(tmp, "p.png")
    writer = media.PreviewWriter(png, "sheet", 4)
    comfy_img = {}

    def comfy():
        sheet = pv.preview_image(x0, "sheet")
        s = max(1, min(8, 512 // max(sheet.shape[:2])))
        comfy_img["img"] = Image.fromarray(sheet.repeat(s, 0).repeat(s, 1))

    def jpeg():
        comfy_img["img"].save(io.BytesIO(), format="JPEG", quality=95)

    rows = [("StepState.preview() (latent->RGB uint8)", median_time(st.preview, reps)),
            ("contact sheet (preview_image)", median_time(lambda: pv.preview_image(x0, "sheet"), reps)),
            ("--preview PNG write (sheet 4x, zlib)", median_time(lambda: writer(st), max(5, reps // 10))),
            ("ComfyUI node image (sheet 8x + PIL)", median_time(comfy, reps))]
    rows.append(("  + ComfyUI server's JPEG encode", median_time(jpeg, max(5, reps // 10))))
    return x0.shape, rows


def tae_costs(reps):
    """The taeh3 decoder (random weights of the published shapes; the cost does not depend on
    the values) at 512x512, 22 frames: the cheap preview (no upscaling) of every latent frame
    and of the first one (what the ComfyUI node decodes), and the full decoder on the first
    latent frame."""
    from h3cy import taeh3
    rng = np.random.default_rng(0)
    state = {k: (rng.standard_normal(s) * 0.02).astype(np.float32) for k, s in taeh3.expected_keys().items()}
    g = h3cy.Geometry(512, 512, 22)
    z = rng.standard_normal((24, g.T, g.h, g.w)).astype(np.float32)
    cheap = taeh3.TAEH3Decoder(state, space_upscale=False, time_upscale=False)
    full = taeh3.TAEH3Decoder(state)
    rows = [(f"taeh3 cheap, all {g.T} latent frames -> {g.T} x 64x64",
             median_time(lambda: pv.tae_frames(cheap, z, "sheet"), reps)),
            ("taeh3 cheap, first latent frame -> 64x64 (ComfyUI node)",
             median_time(lambda: pv.tae_frames(cheap, z, "first"), reps)),
            ("taeh3 full, first latent frame -> 4 x 512x512",
             median_time(lambda: full.decode_frames(z[:, :1]), reps))]
    return z.shape, cheap.compute.threads, rows


def step_cost(blocks, weights, width, height, steps, tmp, threads):
    from synthetic import SyntheticSource
    from h3cy.models.dit import DiT
    t0 = time.perf_counter()
    dit = DiT(SyntheticSource(shared=True, num_layers=blocks, num_refiner_layers=1), weights=weights,
              threads=threads)
    print(f"# built {blocks} full-size {weights} block(s) in {time.perf_counter() - t0:.1f} s", flush=True)
    g = h3cy.Geometry(width, height, 22)
    pe = np.random.default_rng(0).standard_normal((6, 5120), dtype=np.float32)
    writer = media.PreviewWriter(os.path.join(tmp, "step.png"), "sheet", 4)
    spent = []

    def timed_writer(st):
        t = time.perf_counter()
        writer(st)
        spent.append(time.perf_counter() - t)
    h3cy.denoise(dit, pe, g, steps=1, seed=0)            # warm-up (tables, workspaces)
    walls = {"none": [], "preview": []}
    for _ in range(2):                                    # alternated
        for name, hook in (("none", None), ("preview", timed_writer)):
            t = time.perf_counter()
            h3cy.denoise(dit, pe, g, steps=steps, seed=0, on_step=hook)
            walls[name].append((time.perf_counter() - t) / steps)
    return g, h3cy.Layout(g, 6).S, dit.threads, walls, spent


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--reps", type=int, default=200)
    ap.add_argument("--blocks", type=int, default=1)
    ap.add_argument("--weights", default="int8")
    ap.add_argument("--width", type=int, default=128)
    ap.add_argument("--height", type=int, default=128)
    ap.add_argument("--steps", type=int, default=2)
    ap.add_argument("--threads", type=int, default=None)
    ap.add_argument("--no-step", action="store_true", help="only the preview timings")
    ap.add_argument("--tae", action="store_true", help="also time the taeh3 decoder (--tae-reps runs)")
    ap.add_argument("--tae-reps", type=int, default=3)
    a = ap.parse_args()
    print(f"# bench/preview_cost.py {' '.join(sys.argv[1:])}; {time.strftime('%Y-%m-%d %H:%M')}; "
          f"CPU: {cpu_name()}; load avg {os.getloadavg()[0]:.1f}")
    with tempfile.TemporaryDirectory() as tmp:
        default_cost = None
        for w, h, f in ((512, 512, 22), (768, 1344, 362)):
            g = h3cy.Geometry(w, h, f)
            shape, rows = preview_costs(g, a.reps if f == 22 else max(10, a.reps // 20), tmp)
            print(f"\npreview at {w}x{h}, {g.frames} frames: latent {shape} (median / min of runs)")
            for name, (med, mn) in rows:
                print(f"  {name:42s} {1e3 * med:9.3f} ms  {1e3 * mn:9.3f} ms")
            if f == 22:
                default_cost = {name: med for name, (med, _) in rows}
        worst = max(default_cost["--preview PNG write (sheet 4x, zlib)"],
                    default_cost["ComfyUI node image (sheet 8x + PIL)"]
                    + default_cost["  + ComfyUI server's JPEG encode"])
        print(f"\n512x512x22, the dearer of the CLI PNG and the ComfyUI image+JPEG: {1e3 * worst:.3f} ms")
        print(f"  vs a documented full step on the 16-core SPR (int8, S=1872, 12.9 s): "
              f"{100 * worst / DOC_STEP_16CORE:.4f}%")
        print(f"  vs a documented full step on the 2-core Zen 4 (int8, 2.62 s/block x 50 = "
              f"{DOC_STEP_2CORE_ZEN4:.0f} s): {100 * worst / DOC_STEP_2CORE_ZEN4:.5f}%")
        if a.tae:
            shape, th, rows = tae_costs(a.tae_reps)
            print(f"\ntaeh3 at 512x512, 22 frames: latent {shape}, threads {th} (median / min of {a.tae_reps})")
            for name, (med, mn) in rows:
                print(f"  {name:55s} {med:8.3f} s  {mn:8.3f} s")
                print(f"    = {100 * med / DOC_STEP_16CORE:.2f}% of the 16-core SPR step, "
                      f"{100 * med / DOC_STEP_2CORE_ZEN4:.2f}% of the 2-core Zen 4 one")
        if a.no_step:
            return
        g, S, threads, walls, spent = step_cost(a.blocks, a.weights, a.width, a.height, a.steps, tmp,
                                                 a.threads)
        none, prev = min(walls["none"]), min(walls["preview"])
        hook = statistics.median(spent)
        print(f"\none step on this machine at {g.width}x{g.height}, 22 frames (S={S}), {a.blocks} full-size "
              f"{a.weights} block(s), threads {threads}, {a.steps} steps x 2 alternated runs (min per step):")
        print(f"  no hook {none:.3f} s, with --preview hook {prev:.3f} s (runs: none "
              f"{[round(x, 3) for x in walls['none']]}, preview {[round(x, 3) for x in walls['preview']]})")
        print(f"  the hook itself (median of {len(spent)} calls, latent {(24, g.T, g.h, g.w)}): "
              f"{1e3 * hook:.3f} ms = {100 * hook / none:.4f}% of this {a.blocks}-block step; "
              f"x50 blocks -> {none / a.blocks * 50:.1f} s per step, the preview "
              f"{100 * worst / (none / a.blocks * 50):.5f}% of it at full latent size")


if __name__ == "__main__":
    main()
