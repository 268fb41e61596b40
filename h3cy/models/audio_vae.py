"""h3cy.models.audio_vae — the MiniMax-H3 audio VAE decoder (BigVGAN) on the CPU, no torch.

Latents ``[2, 32, A]`` (normalised, as the sampler outputs; the two stereo channels are
decoded as two mono items) become a waveform ``[2, 800 * A]`` in [-1, 1] at 32 kHz:

    de-normalise (latents * std + mean)  ->  dec_in_proj (1x1 conv 32 -> 2048)
    -> conv_pre (k7, 2048 -> 1024)  ->  7 x [ConvTranspose1d (stride 5,5,2,2,2,2,2)
       -> mean of 3 AMP blocks (kernels 3/7/11, dilations 1/3/5, anti-aliased SnakeBeta)]
    -> anti-aliased SnakeBeta -> conv_post (k7, 8 -> 1, no bias) -> clamp(-1, 1)

(spec section 6.3; diffusers ``AutoencoderKLMiniMaxH3Audio.decode`` plus the pipeline's
de-normalisation).  Signals are kept channels-last, ``[T, C]``, so the convolutions are
im2col GEMMs (h3_conv1d: the GEMM reads the im2col rows in place, or, with
``H3CY_CONV_IM2COL=1`` for A/B, builds them first) and the activation runs 16 channels
per vector (h3_snake_aa).

Weight norm (``weight_g`` / ``weight_v``) is folded at load: ``W = v * (g / ||v||)``,
the norm over every dim but 0 (for ConvTranspose1d's ``[in, out, k]`` weights that is
per input channel).  Only decoder tensors are read (memory-mapped), never the encoder.

>>> dec = h3cy.AudioDecoder.from_pretrained("MiniMax-H3/audio_vae")
>>> wave = dec.decode(audio_latents)          # (2, 800 * A) float32, 32 kHz
"""
import json
import math
import os

import numpy as np

from .. import _config
from .. import _kernels
from .. import ops
from .._progress import Ticker
from ..errors import CheckpointError, H3ValueError
from ..weights.linears import make_linear
from ..weights.files import TensorFiles, checkpoint_error

__all__ = ["AudioDecoder", "AUDIO_WEIGHT_MODES"]

AUDIO_WEIGHT_MODES = ("fp32", "bf16", "fp16", "int8")

_FILES = ("diffusion_pytorch_model.safetensors", "model.safetensors")
_ARCH = ("latent_dim", "latent_channels", "decoder_dim", "decoder_rates", "decoder_kernel_sizes",
         "resblock_kernel_sizes", "resblock_dilation_sizes")


def _read_config(folder):
    """(config dict, weights path).  The diffusers config.json names the whole
    architecture; the release's (``MiniMaxH3AudioVAE``) only the latent statistics and
    the sample rate, so missing architecture keys are inferred from tensor shapes later
    (_infer_arch)."""
    path = os.path.join(folder, "config.json")
    try:
        with open(path, encoding="utf-8") as f:
            cfg = json.load(f)
    except FileNotFoundError:
        raise CheckpointError(f"{folder}: no config.json (expected an audio_vae folder)") from None
    except (OSError, ValueError) as e:
        raise CheckpointError(f"{path}: cannot read: {e}") from None
    if not isinstance(cfg, dict):
        raise CheckpointError(f"{path}: not a JSON object")
    out = {k: cfg[k] for k in _ARCH if k in cfg}
    out["sampling_rate"] = cfg.get("sampling_rate", cfg.get("sample_rate", 32000))  # release spelling
    try:
        out["sampling_rate"] = int(out["sampling_rate"])
        for key in ("latents_mean", "latents_std"):
            if not isinstance(cfg.get(key), list):
                raise ValueError(f"{key} missing (a list of latent_channels floats)")
            out[key] = np.asarray(cfg[key], dtype=np.float32)   # torch.tensor(list) is fp32
            if out[key].ndim != 1:
                raise ValueError(f"{key} must be a flat list of numbers")
    except (TypeError, ValueError) as e:
        raise CheckpointError(f"{path}: bad audio VAE config: {e}") from None
    weights = cfg.get("source_safetensors_path")
    names = ([weights] if isinstance(weights, str) and weights else []) + list(_FILES)
    for name in names:
        if os.path.isfile(os.path.join(folder, name)):
            return out, os.path.join(folder, name)
    raise CheckpointError(f"{folder}: no weights file (looked for {', '.join(dict.fromkeys(names))})")


def _infer_arch(cfg, r):
    """Fill in the architecture keys the config lacks from the tensor shapes: widths,
    stage count and kernel sizes are read off the weights; an upsampling rate is
    ceil(kernel / 2) (BigVGAN's kernel = 2 * rate or 2 * rate - 1: 9 -> 5, 4 -> 2) and
    the dilations default to (1, 3, 5) per block, as released."""
    cfg = dict(cfg)
    shape = lambda name: r.shape(name)   # noqa: E731  (CheckpointError if absent)
    cfg.setdefault("latent_dim", shape("dec_in_proj.weight")[0])
    cfg.setdefault("latent_channels", shape("dec_in_proj.weight")[1])
    v = r.weight_suffix
    cfg.setdefault("decoder_dim", shape("decoder.conv_pre" + v)[0])
    n = 0
    while f"decoder.ups.{n}.0{v}" in r.f:
        n += 1
    if "decoder_kernel_sizes" not in cfg:
        cfg["decoder_kernel_sizes"] = [shape(f"decoder.ups.{i}.0{v}")[2] for i in range(n)]
    if "decoder_rates" not in cfg:
        cfg["decoder_rates"] = [(k + 1) // 2 for k in cfg["decoder_kernel_sizes"]]
    nst = len(cfg["decoder_rates"])
    if "resblock_kernel_sizes" not in cfg:
        nb = 0
        while f"decoder.resblocks.{nb}.convs1.0{v}" in r.f:
            nb += 1
        if nst == 0 or nb % nst:
            raise CheckpointError(f"{r.path}: {nb} resblocks do not split over {nst} stages")
        cfg["resblock_kernel_sizes"] = [shape(f"decoder.resblocks.{j}.convs1.0{v}")[2]
                                        for j in range(nb // nst)]
    cfg.setdefault("resblock_dilation_sizes", [[1, 3, 5]] * len(cfg["resblock_kernel_sizes"]))
    try:
        for key in ("latent_dim", "latent_channels", "decoder_dim"):
            cfg[key] = int(cfg[key])
        for key in ("decoder_rates", "decoder_kernel_sizes", "resblock_kernel_sizes"):
            cfg[key] = [int(v) for v in cfg[key]]
        cfg["resblock_dilation_sizes"] = [[int(d) for d in ds] for ds in cfg["resblock_dilation_sizes"]]
        if len(cfg["decoder_rates"]) != len(cfg["decoder_kernel_sizes"]) or not cfg["decoder_rates"]:
            raise ValueError("decoder_rates and decoder_kernel_sizes differ in length (or are empty)")
        if len(cfg["resblock_kernel_sizes"]) != len(cfg["resblock_dilation_sizes"]):
            raise ValueError("resblock_kernel_sizes and resblock_dilation_sizes differ in length")
        for key in ("latents_mean", "latents_std"):
            if cfg[key].shape != (cfg["latent_channels"],):
                raise ValueError(f"{key} has {cfg[key].size} entries, expected {cfg['latent_channels']}")
    except (TypeError, ValueError) as e:
        raise CheckpointError(f"{r.path}: bad audio VAE config: {e}") from None
    return cfg


def _single_file_config(r):
    """A single file (Comfy-Org's ``minimax_h3_audio_vae_fp32``: the release's names, weight
    norm folded, the encoder too) has no config.json: the latent statistics from its own
    ``latents_mean`` / ``latents_std`` (else the released ones), the sample rate from the
    released configuration, the architecture from the shapes (_infer_arch)."""
    from ..weights.released import released_config
    from ..weights.single_file import detect_component
    detect_component(r.path, "audio_vae", r.f)
    rel = released_config("audio_vae")
    cfg = {"sampling_rate": int(rel["sampling_rate"])}
    for key in ("latents_mean", "latents_std"):
        cfg[key] = r.get(key).reshape(-1) if key in r.f else np.asarray(rel[key], np.float32)
    return cfg


class _Reader:
    """Decoder tensors from one safetensors file (weights.files.TensorFiles), as float32
    with checked shapes and finite values."""

    def __init__(self, path):
        self.path = path
        self.f = TensorFiles([path])
        # diffusers and the release keep torch's weight-norm pair (weight_g, weight_v);
        # Comfy-Org's single file stores the folded weight
        self.folded = "decoder.conv_pre.weight" in self.f and "decoder.conv_pre.weight_v" not in self.f
        self.weight_suffix = ".weight" if self.folded else ".weight_v"

    def shape(self, name):
        return tuple(self.f.info(name).shape)

    def get(self, name, shape=None):
        a = self.f.get(name, dtypes=("F32", "F16", "BF16"))
        if self.f.info(name).dtype == "BF16":
            a = (a.astype(np.uint32) << 16).view(np.float32)
        a = np.asarray(a, dtype=np.float32)
        if shape is not None and tuple(a.shape) != tuple(shape):
            raise checkpoint_error(self.path, name, f"shape {tuple(a.shape)}, expected {tuple(shape)}")
        if not np.all(np.isfinite(a)):
            raise checkpoint_error(self.path, name, "NaN or Inf values")
        return a

    def weight_norm(self, prefix, shape):
        """W = v * (g / ||v||) with the norm over all dims but 0 (torch's weight_norm), or
        the stored weight of a file that folded it."""
        if self.folded:
            return self.get(prefix + ".weight", shape)
        v = self.get(prefix + ".weight_v", shape)
        g = self.get(prefix + ".weight_g", (shape[0],) + (1,) * (len(shape) - 1))
        norm = np.sqrt(np.sum(np.square(v, dtype=np.float64), axis=tuple(range(1, v.ndim)),
                              keepdims=True)).astype(np.float32)
        if np.any(norm == 0):
            raise CheckpointError(f"{self.path}: {prefix}.weight_v has an all-zero slice")
        return v * (g / norm)

    def close(self):
        self.f.close()


# Narrow convolutions (the late stages' 4-16 channels) fill only Cout of a GEMM panel's 32
# columns.  They run as a convolution over groups of g = 32 // C time steps instead: the
# signal [T, C] is viewed as [T/g, g*C], the output likewise, and the weights are expanded
# to the g outputs of a group over the few groups their taps reach (zeros elsewhere).
# In float modes the non-zero products are summed in the same order and the added zeros
# are exact, so for finite signals the result is the same bits (tested).  int8 quantises
# activations per group window instead of per output step: as accurate, not the same bits.
# 2 threads, 1 s of audio: the 8-channel k=11 convolutions 11.1 -> 5.2 ms, the whole fp32
# decode ~3 % and int8 ~8 % faster.  Module switch for A/B:
_GROUP_NARROW_TIME = True
_PANEL = 32


def _time_grouping(w, dilation, padding):
    """(g, k', pad', expanded weight [g*Cout, g*Cin, k']) when grouping time steps makes
    the convolution cheaper, else None.  Output group s, position u needs the input steps
    g*s + u + j*dil - pad, which lie in groups s + J for J in [J0, J1]."""
    cout, cin, k = w.shape
    if cin != cout or _PANEL % cin or cin >= _PANEL:
        return None
    g = _PANEL // cin
    j0 = -padding // g                                   # floor division
    j1 = (g - 1 + (k - 1) * dilation - padding) // g
    kg, padg = j1 - j0 + 1, -j0
    # cost per output step: k' taps of a full panel vs k taps of a panel Cin/32 full
    if kg >= k or 2 * padg != kg - 1 or 2 * padding != (k - 1) * dilation:
        return None
    wg = np.zeros((g, cout, kg, g, cin), np.float32)     # [u, co, J', p, ci]
    for u in range(g):
        for j in range(k):
            o = u + j * dilation - padding               # input offset from g*s
            wg[u, :, o // g - j0, o % g, :] = w[:, :, j]
    return g, kg, padg, wg.reshape(g * cout, kg, g * cin)


def _gemm_weight(w2, b, mode, isa, pool):
    """The C linear of a convolution's GEMM weight w2 [N, K] float32 (a copy made here, so
    fp32 uses it in place) in ``mode``, through the models' one linear policy."""
    return make_linear(w2, ops.Compute(mode, isa, pool), bias=b)[0].core


class _Conv:
    """Conv1d (stride 1) over channels-last [T, Cin] -> [T_out, Cout]."""

    def __init__(self, w, b, dilation, padding, mode, isa, pool):
        cout, cin, k = w.shape
        self.cin, self.cout, self.k, self.dil, self.pad = cin, cout, k, dilation, padding
        w2 = np.ascontiguousarray(w.transpose(0, 2, 1).reshape(cout, k * cin))   # tap-major rows
        b = None if b is None else np.ascontiguousarray(b)
        self.core = _gemm_weight(w2, b, mode, isa, pool)
        self.grouped = None
        tg = _time_grouping(w, dilation, padding) if _GROUP_NARROW_TIME else None
        if tg is not None:
            g, kg, padg, wg = tg
            bg = None if b is None else np.tile(b, g)
            core = _gemm_weight(np.ascontiguousarray(wg.reshape(g * cout, kg * g * cin)), bg, mode, isa, pool)
            self.grouped = (g, kg, padg, core)

    def _grouped_for(self, T):
        return self.grouped if self.grouped is not None and T % self.grouped[0] == 0 else None

    def out_len(self, T):
        return T + 2 * self.pad - self.dil * (self.k - 1)

    def ws_bytes(self, T):
        grp = self._grouped_for(T)
        if grp is not None:
            return _kernels.conv1d_workspace_bytes(grp[3], T // grp[0], _config.conv_im2col())
        return _kernels.conv1d_workspace_bytes(self.core, self.out_len(T), _config.conv_im2col())

    def __call__(self, x, y, add=False, ws=None):
        grp = self._grouped_for(x.shape[0])
        if grp is not None:   # "same" padding: T_out == T
            g, kg, padg, core = grp
            _kernels.conv1d(core, x.reshape(-1, g * self.cin), kg, 1, padg, y.reshape(-1, g * self.cout),
                            add, ws, _config.conv_im2col())
            return y
        _kernels.conv1d(self.core, x, self.k, self.dil, self.pad, y, add, ws, _config.conv_im2col())
        return y


class _ConvT:
    """ConvTranspose1d over channels-last [T, Cin] -> [(T-1)*stride - 2*pad + k, Cout]."""

    def __init__(self, w, b, stride, padding, mode, isa, pool):
        cin, cout, k = w.shape
        self.cin, self.cout, self.k, self.stride, self.pad = cin, cout, k, stride, padding
        w2 = np.ascontiguousarray(w.transpose(2, 1, 0).reshape(k * cout, cin))   # row j*Cout + co
        self.core = _gemm_weight(w2, None, mode, isa, pool)
        self.bias = np.array(b, dtype=np.float32)   # a copy, not a view of the mapping

    def out_len(self, T):
        return (T - 1) * self.stride - 2 * self.pad + self.k

    def ws_bytes(self, T):
        return _kernels.conv_transpose1d_workspace_bytes(self.core, T, self.stride)

    def __call__(self, x, y, ws=None):
        _kernels.conv_transpose1d(self.core, x, self.cout, self.k, self.stride, self.pad,
                                  self.bias, y, ws)
        return y


class _Act:
    """Anti-aliased SnakeBeta (Activation1d) with its checkpoint parameters and filters."""

    def __init__(self, r, prefix, channels, isa, pool):
        # copies: a view would keep the whole checkpoint mapping (and its pages) alive
        self.alpha = r.get(prefix + ".act.alpha", (channels,)).copy()
        self.beta = r.get(prefix + ".act.beta", (channels,)).copy()
        self.fu = r.get(prefix + ".upsample.filter", (1, 1, 12)).reshape(12).copy()
        self.fd = r.get(prefix + ".downsample.lowpass.filter", (1, 1, 12)).reshape(12).copy()
        self.isa, self.pool = isa, pool

    def __call__(self, x, y):
        _kernels.snake_aa(x, y, self.alpha, self.beta, self.fu, self.fd, self.isa, self.pool)
        return y


class AudioDecoder:
    """The MiniMax-H3 audio VAE decoder (BigVGAN), float32 activations.

    Attributes
    ----------
    sample_rate : int — output sampling rate (32000)
    hop : int — waveform samples per latent (prod(decoder_rates) = 800)
    latent_channels : int — 32
    weights, isa, threads : the load options in effect
    """

    def __init__(self, reader, cfg, compute):
        self.compute = compute
        self.isa = compute.isa
        self.weights = compute.weights
        self._pool = compute.pool
        self.threads = compute.threads
        self.config = cfg
        self.sample_rate = cfg["sampling_rate"]
        self.rates = cfg["decoder_rates"]
        self.hop = int(math.prod(self.rates))
        self.latent_channels = cfg["latent_channels"]
        self._mean = cfg["latents_mean"]
        self._std = cfg["latents_std"]
        self._build(reader, cfg)

    @classmethod
    def from_pretrained(cls, path, weights="auto", threads=None, isa=None):
        """Load an ``audio_vae`` folder: diffusers (``config.json`` +
        ``diffusion_pytorch_model.safetensors``) or the release ``FL2VA/audio_vae``
        (``config.json`` + ``model.safetensors``; tensor names are the same).

        Parameters
        ----------
        path : str or os.PathLike — the folder
        weights : {"auto", "fp32", "bf16", "fp16", "int8"} — "auto" (the default): a float
            file runs fp32, as released — how the convolution weights are stored
            and multiplied (the checkpoint is fp32).  The two tiny projections
            (``dec_in_proj``, ``conv_post``) always stay fp32.
        threads : int, optional — default :func:`h3cy.get_num_threads`
        isa : str, optional — kernel path (default: ``H3CY_ISA`` or the best available)

        Raises CheckpointError for a missing folder/file/tensor or a wrong shape.
        """
        compute = ops.Compute.resolve(weights, isa, threads, modes=AUDIO_WEIGHT_MODES, auto="fp32")
        folder = os.fspath(path)
        if os.path.isfile(folder):
            cfg, wpath = None, folder
        elif os.path.isdir(folder):
            cfg, wpath = _read_config(folder)
        else:
            raise CheckpointError(f"{folder}: not a folder or a file (expected an audio_vae folder or a "
                                  "single .safetensors file)")
        reader = _Reader(wpath)
        try:
            if cfg is None:
                cfg = _single_file_config(reader)
            return cls(reader, _infer_arch(cfg, reader), compute)
        finally:
            reader.close()

    # -- loading -------------------------------------------------------------------------------
    def _build(self, r, cfg):
        mode, isa, pool = self.weights, self.isa, self._pool
        Cl, D, C0 = cfg["latent_channels"], cfg["latent_dim"], cfg["decoder_dim"]
        self.in_proj = _Conv(r.get("dec_in_proj.weight", (D, Cl, 1)), r.get("dec_in_proj.bias", (D,)),
                             1, 0, "fp32", isa, pool)
        self.conv_pre = _Conv(r.weight_norm("decoder.conv_pre", (C0, D, 7)),
                              r.get("decoder.conv_pre.bias", (C0,)), 1, 3, mode, isa, pool)
        self.ups, self.blocks = [], []
        ks, ds = cfg["resblock_kernel_sizes"], cfg["resblock_dilation_sizes"]
        C = C0
        for i, (rate, kern) in enumerate(zip(cfg["decoder_rates"], cfg["decoder_kernel_sizes"])):
            if C % 2 or (kern - rate) % 2 or kern < rate:
                raise CheckpointError(f"audio VAE config: stage {i} (channels {C}, rate {rate}, "
                                      f"kernel {kern}) is not an exact x{rate} upsampler")
            cin, C = C, C // 2
            p = f"decoder.ups.{i}.0"
            self.ups.append(_ConvT(r.weight_norm(p, (cin, C, kern)), r.get(p + ".bias", (C,)),
                                   rate, (kern - rate) // 2, mode, isa, pool))
            stage = []
            for j, (k, dil) in enumerate(zip(ks, ds)):
                b = f"decoder.resblocks.{len(ks) * i + j}"
                convs1 = [_Conv(r.weight_norm(f"{b}.convs1.{m}", (C, C, k)), r.get(f"{b}.convs1.{m}.bias", (C,)),
                                d, (k * d - d) // 2, mode, isa, pool) for m, d in enumerate(dil)]
                convs2 = [_Conv(r.weight_norm(f"{b}.convs2.{m}", (C, C, k)), r.get(f"{b}.convs2.{m}.bias", (C,)),
                                1, (k - 1) // 2, mode, isa, pool) for m in range(len(dil))]
                acts = [_Act(r, f"{b}.activations.{a}", C, isa, pool) for a in range(2 * len(dil))]
                stage.append((convs1, convs2, acts))
            self.blocks.append(stage)
        self.act_post = _Act(r, "decoder.activation_post", C, isa, pool)
        self.conv_post = _Conv(r.weight_norm("decoder.conv_post", (1, C, 7)), None, 1, 3, "fp32", isa, pool)
        if f"decoder.ups.{len(self.ups)}.0.weight_v" in r.f:
            raise CheckpointError(f"{r.path}: has more upsampling stages than the config's "
                                  f"{len(self.ups)} decoder_rates")

    # -- decoding ------------------------------------------------------------------------------
    def _ws(self, A):
        """One workspace for every convolution of a decode of A latents."""
        need, T = 0, A
        need = max(need, self.in_proj.ws_bytes(T), self.conv_pre.ws_bytes(T))
        for up, stage in zip(self.ups, self.blocks):
            need = max(need, up.ws_bytes(T))
            T = up.out_len(T)
            for convs1, convs2, _ in stage:
                need = max([need] + [c.ws_bytes(T) for c in convs1 + convs2])
        need = max(need, self.conv_post.ws_bytes(T))
        return np.empty(need, np.uint8)

    def decode(self, latent, on_progress=None, cancel=None):
        """Decode audio latents into a waveform.

        Parameters
        ----------
        latent : ndarray of shape (2, latent_channels, A), float32
            Normalised audio latents (as the sampler outputs them; the diffusers
            pipeline's ``latents * std + mean`` is applied here), one item per stereo
            channel (left first).  Any item count >= 1 is decoded the same way.
        on_progress : callable(done, total, "decode_audio"), optional
            Called between stages and AMP blocks (at most ~20 times a second, and always
            at the end); its exceptions propagate.
        cancel : h3cy.CancelToken, optional
            Checked after every stage and AMP block; raises h3cy.Cancelled.

        Returns
        -------
        ndarray of shape (2, hop * A), float32 in [-1, 1] at ``sample_rate``.
        """
        x = np.asarray(latent)
        if x.ndim != 3 or x.shape[0] < 1 or x.shape[1] != self.latent_channels or x.shape[2] < 1:
            raise H3ValueError(f"latent must have shape (2, {self.latent_channels}, A >= 1), "
                               f"got {tuple(x.shape)}")
        if not np.issubdtype(x.dtype, np.number):
            raise H3ValueError(f"latent must be a float array, got {x.dtype}")
        x = np.ascontiguousarray(x, dtype=np.float32)
        B, _, A = x.shape
        per_item = 2 + len(self.ups) * (1 + len(self.blocks[0]))
        total = B * per_item
        ticker = Ticker(total, "decode_audio", on_progress, cancel, what="audio decode")
        tick = ticker.tick
        ticker.check()
        ws = self._ws(A)
        out = np.empty((B, self.hop * A), np.float32)
        # the pipeline's de-normalisation, in its order: latents * std + mean (fp32)
        z = x * self._std[None, :, None] + self._mean[None, :, None]
        for b in range(B):
            out[b] = self._decode_one(np.ascontiguousarray(z[b].T), ws, tick)
        return out

    def _decode_one(self, z, ws, tick):
        T = z.shape[0]
        h = self.in_proj(z, np.empty((T, self.in_proj.cout), np.float32), ws=ws)
        h = self.conv_pre(h, np.empty((T, self.conv_pre.cout), np.float32), ws=ws)
        tick()
        for up, stage in zip(self.ups, self.blocks):
            T = up.out_len(h.shape[0])
            h = up(h, np.empty((T, up.cout), np.float32), ws=ws)
            tick()
            a = np.empty_like(h)
            r = np.empty_like(h)
            acc = None
            xb = np.empty_like(h)
            for convs1, convs2, acts in stage:
                cur = h.copy() if acc is None else xb
                if acc is not None:
                    np.copyto(cur, h)
                for m, (c1, c2) in enumerate(zip(convs1, convs2)):
                    acts[2 * m](cur, a)
                    c1(a, r, ws=ws)
                    acts[2 * m + 1](r, a)
                    c2(a, cur, add=True, ws=ws)
                if acc is None:
                    acc = cur
                else:
                    acc += cur
                tick()
            h = np.divide(acc, np.float32(len(stage)), out=acc)
        a = self.act_post(h, np.empty_like(h))
        y = self.conv_post(a, np.empty((h.shape[0], 1), np.float32), ws=ws)
        np.clip(y, -1.0, 1.0, out=y)
        tick()
        return y[:, 0]

    def __repr__(self):
        return (f"AudioDecoder(stages={len(self.ups)}, hop={self.hop}, sample_rate={self.sample_rate}, "
                f"weights={self.weights!r}, isa={self.isa!r}, threads={self.threads})")
