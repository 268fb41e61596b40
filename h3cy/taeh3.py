"""taeh3: the tiny preview decoder for MiniMax-H3 video latents (TAEHV architecture, patch 2,
24 latent channels), run on h3cy's C convolution kernels.

Architecture read from madebyollin/taehv ``taehv.py`` at commit
1f14a568f24bf8811e0a0ac601613e04fc1581e8 (Aug 2026, "Add TAEH3" is 62f7591f) as a reference
(not copied): class ``TAEHV`` with ``patch_size=2, latent_channels=24`` and the base decoder,
and ``_decode_h3_video`` for H3's chunked time layout.  The decoder, with the indices that
name its tensors in the published checkpoint (``decoder.<i>....``):

    0  Clamp                  x -> 3 tanh(x / 3)
    1  Conv2d 3x3 24->256     (+ bias)            2  ReLU
    3-5 MemBlock(256)         6  Upsample x2 (nearest)   7  TGrow(256, stride 1)
    8  Conv2d 3x3 256->128 (no bias)
    9-11 MemBlock(128)        12 Upsample x2             13 TGrow(128, stride 2)
    14 Conv2d 3x3 128->64 (no bias)
    15-17 MemBlock(64)        18 Upsample x2             19 TGrow(64, stride 2)
    20 Conv2d 3x3 64->64 (no bias)   21 ReLU   22 Conv2d 3x3 64->12 (+ bias)

- MemBlock(C) (``decoder.<i>.conv.{0,2,4}``): ``relu(conv3(relu(conv2(relu(conv1(cat[x,
  past]))))) + x)``, 3x3 convolutions with bias, 2C->C, C->C, C->C; ``past`` is the block's
  input at the previous frame (zeros at the first);
- TGrow(C, s) (``decoder.<i>.conv.weight``, 1x1, no bias): C -> s*C channels, output channel
  group j becomes frame ``s*t + j``.  A checkpoint may hold more rows than the stride needs;
  the last ``s*C`` are used (as ``TAEHV.patch_tgrow_layers``);
- every 3x3 convolution zero-pads by 1; after the decoder: ``pixel_shuffle(2)`` (12 -> 3
  channels at twice the size), clamp to [0, 1].
- H3 time layout (``_decode_h3_video``): the decoder turns T latent frames into 4T frames;
  they are zero-padded to a multiple of 20 (5 latents per H3 chunk), the first 3 frames of
  every 20 are dropped, then the last 12 frames: 4T -> the video's 17n+5 frames
  (T = 7 -> 22).

Input: the normalised latent (24, T, h, w) the sampler holds -- what ComfyUI's previewer
hands its TAESD-style decoders for MiniMax-H3 (its ``MiniMaxH3Video`` format's ``process_in``
is the identity; see h3cy/preview.py).  Output: frames (F, 16h, 16w, 3) in [0, 1].

Every convolution runs in C: a 3x3 convolution over a frame is one ``h3_conv1d``
(csrc/conv.c, the audio decoder's kernel: an im2col GEMM over h3cy's linears, threaded,
per-ISA) over the frame's zero-padded rows flattened, with the three row offsets stacked as
channels (see :class:`_Conv3x3`); a 1x1 convolution is an ``h3_conv1d`` with k = 1.  With
``isa="ref"`` the GEMMs are h3cy's scalar reference kernels.  The element-wise steps
(clamp, ReLU, residual, nearest upsampling, the frame bookkeeping) are numpy.
"""
import os

import numpy as np

from . import _config
from . import _kernels
from . import ops
from .errors import CheckpointError, H3ValueError
from .weights.linears import make_linear

LATENT_CHANNELS = 24
PATCH = 2
WIDTHS = (256, 128, 64, 64)
T_UPSCALE = 4          # TGrow strides 1, 2, 2
CHUNK_LATENTS = 5      # H3's decoder chunk: 5 latents -> 20 decoder frames
TRIM = T_UPSCALE - 1   # frames dropped at each chunk's start
TAIL_LATENTS = 3       # H3 drops 3 tokens' worth of frames at the end

# (index, kind, args): the base TAEHV decoder with patch 2 and 24 latent channels
LAYERS = (
    [(0, "clamp", ()), (1, "conv", (LATENT_CHANNELS, WIDTHS[0], True)), (2, "relu", ())]
    + [(3 + j, "mem", (WIDTHS[0],)) for j in range(3)]
    + [(6, "up", ()), (7, "tgrow", (WIDTHS[0], 1)), (8, "conv", (WIDTHS[0], WIDTHS[1], False))]
    + [(9 + j, "mem", (WIDTHS[1],)) for j in range(3)]
    + [(12, "up", ()), (13, "tgrow", (WIDTHS[1], 2)), (14, "conv", (WIDTHS[1], WIDTHS[2], False))]
    + [(15 + j, "mem", (WIDTHS[2],)) for j in range(3)]
    + [(18, "up", ()), (19, "tgrow", (WIDTHS[2], 2)), (20, "conv", (WIDTHS[2], WIDTHS[3], False)),
       (21, "relu", ()), (22, "conv", (WIDTHS[3], 3 * PATCH * PATCH, True))])


def expected_keys():
    """``{name: shape}`` of every decoder tensor the published checkpoint names (TGrow rows as
    the stride needs them; a file may hold more)."""
    keys = {}
    for i, kind, a in LAYERS:
        if kind == "conv":
            cin, cout, bias = a
            keys[f"decoder.{i}.weight"] = (cout, cin, 3, 3)
            if bias:
                keys[f"decoder.{i}.bias"] = (cout,)
        elif kind == "mem":
            c = a[0]
            for j, cin in ((0, 2 * c), (2, c), (4, c)):
                keys[f"decoder.{i}.conv.{j}.weight"] = (c, cin, 3, 3)
                keys[f"decoder.{i}.conv.{j}.bias"] = (c,)
        elif kind == "tgrow":
            c, s = a
            keys[f"decoder.{i}.conv.weight"] = (c * s, c, 1, 1)
    return keys


def find_checkpoint(folders):
    """The first ``taeh3*.safetensors`` / ``taeh3*.pth`` file in ``folders`` (e.g. ComfyUI's
    ``models/vae_approx``), or None -- ComfyUI matches the name's start the same way."""
    for d in folders:
        if not os.path.isdir(d):
            continue
        for name in sorted(os.listdir(d)):
            if name.startswith("taeh3") and name.endswith(".safetensors"):
                return os.path.join(d, name)
    return None


def _f32(a):
    from .ops.bf16 import bf16_bits_to_f32
    a = np.asarray(a)
    if a.dtype == np.uint16:                     # BF16 raw bits from the reader
        a = bf16_bits_to_f32(a)
    return np.ascontiguousarray(a, dtype=np.float32)


def load_state(path):
    """``{name: float32 array}`` of the decoder tensors in a safetensors file (other tensors,
    e.g. ``encoder.*``, are ignored; a ``taesd_decoder.`` / ``vae.`` prefix is stripped).
    CheckpointError naming the tensor when one is missing or misshapen."""
    from .weights.safetensors import SafetensorsFile
    want = expected_keys()
    out = {}
    with SafetensorsFile(path) as f:
        names = {}
        for k in f.keys():
            for pre in ("", "taesd_decoder.", "vae.", "first_stage_model."):
                if k.startswith(pre + "decoder."):
                    names[k[len(pre):]] = k
        for k, shape in want.items():
            if k not in names:
                raise CheckpointError(f"{path}: taeh3 tensor {k!r} is missing")
            a = _f32(f.get(names[k]))
            if a.shape != shape and not (k.endswith(".conv.weight") and a.ndim == 4
                                         and a.shape[0] >= shape[0] and a.shape[1:] == shape[1:]):
                raise CheckpointError(f"{path}: taeh3 tensor {k!r} has shape {a.shape}, expected {shape}")
            out[k] = a
    return out


class _Conv3x3:
    """3x3 convolution (zero padding 1, stride 1) over a channels-last frame [H, W, Cin] as one
    ``h3_conv1d``: the frame's rows are zero-padded to R = W + 2 and flattened; row offsets
    -R, 0, +R are stacked as 3 Cin channels, so the kernel's three taps (k = 3, pad 1) along
    the flattened axis are the three columns:
    ``y[p] = sum_{dx, dy, ci} W[co, ci, dy, dx] x_flat[p + (dy - 1) R + dx - 1]``.
    Outputs on the padding columns are computed and dropped (2 of every W + 2)."""

    def __init__(self, w, b, compute):
        cout, cin, kh, kw = w.shape
        assert kh == kw == 3
        self.cin, self.cout = cin, cout
        w2 = np.ascontiguousarray(w.transpose(0, 3, 2, 1).reshape(cout, 9 * cin))   # [co][dx][dy][ci]
        self.core = make_linear(w2, compute, bias=None if b is None else np.ascontiguousarray(b))[0].core

    def __call__(self, x, past=None):
        """x (and past, stacked after x's channels): [H, W, C] float32 -> [H, W, Cout]."""
        H, W = x.shape[:2]
        R = W + 2
        cin = self.cin
        if past is not None:
            x = np.concatenate([x, past], axis=2)
        assert x.shape[2] == cin, (x.shape, cin)
        xp = np.zeros((H + 2, R, cin), np.float32)
        xp[1:-1, 1:-1] = x
        flat = xp.reshape(-1, cin)
        n = H * R
        x3 = np.empty((n, 3 * cin), np.float32)
        x3[:, :cin] = flat[:n]
        x3[:, cin:2 * cin] = flat[R:R + n]
        x3[:, 2 * cin:] = flat[2 * R:2 * R + n]
        y = np.empty((n, self.cout), np.float32)
        _kernels.conv1d(self.core, x3, 3, 1, 1, y, False, None, _config.conv_im2col())
        return y.reshape(H, R, self.cout)[:, 1:-1]


class _Conv1x1:
    def __init__(self, w, compute):
        cout, cin = w.shape[:2]
        self.cout = cout
        self.core = make_linear(np.ascontiguousarray(w.reshape(cout, cin)), compute)[0].core

    def __call__(self, x):
        H, W, C = x.shape
        y = np.empty((H * W, self.cout), np.float32)
        _kernels.conv1d(self.core, np.ascontiguousarray(x).reshape(-1, C), 1, 1, 0, y, False, None,
                        _config.conv_im2col())
        return y.reshape(H, W, self.cout)


def _relu(x):
    return np.maximum(x, 0, out=x)


class TAEH3Decoder:
    """The taeh3 preview decoder.  ``TAEH3Decoder.from_file(path)`` loads the published
    safetensors file (the names of :func:`expected_keys`); ``decode(latent)`` -> float32
    frames (F, 16h, 16w, 3) in [0, 1].

    weights : "fp32" (default; exact to the torch reference within 1e-4) or "bf16"
    isa : h3cy's kernel path ("ref" = the scalar reference GEMMs); threads : pool size
    space_upscale, time_upscale : False skips the three nearest upsamplings (frames at 2h x 2w,
        ~1/40 of the work) / uses every TGrow as stride 1 with its last-time-step rows (one
        frame per latent frame): TAEHV's ``decoder_space_upscale`` / ``decoder_time_upscale``
        for a cheaper preview
    """

    def __init__(self, state, weights="fp32", isa=None, threads=None, space_upscale=True, time_upscale=True):
        compute = ops.Compute.resolve(weights, isa, threads, modes=("fp32", "bf16"), auto="fp32")
        self.space_upscale, self.time_upscale = bool(space_upscale), bool(time_upscale)
        self.compute = compute
        want = expected_keys()
        for k, shape in want.items():
            if k not in state:
                raise CheckpointError(f"taeh3 tensor {k!r} is missing")
        self.layers = []
        for i, kind, a in LAYERS:
            if kind == "conv":
                b = state.get(f"decoder.{i}.bias") if a[2] else None
                self.layers.append((kind, _Conv3x3(_f32(state[f"decoder.{i}.weight"]),
                                                   None if b is None else _f32(b), compute)))
            elif kind == "mem":
                convs = [_Conv3x3(_f32(state[f"decoder.{i}.conv.{j}.weight"]),
                                  _f32(state[f"decoder.{i}.conv.{j}.bias"]), compute) for j in (0, 2, 4)]
                self.layers.append((kind, convs))
            elif kind == "tgrow":
                c, s = a
                s = s if self.time_upscale else 1
                w = _f32(state[f"decoder.{i}.conv.weight"])[-c * s:]      # the last-timestep rows
                self.layers.append((kind, (_Conv1x1(w, compute), s)))
            else:
                self.layers.append((kind, None))

    @classmethod
    def from_file(cls, path, weights="fp32", isa=None, threads=None, space_upscale=True, time_upscale=True):
        return cls(load_state(path), weights=weights, isa=isa, threads=threads, space_upscale=space_upscale,
                   time_upscale=time_upscale)

    def decode_frames(self, latent):
        """The decoder alone: latent (24, T, h, w) -> list of 4T frames [2h*8, .., 12]
        channels-last, before the pixel shuffle and the H3 time layout."""
        z = np.asarray(latent)
        if z.ndim != 4 or z.shape[0] != LATENT_CHANNELS or not np.issubdtype(z.dtype, np.floating):
            raise H3ValueError(f"taeh3 decodes a float latent ({LATENT_CHANNELS}, T, h, w), got "
                               f"{getattr(z, 'dtype', '?')} {np.shape(latent)}")
        frames = [np.ascontiguousarray(z[:, t].transpose(1, 2, 0), dtype=np.float32) for t in range(z.shape[1])]
        for kind, op in self.layers:
            if kind == "clamp":
                frames = [np.tanh(f / np.float32(3)) * np.float32(3) for f in frames]
            elif kind == "relu":
                frames = [_relu(f) for f in frames]
            elif kind == "conv":
                frames = [op(f) for f in frames]
            elif kind == "mem":
                out, prev = [], None
                for f in frames:
                    past = np.zeros_like(f) if prev is None else prev
                    h = _relu(op[0](f, past))
                    h = _relu(op[1](h))
                    h = op[2](h)
                    h += f
                    out.append(_relu(h))
                    prev = f
                frames = out
            elif kind == "up" and self.space_upscale:
                frames = [f.repeat(2, axis=0).repeat(2, axis=1) for f in frames]
            elif kind == "tgrow":
                conv, s = op
                out = []
                for f in frames:
                    g = conv(f)
                    c = g.shape[2] // s
                    out.extend(np.ascontiguousarray(g[:, :, j * c:(j + 1) * c]) for j in range(s))
                frames = out
        return frames

    def decode(self, latent):
        """latent (24, T, h, w) -> float32 frames (F, 16h, 16w, 3) in [0, 1], H3's frame count
        (T = 7 -> 22); without time upscaling F = T, without space upscaling 2h x 2w."""
        frames = self.decode_frames(latent)
        n = len(frames)
        if self.time_upscale:
            chunk = CHUNK_LATENTS * T_UPSCALE
            keep = [i for i in range(-(-n // chunk) * chunk) if i % chunk >= TRIM]
            keep = keep[:len(keep) - TAIL_LATENTS * T_UPSCALE]
        else:
            keep = list(range(n))          # one frame per latent frame (its last time step)
        H, W, C = frames[0].shape
        zero = np.zeros((H, W, C), np.float32)
        out = np.empty((len(keep), H * PATCH, W * PATCH, C // (PATCH * PATCH)), np.float32)
        for o, i in enumerate(keep):
            f = frames[i] if i < n else zero
            # pixel_shuffle(2): channel c*4 + a*2 + b -> (c, 2h + a, 2w + b)
            out[o] = f.reshape(H, W, C // 4, PATCH, PATCH).transpose(0, 3, 1, 4, 2).reshape(
                H * PATCH, W * PATCH, C // 4)
        np.clip(out, 0.0, 1.0, out=out)
        return out
