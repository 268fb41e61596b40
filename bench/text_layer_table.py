"""One full-size Qwen3-VL-32B text decoder layer (hidden 5120, 64/8 heads of 128, MLP 25600,
random bf16 weights): seconds per layer for h3cy fp32/bf16/int8/int4 and transformers'
Qwen3VLTextDecoderLayer on torch CPU fp32 and bf16, same process, same inputs; extrapolated
to the 50 layers of hidden_states[50].  Writes bench/results/text_layer.json.

    PYTHONPATH=$PWD python3 bench/text_layer_table.py --threads 2 --L 32 128
"""
import argparse
import json
import os
import platform
import time

import numpy as np

HID, HEADS, KV, HD, FFN = 5120, 64, 8, 128, 25600


def layer_weights(seed=0):
    """bf16 bits of each tensor (uint16), std 0.02 like the init, norms near 1."""
    rng = np.random.default_rng(seed)

    def w(n, k):
        a = (rng.standard_normal((n, k), dtype=np.float32) * 0.02)
        return (a.view(np.uint32) >> 16).astype(np.uint16)
    t = {"q_proj": w(HEADS * HD, HID), "k_proj": w(KV * HD, HID), "v_proj": w(KV * HD, HID),
         "o_proj": w(HID, HEADS * HD), "gate_proj": w(FFN, HID), "up_proj": w(FFN, HID),
         "down_proj": w(HID, FFN)}
    for n, d in (("input_layernorm", HID), ("post_attention_layernorm", HID), ("q_norm", HD), ("k_norm", HD)):
        t[n] = ((1 + 0.1 * rng.standard_normal(d, dtype=np.float32)).view(np.uint32) >> 16).astype(np.uint16)
    return t


def timeit(fn, reps):
    fn()
    ts = []
    for _ in range(reps):
        t0 = time.perf_counter()
        fn()
        ts.append(time.perf_counter() - t0)
    return float(np.median(ts))


def h3cy_layer(t, weights, threads):
    """A TextEncoder-built layer over in-memory weights (the same _Layer code path)."""
    import h3cy
    from h3cy.models import text_encoder as te
    src = type("Src", (), {})()
    src.get = lambda name: t[name.split(".")[-2]]
    enc = te.TextEncoder.__new__(te.TextEncoder)
    enc.weights, enc.round_bf16 = weights, weights == "bf16"
    enc.isa = h3cy.ops.resolve_isa(None)
    enc._pool = h3cy.ops.ThreadPool(threads)
    enc.threads = threads
    enc._cache_reader = enc._cache_writer = None
    enc._build_lock = __import__("threading").Lock()
    enc.config = type("C", (), dict(num_attention_heads=HEADS, num_key_value_heads=KV, rms_norm_eps=1e-6))()
    return enc, te._Layer(enc, src, 0)


def h3cy_run(t, mode, threads, x0):
    """A callable running h3cy's layer in weights mode `mode` on a copy of x0 [L, HID]."""
    from h3cy.models.text_encoder import rope_inv_freq, rope_tables
    L = x0.shape[0]
    cos, sin = rope_tables(np.arange(L), rope_inv_freq(HD, 5e6))
    enc, layer = h3cy_layer(t, mode, threads)
    ws = np.empty(layer.core.workspace_bytes(L) + 64, np.uint8)

    def run():
        h = x0.copy()
        layer.core.forward(h, 1e-6, int(mode == "bf16"), ws, cos, sin)
        return h
    return run


def layer_input(L):
    """The layer input [L, HID]: bf16-valued standard normal (seeded)."""
    x0 = np.random.default_rng(1).standard_normal((L, HID), dtype=np.float32)
    return ((x0.view(np.uint32) + 0x8000) & 0xFFFF0000).view(np.float32)


def torch_layer(t, x0, dt):
    """transformers' Qwen3VLTextDecoderLayer in torch dtype `dt` ("float32"/"bfloat16") with the
    weights t, as a callable running it (causal, SDPA) on x0 [L, HID]."""
    import torch
    from transformers import Qwen3VLTextConfig
    from transformers.models.qwen3_vl.modeling_qwen3_vl import Qwen3VLTextDecoderLayer, Qwen3VLTextRotaryEmbedding
    L = x0.shape[0]
    cfg = Qwen3VLTextConfig(hidden_size=HID, intermediate_size=FFN, num_attention_heads=HEADS,
                            num_key_value_heads=KV, head_dim=HD, num_hidden_layers=1,
                            rope_parameters={"rope_type": "default", "rope_theta": 5e6,
                                             "mrope_section": [24, 20, 20], "mrope_interleaved": True})
    cfg._attn_implementation = "sdpa"
    tl = Qwen3VLTextDecoderLayer(cfg, 0).eval()
    names = {"q_proj": "self_attn.q_proj", "k_proj": "self_attn.k_proj", "v_proj": "self_attn.v_proj",
             "o_proj": "self_attn.o_proj", "q_norm": "self_attn.q_norm", "k_norm": "self_attn.k_norm",
             "gate_proj": "mlp.gate_proj", "up_proj": "mlp.up_proj", "down_proj": "mlp.down_proj"}
    sd = {names.get(k, k) + ".weight": torch.from_numpy((v.astype(np.uint32) << 16).view(np.float32))
          for k, v in t.items()}
    tl.load_state_dict(sd)
    tl = tl.to(getattr(torch, dt))
    rot = Qwen3VLTextRotaryEmbedding(cfg)
    xt = torch.from_numpy(x0)[None].to(getattr(torch, dt))
    pos = torch.arange(L)[None, None].expand(3, 1, L)
    pe = rot(xt, pos)
    mask = torch.full((L, L), float("-inf")).triu(1)[None, None].to(xt.dtype)

    def run():
        with torch.no_grad():
            o = tl(xt, attention_mask=mask, position_embeddings=pe)
        return o[0] if isinstance(o, tuple) else o
    return run


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--threads", type=int, default=2)
    ap.add_argument("--L", type=int, nargs="+", default=[32, 128])
    ap.add_argument("--reps", type=int, default=2)
    ap.add_argument("--modes", nargs="+", default=["fp32", "bf16", "int8", "int4"])
    a = ap.parse_args()
    import torch
    torch.set_num_threads(a.threads)
    t = layer_weights()
    rows = []
    for L in a.L:
        x0 = layer_input(L)
        res = {"L": L}
        for mode in a.modes:
            run = h3cy_run(t, mode, a.threads, x0)
            res[f"h3cy_{mode}"] = timeit(run, a.reps)
            res[f"out_{mode}"] = run()
            del run
        for dt in ("float32", "bfloat16"):
            trun = torch_layer(t, x0, dt)
            res[f"torch_{dt}"] = timeit(trun, a.reps)
            res[f"out_torch_{dt}"] = trun()[0].float().numpy()
            del trun
        ref = res["out_torch_float32"]
        for m in a.modes:
            o = res.pop(f"out_{m}")
            res[f"relL2_{m}"] = float(np.linalg.norm(o - ref) / np.linalg.norm(ref - x0))
        res.pop("out_torch_float32")
        o = res.pop("out_torch_bfloat16")
        res["relL2_torch_bf16"] = float(np.linalg.norm(o - ref) / np.linalg.norm(ref - x0))
        rows.append(res)
        print(json.dumps(res), flush=True)
    out = {"threads": a.threads, "cpu": platform.processor() or platform.machine(), "rows": rows}
    os.makedirs("bench/results", exist_ok=True)
    with open("bench/results/text_layer.json", "w") as f:
        json.dump(out, f, indent=1)
    print(f"{'L':>5} " + " ".join(f"{k:>14}" for k in ["torch_float32", "torch_bfloat16"] + [f"h3cy_{m}" for m in a.modes])
          + "   int8 vs torch bf16   50 layers (int8)")
    for r in rows:
        print(f"{r['L']:>5} " + " ".join(f"{r[k]:>13.3f}s" for k in ["torch_float32", "torch_bfloat16"] + [f"h3cy_{m}" for m in a.modes])
              + f"   {r['torch_bfloat16'] / r['h3cy_int8']:>6.2f}x   {50 * r['h3cy_int8']:>8.1f}s")


if __name__ == "__main__":
    main()
