"""Which products the models' attention multiplies (h3cy.ops.attention_bf16): bf16 pairs for
bf16 models, and by default for int8/int4 models, where the CPU multiplies bf16 natively
(AMX tiles, AVX512-BF16); float32 otherwise or with attention="fp32"."""
import numpy as np
import pytest

import h3cy
from h3cy import _config, ops
from h3cy.errors import H3ValueError
from _compare import rel_l2
from _tiny_vae import build as build_tiny_vae
from conftest import HOST_ISAS
from test_dit_parity import packed_inputs


def native_bf16(isa):
    """Whether attention with bf16_inputs runs the bf16 kernels on this path here."""
    return isa == "amx" or (isa == "avx512" and "avx512_bf16" in ops.cpu_features())


@pytest.mark.parametrize("attention, weights, want", [
    (None, "fp32", False), (None, "fp16", False), (None, "bf16", True),
    (None, "int8", True), (None, "int4", True),
    ("auto", "int8", True), ("AUTO", "fp32", False),
    ("fp32", "int8", False), ("fp32", "int4", False), ("fp32", "bf16", True),
    ("bf16", "fp32", True), ("bf16", "fp16", True),
])
def test_attention_bf16_choice(attention, weights, want):
    assert ops.attention_bf16(attention, weights) is want


def test_attention_env_default_and_bad_values(monkeypatch):
    monkeypatch.setattr(_config, "_ENV_ATTENTION", "fp32")
    assert ops.attention_bf16(None, "int8") is False
    assert ops.attention_bf16("auto", "int8") is True      # an explicit argument wins
    monkeypatch.setattr(_config, "_ENV_ATTENTION", "fast")
    with pytest.raises(H3ValueError, match="attention must be one of"):
        ops.attention_bf16(None, "int8")
    for bad in ("half", 1, True):
        with pytest.raises(H3ValueError, match="attention must be one of"):
            ops.attention_bf16(bad, "fp32")
    with pytest.raises(H3ValueError, match="attention must be one of"):
        h3cy.VideoDecoder.from_pretrained("/nonexistent", weights="int8", attention="half")


@pytest.fixture(scope="module")
def dit_c(tiny_dit_factory):
    """Config "c": head_dim 32, so the bf16 kernels apply (D a multiple of 32)."""
    t = tiny_dit_factory("c")
    return t, packed_inputs(t.config, seed=21)


def test_int8_dit_takes_bf16_products_by_default(dit_c):
    t, inputs = dit_c
    isa = ops.active_isa()
    ref = h3cy.DiT.from_pretrained(t.diffusers_fp32, weights="fp32").forward(**inputs)
    auto = h3cy.DiT.from_pretrained(t.diffusers_fp32, weights="int8").forward(**inputs)
    f32 = h3cy.DiT.from_pretrained(t.diffusers_fp32, weights="int8", attention="fp32").forward(**inputs)
    for a, f, r in zip(auto, f32, ref):
        # observed rel L2 vs fp32 weights: int8 ~1e-2 either way (tiny models quantise
        # coarsely); bf16 products move the result by ~1e-3 relative
        assert rel_l2(a, r) <= 3e-2 and rel_l2(f, r) <= 3e-2
        if native_bf16(isa):
            assert not np.array_equal(a, f), "attention='fp32' changed nothing: the flag is not reaching the kernel"
            assert rel_l2(a, f) <= 1e-2
        else:
            assert np.array_equal(a, f), f"{isa} has no bf16 dot products: the float32 kernels must run"


# every path this machine runs that has no bf16 dot products (ref everywhere; avx2, neon, and
# avx512 without AVX512-BF16 where present): no skips, each one is a real path here
NO_BF16_PATHS = [i for i in HOST_ISAS if not native_bf16(i)]


@pytest.mark.filterwarnings("ignore:h3cy. int8 weights run the portable")
@pytest.mark.parametrize("isa", NO_BF16_PATHS)
def test_paths_without_bf16_products_ignore_the_choice(dit_c, isa):
    t, inputs = dit_c
    a = h3cy.DiT.from_pretrained(t.diffusers_fp32, weights="int8", isa=isa).forward(**inputs)
    f = h3cy.DiT.from_pretrained(t.diffusers_fp32, weights="int8", isa=isa, attention="fp32").forward(**inputs)
    for x, y in zip(a, f):
        assert np.array_equal(x, y)


def test_c_blocks_and_python_path_take_the_same_products(dit_c):
    """fp32 weights with attention="bf16": the C block driver (flag in h3_dit_block_args)
    against the op-by-op Python path (flag in ops.Attention)."""
    t, inputs = dit_c
    d = h3cy.DiT.from_pretrained(t.diffusers_fp32, weights="fp32", attention="bf16")
    got = d.forward(**inputs)
    d._python_blocks = True
    want = d.forward(**inputs)
    plain = h3cy.DiT.from_pretrained(t.diffusers_fp32, weights="fp32").forward(**inputs)
    for g, w, p in zip(got, want, plain):
        # C vs Python in fp32 differ by ~1e-7 (fused epilogues); had one side ignored the
        # flag they would differ like bf16 vs float32 products, ~1e-3
        assert rel_l2(g, w) <= 2e-5
        if native_bf16(d.isa):
            assert rel_l2(g, p) > 1e-5, "attention='bf16' gave the float32 result"


@pytest.fixture(scope="module")
def vae32(tmp_path_factory):
    """The tiny VAE with 2 heads of 32 (the bf16 kernels need D % 32 == 0)."""
    return build_tiny_vae(str(tmp_path_factory.mktemp("tiny_vae_d32")), decoder_attention_head_dim=32)


def test_int8_video_decoder_takes_bf16_products_by_default(vae32):
    latent = np.random.default_rng(3).standard_normal((24, 7, 4, 4)).astype(np.float32)
    ref = h3cy.VideoDecoder.from_pretrained(vae32.diffusers, weights="fp32").decode(latent)
    dec = h3cy.VideoDecoder.from_pretrained(vae32.diffusers, weights="int8")
    auto = dec.decode(latent)
    f32 = h3cy.VideoDecoder.from_pretrained(vae32.diffusers, weights="int8", attention="fp32").decode(latent)
    # observed rel L2 vs fp32: int8 ~2e-3; bf16 products add ~1e-4
    assert rel_l2(auto, ref) <= 1e-2 and rel_l2(f32, ref) <= 1e-2
    if native_bf16(dec.isa):
        assert not np.array_equal(auto, f32)
        assert rel_l2(auto, f32) <= 5e-3
    else:
        assert np.array_equal(auto, f32)


def test_cython_loop_takes_the_same_products(dit_c, monkeypatch):
    """The denoising loop's blocks (pyx/_loop.pxi) carry the model's choice too: its int8
    latents equal the Python loop's (DiT.forward) bit for bit."""
    t, _ = dit_c
    cfg = t.config
    g = h3cy.Geometry(width=64, height=64, frames=22)
    pe = np.random.default_rng(4).standard_normal((5, cfg["text_dim"])).astype(np.float32)
    dit = h3cy.DiT.from_pretrained(t.diffusers_fp32, weights="int8")
    out = {}
    for name, flag in (("python", True), ("cython", False)):
        monkeypatch.setattr(_config, "_ENV_LOOP_PYTHON", flag)
        out[name] = h3cy.denoise(dit, pe, g, steps=3, seed=1)
        assert dit.loop_stats["loop"] == name
    for x, y in zip(out["python"], out["cython"]):
        assert np.array_equal(x, y)
