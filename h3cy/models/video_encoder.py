"""h3cy.models.video_encoder — the MiniMax-H3 video VAE encoder (``AutoencoderKLMiniMaxH3``'s
causal 3-D CNN, ``MiniMaxH3VideoEncoder3d`` + ``quant_conv``) on the CPU, without torch.

>>> enc = h3cy.VideoEncoder.from_pretrained("MiniMax-H3/vae")        # doctest: +SKIP
>>> mean, std = enc.posterior(pixels)    # (F, H, W, 3) ImageNet-normalised -> (24, T, H/16, W/16) each

What ``posterior`` does, in diffusers' order (``AutoencoderKLMiniMaxH3.encode``): one frame
goes through the encoder on its own (every causal Conv3d then sees only its last temporal
tap: h3_conv3d skips the zero-padded ones); a clip of frames is cut into 17-frame chunks
(the last frame repeated up to a whole chunk), each chunk encoded on its own and the
``token_drop`` (3) trailing latent frames of the concatenation dropped, so 17n + 5 frames
give 5n + 2 latents.  Each chunk is encoded in 256-px spatial tiles (64-px minimum overlap,
as released) whose latent moments are blended against their raw neighbours as diffusers'
``_stitch_tiles``.  The moments are split into the posterior's mean and log-variance,
clamped to [-30, 20], std = exp(logvar / 2).

Layers (float32 throughout: diffusers keeps the encoder in fp32 whatever the dtype):
causal Conv3d (reflect spatial padding, causal zero frames; h3_conv3d: one GEMM per
temporal tap), per-frame GroupNorm + SiLU (h3_group_norm), 2 resnet blocks per level, a
strided 3x3x3 downsampling conv after the levels that downsample (asymmetric reflect pad
bottom/right), GroupNorm + SiLU, conv_out, quant_conv (1x1x1).
"""
import logging
import math
import os

import numpy as np

from .. import _kernels
from .. import ops
from ..ops.bf16 import bf16_bits_to_f32
from ..weights.linears import make_linear
from ..weights.files import TensorFiles, checkpoint_error, load_json
from ..weights.transformer import weight_files
from .._progress import Ticker
from ..errors import H3ValueError
from .video_vae import PIXEL_MEAN, PIXEL_STD, blend, split_tiles, vae_config_diffusers, vae_config_original

log = logging.getLogger("h3cy")

__all__ = ["VideoEncoder", "normalize_pixels"]


def normalize_pixels(frames):
    """uint8 RGB frames (..., 3) -> the encoder's input, as the reference's
    ``encode_vae_condition``: ``(x / 255 - mean) / std`` in float32 (ImageNet statistics)."""
    x = np.asarray(frames)
    if x.dtype != np.uint8 or x.ndim < 3 or x.shape[-1] != 3:
        raise H3ValueError(f"frames must be uint8 RGB (..., H, W, 3), got {x.dtype} {x.shape}")
    y = x.astype(np.float32) / np.float32(255.0)
    y -= PIXEL_MEAN
    y /= PIXEL_STD
    return y


# ---------------------------------------------------------------------------------------------
# the checkpoint
# ---------------------------------------------------------------------------------------------
# diffusers name -> original release name of the per-level modules (tests/_tiny_vae.py's map)
_NAMES = {"diffusers": ("encoder.down_blocks.{}.", "resnets.{}.", "conv_shortcut.", "downsamplers.0.conv."),
          "original": ("encoder.down.{}.", "block.{}.", "nin_shortcut.", "downsample.conv.")}


def _factors(v, key, path):
    if not isinstance(v, list) or not v or not all(isinstance(x, int) and x in (1, 2) for x in v):
        raise checkpoint_error(path, None, f"config {key!r} must be a list of 1s and 2s, got {v!r}")
    return list(v)


def _open(path):
    """(conf, files) of a video VAE folder (diffusers ``vae/`` or the release's
    ``video_vae/``) or single file, for the encoder.  The level widths and resnet counts
    come from the tensors' shapes, the per-level down factors, GroupNorm groups and eps
    from the config (the released ones when the file carries none)."""
    p = os.fspath(path)
    raw = {}
    if os.path.isfile(p):
        from ..weights.released import released_config
        raw = released_config("video_vae")
        conf = vae_config_diffusers(raw, p)
        files = TensorFiles([p], float_dtypes=("F32", "BF16", "F16"))
        sf = tf = None
    elif os.path.isdir(p):
        cpath = os.path.join(p, "config.json")
        cfg = load_json(cpath, "config")
        if not isinstance(cfg, dict):
            raise checkpoint_error(cpath, None, "config is not a JSON object")
        if "source_path" in cfg or "source_safetensors_path" in cfg:
            sub, wname = cfg.get("source_path", "source"), cfg.get("source_safetensors_path", "model.safetensors")
            for v, k in ((sub, "source_path"), (wname, "source_safetensors_path")):
                if not isinstance(v, str) or not v or os.path.isabs(v) or ".." in v.split("/"):
                    raise checkpoint_error(cpath, None, f"config {k!r} must be a relative path inside the folder")
            spath = os.path.join(p, sub, "config.json")
            src = load_json(spath, "source config") if os.path.isfile(spath) else {}
            if not isinstance(src, dict):
                raise checkpoint_error(spath, None, "source config is not a JSON object")
            conf = vae_config_original(cfg, cpath, src, spath)
            raw = dict(src)
            sf, tf = src.get("space_down"), src.get("time_down")
            wpath = os.path.join(p, sub, wname)
            if not os.path.isfile(wpath):
                raise checkpoint_error(wpath, None, "weights file not found")
            paths = [wpath]
        else:
            conf = vae_config_diffusers(cfg, cpath)
            raw = cfg
            sf, tf = cfg.get("spatial_downsample_factors"), cfg.get("temporal_downsample_factors")
            _, paths = weight_files(p)
        files = TensorFiles(paths, float_dtypes=("F32", "BF16", "F16"))
    else:
        raise checkpoint_error(p, None, "not a folder or a file (expected a video VAE folder with "
                               "config.json or a single .safetensors file)")
    try:
        if files.has("encoder.down_blocks.0.resnets.0.conv1.weight"):
            conf.enc_layout = "diffusers"
        elif files.has("encoder.down.0.block.0.conv1.weight"):
            conf.enc_layout = "original"
        else:
            raise checkpoint_error(files.paths[0], None, "no MiniMax-H3 video VAE encoder tensors found (neither "
                                   "encoder.down_blocks.0.resnets.0.conv1.weight nor encoder.down.0.block.0.conv1.weight)")
        lv, rn = _NAMES[conf.enc_layout][:2]
        levels = 0
        while files.has(lv.format(levels) + rn.format(0) + "conv1.weight"):
            levels += 1
        per = 0
        while files.has(lv.format(0) + rn.format(per) + "conv1.weight"):
            per += 1
        conf.block_out_channels = [files.shape(lv.format(i) + rn.format(0) + "conv1.weight", 5)[0]
                                   for i in range(levels)]
        conf.layers_per_block = per
        path0 = files.paths[0]
        sf = _factors(sf if sf is not None else raw.get("spatial_downsample_factors", [2, 2, 2, 2, 1, 1]),
                      "spatial_downsample_factors", path0)
        tf = _factors(tf if tf is not None else raw.get("temporal_downsample_factors", [1, 2, 2, 1, 1, 1]),
                      "temporal_downsample_factors", path0)
        if len(sf) != levels or len(tf) != levels:
            raise checkpoint_error(path0, None, f"{levels} encoder levels stored, but the config gives "
                                   f"{len(sf)} spatial and {len(tf)} temporal down factors")
        conf.spatial_factors, conf.temporal_factors = sf, tf
        groups = raw.get("norm_num_groups", raw.get("num_groups", 32))
        eps = raw.get("norm_eps", 1e-6)
        if isinstance(groups, bool) or not isinstance(groups, int) or groups < 1 \
                or any(c % groups for c in conf.block_out_channels):
            raise checkpoint_error(path0, None, f"GroupNorm groups {groups!r} must divide every level width "
                                   f"{conf.block_out_channels}")
        if isinstance(eps, bool) or not isinstance(eps, (int, float)) or not eps > 0:
            raise checkpoint_error(path0, None, f"config 'norm_eps' must be a positive number, got {eps!r}")
        conf.groups, conf.norm_eps = groups, float(eps)
    except BaseException:
        files.close()
        raise
    return conf, files


def _f32(a):
    a = np.asarray(a)
    if a.dtype == np.uint16:
        return bf16_bits_to_f32(a)
    return np.ascontiguousarray(a, dtype=np.float32)


class _Conv3d:
    """A MiniMaxH3VideoCausalConv3d (3x3x3: reflect pad 1, causal pad 2) or a Downsample3d
    (3x3x3, stride (st, ss, ss), reflect pad bottom/right 1 when ss = 2, causal pad 2)."""

    def __init__(self, w, b, compute, stride=(1, 1, 1), down=False):
        w, b = _f32(w), _f32(b)
        cout, cin, kt, kh, kw = w.shape
        self.kernel, self.stride, self.pad_t = (kt, kh, kw), tuple(stride), kt - 1
        if down:
            self.pad = (0, 1, 0, 1) if stride[1] == 2 else (0, 0, 0, 0)
        else:
            self.pad = (kh // 2, kh // 2, kw // 2, kw // 2)
        # tap j: W[:, :, j] as [Cout, kh*kw*Cin] in im2col order; the bias on the last tap
        self.taps = [make_linear(np.ascontiguousarray(w[:, :, j].transpose(0, 2, 3, 1).reshape(cout, -1)),
                                 compute, mode="fp32", bias=b if j == kt - 1 else None)[0].core
                     for j in range(kt)]
        self.cout = cout

    def __call__(self, x, resid=None):
        for axis, pads in ((1, self.pad[:2]), (2, self.pad[2:])):
            if max(pads) >= x.shape[axis]:
                raise H3ValueError(f"the encoder's reflect padding needs frames of at least {max(pads) + 1} px "
                                   f"at this level, got {x.shape[1]}x{x.shape[2]} (image too small)")
        y = np.empty(_kernels.conv3d_out_shape(x.shape, self.kernel, self.stride, self.pad_t, self.pad, self.cout),
                     np.float32)
        _kernels.conv3d(self.taps, x, y, self.kernel, self.stride, self.pad_t, self.pad, resid)
        return y


class _Pointwise:
    """A 1x1x1 Conv3d (conv_shortcut, quant_conv): a linear over the pixels."""

    def __init__(self, w, b, compute):
        w = _f32(w)
        self.lin = make_linear(np.ascontiguousarray(w.reshape(w.shape[0], -1)), compute, mode="fp32",
                               bias=_f32(b))[0]
        self.cout = w.shape[0]

    def __call__(self, x):
        y = self.lin(np.ascontiguousarray(x.reshape(-1, x.shape[-1])))
        return y.reshape(x.shape[:-1] + (self.cout,))


class _Norm:
    def __init__(self, w, b, groups, eps, isa, pool):
        self.w, self.b, self.groups, self.eps, self.isa, self.pool = _f32(w).copy(), _f32(b).copy(), groups, eps, isa, pool

    def __call__(self, x, out=None):
        """GroupNorm per frame + SiLU; out may be x."""
        y = np.empty_like(x) if out is None else out
        _kernels.group_norm(x, y, self.groups, self.w, self.b, self.eps, True, self.isa, self.pool)
        return y


class _Resnet:
    def __init__(self, get, prefix, shortcut_name, groups, eps, compute):
        cin = get(prefix + "conv1.weight").shape[1]
        self.norm1 = _Norm(get(prefix + "norm1.weight"), get(prefix + "norm1.bias"), groups, eps, compute.isa, compute.pool)
        self.conv1 = _Conv3d(get(prefix + "conv1.weight"), get(prefix + "conv1.bias"), compute)
        cout = self.conv1.cout
        self.norm2 = _Norm(get(prefix + "norm2.weight"), get(prefix + "norm2.bias"), groups, eps, compute.isa, compute.pool)
        self.conv2 = _Conv3d(get(prefix + "conv2.weight"), get(prefix + "conv2.bias"), compute)
        self.shortcut = None
        if cin != cout:
            self.shortcut = _Pointwise(get(prefix + shortcut_name + "weight"), get(prefix + shortcut_name + "bias"),
                                       compute)

    def __call__(self, x):
        h = self.conv1(self.norm1(x))
        self.norm2(h, out=h)
        r = self.shortcut(x) if self.shortcut is not None else x
        return self.conv2(h, resid=r)           # residual + conv2(h)


class VideoEncoder:
    """The MiniMax-H3 video VAE encoder on the CPU (float32).  Build with :meth:`from_pretrained`.

    Attributes: ``config`` (dict of the geometry), ``isa``, ``threads``, ``latents_mean``,
    ``latents_std`` ((24,) float32, the VAE's latent statistics).
    """

    @classmethod
    def from_pretrained(cls, path, threads=None, isa=None):
        """Load the encoder half of a video VAE (folder or single file; only ``encoder.*``
        and ``quant_conv.*`` tensors are read, converted to float32).

        Parameters
        ----------
        path : str or os.PathLike — diffusers ``vae/``, the release's ``FL2VA/video_vae``
            (``source/model.safetensors`` with the original ``encoder.down.{i}.block.{j}``
            names) or a single ``.safetensors`` file (released configuration)
        threads : int, optional — default :func:`h3cy.get_num_threads`
        isa : str, optional — kernel path (default ``H3CY_ISA`` or the best available)

        Raises
        ------
        CheckpointError — missing/unreadable files, bad config, a missing tensor or one of
            the wrong shape (the message names it).
        """
        compute = ops.Compute.resolve("fp32", isa, threads, modes=("fp32",), auto="fp32")
        conf, files = _open(path)
        try:
            return cls(conf, files, compute)
        finally:
            files.close()

    def __init__(self, conf, files, compute):
        self.compute, self.isa, self._pool = compute, compute.isa, compute.pool
        self.threads = compute.threads
        self.conf = c = conf
        self.latents_mean, self.latents_std = c.latents_mean, c.latents_std
        self.config = dict(block_out_channels=list(c.block_out_channels), layers_per_block=c.layers_per_block,
                           spatial_downsample_factors=list(c.spatial_factors),
                           temporal_downsample_factors=list(c.temporal_factors), norm_num_groups=c.groups,
                           norm_eps=c.norm_eps, latent_channels=c.latent_channels, clip_length=c.clip_length,
                           token_drop=c.token_drop, tile=c.tile, min_overlap=c.min_overlap, layout=c.enc_layout)
        self.spatial_ratio = int(np.prod(c.spatial_factors))
        lv, rn, sc, dn = _NAMES[c.enc_layout]
        C2 = 2 * c.latent_channels

        def get(name):
            return files.get(name)
        g, eps = c.groups, c.norm_eps
        self.conv_in = _Conv3d(get("encoder.conv_in.weight"), get("encoder.conv_in.bias"), compute)
        self.levels = []
        for i in range(len(c.block_out_channels)):
            res = [_Resnet(get, lv.format(i) + rn.format(j), sc, g, eps, compute) for j in range(c.layers_per_block)]
            down = None
            ts, ss = c.temporal_factors[i], c.spatial_factors[i]
            if ts * ss > 1:
                p = lv.format(i) + dn
                down = _Conv3d(get(p + "weight"), get(p + "bias"), compute, stride=(ts, ss, ss), down=True)
            self.levels.append((res, down))
        self.norm_out = _Norm(get("encoder.norm_out.weight"), get("encoder.norm_out.bias"), g, eps, self.isa, self._pool)
        self.conv_out = _Conv3d(get("encoder.conv_out.weight"), get("encoder.conv_out.bias"), compute)
        if self.conv_out.cout != C2:
            raise checkpoint_error(files.path_of("encoder.conv_out.weight"), "encoder.conv_out.weight",
                                   f"has {self.conv_out.cout} output channels, expected 2 x {c.latent_channels}")
        self.quant_conv = _Pointwise(files.get("quant_conv.weight", (C2, C2, 1, 1, 1)),
                                     files.get("quant_conv.bias", (C2,)), compute)
        self._units = 2 + sum(len(r) + (d is not None) for r, d in self.levels)

    # ---- one tile of one clip --------------------------------------------------------------
    def _tile(self, x, tick):
        """x: (F, H, W, 3) normalised pixels -> moments (T', H/16, W/16, 48)."""
        h = self.conv_in(np.ascontiguousarray(x))
        tick()
        for res, down in self.levels:
            for r in res:
                h = r(h)
                tick()
            if down is not None:
                h = down(h)
                tick()
        h = self.conv_out(self.norm_out(h, out=h))
        tick()
        return self.quant_conv(h)

    def _clip(self, x, tile, tick):
        """One clip, in spatial tiles blended as diffusers' ``_stitch_tiles`` (latent space)."""
        c = self.conf
        F, H, W, _ = x.shape
        if not tile:
            return self._tile(x, tick)
        p = self.spatial_ratio
        ys, oy = split_tiles(H, c.tile, c.min_overlap, p)
        xs, ox = split_tiles(W, c.tile, c.min_overlap, p)
        th, tw = min(c.tile, H), min(c.tile, W)
        rows = [[self._tile(x[:, y0:y0 + th, x0:x0 + tw], tick) for x0 in xs] for y0 in ys]
        oy = [o // p for o in oy]
        ox = [o // p for o in ox]
        out_rows = []
        for i, row in enumerate(rows):
            parts = []
            for j, t in enumerate(row):
                if i > 0:
                    t = blend(rows[i - 1][j], t, oy[i - 1], axis=1)
                if j > 0:
                    t = blend(row[j - 1], t, ox[j - 1], axis=2)
                if i < len(rows) - 1:
                    t = t[:, :t.shape[1] - oy[i]]
                if j < len(row) - 1:
                    t = t[:, :, :t.shape[2] - ox[j]]
                parts.append(t)
            out_rows.append(np.concatenate(parts, axis=2))
        return np.concatenate(out_rows, axis=1)

    def set_tiling(self, tile=256, min_overlap=64):
        """The spatial tile geometry in pixels (diffusers' ``enable_tiling(tile, tile,
        min_overlap, min_overlap)``): ``tile`` a multiple of 16 (>= 32), ``min_overlap`` a
        multiple of 16 below it.  Released: 256 and 64 (the loaded config's)."""
        p = self.spatial_ratio
        for name, v in (("tile", tile), ("min_overlap", min_overlap)):
            if isinstance(v, bool) or not isinstance(v, (int, np.integer)) or v < 0 or v % p:
                raise H3ValueError(f"{name} must be a non-negative multiple of {p}, got {v!r}")
        if tile < 2 * p or min_overlap >= tile:
            raise H3ValueError(f"tile must be >= {2 * p} and min_overlap < tile, got {tile} and {min_overlap}")
        self.conf.tile, self.conf.min_overlap = int(tile), int(min_overlap)
        self.config.update(tile=int(tile), min_overlap=int(min_overlap))

    def tiles_for(self, height, width, tile=True):
        """Spatial tiles a (height x width) frame is encoded in."""
        if not tile:
            return 1
        c = self.conf
        return (len(split_tiles(height, c.tile, c.min_overlap, self.spatial_ratio)[0])
                * len(split_tiles(width, c.tile, c.min_overlap, self.spatial_ratio)[0]))

    # ---- public -------------------------------------------------------------------------------
    def moments(self, pixels, tile=True, on_progress=None, cancel=None):
        """The posterior's raw moments: ``(2 * latent_channels, T, h, w)`` float32
        ([mean; logvar], before the clamp) of normalised pixels ``(F, H, W, 3)`` (or
        ``(H, W, 3)`` for one frame; see :func:`normalize_pixels`).  F = 1, or any F
        (padded with its last frame to whole 17-frame chunks; 17n + 5 frames give 5n + 2
        latent frames).  H and W multiples of 16 (>= 32)."""
        c = self.conf
        x = np.asarray(pixels)
        if x.ndim == 3:
            x = x[None]
        if x.ndim != 4 or x.shape[-1] != 3 or not np.issubdtype(x.dtype, np.floating):
            raise H3ValueError(f"pixels must be float (F, H, W, 3), got {x.dtype} {x.shape}")
        F, H, W, _ = x.shape
        p = self.spatial_ratio
        if F < 1 or H < 2 * p or W < 2 * p or H % p or W % p:
            raise H3ValueError(f"pixels are {F} frames of {H}x{W}; the encoder needs F >= 1 and height and "
                               f"width multiples of {p}, at least {2 * p}")
        for name, fn in (("on_progress", on_progress),):
            if fn is not None and not callable(fn):
                raise H3ValueError(f"{name} must be callable")
        x = x.astype(np.float32, copy=False)
        L = c.clip_length
        clips = 1 if F == 1 else math.ceil(F / L)
        ticker = Ticker(clips * self.tiles_for(H, W, tile) * self._units, "encode_video", on_progress, cancel,
                        what="video encode")
        ticker.check()
        if F == 1:
            m = self._clip(x, tile, ticker.tick)
        else:
            if F % L:
                x = np.concatenate([x, np.repeat(x[-1:], (-F) % L, axis=0)])
            m = np.concatenate([self._clip(x[i * L:(i + 1) * L], tile, ticker.tick) for i in range(clips)])
            if c.token_drop > 0:
                m = m[:m.shape[0] - c.token_drop]
        return np.ascontiguousarray(m.transpose(3, 0, 1, 2))

    def posterior(self, pixels, tile=True, on_progress=None, cancel=None):
        """``(mean, std)`` of the posterior (diffusers' ``DiagonalGaussianDistribution``:
        logvar clamped to [-30, 20], std = exp(logvar / 2)), each ``(latent_channels, T,
        h, w)`` float32.  Arguments as :meth:`moments`."""
        m = self.moments(pixels, tile, on_progress, cancel)
        C = self.conf.latent_channels
        mean = np.ascontiguousarray(m[:C])
        logvar = np.clip(m[C:], np.float32(-30.0), np.float32(20.0))
        std = np.exp(np.float32(0.5) * logvar).astype(np.float32)
        return mean, std

    def __repr__(self):
        c = self.conf
        return (f"VideoEncoder(levels={c.block_out_channels}, layers_per_block={c.layers_per_block}, "
                f"isa={self.isa!r}, threads={self.threads})")
