"""LoRAs on a GGUF DiT: the run-time addend on the GGUF linears (csrc/gemm_lora.c, a GGUF
base: the block product without epilogue, then the up product, then the epilogue) against
the same LoRA on the dequantised model in float32; strength 0 and unloading give the base
back bit for bit; merge=True requantises the adapted GGUF linears to int8."""
import numpy as np
import pytest

import h3cy
from conftest import isa_params
from test_dit_lora import BLOCK_MODULES, make_peft_lora
from test_dit_parity import packed_inputs
from test_gguf_dit import _gguf_dit


@pytest.fixture(scope="module")
def gguf_lora(tiny_dit_factory, tmp_path_factory):
    t = tiny_dit_factory("b")
    d = tmp_path_factory.mktemp("gguf_lora")
    gp, sp, quantised = _gguf_dit(t, d, np.random.default_rng(0))
    # to_q/k/v (the fused QKV, a GGUF linear), to_out (gated residual epilogue), ff.net.0
    # (the SwiGLU pair epilogue), ff.net.2 (gated residual)
    lora = make_peft_lora(t.diffusers_fp32, str(d / "lora"), BLOCK_MODULES, seed=1)
    return gp, sp, lora, packed_inputs(t.config, seed=3)


def _rel(a, b):
    return float(np.linalg.norm(a - b) / np.linalg.norm(b))


@pytest.mark.parametrize("isa", isa_params())
def test_lora_on_gguf_matches_the_dequantised_model(gguf_lora, isa):
    gp, sp, lora, inputs = gguf_lora
    dit = h3cy.DiT.from_pretrained(gp, threads=2, isa=isa)          # weights="auto": as stored
    ref = h3cy.DiT.from_pretrained(sp, weights="fp32", threads=2, isa=isa)
    base_v, base_a = dit.forward(**inputs)
    ref_base_v, ref_base_a = ref.forward(**inputs)
    dit.load_lora(lora, strength=0.8)
    ref.load_lora(lora, strength=0.8)
    got_v, got_a = dit.forward(**inputs)
    want_v, want_a = ref.forward(**inputs)
    # the LoRA moves the output (observed rel 0.11): what follows measures its application
    assert _rel(want_v, ref_base_v) > 0.05
    # only the GGUF GEMM's activation quantisation (int8 per 32) differs: observed rel L2
    # 3.3e-3 (video) and 5.4e-3 (audio); a LoRA skipped on the GGUF linears gives 0.11
    for got, want in ((got_v, want_v), (got_a, want_a)):
        assert _rel(got, want) <= 2e-2, _rel(got, want)
    # the LoRA's own contribution, separately (the quantisation error of both outputs over a
    # difference 9x smaller than them): observed 3.7e-2; a skipped or misplaced addend (a
    # SwiGLU half, a QKV part) gives O(1)
    assert _rel(got_v - base_v, want_v - ref_base_v) <= 0.15
    # strength 0 detaches the addend: the base bit for bit; so does unloading
    name = next(iter(dit.loras))
    dit.set_lora_strength(name, 0.0)
    v0, a0 = dit.forward(**inputs)
    assert np.array_equal(v0, base_v) and np.array_equal(a0, base_a)
    dit.set_lora_strength(name, 0.8)
    v1, _ = dit.forward(**inputs)
    assert np.array_equal(v1, got_v)
    dit.unload_lora(name)
    v2, a2 = dit.forward(**inputs)
    assert np.array_equal(v2, base_v) and np.array_equal(a2, base_a)


def test_lora_on_a_streaming_gguf_dit_equals_resident(gguf_lora):
    gp, _, lora, inputs = gguf_lora
    res = h3cy.DiT.from_pretrained(gp, threads=2)
    st = h3cy.DiT.from_pretrained(gp, threads=2, streaming=True)
    for d in (res, st):
        d.load_lora(lora)
    v_r, a_r = res.forward(**inputs)
    v_s, a_s = st.forward(**inputs)
    assert np.array_equal(v_r, v_s) and np.array_equal(a_r, a_s)


def test_merge_on_gguf_requantises_to_int8(gguf_lora, tmp_path):
    """merge=True on a GGUF base: each adapted linear becomes W + s B A in h3cy's int8 (the
    mode weights="auto" resolves to for GGUF files); unloading gives the GGUF base back."""
    gp, sp, lora, inputs = gguf_lora
    dit = h3cy.DiT.from_pretrained(gp, threads=2, cache_dir=str(tmp_path))
    base_v, _ = dit.forward(**inputs)
    dit.load_lora(lora, merge=True)
    got_v, _ = dit.forward(**inputs)
    ref = h3cy.DiT.from_pretrained(sp, weights="fp32", threads=2)
    ref.load_lora(lora)
    want_v, _ = ref.forward(**inputs)
    # the merged linears are int8 per channel (weights and activations): observed rel L2
    # 4.1e-3; a LoRA not merged gives 0.11
    assert _rel(got_v, want_v) <= 3e-2, _rel(got_v, want_v)
    dit.unload_lora(next(iter(dit.loras)))
    v, _ = dit.forward(**inputs)
    assert np.array_equal(v, base_v)

