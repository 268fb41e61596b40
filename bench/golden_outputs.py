"""Record (or compare) every component's outputs on the tests' tiny models, on every ISA path
this machine runs: the bit-for-bit check of a refactor that must not change any result.

    python3 bench/golden_outputs.py --models /tmp/golden --save before.npz      # old tree
    python3 bench/golden_outputs.py --models /tmp/golden --compare before.npz   # new tree

``--models`` keeps the tiny random models (built once with torch, seeded), so both runs read
the same files.  What is recorded, per ISA path in ``h3cy.ops.available_isas()``:

- DiT.forward of tiny configs a and b, diffusers and release layouts, every weights mode;
  h3cy.denoise (3 steps) in the Cython loop and the Python loop, and streaming;
- TextEncoder.encode (hidden_states[50]) of the 51-layer tiny Qwen3-VL, every mode, and
  streaming; its vision tower (merger and deepstack outputs) on two pictures, fp32/bf16/int8;
- VideoDecoder.decode (fp32, bf16, int8) and AudioDecoder.decode (fp32, int8, both configs);
- the whole pipeline on the built-in demo model (h3cy.load + generate, 2 steps).

Comparison prints each differing array with its max |diff|, and exits 1 if any differs.
"""
import argparse
import os
import sys

import numpy as np

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, os.path.join(HERE, "..", "tests"))

import h3cy  # noqa: E402

MODES = ("fp32", "bf16", "fp16", "int8", "int4")
LONG_IDS = [785, 3974, 13876, 38835, 35512, 916, 279, 17999, 11, 264, 2696, 13939, 4126,
            40489, 26, 5527, 11, 11460, 11, 48968, 16, 13]


def build_models(root):
    """Tiny models of the tests (same builders, same seeds) under root, built once."""
    import _tiny_audio_vae
    import _tiny_dit
    import _tiny_text_encoder
    import _tiny_vae
    done = os.path.join(root, "done")
    if not os.path.exists(done):
        os.makedirs(root, exist_ok=True)
        for name in ("a", "b"):
            _tiny_dit.build(name, os.path.join(root, f"dit_{name}"))
            _tiny_audio_vae.build(name, os.path.join(root, f"audio_{name}"))
        _tiny_text_encoder.build(os.path.join(root, "te"))
        _tiny_text_encoder.build(os.path.join(root, "te_vision"), vision=True)
        _tiny_vae.build(os.path.join(root, "vae"))
        from h3cy import demo
        demo.build_demo_model(os.path.join(root, "demo_cache"))
        open(done, "w").close()
    from h3cy import demo
    return {
        "dit": {name: {"diffusers": os.path.join(root, f"dit_{name}", "diffusers_fp32"),
                       "release": os.path.join(root, f"dit_{name}", "original")} for name in ("a", "b")},
        "te": os.path.join(root, "te", "text_encoder"),
        "te_vision": os.path.join(root, "te_vision", "text_encoder"),
        "vae": os.path.join(root, "vae", "diffusers"),
        "audio": {name: os.path.join(root, f"audio_{name}", "diffusers") for name in ("a", "b")},
        "demo": demo.build_demo_model(os.path.join(root, "demo_cache")),
    }


def dit_inputs(cfg, seed=1, L=5, Nv=12, Na=6):
    from test_dit_parity import packed_inputs
    return packed_inputs(cfg, seed, L=L, Nv=Nv, Na=Na, U=2)


def vision_inputs():
    """(pixel_values, grids) of two seeded pictures (a 14x20-patch and a 20x14-patch one),
    through h3cy's image processor."""
    from PIL import Image
    from h3cy.models.image_processor import ImageProcessor
    rng = np.random.default_rng(7)
    proc = ImageProcessor.default()
    pvs, grids = [], []
    for h, w in ((200, 300), (64, 48)):
        pv, grid = proc(Image.fromarray(rng.integers(0, 256, (h, w, 3), dtype=np.uint8)))
        pvs.append(pv)
        grids.append(tuple(grid))
    return np.concatenate(pvs), grids


def record(models, cache_dir):
    import json
    out = {}
    for isa in h3cy.ops.available_isas():
        for name, folders in models["dit"].items():
            with open(os.path.join(folders["diffusers"], "config.json")) as f:
                cfg = json.load(f)
            inputs = dit_inputs(cfg)
            for layout, folder in folders.items():
                for mode in MODES:
                    d = h3cy.DiT.from_pretrained(folder, weights=mode, isa=isa, threads=2, cache_dir=cache_dir)
                    v, a = d.forward(**inputs)
                    out[f"dit/{isa}/{name}/{layout}/{mode}/video"] = v
                    out[f"dit/{isa}/{name}/{layout}/{mode}/audio"] = a
            d = h3cy.DiT.from_pretrained(folders["release"], weights="bf16", isa=isa, threads=2)
            g = h3cy.Geometry(64, 64, 22)
            pe = np.random.default_rng(3).standard_normal((4, cfg["text_dim"])).astype(np.float32)
            v, a = h3cy.denoise(d, pe, g, steps=3, seed=0)
            out[f"denoise/{isa}/{name}/cython/video"], out[f"denoise/{isa}/{name}/cython/audio"] = v, a
            from h3cy import _config
            old = _config._ENV_LOOP_PYTHON
            _config._ENV_LOOP_PYTHON = True
            try:
                v, a = h3cy.denoise(d, pe, g, steps=3, seed=0)
            finally:
                _config._ENV_LOOP_PYTHON = old
            out[f"denoise/{isa}/{name}/python/video"], out[f"denoise/{isa}/{name}/python/audio"] = v, a
            ds = h3cy.DiT.from_pretrained(folders["release"], weights="int8", isa=isa, threads=2,
                                          streaming=True, cache_dir=cache_dir)
            v, a = h3cy.denoise(ds, pe, g, steps=3, seed=0)
            out[f"denoise/{isa}/{name}/streaming_int8/video"] = v
        for mode in MODES:
            enc = h3cy.TextEncoder.from_pretrained(models["te"], weights=mode, isa=isa, threads=2,
                                                   cache_dir=cache_dir)
            out[f"te/{isa}/{mode}"] = enc.encode(LONG_IDS)
        enc = h3cy.TextEncoder.from_pretrained(models["te"], weights="int8", isa=isa, threads=2,
                                               cache_dir=cache_dir, streaming=True)
        out[f"te/{isa}/int8_streaming"] = enc.encode(LONG_IDS)
        for mode in ("fp32", "bf16", "int8"):
            enc = h3cy.TextEncoder.from_pretrained(models["te_vision"], weights=mode, isa=isa, threads=2)
            merged, deep = enc.vision.forward(*vision_inputs())
            out[f"vision/{isa}/{mode}/merged"] = merged
            for i, d in enumerate(deep):
                out[f"vision/{isa}/{mode}/deepstack{i}"] = d
        lat = np.random.default_rng(7).standard_normal((24, 7, 8, 12)).astype(np.float32)
        for mode in ("fp32", "bf16", "int8"):
            dec = h3cy.VideoDecoder.from_pretrained(models["vae"], weights=mode, isa=isa, threads=2)
            out[f"vae/{isa}/{mode}"] = dec.decode(lat)
        for name, folder in models["audio"].items():
            for mode in ("fp32", "int8"):
                dec = h3cy.AudioDecoder.from_pretrained(folder, weights=mode, isa=isa, threads=2)
                cin = dec.latent_channels if hasattr(dec, "latent_channels") else None
                if cin is None:
                    with open(os.path.join(folder, "config.json")) as f:
                        cin = json.load(f)["latent_channels"]
                alat = np.random.default_rng(5).standard_normal((2, cin, 7)).astype(np.float32)
                out[f"audio/{isa}/{name}/{mode}"] = dec.decode(alat)
        pipe = h3cy.load(models["demo"], weights="int8", isa=isa, threads=2, cache_dir=cache_dir)
        res = pipe.generate("a red fox walking through snow", width=128, height=64, frames=22, steps=2,
                            seed=0)
        out[f"pipeline/{isa}/video_latent"] = res.video_latent
        out[f"pipeline/{isa}/audio"] = res.audio
        out[f"pipeline/{isa}/frames"] = res.frames
        print(f"{isa}: recorded", flush=True)
    return out


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--models", required=True, help="folder of the tiny models (built if absent)")
    g = ap.add_mutually_exclusive_group(required=True)
    g.add_argument("--save", help="write the outputs to this .npz")
    g.add_argument("--compare", help="compare with the outputs in this .npz")
    a = ap.parse_args()
    models = build_models(a.models)
    import tempfile
    with tempfile.TemporaryDirectory() as cache_dir:
        out = record(models, cache_dir)
    if a.save:
        np.savez_compressed(a.save, **out)
        print(f"saved {len(out)} arrays to {a.save}")
        return 0
    old = np.load(a.compare)
    bad = 0
    for k in sorted(set(old.files) | set(out)):
        if k not in out or k not in old.files:
            print(f"MISSING {k} ({'new' if k in out else 'old'} only)")
            bad += 1
            continue
        x, y = old[k], out[k]
        if x.shape != y.shape or x.dtype != y.dtype or not np.array_equal(x, y, equal_nan=True):
            d = np.max(np.abs(x.astype(np.float64) - y.astype(np.float64))) if x.shape == y.shape else "shape"
            print(f"DIFFERS {k}: max |diff| {d}")
            bad += 1
    print(f"{len(out)} arrays compared on {', '.join(h3cy.ops.available_isas())}: "
          f"{'all bit-identical' if not bad else f'{bad} differ'}")
    return 1 if bad else 0


if __name__ == "__main__":
    sys.exit(main())
