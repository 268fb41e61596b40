"""Comfy's NVFP4 text encoder layout (``qwen3vl_32b_minimax_h3_nvfp4_awq``): E2M1 codes two
per byte, e4m3 block scales in cuBLAS's blocked layout, a per-tensor scale, AWQ's
``pre_quant_scale``, an int8 embedding.  The reader's dequantisation against an independent
numpy decode, and the encoder -- its linears on the NVFP4 GEMM over the file's codes as
stored (tests/test_nvfp4_gemm.py tests the GEMM itself) -- against transformers on the
dequantised weights."""
import numpy as np
import pytest
import torch

import h3cy
from h3cy.errors import CheckpointError
from h3cy.weights.comfy_quant import read_nvfp4
from h3cy.weights.files import TensorFiles
from h3cy.weights.single_file import detect
from _comfy_files import decode_nvfp4, put_int8, put_nvfp4, quant_blob, save, text_encoder_file
from _compare import assert_nontrivial, rel_l2


@pytest.mark.parametrize("N,K,awq", [(128, 64, False), (37, 200, True), (300, 48, False)])
def test_nvfp4_dequantisation_matches_an_independent_decode(tmp_path, N, K, awq):
    """Padded shapes (N not a multiple of 16 or 128, K not of 64), the blocked scales and
    the hi-first nibbles: h3cy's dequantised weight against float64 numpy."""
    g = torch.Generator().manual_seed(N + K)
    w = torch.randn((N, K), generator=g) * torch.rand((N, 1), generator=g) * 3
    pqs = (0.5 + torch.rand(K, generator=g) * 1.5) if awq else None
    sd = put_nvfp4({"l.weight": w}, "l", pqs)
    path = save(sd, tmp_path / "f.safetensors")
    files = TensorFiles([path], float_dtypes=("F32", "BF16", "F16"))
    try:
        got = read_nvfp4(files, "l", (N, K)).dequantized()
    finally:
        files.close()
    want = decode_nvfp4(sd["l.weight"], sd["l.weight_scale"], sd["l.weight_scale_2"], N, K, pqs)
    assert_nontrivial(want)
    assert np.abs(got - want).max() <= 1e-6 * np.abs(want).max()     # float32 products of exact values
    # and it is the weight, to NVFP4's precision (a swapped nibble order or an unswizzled
    # scale read as plain gives rel-L2 ~1)
    assert rel_l2(got, w.numpy()) < 0.15


def _nvfp4_text_encoder(tiny_te, tmp_path):
    """The tiny encoder as Comfy's nvfp4_awq file: every LM linear NVFP4 (o_proj and
    down_proj with AWQ scales), the embedding int8_tensorwise (per row), the rest bf16."""
    from safetensors.torch import load_file
    sd = load_file(text_encoder_file(tiny_te, tmp_path / "te.safetensors"))
    g = torch.Generator().manual_seed(3)
    for name in list(sd):
        if name.startswith("model.layers.") and name.endswith("_proj.weight"):
            layer = name[:-len(".weight")]
            awq = layer.endswith(("o_proj", "down_proj"))
            K = sd[name].shape[1]
            put_nvfp4(sd, layer, (0.5 + torch.rand(K, generator=g)) if awq else None)
    sd["model.embed_tokens.weight"] = sd["model.embed_tokens.weight"].float()
    put_int8(sd, "model.embed_tokens")
    sd["model.embed_tokens.comfy_quant"] = quant_blob({"format": "int8_tensorwise"})
    return sd, save(sd, tmp_path / "te_nvfp4_awq.safetensors")


def _transformers_on(tiny_te, weights, ids):
    """transformers' hidden_states[50] with the LM weights replaced by ``weights``."""
    from transformers import Qwen3VLForConditionalGeneration
    m = Qwen3VLForConditionalGeneration.from_pretrained(tiny_te, dtype=torch.float32).eval()
    sd = m.state_dict()
    with torch.no_grad():
        for k, v in weights.items():
            sd["model.language_model." + k[len("model."):]].copy_(torch.from_numpy(v))
        x = torch.tensor([list(ids)], dtype=torch.long)
        out = m.model(input_ids=x, attention_mask=torch.ones_like(x), use_cache=False, output_hidden_states=True)
    return out.hidden_states[50][0].float().numpy()


def test_nvfp4_text_encoder_matches_transformers_on_the_dequantised_weights(tiny_te, tmp_path):
    from test_single_file import TE_IDS
    sd, path = _nvfp4_text_encoder(tiny_te, tmp_path)
    k = detect(path)
    assert k.quant == {"nvfp4": 350, "int8_tensorwise": 1}
    deq = {}
    for name in sd:
        if name.endswith(".comfy_quant") and "embed_tokens" not in name:
            layer = name[:-len(".comfy_quant")]
            K = {"o_proj": 128, "down_proj": 96}.get(layer.rsplit(".", 1)[1], 64)
            N = int(sd[layer + ".weight"].shape[0])
            deq[layer + ".weight"] = decode_nvfp4(sd[layer + ".weight"], sd[layer + ".weight_scale"],
                                                  sd[layer + ".weight_scale_2"], N, K,
                                                  sd.get(layer + ".pre_quant_scale")).astype(np.float32)
    e = sd["model.embed_tokens.weight"].float() * sd["model.embed_tokens.weight_scale"]
    deq["model.embed_tokens.weight"] = e.numpy()
    want = _transformers_on(tiny_te, deq, TE_IDS)
    assert_nontrivial(want)
    f32 = h3cy.TextEncoder.from_pretrained(path, weights="fp32", threads=2).encode(TE_IDS)
    # observed 7e-7: the same float weights (the reader's dequantisation, AWQ folded in)
    assert rel_l2(f32, want) < 1e-4
    enc = h3cy.TextEncoder.from_pretrained(path, weights="auto", threads=2)
    # as stored: every LM linear an NVFP4 linear over the file's codes (N K / 2 bytes) and
    # scales (N K / 16), nothing widened (int8 would hold N K bytes)
    for name, lin in enc.layers[0].linears.items():
        N, K = lin.N, lin.K            # (gate_up: both halves)
        assert lin.core.weight_bytes == N * K // 2 + N * K // 16, name
    got = enc.encode(TE_IDS)
    # the int8 mode's bound (3e-2); observed 1.8e-2: only the activations are quantised (per 32
    # inputs, after the AWQ scale), the weights are the file's exactly -- where the int8 mode's
    # conversion observed 2.9e-2 (weights re-rounded to int8 per row on top)
    assert rel_l2(got, want) < 3e-2


@pytest.mark.parametrize("case,match", [
    ("scale_shape", r"layers\.0\.self_attn\.q_proj\.weight_scale.*nvfp4.*F8_E4M3"),
    ("scale_nan", r"layers\.0\.self_attn\.q_proj\.weight_scale.*NaN"),
    ("packed_shape", r"layers\.0\.self_attn\.q_proj\.weight.*nvfp4.*U8"),
    ("no_scale_2", r"layers\.0\.self_attn\.q_proj\.weight_scale_2.*missing"),
    ("awq_shape", r"layers\.0\.self_attn\.o_proj\.pre_quant_scale.*vector of 128"),
])
def test_malformed_nvfp4_layers_are_refused_by_name(tiny_te, tmp_path, case, match):
    sd, _ = _nvfp4_text_encoder(tiny_te, tmp_path)
    L = "model.layers.0.self_attn.q_proj"
    if case == "scale_shape":
        sd[L + ".weight_scale"] = sd[L + ".weight_scale"][:64].contiguous()
    elif case == "scale_nan":
        s = sd[L + ".weight_scale"].view(torch.uint8).clone()
        s[0, 0] = 0x7F
        sd[L + ".weight_scale"] = s.view(torch.float8_e4m3fn)
    elif case == "packed_shape":
        sd[L + ".weight"] = sd[L + ".weight"][:, :16].contiguous()
    elif case == "no_scale_2":
        del sd[L + ".weight_scale_2"]
    elif case == "awq_shape":
        sd["model.layers.0.self_attn.o_proj.pre_quant_scale"] = torch.ones(64, dtype=torch.bfloat16)
    path = save(sd, tmp_path / "bad.safetensors")
    with pytest.raises(CheckpointError, match=match):
        h3cy.TextEncoder.from_pretrained(path, weights="int8", threads=1)
