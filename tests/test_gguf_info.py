"""``h3cy info FILE.gguf``: header, block types and counts, the component detected, the name
mapping (read / not read / unsupported, each named) and the memory per weights mode."""
import os

import numpy as np

from _comfy_files import dit_state
from _gguf_files import TYPES, random_blocks, write_gguf
from test_gguf_dit import _gguf_dit


def _info(path, capsys):
    from h3cy.cli import info_file
    assert info_file(str(path)) == 0
    return capsys.readouterr().out


def test_info_on_a_gguf_dit(tiny_dit_factory, tmp_path, capsys):
    t = tiny_dit_factory("b")
    gp, _, quantised = _gguf_dit(t, tmp_path, np.random.default_rng(2))
    out = _info(gp, capsys)
    lines = out.splitlines()
    assert "component : transformer (original tensor names)" in out
    assert "general.architecture none" in out and "config    : num_attention_heads=4" in out
    assert f"({os.path.getsize(gp)} bytes)" in out
    types = [ln for ln in lines if ln.startswith("types     :")][0]
    for tname in ("Q8_0", "Q4_0", "Q5_1", "Q4_1", "Q5_0"):
        assert f"{tname} x4 (" in types, types          # 20 quantised linears, 4 of each type
    n = len(dit_state(t))
    assert f"mapping   : {n} of {n} tensors read as h3cy's transformer" in out
    assert "not read" not in out and "UNSUPPORTED" not in out
    mem = {ln.split()[0]: ln for ln in lines if ln.startswith("  ") and "resident" in ln}
    assert set(mem) == {"auto", "fp32", "bf16", "fp16", "int8", "int4"}
    assert "weights='auto' runs this file as stored" in out


def test_info_names_unread_and_unsupported_tensors(tiny_dit_factory, tmp_path, capsys):
    sd = dit_state(tiny_dit_factory("b"))
    rng = np.random.default_rng(3)
    tensors = []
    for name, v in sd.items():
        a = v.float().numpy()
        if name == "blocks.0.attn.qkv_proj.weight":
            tensors.append((name, "Q4_0", a.shape, random_blocks("Q4_0", a.shape[0], a.shape[1], rng)))
        else:
            tensors.append((name, "F32", a.shape, a.astype(np.float32)))
    p = tmp_path / "iq.gguf"
    write_gguf(p, tensors)
    raw = bytearray(p.read_bytes())
    enc = b"blocks.0.attn.qkv_proj.weight"
    at = raw.index(enc) + len(enc) + 4 + 16            # n_dims, two dims, then the type id
    assert raw[at] == TYPES["Q4_0"][0]
    raw[at] = 39                                       # MXFP4: 32 values a block, not read by h3cy
    p.write_bytes(bytes(raw))
    out = _info(p, capsys)
    assert "MXFP4 x1" in out
    assert "UNSUPPORTED: blocks.0.attn.qkv_proj.weight is MXFP4" in out
    assert "the load FAILS" in out

    # a tensor the transformer has no use for: the load refuses it and info names it
    tensors = [(n, "F32", tuple(v.shape), v.float().numpy()) for n, v in sd.items()]
    tensors.append(("blocks.0.attn.extra_gate.weight", "F32", (4, 4), np.ones((4, 4), np.float32)))
    p2 = tmp_path / "extra.gguf"
    write_gguf(p2, tensors)
    out = _info(p2, capsys)
    assert "the load FAILS" in out and "blocks.0.attn.extra_gate.weight" in out


def test_info_on_a_llama_cpp_named_text_encoder(tmp_path, capsys):
    """llama.cpp's names are mapped back to Comfy's; layers past the 50th and the final norm
    are stored but not read (the encoder returns hidden_states[50])."""
    rng = np.random.default_rng(4)
    q = random_blocks("Q8_0", 64, 32, rng)
    tensors = [("token_embd.weight", "Q8_0", (64, 32), q),
               ("blk.0.attn_q.weight", "Q8_0", (64, 32), q),
               ("blk.0.attn_norm.weight", "F32", (32,), np.ones(32, np.float32)),
               ("blk.60.attn_q.weight", "Q8_0", (64, 32), q),
               ("output_norm.weight", "F32", (32,), np.ones(32, np.float32))]
    p = tmp_path / "te.gguf"
    write_gguf(p, tensors, [("general.architecture", 8, "qwen3vl")])
    out = _info(p, capsys)
    assert "component : text_encoder" in out
    assert "general.architecture qwen3vl" in out and "llama.cpp names mapped back" in out
    assert "mapping   : 3 of 5 tensors read as h3cy's text_encoder" in out
    assert "not read: model.layers.60.self_attn.q_proj.weight (Q8_0)" in out
    assert "not read: model.norm.weight (F32)" in out


def test_gguf_memory_per_mode():
    """The per-mode rule on three tensors, by hand: a Q8_0 matrix (34 bytes per 32 values),
    an F16 matrix and an F32 vector."""
    from h3cy.weights.gguf import GGUFTensorInfo
    from h3cy.weights.gguf_info import gguf_memory
    ts = [GGUFTensorInfo("a.weight", "a.weight", "Q8_0", 8, (64, 64), 0, 64 * 2 * 34, 2 * 34),
          GGUFTensorInfo("b.weight", "b.weight", "F16", 1, (64, 32), 0, 64 * 32 * 2, 64),
          GGUFTensorInfo("n.weight", "n.weight", "F32", 0, (64,), 0, 256, 256)]
    m = gguf_memory(ts)
    assert m["auto"] == 4352 + 64 * 32 * 4 + 256     # blocks as stored, F16 widened, vector fp32
    assert m["int8"] == 4352 + int(1.02 * 2048) + 256
    assert m["fp32"] == 4 * (4096 + 2048) + 256
    assert m["bf16"] == m["fp16"] == 2 * (4096 + 2048) + 256
    assert m["int4"] == int(0.53 * 4096) + int(0.53 * 2048) + 256
