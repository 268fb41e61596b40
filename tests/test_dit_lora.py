"""LoRAs on h3cy.DiT against diffusers 0.42.1 + peft: a random PEFT LoRA saved by diffusers'
``save_lora_adapter`` on the tiny models (tests/_tiny_dit.py), applied by diffusers'
``load_lora_adapter`` and by ``DiT.load_lora``; the same LoRA in the kohya/ComfyUI layout."""
import json
import os

import numpy as np
import pytest
import torch

import h3cy
from h3cy.errors import CheckpointError, H3ValueError
from _compare import assert_close, assert_nontrivial, rel_l2
from test_dit_parity import packed_inputs

torch.set_num_threads(2)

BLOCK_MODULES = ["to_q", "to_k", "to_v", "to_out.0", "ff.net.0.proj", "ff.net.2"]
TIME_MODULES = ["adaln_proj.linear", "norm_out.linear", "time_embedder.linear_1", "time_embedder.linear_2"]
EDGE_MODULES = ["proj_in", "audio_proj_in", "context_embedder", "proj_out", "audio_proj_out"]


def make_peft_lora(folder, out_dir, targets, seed, r=4, alpha=8.0):
    """A random PEFT LoRA on the diffusers model in ``folder``, saved by diffusers
    (save_lora_adapter).  lora_B is random too (PEFT initialises it to zero)."""
    from diffusers import MiniMaxH3Transformer3DModel
    from peft import LoraConfig
    torch.manual_seed(seed)
    m = MiniMaxH3Transformer3DModel.from_pretrained(folder, torch_dtype=torch.float32)
    m.add_adapter(LoraConfig(r=r, lora_alpha=alpha, target_modules=targets, init_lora_weights=False),
                  adapter_name="x")
    with torch.no_grad():
        for n, p in m.named_parameters():
            if "lora_" in n:
                p.normal_(0.0, 0.3)
    m.save_lora_adapter(out_dir, adapter_name="x")
    return os.path.join(out_dir, "pytorch_lora_weights.safetensors")


def diffusers_with_loras(folder, loras, inputs):
    """diffusers' forward with these (path, strength) LoRAs loaded by load_lora_adapter."""
    from diffusers import MiniMaxH3Transformer3DModel
    m = MiniMaxH3Transformer3DModel.from_pretrained(folder, torch_dtype=torch.float32).eval()
    names = []
    for i, (path, s) in enumerate(loras):
        # folder + weight_name + use_safetensors: the way diffusers reads the file's metadata
        # (lora_alpha); given a file path it loads the tensors but drops the metadata
        m.load_lora_adapter(os.path.dirname(path), weight_name=os.path.basename(path),
                            use_safetensors=True, adapter_name=f"l{i}", prefix=None)
        names.append(f"l{i}")
    if names:
        m.set_adapters(names, weights=[s for _, s in loras])
    with torch.no_grad():
        v, a = m(**{k: torch.from_numpy(np.asarray(x)) for k, x in inputs.items()}, return_dict=False)
    return v.numpy(), a.numpy()


@pytest.fixture(scope="module")
def lora_a(tiny_dit_factory, tmp_path_factory):
    t = tiny_dit_factory("b")
    d = tmp_path_factory.mktemp("lora")
    return t, make_peft_lora(t.diffusers_fp32, str(d / "one"), BLOCK_MODULES, seed=1), \
        make_peft_lora(t.diffusers_fp32, str(d / "two"), BLOCK_MODULES, seed=2, r=2, alpha=1.0)


def fwd(dit, inputs):
    return dit.forward(**inputs)


# the release layout holds the released dtype mix: diffusers' bf16 folder loaded as float32
# has the same values
@pytest.mark.parametrize("layout,ref", [("diffusers_fp32", "diffusers_fp32"), ("original", "diffusers_bf16")])
def test_peft_lora_matches_diffusers(lora_a, layout, ref):
    t, one, _ = lora_a
    inputs = packed_inputs(t.config, seed=3, U=2)
    want_v, want_a = diffusers_with_loras(getattr(t, ref), [(one, 0.7)], inputs)
    base_v, _ = diffusers_with_loras(getattr(t, ref), [], inputs)
    assert rel_l2(want_v, base_v) > 1e-2          # the LoRA changes the output
    dit = h3cy.DiT.from_pretrained(getattr(t, layout), weights="fp32", threads=2)
    dit.load_lora(one, strength=0.7)
    got_v, got_a = fwd(dit, inputs)
    # observed max-rel ~3e-7 (both layouts: interleaved QKV rows of the release, [gate; value])
    assert_close(got_v, want_v, max_rel_tol=1e-4, what="video")
    assert_close(got_a, want_a, max_rel_tol=1e-4, what="audio")


def test_strength_zero_unload_and_two_loras(lora_a):
    t, one, two = lora_a
    inputs = packed_inputs(t.config, seed=4, U=2)
    dit = h3cy.DiT.from_pretrained(t.diffusers_fp32, weights="fp32", threads=2)
    base = fwd(dit, inputs)
    dit.load_lora(one, strength=0.0)
    z = fwd(dit, inputs)
    assert all(np.array_equal(x, y) for x, y in zip(z, base))      # bit for bit
    dit.set_lora_strength("pytorch_lora_weights", 1.0)
    dit.load_lora(two, strength=-0.5, name="two")
    got = fwd(dit, inputs)
    want = diffusers_with_loras(t.diffusers_fp32, [(one, 1.0), (two, -0.5)], inputs)
    assert_close(got[0], want[0], max_rel_tol=1e-4, what="video, two LoRAs")
    assert_close(got[1], want[1], max_rel_tol=1e-4, what="audio, two LoRAs")
    dit.unload_lora("two")
    dit.unload_lora("pytorch_lora_weights")
    back = fwd(dit, inputs)
    assert all(np.array_equal(x, y) for x, y in zip(back, base))   # bit for bit


def kohya_copy(src, dst, prefix="lora_unet_", original_names=True):
    """The same LoRA in kohya/ComfyUI keys: lora_down/lora_up/alpha on original names with
    the fused QKV (stacked [q; k; v], block-diagonal B) and mlp.fc1 ([gate; value])."""
    from safetensors.numpy import load_file, save_file
    sd = load_file(src)
    meta = json.loads(__import__("safetensors").safe_open(src, "np").metadata()["lora_adapter_metadata"])
    r, alpha = meta["r"], float(meta["lora_alpha"])
    mods = sorted({k[:-len(".lora_A.weight")] for k in sd if k.endswith(".lora_A.weight")})
    out = {}

    def put(name, a, b):
        key = prefix + name.replace(".", "_") if prefix == "lora_unet_" else prefix + name
        out[key + ".lora_down.weight"] = a
        out[key + ".lora_up.weight"] = b
        out[key + ".alpha"] = np.array(alpha * a.shape[0] / r, np.float32)

    done = set()
    for m in mods:
        A, B = sd[m + ".lora_A.weight"], sd[m + ".lora_B.weight"]
        blk = m.rsplit(".attn.", 1)[0] if ".attn." in m else m.rsplit(".ff.", 1)[0]
        oblk = blk.replace("transformer_blocks.", "blocks.").replace("refiner_blocks.", "blocks.")
        if m.endswith((".to_q", ".to_k", ".to_v")):
            if blk in done:
                continue
            done.add(blk)
            As = [sd[f"{blk}.attn.to_{p}.lora_A.weight"] for p in "qkv"]
            Bs = [sd[f"{blk}.attn.to_{p}.lora_B.weight"] for p in "qkv"]
            I = Bs[0].shape[0]
            Bf = np.zeros((3 * I, 3 * r), np.float32)
            for i, b in enumerate(Bs):
                Bf[i * I:(i + 1) * I, i * r:(i + 1) * r] = b
            put(oblk + ".attn.qkv_proj", np.concatenate(As), Bf)
        elif m.endswith(".to_out.0"):
            put(oblk + ".attn.out_proj", A, B)
        elif m.endswith(".ff.net.0.proj"):
            F = B.shape[0] // 2
            put(oblk + ".mlp.fc1", A, np.concatenate([B[F:], B[:F]]))
        elif m.endswith(".ff.net.2"):
            put(oblk + ".mlp.fc2", A, B)
        else:
            raise AssertionError(m)
    save_file(out, dst)
    return dst


@pytest.mark.parametrize("prefix", ["lora_unet_", "diffusion_model."])
def test_kohya_layout_gives_the_same_result(lora_a, tmp_path, prefix):
    t, one, _ = lora_a
    k = kohya_copy(one, str(tmp_path / "k.safetensors"), prefix=prefix)
    inputs = packed_inputs(t.config, seed=5, U=2)
    dit = h3cy.DiT.from_pretrained(t.original, weights="fp32", threads=2)
    dit.load_lora(one, name="peft")
    want = fwd(dit, inputs)
    dit.unload_lora("peft")
    dit.load_lora(k)
    got = fwd(dit, inputs)
    # the fused QKV's block-diagonal B adds zeros: same values up to rounding order (~1e-7)
    assert_close(got[0], want[0], max_rel_tol=1e-5, what="video")
    assert_close(got[1], want[1], max_rel_tol=1e-5, what="audio")


def test_int8_base_with_lora_within_int8_error(lora_a):
    t, one, _ = lora_a
    inputs = packed_inputs(t.config, seed=6, U=2)
    f32 = h3cy.DiT.from_pretrained(t.diffusers_fp32, weights="fp32", threads=2)
    i8 = h3cy.DiT.from_pretrained(t.diffusers_fp32, weights="int8", threads=2)
    base_err = rel_l2(fwd(i8, inputs)[0], fwd(f32, inputs)[0])
    f32.load_lora(one)
    i8.load_lora(one)
    lora_err = rel_l2(fwd(i8, inputs)[0], fwd(f32, inputs)[0])
    # the LoRA runs in float32 beside the int8 product: it adds no error of its own
    assert lora_err <= 1.5 * base_err + 1e-6, (lora_err, base_err)


def test_lora_on_adaln_and_final_layer_matches_diffusers(tiny_dit_factory, tmp_path):
    t = tiny_dit_factory("b")
    path = make_peft_lora(t.diffusers_fp32, str(tmp_path / "t"),
                          BLOCK_MODULES + TIME_MODULES + EDGE_MODULES, seed=7)
    inputs = packed_inputs(t.config, seed=8, U=3)
    want_v, want_a = diffusers_with_loras(t.diffusers_fp32, [(path, 1.0)], inputs)
    dit = h3cy.DiT.from_pretrained(t.diffusers_fp32, weights="fp32", threads=2)
    dit.prepare_timesteps(inputs["timestep"])       # tables made before the LoRA
    base = fwd(dit, inputs)
    dit.load_lora(path)
    got_v, got_a = fwd(dit, inputs)                 # ... must be remade after it
    assert_nontrivial(want_v)
    assert_close(got_v, want_v, max_rel_tol=1e-4, what="video")
    assert_close(got_a, want_a, max_rel_tol=1e-4, what="audio")
    dit.unload_lora("pytorch_lora_weights")
    assert all(np.array_equal(x, y) for x, y in zip(fwd(dit, inputs), base))


def test_unknown_or_unmatched_keys_apply_nothing(lora_a, tmp_path):
    from safetensors.numpy import load_file, save_file
    t, one, _ = lora_a
    sd = load_file(one)
    dit = h3cy.DiT.from_pretrained(t.diffusers_fp32, weights="fp32", threads=2)
    bad = dict(sd, **{"transformer_blocks.0.attn.to_q.dora_scale": np.ones(3, np.float32)})
    save_file(bad, str(tmp_path / "bad.safetensors"))
    with pytest.raises(CheckpointError, match="dora_scale"):
        dit.load_lora(str(tmp_path / "bad.safetensors"))
    far = dict(sd, **{"transformer_blocks.9.attn.to_q.lora_A.weight": sd["transformer_blocks.0.attn.to_q.lora_A.weight"],
                      "transformer_blocks.9.attn.to_q.lora_B.weight": sd["transformer_blocks.0.attn.to_q.lora_B.weight"]})
    save_file(far, str(tmp_path / "far.safetensors"))
    with pytest.raises(CheckpointError, match="transformer_blocks.9.attn.to_q"):
        dit.load_lora(str(tmp_path / "far.safetensors"))
    half = {k: v for k, v in sd.items() if k != "transformer_blocks.1.ff.net.2.lora_B.weight"}
    save_file(half, str(tmp_path / "half.safetensors"))
    with pytest.raises(CheckpointError, match="transformer_blocks.1.ff.net.2"):
        dit.load_lora(str(tmp_path / "half.safetensors"))
    assert dit.loras == {}
    with pytest.raises(H3ValueError):
        dit.unload_lora("nope")


def test_lora_in_the_cython_loop_equals_python_loop(lora_a, monkeypatch):
    t, one, _ = lora_a
    rng = np.random.default_rng(0)
    g = h3cy.Geometry(width=64, height=64, frames=22)
    pe = rng.standard_normal((5, t.config["text_dim"])).astype(np.float32)
    dit = h3cy.DiT.from_pretrained(t.diffusers_fp32, weights="int8", threads=2)
    dit.load_lora(one, strength=0.8)
    got = h3cy.denoise(dit, pe, g, steps=2, seed=1)
    assert dit.loop_stats["loop"] == "cython"
    from h3cy import _config
    monkeypatch.setattr(_config, "_ENV_LOOP_PYTHON", True)
    want = h3cy.denoise(dit, pe, g, steps=2, seed=1)
    assert dit.loop_stats["loop"] == "python"
    dit.unload_lora("pytorch_lora_weights")
    base = h3cy.denoise(dit, pe, g, steps=2, seed=1)
    assert not np.array_equal(got[0], base[0])
    assert np.array_equal(got[0], want[0]) and np.array_equal(got[1], want[1])


@pytest.fixture(scope="module")
def pipeline_lora(tiny_pipeline, tmp_path_factory):
    tp = tiny_pipeline
    return tp, make_peft_lora(tp.dit.diffusers_fp32, str(tmp_path_factory.mktemp("plora")),
                              BLOCK_MODULES + ["adaln_proj.linear"], seed=9)


@pytest.mark.parametrize("keep_loaded", [False, True])
def test_pipeline_applies_loras_whenever_it_builds_the_transformer(pipeline_lora, keep_loaded):
    tp, path = pipeline_lora
    rng = np.random.default_rng(2)
    pe = rng.standard_normal((4, tp.dit.config["text_dim"])).astype(np.float32)
    kw = dict(prompt_embeds=pe, width=64, height=64, frames=22, steps=2, seed=3, output="latent")
    pipe = h3cy.load(tp.diffusers, weights="fp32", streaming=False, keep_loaded=keep_loaded)
    base = pipe.generate(**kw).video_latent
    with_lora = h3cy.load(tp.diffusers, weights="fp32", streaming=False, keep_loaded=keep_loaded,
                          loras=[(path, 0.6)])
    want = with_lora.generate(**kw).video_latent
    assert with_lora.loras == {"pytorch_lora_weights": 0.6}
    assert rel_l2(want, base) > 1e-3
    dit = h3cy.DiT.from_pretrained(tp.dit.diffusers_fp32, weights="fp32", threads=None)
    dit.load_lora(path, strength=0.6)
    g = h3cy.Geometry(width=64, height=64, frames=22)
    direct = h3cy.denoise(dit, pe, g, steps=2, seed=3)[0]
    assert np.array_equal(want, direct)
    pipe.load_lora(path, strength=0.6)
    assert np.array_equal(pipe.generate(**kw).video_latent, want)      # built (or kept) with it
    pipe.set_lora_strength("pytorch_lora_weights", 0.0)
    assert np.array_equal(pipe.generate(**kw).video_latent, base)
    pipe.unload_lora("pytorch_lora_weights")
    assert np.array_equal(pipe.generate(**kw).video_latent, base)


def test_pipeline_checks_lora_files_when_added(pipeline_lora, tmp_path):
    from safetensors.numpy import save_file
    tp, _ = pipeline_lora
    save_file({"blocks.7.mlp.fc2.lora_down.weight": np.zeros((2, 48), np.float32),
               "blocks.7.mlp.fc2.lora_up.weight": np.zeros((32, 2), np.float32)},
              str(tmp_path / "x.safetensors"))
    with pytest.raises(CheckpointError, match="blocks.7.mlp.fc2"):
        h3cy.load(tp.diffusers, weights="fp32", loras=[str(tmp_path / "x.safetensors")])
