"""Comfy-Org-style single files of the tests' tiny models: the release's tensor names in one
``.safetensors`` per component, no config.json (as ComfyUI's templates download them)."""
import json
import os

import torch

COMFY_PREFIX = "model.diffusion_model."


def save(sd, path, prefix=""):
    from safetensors.torch import save_file
    save_file({prefix + k: v.contiguous() for k, v in sd.items()}, str(path))
    return str(path)


def dit_state(t):
    """The tiny model's tensors as Comfy-Org stores them: the release's names, stacked
    [q; k; v] rows (the original_single folder's file), as torch tensors."""
    from safetensors.torch import load_file
    return load_file(os.path.join(t.original_single, "model.safetensors"))


def _save(sd, path, prefix=""):
    from safetensors.torch import save_file
    save_file({prefix + k: v.contiguous() for k, v in sd.items()}, str(path))
    return str(path)


def text_encoder_file(tiny_te, path, drop=(), layers=50):
    """The tiny Qwen3-VL as Comfy-Org stores it: ``model.layers.N.*`` (the text stack up to
    hidden_states[50]), ``model.embed_tokens``, the vision tower; no final norm, no LM head."""
    from safetensors.torch import load_file
    sd = load_file(os.path.join(tiny_te, "model.safetensors"))
    out = {}
    for k, v in sd.items():
        if k.startswith("model.language_model."):
            rest = k[len("model.language_model."):]
            if rest.startswith("norm.") or (rest.startswith("layers.") and int(rest.split(".")[1]) >= layers):
                continue
            out["model." + rest] = v
        elif k.startswith("model.visual."):
            out[k[len("model."):]] = v
    for k in drop:
        del out[k]
    return save(out, path)


def video_vae_file(vae, path, dtype=torch.float32):
    """The release's video VAE tensors in one file with the latent statistics, as Comfy-Org's."""
    from safetensors.torch import load_file
    import _tiny_vae
    sd = {k: v.to(dtype) if v.is_floating_point() else v
          for k, v in load_file(os.path.join(vae.original, "source", "model.safetensors")).items()}
    sd["latents_mean"] = torch.tensor(_tiny_vae.LATENTS_MEAN, dtype=dtype)
    sd["latents_std"] = torch.tensor(_tiny_vae.LATENTS_STD, dtype=dtype)
    return save(sd, path)


def audio_vae_file(folder, path):
    """Comfy-Org's audio VAE: the release's names with torch's weight norm folded into plain
    weights, the latent statistics as tensors, no config.json."""
    from safetensors.torch import load_file
    sd = load_file(os.path.join(folder, "diffusion_pytorch_model.safetensors"))
    out = {}
    for k, v in sd.items():
        if k.endswith(".weight_g"):
            continue
        if k.endswith(".weight_v"):
            g = sd[k[:-1] + "g"]
            norm = v.flatten(1).norm(dim=1).reshape((-1,) + (1,) * (v.ndim - 1))
            out[k[:-2]] = v * (g / norm)
        else:
            out[k] = v
    cfg = json.load(open(os.path.join(folder, "config.json")))
    out["latents_mean"] = torch.tensor(cfg["latents_mean"], dtype=torch.float32)
    out["latents_std"] = torch.tensor(cfg["latents_std"], dtype=torch.float32)
    return save(out, path)


# ---- int8 "convrot" (comfy-kitchen's recipe, written here with torch) ------------------------
def regular_hadamard(group):
    """comfy-kitchen's ``_build_hadamard``: Kronecker powers of H4 (not Sylvester's),
    normalised by sqrt(group); float64."""
    h4 = torch.tensor([[1, 1, 1, -1], [1, 1, -1, 1], [1, -1, 1, 1], [-1, 1, 1, 1]], dtype=torch.float64)
    h = h4
    while h.shape[0] < group:
        h = torch.kron(h, h4)
    assert h.shape[0] == group, group
    return h / group ** 0.5


def quantise_int8(w, group=None):
    """(q int8 [N, K], scale float32 [N, 1]) as comfy-kitchen's quantize_int8_convrot_weight
    (group given: W_rot = W H^T per group of input columns) or quantize_int8_rowwise
    (group None): scale = amax / 127 per row, q = clamp(round(W / scale), -128, 127)."""
    w = w.float()
    if group:
        h = regular_hadamard(group).float()
        n, k = w.shape
        w = (w.reshape(n, k // group, group) @ h.T).reshape(n, k)
    scale = (w.abs().amax(dim=-1, keepdim=True) / 127.0).clamp(min=1e-30)
    q = (w / scale).round().clamp(-128, 127).to(torch.int8)
    return q, scale


def quant_blob(obj):
    """A ``comfy_quant`` tensor: the UTF-8 JSON bytes of obj (or obj itself if bytes)."""
    raw = obj if isinstance(obj, bytes) else json.dumps(obj).encode()
    return torch.tensor(list(raw), dtype=torch.uint8)


def put_int8(sd, layer, group=None):
    """Replace ``layer.weight`` of a Comfy state dict by Comfy's int8 (convrot when group)
    tensors: ``.weight`` I8, ``.weight_scale`` F32 [N, 1], ``.comfy_quant``."""
    q, scale = quantise_int8(sd[layer + ".weight"], group)
    sd[layer + ".weight"] = q
    sd[layer + ".weight_scale"] = scale
    meta = {"format": "int8_tensorwise"}
    if group:
        meta.update(convrot=True, convrot_groupsize=group)
    sd[layer + ".comfy_quant"] = quant_blob(meta)
    return sd


# ---- NVFP4 (comfy-kitchen's TensorCoreNVFP4Layout, written here with torch) -----------------
E2M1_MAGS = torch.tensor([0.0, 0.5, 1.0, 1.5, 2.0, 3.0, 4.0, 6.0])


def to_blocked(scales):
    """cuBLAS's blocked layout of a (rows, cols) scale matrix, padded to (128, 4) tiles:
    each 128 x 4 tile stored as [32][4][4] (row r = a * 32 + b goes to [b][a])."""
    rows, cols = scales.shape
    R, C = -(-rows // 128) * 128, -(-cols // 4) * 4
    pad = torch.zeros((R, C), dtype=scales.dtype)
    pad[:rows, :cols] = scales
    t = pad.reshape(R // 128, 4, 32, C // 4, 4)            # [rb][a][b][cb][c]
    return t.permute(0, 3, 2, 1, 4).reshape(R, C).contiguous()   # [rb][cb][b][a][c]


def quantise_nvfp4(w, pre_quant_scale=None):
    """(packed U8, block scales F8_E4M3 blocked, scale_2 F32 []) for w [N, K] as Comfy's
    quantize_nvfp4: per-tensor scale amax / (448 * 6), per-16 scales amax / 6 over it in
    e4m3, codes the nearest E2M1 value, two per byte (first element in the high nibble);
    rows padded to 16, columns to 16.  With pre_quant_scale (AWQ), w / s is quantised."""
    w = w.float()
    if pre_quant_scale is not None:
        w = w / pre_quant_scale.float()[None, :]
    N, K = w.shape
    Np, Kp = -(-N // 16) * 16, -(-K // 16) * 16
    x = torch.zeros((Np, Kp))
    x[:N, :K] = w
    s2 = x.abs().max() / (448.0 * 6.0)
    blocks = x.reshape(Np, Kp // 16, 16)
    bs = (blocks.abs().amax(-1) / 6.0 / s2).clamp(max=448.0).to(torch.float8_e4m3fn)
    total = bs.float() * s2
    v = torch.where(total[..., None] > 0, blocks / total[..., None].clamp(min=1e-30), torch.zeros(()))
    v = v.clamp(-6.0, 6.0).reshape(Np, Kp)
    mag = (v.abs()[..., None] - E2M1_MAGS).abs().argmin(-1)
    codes = (mag + 8 * (v < 0)).to(torch.uint8)
    packed = (codes[:, 0::2] << 4) | codes[:, 1::2]
    return packed.contiguous(), to_blocked(bs[:N]).contiguous(), s2.reshape(())


def put_nvfp4(sd, layer, pre_quant_scale=None):
    """Replace ``layer.weight`` by Comfy's NVFP4 tensors (+ ``pre_quant_scale`` in bf16)."""
    packed, bs, s2 = quantise_nvfp4(sd[layer + ".weight"], pre_quant_scale)
    sd[layer + ".weight"] = packed
    sd[layer + ".weight_scale"] = bs
    sd[layer + ".weight_scale_2"] = s2
    if pre_quant_scale is not None:
        sd[layer + ".pre_quant_scale"] = pre_quant_scale.to(torch.bfloat16)
    sd[layer + ".comfy_quant"] = quant_blob({"format": "nvfp4", "full_precision_matrix_mult": True})
    return sd


def decode_nvfp4(packed, blocked, s2, N, K, pre_quant_scale=None):
    """float64 numpy W [N, K] of put_nvfp4's tensors, decoded independently of h3cy."""
    import numpy as np
    p = packed.numpy()
    codes = np.stack([p >> 4, p & 15], axis=-1).reshape(p.shape[0], -1)[:N]
    mags = E2M1_MAGS.double().numpy()
    vals = np.where(codes >= 8, -1.0, 1.0) * mags[codes % 8]
    R, C = blocked.shape
    plain = blocked.reshape(R // 128, C // 4, 32, 4, 4).permute(0, 3, 2, 1, 4).reshape(R, C)
    sc = plain.float().double().numpy()[:N, :vals.shape[1] // 16]
    w = (vals.reshape(N, -1, 16) * sc[:, :, None]).reshape(N, -1)[:, :K] * float(s2)
    if pre_quant_scale is not None:
        w = w * pre_quant_scale.to(torch.bfloat16).double().numpy()[None, :]
    return w
