"""A tiny H3 DiT written as GGUF (the published files' tensor names: Comfy-Org's, no metadata,
as stable-diffusion.cpp's converter writes them) with mixed block types and float layers,
loaded with weights="auto" (quantised blocks on the GGUF GEMM, float tensors as float)."""
import numpy as np
import pytest
import torch

import h3cy
from _compare import assert_close, assert_nontrivial
from _comfy_files import dit_state, save
from _gguf_files import TYPES, oracle_dequant, random_blocks, write_gguf
from test_dit_parity import packed_inputs

import gguf  # noqa: F401  the test dependency whose dequantiser is the oracle

CYCLE = ["Q8_0", "Q4_0", "Q5_1", "Q4_1", "Q5_0"]


def _gguf_dit(t, tmp_path, rng, cycle=CYCLE):
    """(gguf path, safetensors path of the same model with every quantised weight replaced
    by its dequantised float32 values)."""
    sd = dit_state(t)
    tensors, deq, i = [], {}, 0
    for name, v in sd.items():
        a = v.float().numpy()
        if a.ndim == 2 and name.endswith(".weight") and ("blocks." in name) and a.shape[1] % 32 == 0:
            for j in range(len(cycle)):          # the next type in the cycle whose block divides K
                tname = cycle[(i + j) % len(cycle)]
                if a.shape[1] % TYPES[tname][1] == 0:
                    break
            i += 1
            b = random_blocks(tname, a.shape[0], a.shape[1], rng, scale=float(np.abs(a).max()) / 8)
            tensors.append((name, tname, a.shape, b))
            deq[name] = torch.from_numpy(oracle_dequant(tname, b, a.shape))
        elif v.dtype == torch.bfloat16:
            tensors.append((name, "BF16", a.shape, v.view(torch.int16).numpy().view(np.uint16)))
            deq[name] = v
        else:
            f16 = a.ndim == 2 and i % 2 == 0       # some float layers F16, as converters leave them
            tensors.append((name, "F16" if f16 else "F32", a.shape, a.astype(np.float16 if f16 else np.float32)))
            deq[name] = torch.from_numpy(a.astype(np.float16).astype(np.float32) if f16 else a)
    assert i >= 8, "too few quantised layers to test"
    gp = tmp_path / f"dit-mixed-{len(cycle)}.gguf"
    write_gguf(gp, tensors)
    sp = save(deq, tmp_path / "dit-dequantised.safetensors")
    return str(gp), sp, {n for n, tn, _, _ in tensors if tn in TYPES and TYPES[tn][1] > 1}


def test_gguf_dit_runs_as_stored_and_matches_the_dequantised_model(tiny_dit_factory, tmp_path):
    t = tiny_dit_factory("b")
    gp, sp, quantised = _gguf_dit(t, tmp_path, np.random.default_rng(0))
    inputs = packed_inputs(t.config, seed=3)
    dit = h3cy.DiT.from_pretrained(gp, threads=2)          # weights="auto"
    got_v, got_a = dit.forward(**inputs)
    # the reference: the same weights dequantised, in float32 (h3cy's fp32 path, itself
    # checked against diffusers at 1e-4 in test_single_file.py)
    want_v, want_a = h3cy.DiT.from_pretrained(sp, weights="fp32", threads=2).forward(**inputs)
    assert_nontrivial(want_v)
    # only the activation quantisation (int8 per group of 256) differs: observed rel L2 3.1e-3 /
    # 4.5e-3 (2.3e-3 / 3.4e-3 per 32 values, before session 25);
    # a wrong name mapping, block layout or QKV order gives O(1)
    for got, want in ((got_v, want_v), (got_a, want_a)):
        rel = np.linalg.norm(got - want) / np.linalg.norm(want)
        print(f"observed rel L2 {rel:.2e}")
        assert rel <= 2e-2, rel
    # and the quantised layers did run on the GGUF GEMM: dequantised fp32 weights give the
    # reference bit for bit
    got32_v, _ = h3cy.DiT.from_pretrained(gp, weights="fp32", threads=2).forward(**inputs)
    assert_close(got32_v, want_v, max_rel_tol=1e-5, what="video")
    assert len(quantised) >= 8   # 20 in config b


def test_gguf_dit_with_iq4_layers(tiny_dit_factory, tmp_path, capsys, monkeypatch):
    """IQ4 layers (an IQ4_XS DiT is among the published H3 sets) run as stored on the GGUF
    GEMM beside Q8_0 ones: weights="auto" matches the dequantised model to the activation
    quantisation's error, and `h3cy info` counts their blocks at their size.  IQ4_NL here:
    IQ4_XS blocks hold 256 values and no tiny-model layer has K % 256 == 0 (the GEMM and
    dequantiser tests in test_gguf.py run IQ4_XS)."""
    from h3cy.cli import info_file
    from h3cy.weights.gguf import GGUFFile
    from h3cy.weights import linears
    from h3cy.weights.gguf_info import gguf_memory
    t = tiny_dit_factory("b")
    gp, sp, _ = _gguf_dit(t, tmp_path, np.random.default_rng(6), cycle=["IQ4_NL", "Q8_0"])
    g = GGUFFile(gp)
    try:
        iq4 = [ti for ti in g.tensors.values() if ti.dtype == "IQ4_NL"]
        assert len(iq4) >= 4
        # `h3cy info`'s memory: the IQ4 blocks at their own size under "auto" (int8: ~1.9x)
        assert gguf_memory(iq4)["auto"] == sum(ti.nbytes for ti in iq4)
    finally:
        g.close()
    ran = []                        # the type names of the linears the GGUF GEMM took as stored
    real = linears._gguf_linear

    def spy(w, *args):
        lin = real(w, *args)
        if lin is not None:
            ran.extend(p.type_name for p in (w if isinstance(w, (list, tuple)) else [w]))
        return lin
    monkeypatch.setattr(linears, "_gguf_linear", spy)
    inputs = packed_inputs(t.config, seed=3)
    got_v, got_a = h3cy.DiT.from_pretrained(gp, threads=2).forward(**inputs)
    monkeypatch.undo()
    assert ran.count("IQ4_NL") == len(iq4), (ran, len(iq4))
    want_v, want_a = h3cy.DiT.from_pretrained(sp, weights="fp32", threads=2).forward(**inputs)
    # only the activation quantisation (int8 per group of 256) differs: observed rel L2
    # 9.8e-3 / 1.16e-2 (video / audio; fixed seeds; as large as h3cy int8 gave when the
    # loader decoded IQ4 to it, 1.0e-2, so the spy above is what shows the route); a wrong
    # IQ4 level table, nibble order or sub-block scale gives O(1)
    for got, want in ((got_v, want_v), (got_a, want_a)):
        rel = np.linalg.norm(got - want) / np.linalg.norm(want)
        print(f"observed rel L2 {rel:.2e}")
        assert rel <= 2e-2, rel
    # weights="fp32" dequantises everything: the dequantised model itself
    got32, _ = h3cy.DiT.from_pretrained(gp, weights="fp32", threads=2).forward(**inputs)
    assert_close(got32, want_v, max_rel_tol=1e-5, what="video")
    assert info_file(gp) == 0
    assert "decoded at load" not in capsys.readouterr().out


def test_gguf_dit_streaming_and_weight_cache(tiny_dit_factory, tmp_path):
    """streaming=True builds each block from the mapped file (the same bits as resident);
    weights="auto" converts nothing, so cache_dir gets no file; a converting mode (int4)
    writes its cache once and maps it on the next load, streaming or not."""
    t = tiny_dit_factory("b")
    gp, _, _ = _gguf_dit(t, tmp_path, np.random.default_rng(5))
    inputs = packed_inputs(t.config, seed=3)
    cd = tmp_path / "cache"
    want_v, want_a = h3cy.DiT.from_pretrained(gp, threads=2).forward(**inputs)
    st = h3cy.DiT.from_pretrained(gp, threads=2, streaming=True, cache_dir=str(cd))
    got_v, got_a = st.forward(**inputs)
    assert np.array_equal(got_v, want_v) and np.array_equal(got_a, want_a)
    assert not cd.exists() or not list(cd.iterdir())
    first = h3cy.DiT.from_pretrained(gp, weights="int4", threads=2, cache_dir=str(cd))
    v4, _ = first.forward(**inputs)
    assert len(list(cd.glob("h3cy-int4-*.h3w"))) == 1
    again = h3cy.DiT.from_pretrained(gp, weights="int4", threads=2, cache_dir=str(cd))
    assert again.linears_attached > 0                       # mapped from the cache, not converted
    assert np.array_equal(again.forward(**inputs)[0], v4)
    assert np.array_equal(h3cy.DiT.from_pretrained(gp, weights="int4", threads=2, streaming=True,
                                                   cache_dir=str(cd)).forward(**inputs)[0], v4)


def test_gguf_unsupported_type_is_named(tiny_dit_factory, tmp_path):
    from h3cy.errors import CheckpointError
    t = tiny_dit_factory("b")
    sd = dit_state(t)
    tensors = []
    victim = None
    for name, v in sd.items():
        a = v.float().numpy()
        if victim is None and name.endswith("attn.qkv_proj.weight"):
            victim = name
            # made MXFP4 below (id 39, 32 values in 17 bytes): a type h3cy does not read
            tensors.append((name, "Q4_0", a.shape, random_blocks("Q4_0", a.shape[0], a.shape[1],
                                                                np.random.default_rng(1))))
        else:
            tensors.append((name, "F32", a.shape, a.astype(np.float32)))
    p = tmp_path / "iq.gguf"
    write_gguf(p, tensors)
    raw = bytearray(p.read_bytes())
    enc = victim.encode()
    at = raw.index(enc) + len(enc) + 4 + 16
    assert raw[at] == TYPES["Q4_0"][0]
    raw[at] = 39
    p.write_bytes(bytes(raw))
    with pytest.raises(CheckpointError, match=r"MXFP4") as ei:
        h3cy.DiT.from_pretrained(str(p), threads=1)
    assert "qkv_proj" in str(ei.value)


def _lossless_gguf(sd, path):
    """The Comfy state dict as GGUF with every tensor as stored (BF16 stays BF16, the rest
    F32): the same values as the release folder, so the pipeline must give the same bits."""
    tensors = []
    for name, v in sd.items():
        if v.dtype == torch.bfloat16:
            tensors.append((name, "BF16", tuple(v.shape), v.view(torch.int16).numpy().view(np.uint16)))
        else:
            tensors.append((name, "F32", tuple(v.shape), v.float().numpy()))
    write_gguf(path, tensors)
    return str(path)


def test_load_and_cli_take_a_gguf_transformer(tiny_pipeline, tiny_dit_factory, tmp_path):
    """h3cy.load(dit=FILE.gguf) and `h3cy generate --dit FILE.gguf`: the GGUF file takes the
    folder's transformer, and a file of float tensors gives the release folder's bits."""
    import os
    import subprocess
    import sys
    from test_pipeline import F, H, W
    tp = tiny_pipeline
    gp = _lossless_gguf(dit_state(tiny_dit_factory("p")), tmp_path / "dit.gguf")
    kw = dict(prompt="a red fox in the snow", width=W, height=H, frames=F, steps=2, output="latent", seed=3)
    want = h3cy.load(tp.release, weights="fp32").generate(**kw)
    pipe = h3cy.load(tp.diffusers, weights="fp32", dit=gp)
    assert pipe.folder.paths["transformer"] == gp
    got = pipe.generate(**kw)
    assert np.array_equal(got.video_latent, want.video_latent)
    assert np.array_equal(got.audio_latent, want.audio_latent)
    lat = tmp_path / "lat.npz"
    env = dict(os.environ, PYTHONPATH=os.pathsep.join(
        [os.path.dirname(os.path.dirname(h3cy.__file__)), os.environ.get("PYTHONPATH", "")]))
    r = subprocess.run([sys.executable, "-m", "h3cy", "generate", "-m", tp.diffusers, "--dit", gp, "-p",
                        "a red fox in the snow", "--width", str(W), "--height", str(H), "--frames", str(F),
                        "--steps", "2", "--seed", "3", "--weights", "fp32", "--latent-out", str(lat), "-q"],
                       capture_output=True, text=True, env=env, timeout=300)
    assert r.returncode == 0, r.stderr
    with np.load(lat) as z:
        assert np.array_equal(z["video_latent"], want.video_latent)
