"""Wall time of few-step and full generations at one geometry (#22): the denoising phase of
``quality`` (20 steps, shifts 12/3, no LoRA) beside ``turbo8`` and ``turbo4`` (8 and 4
steps, shifts 6/3, a rank-64 LoRA on every block's attention and FFN linears, applied at
run time), on a synthetic model of the real width (bench/synthetic.py, random weights).

    python bench/steps_wall.py --layers 10 --threads 16 --weights int8
    python bench/steps_wall.py --layers 50 --threads 16 --quality-steps 4   # full depth

Every run is a real ``h3cy.denoise`` (the Cython loop, the sampler, the AdaLN tables) at
512x512x22 with a 160-row prompt.  ``--layers`` below 50 keeps the call short; the table
then also shows the time scaled to 50 blocks (blocks are identical, so a step's time is
affine in the block count: the scaled figure is per-step time x 50 / layers, which
slightly over-counts the refiner/heads, a few % of a step).  ``--quality-steps N`` < 20
measures N base steps and scales to 20 (the per-step cost is the same at every step: the
4- and 8-step LoRA runs show it).  The text encoder and the VAE decode are not part of
these figures (bench/text_layer_table.py, bench/video_vae_full.py): they are the same for
every preset.
"""
import argparse
import os
import platform
import sys
import tempfile
import time

import numpy as np

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, HERE)
sys.path.insert(0, os.path.dirname(HERE))

from lora_overhead import lora_shapes  # noqa: E402
from synthetic import FULL_CONFIG, SyntheticSource  # noqa: E402


def write_lora_all_blocks(path, rank, layers, seed=0):
    """A random PEFT LoRA of ``rank`` on every block's attention and FFN linears (one
    random pair per shape, repeated over the blocks: the values do not matter for time)."""
    from h3cy.weights.st_write import save_file
    rng = np.random.default_rng(seed)
    arrays = {}
    for m, (n, k) in lora_shapes().items():
        a = (rng.standard_normal((rank, k), dtype=np.float32) * 0.01).astype(np.float32)
        b = (rng.standard_normal((n, rank), dtype=np.float32) * 0.01).astype(np.float32)
        for blk in range(layers):
            mb = m.replace("transformer_blocks.0.", f"transformer_blocks.{blk}.")
            arrays[f"{mb}.lora_A.weight"], arrays[f"{mb}.lora_B.weight"] = a, b
    save_file(path, arrays)
    return path


def cpu_name():
    try:
        with open("/proc/cpuinfo") as f:
            for line in f:
                if line.startswith("model name"):
                    return line.split(":", 1)[1].strip()
    except OSError:
        pass
    return platform.processor() or "unknown"


def timed_denoise(dit, pe, steps, shifts, label):
    import h3cy
    times = []
    last = [time.perf_counter()]

    def on_step(state):
        now = time.perf_counter()
        times.append(now - last[0])
        last[0] = now

    t0 = time.perf_counter()
    last[0] = t0
    v, a = h3cy.denoise(dit, pe, h3cy.Geometry(512, 512, 22), steps=steps, seed=0,
                        shift_video=shifts[0], shift_audio=shifts[1], on_step=on_step)
    wall = time.perf_counter() - t0
    assert np.all(np.isfinite(v)) and np.all(np.isfinite(a))
    print(f"  {label}: {steps} steps {wall:.1f} s; per step " + " ".join(f"{t:.2f}" for t in times), flush=True)
    return wall, times


def main():
    p = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    p.add_argument("--layers", type=int, default=10)
    p.add_argument("--threads", type=int, default=None)
    p.add_argument("--weights", default="int8")
    p.add_argument("--rank", type=int, default=64)
    p.add_argument("--quality-steps", type=int, default=20)
    p.add_argument("--prompt-rows", type=int, default=160)
    a = p.parse_args()
    from h3cy.models.dit import DiT
    t0 = time.perf_counter()
    d = DiT(SyntheticSource(shared=True, num_layers=a.layers), weights=a.weights, threads=a.threads)
    print(f"# {cpu_name()}, isa {d.isa}, {d.threads} threads, weights {d.weights}, {a.layers} blocks "
          f"of the real width; load {time.perf_counter() - t0:.1f} s", flush=True)
    pe = (np.random.default_rng(1).standard_normal((a.prompt_rows, FULL_CONFIG["text_dim"]), dtype=np.float32)
          * 0.5).astype(np.float32)
    rows = {}
    q = a.quality_steps
    rows["quality"] = (20,) + timed_denoise(d, pe, q, (12.0, 3.0), f"quality (base, measured {q} of 20 steps)")
    with tempfile.TemporaryDirectory() as tmp:
        path = write_lora_all_blocks(os.path.join(tmp, "turbo.safetensors"), a.rank, a.layers)
        t0 = time.perf_counter()
        d.load_lora(path, name="turbo")
        print(f"  LoRA rank {a.rank} on {a.layers} blocks loaded in {time.perf_counter() - t0:.1f} s", flush=True)
        rows["turbo8"] = (8,) + timed_denoise(d, pe, 8, (6.0, 3.0), "turbo8 (LoRA)")
        rows["turbo4"] = (4,) + timed_denoise(d, pe, 4, (6.0, 3.0), "turbo4 (LoRA)")
    scale = 50 / a.layers
    print()
    print(f"| preset | steps | denoise s ({a.layers} blocks) | s/step (median) | x50/{a.layers}: s/step | "
          f"x50/{a.layers}: denoise s | vs quality |")
    print("|---|---|---|---|---|---|---|")
    full_q = None
    for name in ("quality", "turbo8", "turbo4"):
        steps, wall, times = rows[name]
        med = float(np.median(times))
        full = med * scale * steps
        full_q = full if full_q is None else full_q
        measured = f"{wall:.1f}" if len(times) == steps else f"{wall:.1f} ({len(times)} measured)"
        print(f"| {name} | {steps} | {measured} | {med:.2f} | {med * scale:.1f} | {full:.0f} | {full / full_q:.2f} |")


if __name__ == "__main__":
    main()
