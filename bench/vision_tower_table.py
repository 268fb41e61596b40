"""The Qwen3-VL vision tower at the released size (MiniMax-H3's text_encoder vision_config:
27 blocks, hidden 1152, 16 heads, MLP 4304, deepstack after blocks 8/16/24, out 5120;
random weights) on one 512x512 and one 1344x768 image: seconds per image for h3cy
(fp32/bf16/int8) and transformers' Qwen3VLVisionModel on torch CPU (fp32/bf16), same
process, same pixels (the Pillow processor's), as ratios.  Writes
bench/results/vision_tower.json.

    PYTHONPATH=$PWD python3 bench/vision_tower_table.py --threads 16            # full size
    PYTHONPATH=$PWD python3 bench/vision_tower_table.py --threads 2 --depth 2   # a small box

--depth N keeps the first N blocks (and the deepstack mergers at indexes < N): the per-block
cost is the same, so the table also prints seconds per block.
"""
import argparse
import json
import os
import platform
import sys
import tempfile

import numpy as np

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, os.path.dirname(HERE))
sys.path.insert(0, HERE)
from text_layer_table import timeit  # noqa: E402  (median of reps after a warm-up)
RELEASED = dict(depth=27, hidden_size=1152, intermediate_size=4304, num_heads=16, out_hidden_size=5120,
                patch_size=16, temporal_patch_size=2, spatial_merge_size=2, num_position_embeddings=2304,
                deepstack_visual_indexes=[8, 16, 24], hidden_act="gelu_pytorch_tanh", in_channels=3)
SIZES = {"512x512": (512, 512), "1344x768": (768, 1344)}


def make_reference(depth, folder):
    """transformers' vision model (random init, bf16 as released) saved as model.visual.* in
    folder/model.safetensors with its config.json; returns the fp32 model."""
    import torch
    from safetensors.torch import save_file
    from transformers.models.qwen3_vl.configuration_qwen3_vl import Qwen3VLVisionConfig
    from transformers.models.qwen3_vl.modeling_qwen3_vl import Qwen3VLVisionModel
    vc = dict(RELEASED, depth=depth, deepstack_visual_indexes=[i for i in RELEASED["deepstack_visual_indexes"] if i < depth])
    torch.manual_seed(0)
    model = Qwen3VLVisionModel(Qwen3VLVisionConfig(**vc)).eval()
    sd = {"model.visual." + k: v.to(torch.bfloat16).contiguous() for k, v in model.state_dict().items()}
    save_file(sd, os.path.join(folder, "model.safetensors"))
    with open(os.path.join(folder, "config.json"), "w") as f:
        json.dump({"vision_config": vc, "text_config": {"hidden_size": 5120}}, f)
    model.load_state_dict({k[len("model.visual."):]: v.float() for k, v in sd.items()})
    return model, vc


def h3cy_tower(folder, weights, threads):
    """A VisionTower over the saved tensors, built by the same code a TextEncoder uses."""
    import threading
    from h3cy import ops
    from h3cy.models import text_encoder as te
    from h3cy.models.vision_tower import VisionConfig, VisionTower
    from h3cy.weights.files import TensorFiles
    enc = te.TextEncoder.__new__(te.TextEncoder)
    enc.compute = ops.Compute.resolve(weights, None, threads)
    enc.weights, enc.isa, enc._pool, enc.threads = weights, enc.compute.isa, enc.compute.pool, threads
    enc.round_bf16 = weights == "bf16"
    enc._cache_reader = enc._cache_writer = None
    enc._as_stored = False
    enc._build_lock = threading.Lock()
    with open(os.path.join(folder, "config.json")) as f:
        cfg = VisionConfig(json.load(f), folder)
    files = TensorFiles([os.path.join(folder, "model.safetensors")])
    return VisionTower(files, cfg, enc, folder)


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--threads", type=int, default=os.cpu_count())
    ap.add_argument("--depth", type=int, default=27)
    ap.add_argument("--reps", type=int, default=2)
    ap.add_argument("--modes", nargs="+", default=["fp32", "bf16", "int8"])
    ap.add_argument("--ref-modes", nargs="*", default=["fp32", "bf16"], choices=["fp32", "bf16"],
                    help="transformers runs to time (torch bf16 without native bf16 kernels, e.g. Zen 1, "
                         "takes minutes per block at 1344x768)")
    ap.add_argument("--sizes", nargs="+", default=list(SIZES), choices=list(SIZES))
    ap.add_argument("--out", default=os.path.join(HERE, "results", "vision_tower.json"))
    a = ap.parse_args()
    import torch
    from h3cy.models.image_processor import ImageProcessor, load_vision_image
    from h3cy.ops.measurement import cpu_model
    from h3cy.ops import resolve_isa
    torch.set_num_threads(a.threads)
    proc = ImageProcessor.default()
    rng = np.random.default_rng(0)
    rows = []
    with tempfile.TemporaryDirectory() as folder:
        ref32, vc = make_reference(a.depth, folder)
        import copy
        ref16 = copy.deepcopy(ref32).to(torch.bfloat16)
        towers = {m: h3cy_tower(folder, m, a.threads) for m in a.modes}
        for name in a.sizes:
            h, w = SIZES[name]
            pv, grid = proc(load_vision_image(rng.integers(0, 256, (h, w, 3), dtype=np.uint8)))
            tpv, tgrid = torch.from_numpy(pv), torch.tensor([grid])
            times = {}
            print(f"{name} ({pv.shape[0]} patches, {pv.shape[0] // 4} tokens), depth {a.depth}, {a.threads} threads:",
                  flush=True)
            runs = [(f"h3cy {m}", lambda t=t: t.forward(pv, [grid])) for m, t in towers.items()]
            if "fp32" in a.ref_modes:
                runs.append(("torch fp32", lambda: ref32(tpv, grid_thw=tgrid)))
            if "bf16" in a.ref_modes:
                runs.append(("torch bf16", lambda: ref16(tpv.to(torch.bfloat16), grid_thw=tgrid)))
            for k, fn in runs:
                with torch.no_grad():
                    times[k] = timeit(fn, a.reps)
                print(f"  {k:11s} {times[k]:8.3f} s   {times[k] / a.depth:7.3f} s/block", flush=True)
            row = dict(image=name, patches=int(pv.shape[0]), tokens=int(pv.shape[0] // 4), seconds=times,
                       per_block={k: v / a.depth for k, v in times.items()})
            for ref in ("torch fp32", "torch bf16"):
                if ref in times:
                    row["speedup_vs_" + ref.replace(" ", "_")] = {k: times[ref] / v for k, v in times.items()}
                    print(f"  vs {ref}: " + ", ".join(f"{k} x{times[ref] / v:.2f}" for k, v in times.items()
                                                      if k.startswith("h3cy")))
            rows.append(row)
    rec = dict(cpu=cpu_model(), isa=resolve_isa(None), threads=a.threads, depth=a.depth, machine=platform.machine(),
               torch=torch.__version__, rows=rows)
    os.makedirs(os.path.dirname(a.out), exist_ok=True)
    with open(a.out, "w") as f:
        json.dump(rec, f, indent=1)
    print(f"{rec['cpu']} isa={rec['isa']} -> {a.out}")


if __name__ == "__main__":
    main()
