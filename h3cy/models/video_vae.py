"""h3cy.models.video_vae — the MiniMax-H3 video VAE decoder (``AutoencoderKLMiniMaxH3``, ViT
decoder, spec §6.2) on the CPU, without torch.

>>> dec = h3cy.VideoDecoder.from_pretrained("MiniMax-H3/vae", weights="fp32")  # doctest: +SKIP
>>> frames = dec.decode(latent)          # (24, T, h, w) -> (F, 16h, 16w, 3) in [0, 1]
>>> h3cy.to_uint8(frames)                # (F, H, W, 3) uint8

What ``decode`` does, in diffusers' order: de-normalise the latent per channel
(``latent * latents_std + latents_mean``), cut it into temporal clips of 7 latents
(stride 5), decode each clip in 256-px spatial tiles (each tile one ViT sequence of
``7*16*16`` tokens + 4 register tokens + 1 zero token through 36 blocks), blend the
tiles against their raw neighbours, cross-fade consecutive clips over 5 frames, and map
the ImageNet-normalised RGB to [0, 1].  Frames are final clip by clip, so ``on_frames``
receives them as soon as they are, and memory stays one clip wide.

Weights modes: ``fp32`` (the release is float32; the reference), ``bf16`` (reproduces
diffusers' decoder loaded with ``torch_dtype=torch.bfloat16``: linear weights and biases,
``post_quant_conv`` and ``register_tokens`` in bf16 with the activations rounded where
torch rounds them; norms, ``scale1``/``scale2`` and the residual stream float32), and
``fp16`` / ``int8`` for the 36 blocks' projections (activations float32; the small
``post_quant_conv``/``proj_in``/``proj_out`` stay float32).
"""
import logging
import math
import os
import threading

import numpy as np

from .. import _kernels
from ..weights import pages as _pages
from .. import ops
from ..ops.bf16 import bf16_bits_to_f32, round_bf16
from ..weights.comfy_quant import Int8Weight, read_int8
from ..weights.linears import make_linear
from ..weights.files import TensorFiles, checkpoint_error, load_json, report_once
from ..weights.transformer import weight_files
from .._progress import Ticker
from ..errors import H3ValueError

log = logging.getLogger("h3cy")

__all__ = ["VideoDecoder", "to_uint8", "split_tiles", "blend", "PIXEL_MEAN", "PIXEL_STD"]

PIXEL_MEAN = np.array([0.485, 0.456, 0.406], np.float32)   # the VAE's RGB space is ImageNet-normalised
PIXEL_STD = np.array([0.229, 0.224, 0.225], np.float32)
WEIGHT_MODES = ("fp32", "bf16", "fp16", "int8")
# ViT rope inv_freq for theta 100 and 8 frequencies (spec Appendix B), torch's float32 bits
_VIT_INV_FREQ_8 = np.array([int(h, 16) for h in (
    "3f800000 3f0ff59a 3ea1e89b 3e361887 3dcccccd 3d6655c2 3d0186e3 3c91ad39").split()],
    dtype=np.uint32).view(np.float32)
_TWO_PI = np.float32(2.0 * math.pi)     # 0x40c90fdb, as torch rounds the Python scalar


# ---------------------------------------------------------------------------------------------
# geometry helpers (pure numpy; the spec's formulas)
# ---------------------------------------------------------------------------------------------
def split_tiles(length, tile=256, min_overlap=64, step=16):
    """Tile layout along one pixel axis, as diffusers' ``_split_tiles``.

    Returns ``(starts, overlaps)``: tile i covers ``[starts[i], starts[i] + tile)``
    (one tile of ``length`` when ``length <= tile``), ``overlaps[i]`` pixels shared by
    tiles i and i+1.  The fewest tiles whose overlaps are all >= ``min_overlap``; the
    slack is added round-robin to the overlaps in ``step``-pixel increments.
    """
    if tile >= length:
        return [0], []
    k = math.ceil(length / tile)
    while tile * k - min_overlap * (k - 1) < length:
        k += 1
    overlaps = [min_overlap] * (k - 1)
    slack = tile * k - min_overlap * (k - 1) - length
    for i in range(slack // step):
        overlaps[i % (k - 1)] += step
    starts = [0]
    for ov in overlaps:
        starts.append(starts[-1] + tile - ov)
    return starts, overlaps


def blend(a, b, extent, axis, bf16=False, inplace=False):
    """``b`` with its first ``extent`` entries along ``axis`` cross-faded from ``a``'s last
    ones: ``b[p] = a[-e + p] * (1 - p/e) + b[p] * (p/e)`` (diffusers' ``_blend``), float32;
    with ``bf16`` every op rounded to bfloat16 as torch does on bf16 tensors.  Returns a
    new array, or ``b`` itself updated with ``inplace`` (b: a writable float32 array);
    ``a`` needs only its last ``extent`` entries along ``axis``."""
    e = min(a.shape[axis], b.shape[axis], extent)
    out = b if inplace else np.array(b, dtype=np.float32, copy=True)
    if e <= 0:
        return out
    shape = [1] * b.ndim
    shape[axis] = e
    pos = np.arange(e, dtype=np.float32)
    wb = pos / np.float32(e)
    if bf16:
        wb = round_bf16(wb)
    wa = np.float32(1.0) - wb
    if bf16:
        wa = round_bf16(wa)
    wa, wb = wa.reshape(shape), wb.reshape(shape)
    sa = [slice(None)] * a.ndim
    sa[axis] = slice(a.shape[axis] - e, None)
    sb = [slice(None)] * b.ndim
    sb[axis] = slice(0, e)
    ta, tb = a[tuple(sa)] * wa, out[tuple(sb)] * wb
    if bf16:
        out[tuple(sb)] = round_bf16(round_bf16(ta) + round_bf16(tb))
    else:
        out[tuple(sb)] = ta + tb
    return out


def to_uint8(frames):
    """Float frames in [0, 1] -> uint8, ``round_half_even(x * 255)`` in float32 (as
    diffusers' ``numpy_to_pil``).  Values outside [0, 1] are clipped first."""
    x = np.asarray(frames, dtype=np.float32)
    y = np.clip(x, np.float32(0), np.float32(1)) * np.float32(255)
    return np.rint(y).astype(np.uint8)


def _pixels(raw, bf16):
    """Decoder output (ImageNet-normalised RGB, [..., 3]) -> clamp(x * std + mean, 0, 1)."""
    x = raw.astype(np.float32, copy=False)
    y = x * PIXEL_STD
    y += PIXEL_MEAN
    np.clip(y, np.float32(0), np.float32(1), out=y)
    return y


# ---------------------------------------------------------------------------------------------
# the checkpoint
# ---------------------------------------------------------------------------------------------
class _Config:
    """The decoder's geometry, from either config spelling."""

    def __init__(self, **kw):
        self.__dict__.update(kw)

    def as_dict(self):
        return dict(self.__dict__)


def _pos_int(d, key, default, path):
    v = d.get(key, default)
    if isinstance(v, bool) or not isinstance(v, int) or v < 1:
        raise checkpoint_error(path, None, f"config {key!r} must be a positive int, got {v!r}")
    return v


def _pos_float(d, key, default, path):
    v = d.get(key, default)
    if isinstance(v, bool) or not isinstance(v, (int, float)) or not v > 0:
        raise checkpoint_error(path, None, f"config {key!r} must be a positive number, got {v!r}")
    return float(v)


def _stats(d, key, n, path):
    v = d.get(key)
    if v is None:
        return np.full(n, 0.0 if key == "latents_mean" else 1.0, np.float32)
    a = np.asarray(v, dtype=np.float64) if isinstance(v, list) else None
    if a is None or a.shape != (n,) or not np.isfinite(a).all():
        raise checkpoint_error(path, None, f"config {key!r} must be {n} finite numbers")
    return a.astype(np.float32)


def _prod(v, key, path):
    if not isinstance(v, list) or not v or not all(isinstance(x, int) and x >= 1 for x in v):
        raise checkpoint_error(path, None, f"config {key!r} must be a list of positive ints, got {v!r}")
    return int(np.prod(v))


def vae_config_diffusers(d, path):
    """The VAE geometry (decoder sizes, latent statistics, clip and tile settings) of a
    diffusers config dict (also the encoder's, h3cy.models.video_encoder)."""
    c = _pos_int(d, "latent_channels", 24, path)
    return _Config(
        layout="diffusers", latent_channels=c, out_channels=_pos_int(d, "out_channels", 3, path),
        patch=_prod(d.get("spatial_downsample_factors", [2, 2, 2, 2, 1, 1]), "spatial_downsample_factors", path),
        patch_t=_prod(d.get("temporal_downsample_factors", [1, 2, 2, 1, 1, 1]), "temporal_downsample_factors", path),
        num_layers=_pos_int(d, "decoder_num_layers", 36, path),
        heads=_pos_int(d, "decoder_num_attention_heads", 32, path),
        head_dim=_pos_int(d, "decoder_attention_head_dim", 64, path),
        registers=d.get("decoder_num_register_tokens", 4),
        ffn_mult=_pos_float(d, "decoder_ffn_mult", 4, path),
        rope_theta=_pos_float(d, "decoder_rope_theta", 100.0, path),
        rope_dim_ratio=_pos_float(d, "decoder_rope_dim_ratio", 0.75, path),
        eps=_pos_float(d, "decoder_norm_eps", 1e-5, path),
        clip_length=_pos_int(d, "clip_length", 17, path), token_drop=d.get("token_drop", 3),
        tile=256, min_overlap=64,
        latents_mean=_stats(d, "latents_mean", c, path), latents_std=_stats(d, "latents_std", c, path))


def vae_config_original(wrap, wpath, src, spath):
    """FL2VA/video_vae/config.json (wrapper) + source/config.json (``vit_decoder_kwargs``)."""
    vk = src.get("vit_decoder_kwargs", {}) if src is not None else {}
    if not isinstance(vk, dict):
        raise checkpoint_error(spath, None, "config 'vit_decoder_kwargs' must be an object")
    for key, want in (("norm_type", "rms_norm"), ("qk_norm_type", "rms_norm"), ("ffn_activation_fn", "silu"),
                      ("ffn_use_gated", True), ("qk_norm_affine", False)):
        if key in vk and vk[key] != want:
            raise checkpoint_error(spath, None, f"vit_decoder_kwargs {key!r} = {vk[key]!r}: only {want!r} "
                                     f"(the released decoder) is implemented")
    s = src or {}
    c = _pos_int(s, "z_channels", wrap.get("latent_channels", 24), spath)
    return _Config(
        layout="original", latent_channels=c, out_channels=_pos_int(s, "out_ch", 3, spath),
        patch=_prod(s.get("space_down", [2, 2, 2, 2, 1, 1]), "space_down", spath),
        patch_t=_prod(s.get("time_down", [1, 2, 2, 1, 1, 1]), "time_down", spath),
        num_layers=_pos_int(vk, "num_layers", 36, spath), heads=_pos_int(vk, "heads", 32, spath),
        head_dim=_pos_int(vk, "dim_head", 64, spath), registers=4,
        ffn_mult=_pos_float(vk, "ffn_mult", 4, spath),
        rope_theta=_pos_float(vk, "rope_theta", 100.0, spath),
        rope_dim_ratio=_pos_float(vk, "rope_dim_ratio", 0.75, spath),
        eps=_pos_float(vk, "eps", 1e-5, spath),
        clip_length=_pos_int(wrap, "vae_clip_length", 17, wpath), token_drop=wrap.get("vae_token_drop", 3),
        tile=_pos_int(wrap, "vae_tile_size", 256, wpath),
        min_overlap=_pos_int(wrap, "vae_tile_overlap_min", 64, wpath),
        latents_mean=_stats(wrap, "latents_mean", c, wpath), latents_std=_stats(wrap, "latents_std", c, wpath))


def _open(path):
    """(config, files, names) of a diffusers ``vae/`` or original ``video_vae/`` folder.
    ``names`` maps the roles this loader reads to the stored tensor names."""
    folder = os.fspath(path)
    if os.path.isfile(folder):
        return _open_single_file(folder)
    if not os.path.isdir(folder):
        raise checkpoint_error(folder, None, "not a folder or a file (expected a video VAE folder with "
                               "config.json or a single .safetensors file)")
    cpath = os.path.join(folder, "config.json")
    cfg = load_json(cpath, "config")
    if not isinstance(cfg, dict):
        raise checkpoint_error(cpath, None, "config is not a JSON object")
    if "source_path" in cfg or "source_safetensors_path" in cfg:
        sub = cfg.get("source_path", "source")
        wname = cfg.get("source_safetensors_path", "model.safetensors")
        for v, k in ((sub, "source_path"), (wname, "source_safetensors_path")):
            if not isinstance(v, str) or not v or os.path.isabs(v) or ".." in v.split("/"):
                raise checkpoint_error(cpath, None, f"config {k!r} must be a relative path inside the folder")
        sdir = os.path.join(folder, sub)
        spath = os.path.join(sdir, "config.json")
        src = load_json(spath, "source config") if os.path.isfile(spath) else None
        if src is not None and not isinstance(src, dict):
            raise checkpoint_error(spath, None, "source config is not a JSON object")
        conf = vae_config_original(cfg, cpath, src, spath)
        wpath = os.path.join(sdir, wname)
        if not os.path.isfile(wpath):
            raise checkpoint_error(wpath, None, "weights file not found")
        paths = [wpath]
    else:
        conf = vae_config_diffusers(cfg, cpath)
        _, paths = weight_files(folder)
    files = TensorFiles(paths)
    try:
        if files.has("decoder.x_embedder.weight") or files.has("decoder.transformer_blocks.0.attn.to_qkv.weight"):
            conf.layout = "original"
        elif files.has("decoder.proj_in.weight"):
            conf.layout = "diffusers"
        else:
            raise checkpoint_error(paths[0], None, "no MiniMax-H3 video VAE decoder tensors found (neither "
                                        "decoder.proj_in.weight nor decoder.x_embedder.weight)")
        pin = "decoder.proj_in.weight" if conf.layout == "diffusers" else "decoder.x_embedder.weight"
        files.get(pin, (conf.heads * conf.head_dim, conf.latent_channels))   # checks the shape
        if conf.layout == "original" and files.has("decoder.register_tokens"):
            conf.registers = files.info("decoder.register_tokens").shape[1]
    except BaseException:
        files.close()
        raise
    return conf, files


def _open_single_file(path):
    """A video VAE in one file (Comfy-Org's ``minimax_h3_video_vae_fp16``: the release's
    names, F16, the encoder too): the decoder's sizes from its tensors' shapes, the rest from
    the released configuration, the latent statistics from the file's own ``latents_mean``
    / ``latents_std`` when it has them."""
    from ..weights.released import released_config
    from ..weights.single_file import detect_component
    # only the decoder is read: a quantised encoder does not matter
    kind = detect_component(path, "video_vae", quantised_ok=lambda layer: not layer.startswith("decoder."))
    files = TensorFiles([path], float_dtypes=("F32", "BF16", "F16"))
    try:
        rel = released_config("video_vae")
        conf = vae_config_diffusers(rel, path)
        conf.layout = kind.naming
        pin = "decoder.proj_in.weight" if kind.naming == "diffusers" else "decoder.x_embedder.weight"
        width, conf.latent_channels = files.shape(pin, 2)
        if width % conf.head_dim:
            raise checkpoint_error(path, pin, f"width {width} is not a multiple of the released head_dim "
                                   f"{conf.head_dim}")
        conf.heads = width // conf.head_dim
        n = 0
        while files.has(f"decoder.transformer_blocks.{n}.norm1.weight"):
            n += 1
        conf.num_layers = n
        if files.has("decoder.register_tokens"):
            conf.registers = files.shape("decoder.register_tokens", 3)[1]
        for key in ("latents_mean", "latents_std"):
            if files.has(key):
                v = files.get(key, (conf.latent_channels,))
                v = bf16_bits_to_f32(v) if v.dtype == np.uint16 else np.array(v, np.float32)
                if not np.all(np.isfinite(v)):
                    raise checkpoint_error(path, key, "latent statistics must be finite")
                setattr(conf, key, v)
            elif conf.latent_channels != len(getattr(conf, key)):
                raise checkpoint_error(path, key, f"missing, and the released one has {len(getattr(conf, key))} "
                                       f"channels, not {conf.latent_channels}")
        report_once(path, f"video VAE decoder sizes from the tensor shapes ({conf.num_layers} layers, "
                          f"{conf.heads} heads), the rest from the released configuration")
    except BaseException:
        files.close()
        raise
    return conf, files


class _Block:
    def __init__(self, core, linears):
        self.core = core
        self.linears = linears


class VideoDecoder:
    """The MiniMax-H3 video VAE decoder on the CPU.  Build with :meth:`from_pretrained`.

    Attributes: ``config`` (dict of the geometry), ``weights``, ``isa``, ``threads``.
    """

    @classmethod
    def from_pretrained(cls, path, weights="auto", threads=None, isa=None, attention=None):
        """Load a video VAE folder, memory-mapped; only decoder tensors are read.

        Parameters
        ----------
        path : str or os.PathLike
            diffusers ``vae/`` (``config.json`` + ``diffusion_pytorch_model.safetensors``,
            or an index and shards) or the original release's ``FL2VA/video_vae``
            (``config.json`` with ``source_path``, ``source/config.json``,
            ``source/model.safetensors``; fused per-head-interleaved ``attn.to_qkv`` and
            ``[gate; up]`` ``ff.w1`` are used as stored).
        weights : {"auto", "fp32", "bf16", "fp16", "int8"} — "auto" (the default): a float
            file runs fp32, as released; a file with int8(-convrot) linears runs int8, those
            linears as stored
        threads : int, optional — default :func:`h3cy.get_num_threads`
        isa : str, optional — kernel path (default ``H3CY_ISA`` or the best available)
        attention : {None, "auto", "fp32", "bf16"} — products inside the ViT attention, as
            for :meth:`h3cy.DiT.from_pretrained` (:func:`h3cy.ops.attention_bf16`): by
            default bf16 pairs for bf16 and int8 weights where the CPU multiplies bf16
            natively, float32 for fp32 and fp16

        Raises
        ------
        CheckpointError — missing/unreadable files, bad config, a missing tensor or one of
            the wrong shape or dtype (the message names it).
        """
        if weights == "auto" and os.path.isfile(os.fspath(path)):
            from ..weights.single_file import detect
            if any(f.startswith("int8") for f in detect(path).quant):
                weights = "int8"        # an int8(-convrot) file's linears run as stored
        compute = ops.Compute.resolve(weights, isa, threads, modes=WEIGHT_MODES, auto="fp32")
        attn_bf16 = ops.attention_bf16(attention, compute.weights)
        conf, files = _open(path)
        try:
            return cls(conf, files, compute, attn_bf16)
        finally:
            files.close()       # views keep the mapping of what the linears attached

    def __init__(self, conf, files, compute, attn_bf16=False):
        self.compute = compute
        self.weights = compute.weights
        self.attn_bf16 = bool(attn_bf16)
        self.isa = compute.isa
        self._pool = compute.pool
        self.threads = compute.threads
        self.round_bf16 = self.weights == "bf16"
        c = conf
        self.hidden = c.heads * c.head_dim
        self.ffn = int(self.hidden * c.ffn_mult)
        self.rot_dim = int(c.head_dim * c.rope_dim_ratio)
        if self.rot_dim % 6 or self.rot_dim < 6:
            raise checkpoint_error(getattr(files.files[0], "path", "?"), None,
                        f"rope dim {self.rot_dim} (head_dim * rope_dim_ratio) must be a positive multiple of 6")
        if c.token_drop not in (0, 1, 2, 3, 4) or c.clip_length < c.patch_t:
            raise checkpoint_error(files.files[0].path, None, "unsupported clip_length/token_drop")
        self.conf = c
        self.config = {k: (v.tolist() if isinstance(v, np.ndarray) else v) for k, v in c.as_dict().items()}
        self.config.update(hidden=self.hidden, ffn=self.ffn, rot_dim=self.rot_dim)
        nf = self.rot_dim // 6
        if nf == 8 and c.rope_theta == 100.0:
            self.inv_freq = _VIT_INV_FREQ_8.copy()
        else:
            ar = np.arange(0, 1, 6 / self.rot_dim, dtype=np.float64).astype(np.float32)
            self.inv_freq = (np.float32(1.0) / (np.float32(c.rope_theta) ** ar)).astype(np.float32)
        self._load(files)
        self._ws = None
        self._rope = {}
        self._lock = threading.Lock()

    # ---- weights -------------------------------------------------------------------------
    def _linear(self, w, b, mode, pair=False, act_group=None):
        """A Linear over w [N, K] (float32 or bf16 bits) with a float32 bias, in ``mode``
        (h3cy.weights.linears.make_linear): the decoder's bf16 linears take bf16 weights and
        a bf16 bias, as diffusers' bf16 run; the other float modes float32 weights."""
        b = None if b is None else (bf16_bits_to_f32(b) if b.dtype == np.uint16 else np.ascontiguousarray(b, np.float32))
        if isinstance(w, Int8Weight):       # a single file's int8 linear: as stored in int8 mode
            if mode == "int8":
                return make_linear(w, self.compute, mode=mode, bias=b, pair=pair)[0]
            w = w.dequantized(self.isa, self._pool)
        if mode == "bf16":
            if b is not None:
                b = round_bf16(b)       # diffusers' bf16 linear adds a bf16 bias
            if w.dtype == np.float32:
                w = (round_bf16(np.ascontiguousarray(w)).view(np.uint32) >> 16).astype(np.uint16)
        elif w.dtype == np.uint16:
            w = bf16_bits_to_f32(w)
        lin, _ = make_linear(np.ascontiguousarray(w), self.compute, mode=mode, bias=b, pair=pair,
                             act_group=act_group if mode == "int8" else None)
        return lin

    def _load(self, files):
        c = self.conf
        Hd, F, C = self.hidden, self.ffn, c.latent_channels
        P = c.out_channels * c.patch_t * c.patch * c.patch
        orig = c.layout == "original"
        f32 = lambda a: bf16_bits_to_f32(a) if a.dtype == np.uint16 else np.ascontiguousarray(a, np.float32)  # noqa: E731
        small = self.weights if self.weights in ("fp32", "bf16") else "fp32"
        pq_w = files.get("post_quant_conv.weight", (C, C, 1, 1, 1)).reshape(C, C)
        self.post_quant = self._linear(pq_w, files.get("post_quant_conv.bias", (C,)), small)
        pin = "decoder.x_embedder." if orig else "decoder.proj_in."
        pin_b = f32(files.get(pin + "bias", (Hd,)))
        # diffusers feeds proj_in a non-contiguous view, so torch runs matmul, then adds the bias:
        # in bf16 that is two roundings, R(R(x W^T) + b)
        self.proj_in_bias = round_bf16(pin_b) if self.round_bf16 else None
        self.proj_in = self._linear(files.get(pin + "weight", (Hd, C)), None if self.round_bf16 else pin_b, small)
        regs = f32(files.get("decoder.register_tokens", (1, c.registers, Hd))).reshape(c.registers, Hd)
        self.registers = round_bf16(regs) if self.round_bf16 else regs.copy()
        self.norm_out_w = f32(files.get("decoder.norm_out.weight", (Hd,))).copy()
        self.norm_out_b = f32(files.get("decoder.norm_out.bias", (Hd,))).copy()
        self.proj_out = self._linear(files.get("decoder.proj_out.weight", (P, Hd)),
                                     files.get("decoder.proj_out.bias", (P,)), small)
        act_group = 1024 if F % 1024 == 0 else None

        def weight(layer, shape):
            """A block linear's weight: float as stored, or a single file's int8 (comfy_quant)."""
            if files.has(layer + ".comfy_quant"):
                return read_int8(files, layer, shape)
            return files.get(layer + ".weight", shape)
        self.blocks = []
        for i in range(c.num_layers):
            p = f"decoder.transformer_blocks.{i}."
            if orig:
                qkv_w = weight(p + "attn.to_qkv", (3 * Hd, Hd))
                qkv_b = files.get(p + "attn.to_qkv.bias", (3 * Hd,))
                out_w, out_b = weight(p + "attn.to_out", (Hd, Hd)), files.get(p + "attn.to_out.bias", (Hd,))
                up_w = weight(p + "ff.w1", (2 * F, Hd))          # [gate; up] as stored
                up_b = files.get(p + "ff.w1.bias", (2 * F,))
                dn_w, dn_b = weight(p + "ff.w2", (Hd, F)), files.get(p + "ff.w2.bias", (Hd,))
            else:
                parts = [(files.get(p + f"attn.to_{x}.weight", (Hd, Hd)), files.get(p + f"attn.to_{x}.bias", (Hd,)))
                         for x in "qkv"]
                same = len({w.dtype for w, _ in parts}) == 1
                qkv_w = np.concatenate([w if same else f32(w) for w, _ in parts])
                qkv_b = np.concatenate([f32(b) for _, b in parts])
                _pages.release([w for w, _ in parts])
                out_w, out_b = files.get(p + "attn.to_out.0.weight", (Hd, Hd)), files.get(p + "attn.to_out.0.bias", (Hd,))
                fw = files.get(p + "ff.net.0.proj.weight", (2 * F, Hd))    # [up; gate] -> [gate; up]
                fb = files.get(p + "ff.net.0.proj.bias", (2 * F,))
                up_w = np.concatenate([fw[F:], fw[:F]])
                up_b = np.concatenate([f32(fb[F:]), f32(fb[:F])])
                _pages.release([fw])
                dn_w, dn_b = files.get(p + "ff.net.2.weight", (Hd, F)), files.get(p + "ff.net.2.bias", (Hd,))
            m = self.weights
            qkv = self._linear(qkv_w, qkv_b, m)
            out = self._linear(out_w, out_b, m)
            up = self._linear(up_w, up_b, m, pair=True)
            down = self._linear(dn_w, dn_b, m, act_group=act_group)
            vec = [f32(files.get(p + n, (Hd,))).copy() for n in ("norm1.weight", "norm2.weight", "scale1", "scale2")]
            core = _kernels.VitBlockCore(qkv.core, int(orig), out.core, up.core, down.core, *vec, self._pool)
            self.blocks.append(_Block(core, (qkv, out, up, down, vec)))

    # ---- one ViT sequence ------------------------------------------------------------------
    def _rope_tables(self, t, hh, ww):
        key = (t, hh, ww)
        if key not in self._rope:
            grids = [(np.arange(0.5, n, dtype=np.float32) / np.float32(n)) * np.float32(2.0) - np.float32(1.0)
                     for n in (t, hh, ww)]
            pos = np.stack(np.meshgrid(*grids, indexing="ij"), axis=-1).reshape(-1, 3)
            pos = np.concatenate([pos, np.zeros((self.conf.registers + 1, 3), np.float32)])
            ang = ((_TWO_PI * pos)[:, :, None] * self.inv_freq[None, None, :]).astype(np.float32)
            ang = np.ascontiguousarray(ang.reshape(pos.shape[0], -1))
            self._rope = {key: (np.cos(ang).astype(np.float32), np.sin(ang).astype(np.float32))}
        return self._rope[key]

    def _r(self, x):
        if self.round_bf16:
            round_bf16(x, out=x)
        return x

    def _vit(self, pq, tick):
        """pq: (t, hh, ww, C) post_quant_conv output -> raw pixels (t*pt, hh*p, ww*p, 3)."""
        c = self.conf
        t, hh, ww, C = pq.shape
        N = t * hh * ww
        S = N + c.registers + 1
        h = np.empty((S, self.hidden), np.float32)
        self.proj_in(np.ascontiguousarray(pq.reshape(N, C)), out=h[:N])
        if self.proj_in_bias is not None:
            self._r(h[:N])
            h[:N] += self.proj_in_bias
        self._r(h[:N])
        h[N:N + c.registers] = self.registers
        h[N + c.registers:] = 0.0
        cos, sin = self._rope_tables(t, hh, ww)
        need = self.blocks[0].core.workspace_bytes(S, c.heads, self.rot_dim, int(self.round_bf16)) + 64
        if self._ws is None or self._ws.nbytes < need:
            self._ws = None
            self._ws = np.empty(need, np.uint8)
        for blk in self.blocks:
            blk.core.forward(h, c.heads, self.rot_dim, c.eps, int(self.round_bf16), self._ws, cos, sin,
                             attn_bf16=int(self.attn_bf16))
            tick()
        hn = np.empty((N, self.hidden), np.float32)
        _kernels.elem_layernorm(h[:N], self.norm_out_w, self.norm_out_b, hn, c.eps, self.isa, self._pool)
        self._r(hn)
        y = self._r(self.proj_out(hn))
        p, pt = c.patch, c.patch_t
        y = y.reshape(t, hh, ww, c.out_channels, pt, p, p).transpose(0, 4, 1, 5, 2, 6, 3)
        return y.reshape(t * pt, hh * p, ww * p, c.out_channels)

    # ---- one temporal clip -----------------------------------------------------------------
    def _clip(self, zc, keep, tile, tick, put):
        """zc: (C, t, h, w) de-normalised latent clip.  Decodes the frames ``keep`` of it tile
        by tile, blends each tile against its raw neighbours, and hands every stitched
        region to ``put(region, y0, x0)`` as soon as it is final (region: raw float32
        (len(keep), hy, wx, 3) at pixel offset y0, x0).  Only a tile and the overlap
        strips of its row and column are held here."""
        c = self.conf
        C, t, hl, wl = zc.shape
        x = np.ascontiguousarray(zc.transpose(1, 2, 3, 0)).reshape(-1, C)
        if self.round_bf16:
            x = round_bf16(x)
        pq = self._r(self.post_quant(x)).reshape(t, hl, wl, C)
        p = c.patch
        H, W = hl * p, wl * p
        if not tile:
            put(self._vit(pq, tick)[keep], 0, 0)
            return
        ys, oy = split_tiles(H, c.tile, c.min_overlap, p)
        xs, ox = split_tiles(W, c.tile, c.min_overlap, p)
        th, tw = min(c.tile, H), min(c.tile, W)
        above = [None] * len(xs)
        bf = self.round_bf16
        for i, y0 in enumerate(ys):
            left = None
            for j, x0 in enumerate(xs):
                tl = self._vit(np.ascontiguousarray(pq[:, y0 // p:(y0 + th) // p, x0 // p:(x0 + tw) // p]), tick)[keep]
                # the neighbours blend against this tile's raw strips: copy them out first,
                # then blend the tile (a fresh array) in place
                up, lt = above[j], left
                above[j] = tl[:, th - oy[i]:].copy() if i < len(ys) - 1 else None
                left = tl[:, :, tw - ox[j]:].copy() if j < len(xs) - 1 else None
                if i > 0:
                    blend(up, tl, oy[i - 1], axis=1, bf16=bf, inplace=True)
                if j > 0:
                    blend(lt, tl, ox[j - 1], axis=2, bf16=bf, inplace=True)
                del up, lt
                hy = th - oy[i] if i < len(ys) - 1 else th
                wx = tw - ox[j] if j < len(xs) - 1 else tw
                put(tl[:, :hy, :wx], y0, x0)
                del tl

    # ---- public -------------------------------------------------------------------------------
    def frames_for(self, T):
        """Pixel frames of a decode of T latent frames (T = 5n + 2 -> 17n + 5)."""
        n = self._clips(T)
        return self.conf.clip_length * n + self._frame_overlap()

    def _chunk(self):
        return math.ceil(self.conf.clip_length / self.conf.patch_t)

    def _frame_overlap(self):
        c = self.conf
        pre = (-c.clip_length) % c.patch_t
        tok_ov = (-c.token_drop) % self._chunk()
        return max(tok_ov * c.patch_t - pre, 0)

    def _clips(self, T):
        c = self.conf
        k = self._chunk()
        if c.token_drop == 0 or (T + c.token_drop) % k or T + c.token_drop < 2 * k:
            n0 = (T - (k - c.token_drop)) // k
            lo = k * max(n0, 1) + (k - c.token_drop)
            raise H3ValueError(f"latent has T={T} frames; the decoder needs T = {k}n + {k - c.token_drop} "
                               f"(n >= 1), e.g. {lo} or {lo + k}")
        return (T + c.token_drop) // k - 1

    def decode(self, latent, on_frames=None, on_progress=None, cancel=None, tile=True, uint8=False):
        """Decode a normalised video latent to frames in [0, 1].

        Parameters
        ----------
        latent : ndarray of shape (latent_channels, T, h, w) (or with a leading batch axis
            of 1), float — the sampler's normalised latent; T = 5n + 2, n >= 1
        on_frames : callable(frames, first_frame_index), optional — receives each clip's
            final frames ((f, H, W, 3)) as soon as they are final; decode then returns
            None, and memory stays one clip wide whatever the video's length
        on_progress : callable(done, total, "decode_video"), optional — blocks decoded
            over all tiles and clips; at most ~20 reports a second, always one at the end
        cancel : h3cy.CancelToken, optional — stops within one block (h3cy.Cancelled)
        tile : bool — 256-px spatial tiles as released (default); False decodes each clip
            as one sequence (a different result, and memory quadratic in the canvas)
        uint8 : bool — frames as uint8 (:func:`to_uint8` of the float frames, bit for bit)
            instead of float32: each tile's final region is converted as it is stitched,
            so a clip is held at a quarter of the float size (what the pipeline uses)

        Returns
        -------
        frames : ndarray of shape (17n + 5, 16h, 16w, 3), float32 in [0, 1] (uint8 with
            ``uint8``), or None

        Memory: besides the weights and one tile's workspace, a decode holds one clip of
        output frames (17 frames, float32 or uint8), one raw float32 5-frame cross-fade
        tail (rewritten region by region) and the overlap strips of one tile row -- never
        a float copy of a whole clip.
        """
        c = self.conf
        z = ops.drop_batch(latent, "latent", "(channels, T, h, w)")
        if not (np.issubdtype(z.dtype, np.floating) or np.issubdtype(z.dtype, np.integer)):
            raise H3ValueError(f"latent must be a float array, got {z.dtype}")
        C, T, hl, wl = z.shape
        if C != c.latent_channels:
            raise H3ValueError(f"latent has {C} channels, expected {c.latent_channels}")
        if hl < 1 or wl < 1:
            raise H3ValueError(f"latent grid {hl}x{wl} is empty")
        n = self._clips(T)
        for name, fn in (("on_frames", on_frames), ("on_progress", on_progress)):
            if fn is not None and not callable(fn):
                raise H3ValueError(f"{name} must be callable")
        # de-normalise (float32, torch's order: x * std + mean)
        z = z.astype(np.float32)
        z = z * c.latents_std[:, None, None, None] + c.latents_mean[:, None, None, None]
        k = self._chunk()
        pt = c.patch_t
        pre = (-c.clip_length) % pt
        cf = k * pt - pre                           # main frames per clip (17)
        ov = self._frame_overlap()                  # cross-faded frames (5)
        tok_ov = (-c.token_drop) % k
        clip_t = k + tok_ov                         # latents per clip (7)
        keep = np.r_[pre:k * pt, k * pt + pre:clip_t * pt]   # main | tail frames of a clip
        H, W = hl * c.patch, wl * c.patch
        n_tiles = (len(split_tiles(H, c.tile, c.min_overlap, c.patch)[0])
                   * len(split_tiles(W, c.tile, c.min_overlap, c.patch)[0])) if tile else 1
        total = n * n_tiles * len(self.blocks)
        F = cf * n + ov
        odt = np.uint8 if uint8 else np.float32
        out = None if on_frames is not None else np.empty((F, H, W, c.out_channels), odt)
        ticker = Ticker(total, "decode_video", on_progress, cancel, what="video decode")
        bf = self.round_bf16

        def px(raw):
            y = _pixels(raw, bf)
            return to_uint8(y) if uint8 else y

        ticker.check()
        with self._lock:
            # the raw cross-fade tail: one buffer, read and rewritten region by region (the
            # regions of a clip partition the canvas, so a region's previous tail is read
            # for its blend before this clip's tail replaces it)
            tail = np.empty((len(keep) - cf, H, W, c.out_channels), np.float32)
            for ci in range(n):
                # this clip's main frames go straight to the output (its first ov cross-
                # faded from the previous clip's raw tail, region by region: the blend is
                # per pixel), its last ov stay raw for the next clip
                dst = out[ci * cf:(ci + 1) * cf] if out is not None else np.empty((cf, H, W, c.out_channels), odt)

                def put(region, y0, x0, dst=dst, first=ci == 0):
                    hy, wx = region.shape[1], region.shape[2]
                    main = region[:cf]
                    prev = tail[:, y0:y0 + hy, x0:x0 + wx]
                    if not first and ov:
                        main = np.concatenate([blend(prev, main[:ov], ov, axis=0, bf16=bf), main[ov:]])
                    dst[:, y0:y0 + hy, x0:x0 + wx] = px(main)
                    prev[...] = region[cf:]

                self._clip(z[:, ci * k:ci * k + clip_t], keep, tile, ticker.tick, put)
                if on_frames is not None:
                    on_frames(dst, ci * cf)
                del dst
            if on_frames is not None:
                on_frames(px(tail), n * cf)
            else:
                out[n * cf:] = px(tail)
        return out
