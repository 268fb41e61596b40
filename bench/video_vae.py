"""The video VAE decoder at full width (dim 2048, 32 heads x 64, FFN 8192, one 256-px tile =
7*16*16 + 5 = 1797 tokens), random weights:

1. one ViT block's seconds: h3cy fp32 / bf16 / int8 beside diffusers'
   MiniMaxH3VideoTransformerBlock on torch CPU fp32 and bf16, same inputs, same thread count;
   extrapolated to a 512x512x22 decode (9 tiles x 1 clip x 36 blocks);
2. peak RSS of whole decodes (a 2-block full-width model, streamed with on_frames) at two
   canvas sizes, each in a fresh process: it grows by the output clip only, not per tile;
3. (--ab) the block ratio h3cy / torch at equal precision (fp32, bf16) over alternated rounds,
   so that a machine whose speed drifts still gives a fair ratio (the median of the rounds).

    H3CY_THREADS=2 python bench/video_vae.py [--rss-only|--block-only|--ab] > bench/results/video_vae_2threads.txt
"""
import itertools
import json
import os
import subprocess
import sys
import time

import numpy as np

DIM, HEADS, HD, FFN, TOK = 2048, 32, 64, 8192, 7 * 16 * 16 + 5
ROOT = os.environ.get("H3CY_BENCH_DIR", "/tmp/h3cy_bench_vae")


def write_checkpoint(folder, layers, seed=0):
    """A diffusers-layout vae/ folder with full-width decoder tensors (float32, random)."""
    from safetensors.numpy import save_file
    if os.path.isfile(os.path.join(folder, "diffusion_pytorch_model.safetensors")):
        return folder
    os.makedirs(folder, exist_ok=True)
    rng = np.random.default_rng(seed)

    def w(n, k):
        return (rng.standard_normal((n, k), dtype=np.float32) / np.sqrt(k)).astype(np.float32)

    def v(n, s=0.1, base=0.0):
        return (base + s * rng.standard_normal(n, dtype=np.float32)).astype(np.float32)
    sd = {"post_quant_conv.weight": w(24, 24).reshape(24, 24, 1, 1, 1), "post_quant_conv.bias": v(24),
          "decoder.proj_in.weight": w(DIM, 24), "decoder.proj_in.bias": v(DIM),
          "decoder.register_tokens": v(DIM * 4, 1.0).reshape(1, 4, DIM),
          "decoder.norm_out.weight": v(DIM, 0.1, 1.0), "decoder.norm_out.bias": v(DIM),
          "decoder.proj_out.weight": w(3072, DIM), "decoder.proj_out.bias": v(3072)}
    for i in range(layers):
        p = f"decoder.transformer_blocks.{i}."
        for x in "qkv":
            sd[p + f"attn.to_{x}.weight"], sd[p + f"attn.to_{x}.bias"] = w(DIM, DIM), v(DIM)
        sd[p + "attn.to_out.0.weight"], sd[p + "attn.to_out.0.bias"] = w(DIM, DIM), v(DIM)
        sd[p + "ff.net.0.proj.weight"], sd[p + "ff.net.0.proj.bias"] = w(2 * FFN, DIM), v(2 * FFN)
        sd[p + "ff.net.2.weight"], sd[p + "ff.net.2.bias"] = w(DIM, FFN), v(DIM)
        sd[p + "norm1.weight"], sd[p + "norm2.weight"] = v(DIM, 0.1, 1.0), v(DIM, 0.1, 1.0)
        sd[p + "scale1"], sd[p + "scale2"] = v(DIM, 0.3), v(DIM, 0.3)
    save_file(sd, os.path.join(folder, "diffusion_pytorch_model.safetensors"))
    with open(os.path.join(folder, "config.json"), "w") as f:
        json.dump({"_class_name": "AutoencoderKLMiniMaxH3", "decoder_num_layers": layers}, f)
    return folder


def block_inputs(seed=1):
    rng = np.random.default_rng(seed)
    return (rng.standard_normal((TOK, DIM), dtype=np.float32)).astype(np.float32)


def h3cy_block_timer(folder, mode):
    import h3cy
    dec = h3cy.VideoDecoder.from_pretrained(folder, weights=mode)
    blk = dec.blocks[0]
    cos, sin = dec._rope_tables(7, 16, 16)
    ws = np.empty(blk.core.workspace_bytes(TOK, HEADS, dec.rot_dim, int(dec.round_bf16)) + 64, np.uint8)
    h0 = block_inputs()

    def run():
        h = h0.copy()
        blk.core.forward(h, HEADS, dec.rot_dim, 1e-5, int(dec.round_bf16), ws, cos, sin,
                         attn_bf16=int(dec.attn_bf16))
        return h
    return run, dec


def torch_block_timer(folder, dtype):
    import torch
    from safetensors.numpy import load_file
    from diffusers.models.autoencoders.autoencoder_kl_minimax_h3 import (
        MiniMaxH3VideoRotaryPosEmbed, MiniMaxH3VideoTransformerBlock)
    torch.set_num_threads(int(os.environ.get("H3CY_THREADS", "2")))
    sd = load_file(os.path.join(folder, "diffusion_pytorch_model.safetensors"))
    pre = "decoder.transformer_blocks.0."
    blk = MiniMaxH3VideoTransformerBlock(DIM, HEADS, HD, 4, 1e-5).eval()
    blk.load_state_dict({k[len(pre):]: torch.from_numpy(v) for k, v in sd.items() if k.startswith(pre)})
    td = {"fp32": torch.float32, "bf16": torch.bfloat16}[dtype]
    if dtype == "bf16":     # as from_pretrained(torch_dtype=bf16): norms and scales stay fp32
        for n, p in blk.named_parameters():
            if not any(s in n for s in ("norm1", "norm2", "scale1", "scale2")):
                p.data = p.data.to(td)
    grids = [2.0 * (torch.arange(0.5, n, dtype=torch.float32) / n) - 1.0 for n in (7, 16, 16)]
    pos = torch.stack(torch.meshgrid(*grids, indexing="ij"), dim=-1).flatten(0, 2)
    pos = torch.cat([pos, torch.zeros(5, 3)])[None]
    rope = MiniMaxH3VideoRotaryPosEmbed(48, 100.0)(pos)
    h0 = torch.from_numpy(block_inputs())[None]
    if dtype == "bf16":
        h0 = h0.to(td)

    def run():
        with torch.inference_mode():
            return blk(h0, rope).float().numpy()[0]
    return run


def timeit(fn, reps):
    fn()                         # warm-up (and the agreement check's output)
    ts = []
    for _ in range(reps):
        t = time.perf_counter()
        fn()
        ts.append(time.perf_counter() - t)
    return float(np.median(ts))


def block_table(reps=2):
    folder = write_checkpoint(os.path.join(ROOT, "vae_1layer"), 1)
    rows = []
    ref = torch_block_timer(folder, "fp32")
    want = ref()
    rows.append(("diffusers fp32 (torch)", timeit(ref, reps), 0.0))
    refb = torch_block_timer(folder, "bf16")
    rows.append(("diffusers bf16 (torch)", timeit(refb, reps), rel(refb(), want)))
    del ref, refb
    for mode in ("fp32", "bf16", "int8"):
        run, dec = h3cy_block_timer(folder, mode)
        got = run()
        rows.append((f"h3cy {mode} ({dec.isa})", timeit(run, reps), rel(got, want)))
        del run, dec
    base = rows[0][1]
    thr = os.environ.get("H3CY_THREADS", "2")
    print(f"# one ViT decoder block, S={TOK} tokens (one 256-px tile of a 7-latent clip), "
          f"dim {DIM}, {HEADS}x{HD}, FFN {FFN}, {thr} threads")
    print(f"{'implementation':28s} {'s/block':>8s} {'x torch fp32':>12s} {'512x512x22 (324 blocks)':>24s} {'rel L2 vs torch fp32':>21s}")
    for name, s, e in rows:
        print(f"{name:28s} {s:8.3f} {base / s:12.2f} {s * 324:20.0f} s   {e:21.2e}")
    return rows


def rel(a, b):
    a, b = np.asarray(a, np.float64), np.asarray(b, np.float64)
    d = b - np.asarray(block_inputs(), np.float64)           # compare the block's update, not h
    return float(np.linalg.norm(a - b) / np.linalg.norm(d))


def rss_child(folder, hl, wl, mode, out_dtype="float32"):
    import h3cy
    dec = h3cy.VideoDecoder.from_pretrained(folder, weights=mode)
    after_load = _status("VmRSS")
    with open("/proc/self/clear_refs", "w") as f:   # reset VmHWM: the decode's own peak follows
        f.write("5")
    lat = np.random.default_rng(0).standard_normal((24, 7, hl, wl)).astype(np.float32)
    t = time.perf_counter()
    n = [0]
    dec.decode(lat, on_frames=lambda f, i: n.__setitem__(0, n[0] + f.shape[0]), uint8=out_dtype == "uint8")
    dt = time.perf_counter() - t
    peak = _status("VmHWM")
    print(json.dumps(dict(H=16 * hl, W=16 * wl, frames=n[0], load_peak_mib=after_load / 1024,
                          decode_peak_mib=peak / 1024, seconds=dt)))


def _status(key):
    """kB from /proc/self/status."""
    with open("/proc/self/status") as f:
        for line in f:
            if line.startswith(key + ":"):
                return int(line.split()[1])
    return 0


def rss_table(mode="bf16"):
    folder = write_checkpoint(os.path.join(ROOT, "vae_2layer"), 2)
    print(f"\n# peak RSS of a streamed decode (2-block full-width model, weights={mode}, T=7 -> 22 frames), "
          f"fresh process each")
    print(f"{'canvas':>10s} {'frames':>7s} {'tiles':>5s} {'RSS after load':>15s} {'decode peak MiB':>16s} "
          f"{'growth MiB':>11s} {'one clip out MiB':>17s} {'seconds':>8s}")
    for (hl, wl), dt in itertools.product(((16, 16), (32, 32)), ("float32", "uint8")):
        out = subprocess.run([sys.executable, __file__, "--child", folder, str(hl), str(wl), mode, dt],
                             capture_output=True, text=True, check=True)
        r = json.loads(out.stdout.strip().splitlines()[-1])
        tiles = len(__import__("h3cy").video_vae.split_tiles(16 * hl)[0]) * len(__import__("h3cy").video_vae.split_tiles(16 * wl)[0])
        clip = 22 * r["H"] * r["W"] * 3 * (4 if dt == "float32" else 1) / 2**20
        print(f"{r['H']:>4d}x{r['W']:<5d} {dt:>7s} {tiles:5d} {r['load_peak_mib']:15.0f} {r['decode_peak_mib']:16.0f} "
              f"{r['decode_peak_mib'] - r['load_peak_mib']:11.0f} {clip:17.0f} {r['seconds']:8.1f}")


def block_ab(rounds=7):
    """torch and h3cy at equal precision, alternated: each round times both (best of 2)."""
    from text_layer_ab import best_of          # this folder's other alternating bench
    folder = write_checkpoint(os.path.join(ROOT, "vae_1layer"), 1)
    thr = os.environ.get("H3CY_THREADS", "2")
    print(f"# one ViT decoder block (S={TOK}, dim {DIM}, {HEADS}x{HD}), h3cy vs torch at equal precision, "
          f"{thr} threads, {rounds} alternated rounds (best of 2 calls each)")
    print(f"{'precision':>9s} {'h3cy median':>12s} {'torch median':>13s} {'ratio of medians':>17s}  per-round ratios")
    for prec in ("fp32", "bf16"):
        ref = torch_block_timer(folder, prec)
        run, dec = h3cy_block_timer(folder, prec)
        ref(), run()                                   # warm-up
        th, tt = [], []
        for _ in range(rounds):
            tt.append(best_of(ref, 2))
            th.append(best_of(run, 2))
        per = " ".join(f"{a / b:.2f}" for a, b in zip(tt, th))
        print(f"{prec:>9s} {np.median(th):11.3f}s {np.median(tt):12.3f}s {np.median(tt) / np.median(th):16.2f}x  {per}",
              flush=True)
        del ref, run, dec


if __name__ == "__main__":
    if sys.argv[1:2] == ["--child"]:
        rss_child(sys.argv[2], int(sys.argv[3]), int(sys.argv[4]), sys.argv[5], sys.argv[6])
    elif "--ab" in sys.argv:
        block_ab()
    else:
        if "--rss-only" not in sys.argv:
            block_table()
        if "--block-only" not in sys.argv:
            rss_table()
