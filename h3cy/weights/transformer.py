"""Open a MiniMax-H3 transformer checkpoint folder and present its tensors under diffusers names.

Two folder layouts (spec §4.1–4.2), told apart by the tensor names in the files:

* **diffusers** (``transformer/``): ``config.json`` + ``diffusion_pytorch_model.safetensors`` or
  ``diffusion_pytorch_model.safetensors.index.json`` + shards.
* **original** release (``FL2VA/transformer/``, ``Ref2VA/transformer/``): ``config.json`` (original key
  spellings) + ``model.safetensors.index.json`` + ``model-*.safetensors`` shards, or one
  ``model.safetensors``.  Its tensors differ from diffusers' in three ways, all handled here without a
  full-size copy:

  - names (``blocks.{b}.mlp.fc2`` -> ``transformer_blocks.{b}.ff.net.2``, ...), spec §4.2 rename rules;
  - ``attn.qkv_proj.weight`` [3·inner, hidden] fuses ``to_q/to_k/to_v``.  ``qkv_layout="interleaved"``:
    rows per head ``[h0: q k v, h1: q k v, ...]`` (MiniMaxAI shards), ``to_q[h·D + d] = qkv[h·3D + d]``;
    ``"stacked"``: ``[q; k; v]`` (re-published single files).  The tensor cannot tell which; the folder
    decides (index + shards -> interleaved, one file -> stacked; the ``qkv_layout=`` argument overrides);
  - ``mlp.fc1.weight`` rows are ``[gate; value]``, diffusers' ``ff.net.0.proj.weight`` ``[value; gate]``.

How to consume (the lead's DiT loader):

* ``ckpt.attention_qkv(prefix)`` -> ``(q, k, v)``, each a view of shape (heads, head_dim, hidden_size).
  For diffusers and stacked layouts they are C-contiguous (``.reshape(inner, hidden)`` is free); for
  the interleaved layout they are strided views into the fused tensor — pack them, don't copy twice.
* ``ckpt.swiglu(prefix)`` -> ``(value, gate)``, each a contiguous row-slice view (ffn_dim, hidden_size),
  in both layouts; diffusers computes ``net.2(value * silu(gate))``.  The same views are also reachable
  as ``ckpt[prefix + ".ff.value.weight"]`` / ``ckpt[prefix + ".ff.gate.weight"]``.
* ``ckpt.fused_qkv(prefix)`` -> ``(rows (3·inner, hidden), "interleaved" | "stacked")`` and
  ``ckpt.swiglu_gate_value(prefix)`` -> rows (2·ffn, hidden) ``[gate; value]``: the original layout's
  fused tensors as stored (zero-copy); for the diffusers layout assembled copies.
* ``ckpt[name]`` for any diffusers state-dict key returns exactly the diffusers parameter (bf16 as
  uint16 bits).  It is a zero-copy view except for ``to_q/to_k/to_v`` of an interleaved and
  ``ff.net.0.proj.weight`` of an original checkpoint, which are assembled copies
  (``ckpt.entry(name).zero_copy`` is False and ``.note`` says what to use instead).

RoPE frequencies: the original layout stores the rotary frequencies as a float32 tensor
``rope.inv_freq`` of shape (``rope_inv_freq_len``,) and its config has no ``rope_theta``.  When present
that tensor is read, validated and exposed as ``ckpt.rope_inv_freq``; :class:`h3cy.DiT` builds its RoPE
tables from it (it is what the released model computes with), not from θ.  Without it, and for the
diffusers layout (which computes ``inv_freq`` from ``config.rope_theta`` like diffusers; a stray
``rope.inv_freq`` there is ignored, as diffusers' non-persistent buffer ignores it),
``ckpt.rope_inv_freq`` is None and the frequencies come from ``rope_theta`` (default 10000).
``rope.inv_freq`` is a buffer, not a diffusers parameter: it is not among :meth:`keys`.

Everything is validated when the folder is opened, before any compute: config keys and values, every
expected tensor present (from ``num_layers`` / ``num_refiner_layers``), no unexpected tensor, shapes as
the config implies, dtypes per one of three policies:
``"released"`` (float32 for proj_in, audio_proj_in, time_embedder, proj_out, audio_proj_out; bfloat16
elsewhere — also what diffusers' ``save_pretrained`` writes for a model loaded with
``torch_dtype=torch.bfloat16``), ``"fp32"`` or ``"bf16"`` throughout; ``rope.inv_freq`` (original
layout) float32, shape (``rope_inv_freq_len``,), finite and positive.  Problems raise
:class:`h3cy.CheckpointError` naming the file and the tensor; every file opened so far is closed.
"""
import logging
import math
import os
from dataclasses import dataclass, fields

import numpy as np

from ..errors import H3ValueError
from .comfy_quant import BLOB as QUANT_BLOB, SCALE as QUANT_SCALE, Int8Weight, read_int8
from .files import TensorFiles, checkpoint_error, find_weights, load_json, report_once

__all__ = ["TransformerConfig", "TensorEntry", "TransformerCheckpoint", "open_transformer",
           "expected_tensors", "MODALITY_NUM", "KEEP_IN_FP32_MODULES", "weight_files"]

log = logging.getLogger("h3cy")

MODALITY_NUM = 3  # video, audio, text: each block's AdaLN projects 6 vectors per modality
KEEP_IN_FP32_MODULES = ("proj_in", "audio_proj_in", "time_embedder", "proj_out", "audio_proj_out")
DIFFUSERS_INDEX = "diffusion_pytorch_model.safetensors.index.json"
DIFFUSERS_SINGLE = "diffusion_pytorch_model.safetensors"
ORIGINAL_INDEX = "model.safetensors.index.json"
ORIGINAL_SINGLE = "model.safetensors"
ROPE_INV_FREQ = "rope.inv_freq"
SINGLE_FILE_DTYPES = ("F32", "BF16", "F16")
# a GGUF file's quantised tensors (weights.gguf.GGUFWeight): run as stored
from .gguf import READABLE_TYPES as GGUF_TYPES  # noqa: E402
ADALN_TABLE = "adaln_t_table"       # the curve form's AdaLN input table (Comfy-Org pruned files)
# stored tensors that are buffers, not diffusers parameters: not among keys() nor in nbytes
BUFFER_TENSORS = (ROPE_INV_FREQ,)


# ---------------------------------------------------------------------------------------------
# config
# ---------------------------------------------------------------------------------------------
# (field, diffusers key, original key, kind); kind "int" (> 0), "int0" (>= 0), "float" (> 0), "patch"
_CONFIG_KEYS = (
    ("num_attention_heads", "num_attention_heads", "num_attention_heads", "int"),
    ("attention_head_dim", "attention_head_dim", "attention_head_dim", "int"),
    ("hidden_size", "hidden_size", "hidden_size", "int"),
    ("num_layers", "num_layers", "num_layers", "int"),
    ("num_refiner_layers", "num_refiner_layers", "token_refiner_num_layers", "int0"),
    ("ffn_dim", "ffn_dim", "ffn_hidden_size", "int"),
    ("in_channels", "in_channels", "latents_dim", "int"),
    ("audio_in_channels", "audio_in_channels", "audio_latents_dim", "int"),
    ("patch_size", "patch_size", "patch_size", "patch"),
    ("text_dim", "text_dim", "text_dim", "int"),
    ("freq_dim", "freq_dim", "timestep_input_dim", "int"),
    ("time_embed_hidden_dim", "time_embed_hidden_dim", "time_embed_hidden_size", "int"),
    ("time_embed_dim", "time_embed_dim", "time_embed_dim", "int"),
    ("rope_freq_dim", "rope_freq_dim", "rope_inv_freq_len", "int"),
    ("rope_theta", "rope_theta", "rope_theta", "float"),
    ("norm_eps", "norm_eps", "norm_eps", "float"),
    ("qk_norm_eps", "qk_norm_eps", "qk_norm_eps", "float"),
    ("final_norm_eps", "final_norm_eps", "final_norm_eps", "float"),
    ("adaln_curve_grid", "adaln_curve_grid", "adaln_curve_grid", "int0"),
)
# Keys the shapes cannot check default as in diffusers' __init__ (diffusers fills missing config keys the
# same way); the original config has no rope_theta (spec §4.1).  Every shape-bearing key is required.
_DEFAULTS = {"rope_theta": 10000.0, "norm_eps": 1e-5, "qk_norm_eps": 1e-5, "final_norm_eps": 1e-5,
             "adaln_curve_grid": 0}
_QUIET_DEFAULTS = ("rope_theta", "adaln_curve_grid")   # absent from the released configs by design


@dataclass(frozen=True)
class TransformerConfig:
    """Normalised transformer config (diffusers names, spec §4.1).  Values of the released model in
    brackets."""
    num_attention_heads: int     # [56]
    attention_head_dim: int      # [128]
    hidden_size: int             # [5376]
    num_layers: int              # [50]
    num_refiner_layers: int      # [2]
    ffn_dim: int                 # [14336]  SwiGLU inner width
    in_channels: int             # [24]     video latent channels
    audio_in_channels: int       # [32]
    patch_size: tuple            # [(1, 2, 2)]
    text_dim: int                # [5120]
    freq_dim: int                # [256]    sinusoidal timestep features
    time_embed_hidden_dim: int   # [5376]
    time_embed_dim: int          # [2688]
    rope_freq_dim: int           # [16]
    rope_theta: float            # [10000.0]
    norm_eps: float              # [1e-5]
    qk_norm_eps: float           # [1e-5]
    final_norm_eps: float        # [1e-5]
    # > 0: the pruned "curve form" of Comfy-Org's files: no time embedder; the AdaLN input is
    # a [adaln_curve_grid, time_embed_dim] table sampled over t in [0, 1] (time_embed_dim is
    # then the table's rank, 8 in the published files)
    adaln_curve_grid: int = 0

    @property
    def inner_dim(self):
        """num_attention_heads * attention_head_dim [7168]."""
        return self.num_attention_heads * self.attention_head_dim

    @property
    def video_patch_dim(self):
        """in_channels * prod(patch_size) [96]."""
        return self.in_channels * math.prod(self.patch_size)

    @property
    def adaln_out_features(self):
        """6 * MODALITY_NUM * hidden_size [96768]."""
        return 6 * MODALITY_NUM * self.hidden_size

    @classmethod
    def from_dict(cls, d, path="<config>"):
        """Normalise a config dict in diffusers or original spelling (spec §4.1 table).

        Raises CheckpointError naming ``path`` and the key when a key is missing, spelt both ways with
        different values, or out of range.
        """
        if not isinstance(d, dict):
            raise checkpoint_error(path, None, f"config must be a JSON object, got {type(d).__name__}")
        vals = {}
        for field, dk, ok, kind in _CONFIG_KEYS:
            have = [(k, d[k]) for k in dict.fromkeys((dk, ok)) if k in d]
            if len(have) == 2 and have[0][1] != have[1][1]:
                raise checkpoint_error(path, None, f"config keys {dk!r}={have[0][1]!r} and {ok!r}={have[1][1]!r} disagree")
            if not have:
                if field in _DEFAULTS:
                    vals[field] = _DEFAULTS[field]
                    if field not in _QUIET_DEFAULTS:
                        log.info("%s: config has no %r; using diffusers' default %r", path, dk, _DEFAULTS[field])
                    continue
                names = dk if dk == ok else f"{dk!r} (original: {ok!r})"
                raise checkpoint_error(path, None, f"config key {names} is missing")
            key, v = have[0]
            if kind in ("int", "int0"):
                if isinstance(v, bool) or not isinstance(v, int) or v < (kind == "int"):
                    word = "a positive" if kind == "int" else "a non-negative"
                    raise checkpoint_error(path, None, f"config {key!r} must be {word} int, got {v!r}")
            elif kind == "float":
                if isinstance(v, bool) or not isinstance(v, (int, float)) or not math.isfinite(v) or v <= 0:
                    raise checkpoint_error(path, None, f"config {key!r} must be a positive finite number, got {v!r}")
                v = float(v)
            else:
                if (not isinstance(v, (list, tuple)) or len(v) != 3
                        or not all(isinstance(p, int) and not isinstance(p, bool) and p > 0 for p in v)):
                    raise checkpoint_error(path, None, f"config {key!r} must be three positive ints, got {v!r}")
                v = tuple(v)
            vals[field] = v
        cfg = cls(**vals)
        if 6 * cfg.rope_freq_dim > cfg.attention_head_dim:
            raise checkpoint_error(path, None, f"config rope_freq_dim={cfg.rope_freq_dim}: RoPE rotates 6*rope_freq_dim = "
                                   f"{6 * cfg.rope_freq_dim} channels, more than attention_head_dim="
                                   f"{cfg.attention_head_dim}")
        for key, want in (("adaln_out_features", cfg.adaln_out_features),
                          ("final_adaln_out_features", 2 * cfg.hidden_size)):
            if key in d and d[key] != want:
                raise checkpoint_error(path, None, f"config {key!r}={d[key]!r} but hidden_size={cfg.hidden_size} "
                                       f"implies {want}")
        return cfg

    def to_dict(self):
        """Diffusers-spelt dict (``patch_size`` as a list), as diffusers' config.json."""
        out = {f.name: getattr(self, f.name) for f in fields(self)}
        out["patch_size"] = list(self.patch_size)
        return out


# ---------------------------------------------------------------------------------------------
# tensor table
# ---------------------------------------------------------------------------------------------
def _block_tensors(cfg, dprefix, oprefix, adaln):
    """Rows (diffusers name, original name, shape, qkv/ff role) of one block."""
    H, I, D, F = cfg.hidden_size, cfg.inner_dim, cfg.attention_head_dim, cfg.ffn_dim
    rows = [
        ("norm1.weight", "norm1.weight", (H,), None),
        ("attn.to_q.weight", "attn.qkv_proj.weight", (I, H), ("qkv", 0)),
        ("attn.to_k.weight", "attn.qkv_proj.weight", (I, H), ("qkv", 1)),
        ("attn.to_v.weight", "attn.qkv_proj.weight", (I, H), ("qkv", 2)),
        ("attn.norm_q.weight", "attn.q_norm.weight", (D,), None),
        ("attn.norm_k.weight", "attn.k_norm.weight", (D,), None),
        ("attn.to_out.0.weight", "attn.out_proj.weight", (H, I), None),
        ("norm2.weight", "norm2.weight", (H,), None),
        ("ff.net.0.proj.weight", "mlp.fc1.weight", (2 * F, H), ("ff", None)),
        ("ff.net.2.weight", "mlp.fc2.weight", (H, F), None),
    ]
    if adaln:
        A = cfg.adaln_out_features
        rows += [("adaln_proj.linear.weight", "adaln_proj.linear.weight", (A, cfg.time_embed_dim), None),
                 ("adaln_proj.linear.bias", "adaln_proj.linear.bias", (A,), None)]
    return [(dprefix + d, oprefix + o, s, role) for d, o, s, role in rows]


def expected_tensors(cfg):
    """The tensor table a config implies, in diffusers state-dict order.

    Returns
    -------
    list of (diffusers_name, original_name, shape, role)
        ``role`` is None, ``("qkv", part)`` (part 0 q, 1 k, 2 v; the original tensor is the fused
        ``attn.qkv_proj.weight`` of shape (3 * inner_dim, hidden_size)) or ``("ff", None)``.
    """
    H, T, TH = cfg.hidden_size, cfg.time_embed_dim, cfg.time_embed_hidden_dim
    out = [
        ("proj_in.weight", "video_patch_proj.weight", (H, cfg.video_patch_dim), None),
        ("proj_in.bias", "video_patch_proj.bias", (H,), None),
        ("audio_proj_in.weight", "audio_patch_proj.weight", (H, cfg.audio_in_channels), None),
        ("audio_proj_in.bias", "audio_patch_proj.bias", (H,), None),
        ("context_embedder.weight", "condition_proj.weight", (H, cfg.text_dim), None),
        ("context_embedder.bias", "condition_proj.bias", (H,), None),
    ]
    if cfg.adaln_curve_grid:
        out.append((ADALN_TABLE, ADALN_TABLE, (cfg.adaln_curve_grid, T), None))
    else:
        out += [
            ("time_embedder.linear_1.weight", "time_embedder.proj_in.weight", (TH, cfg.freq_dim), None),
            ("time_embedder.linear_1.bias", "time_embedder.proj_in.bias", (TH,), None),
            ("time_embedder.linear_2.weight", "time_embedder.proj_out.weight", (T, TH), None),
            ("time_embedder.linear_2.bias", "time_embedder.proj_out.bias", (T,), None),
        ]
    for j in range(cfg.num_refiner_layers):
        out += _block_tensors(cfg, f"token_refiner.refiner_blocks.{j}.", f"token_refiner.blocks.{j}.", False)
    out.append(("token_refiner.final_norm.weight", "token_refiner.final_norm.weight", (H,), None))
    for b in range(cfg.num_layers):
        out += _block_tensors(cfg, f"transformer_blocks.{b}.", f"blocks.{b}.", True)
    vpd, A = cfg.video_patch_dim, cfg.audio_in_channels
    out += [
        ("norm_out.norm.weight", "final_layer.norm.weight", (H,), None),
        ("norm_out.linear.weight", "final_layer.adaln_proj.linear.weight", (2 * H, T), None),
        ("norm_out.linear.bias", "final_layer.adaln_proj.linear.bias", (2 * H,), None),
        ("proj_out.weight", "final_layer.video_out.weight", (vpd, H), None),
        ("proj_out.bias", "final_layer.video_out.bias", (vpd,), None),
        ("audio_proj_out.weight", "final_layer.audio_out.weight", (A, H), None),
        ("audio_proj_out.bias", "final_layer.audio_out.bias", (A,), None),
    ]
    return out


def fp32_in_release(diffusers_name):
    """True when the released checkpoint stores this tensor in float32 (diffusers'
    ``_keep_in_fp32_modules``, matched per dotted name component)."""
    return any(m in diffusers_name.split(".") for m in KEEP_IN_FP32_MODULES)


@dataclass
class TensorEntry:
    """One logical tensor, under its diffusers name.

    Attributes
    ----------
    name : str          diffusers name (or ``<prefix>.ff.value.weight`` / ``.ff.gate.weight``)
    shape : tuple       the logical (diffusers) shape
    dtype : str         stored dtype, "F32", "BF16", "F16" or (a single file's quantised linear)
                        "I8": then the tensor is a weights.comfy_quant.Int8Weight
    file : str          the safetensors file holding it
    source : str        the stored tensor's name in that file
    kind : str          "direct"; "rows" (row slice [start, stop) of source); "qkv_interleaved"
                        (part ``part`` of per-head interleaved fused QKV); "ff_swap" (source halves
                        swapped: [value; gate] assembled from an original [gate; value])
    start, stop, part : int or None
    zero_copy : bool    whether ``ckpt[name]`` is a view (False: an assembled copy)
    note : str          how to consume it
    """
    name: str
    shape: tuple
    dtype: str
    file: str
    source: str
    kind: str = "direct"
    start: int = None
    stop: int = None
    part: int = None
    zero_copy: bool = True
    note: str = ""


# ---------------------------------------------------------------------------------------------
# the folder
# ---------------------------------------------------------------------------------------------
def weight_files(folder):
    """``(index or None, [shard paths])`` of a transformer (or video VAE) folder: one of the
    diffusers or original file names (weights.files.find_weights)."""
    return find_weights(folder, (DIFFUSERS_INDEX, ORIGINAL_INDEX, DIFFUSERS_SINGLE, ORIGINAL_SINGLE))


class TransformerCheckpoint:
    """A validated, memory-mapped MiniMax-H3 transformer checkpoint.  Create with :func:`open_transformer`.

    Attributes
    ----------
    path : str                  the folder
    config : TransformerConfig
    layout : str                "diffusers" or "original"
    qkv_layout : str or None    "interleaved" / "stacked" for the original layout, None for diffusers
    dtype_policy : str          "released", "fp32" or "bf16"
    files : list of str         the safetensors files, in index order
    rope_inv_freq : ndarray or None
        The original layout's stored ``rope.inv_freq`` (float32, shape (rope_freq_dim,), validated,
        an owned read-only copy): the RoPE frequencies to compute with, whatever ``config.rope_theta``
        says.  None for the diffusers layout and for an original folder without it: the frequencies
        are then ``1 / rope_theta ** (arange(0, 2F, 2) / 2F)`` as diffusers computes them.
    """

    def __init__(self, path, config, layout, qkv_layout, files, entries, dtype_policy, rope_inv_freq=None):
        self.path, self.config, self.layout, self.qkv_layout = path, config, layout, qkv_layout
        self._files = files              # weights.files.TensorFiles
        self._entries = entries          # logical name -> TensorEntry
        self._keys = [n for n, e in entries.items() if ".ff.value." not in n and ".ff.gate." not in n]
        self.dtype_policy = dtype_policy
        self.rope_inv_freq = rope_inv_freq

    # -- names -----------------------------------------------------------------------------------
    @property
    def files(self):
        return list(self._files.paths)

    def keys(self):
        """Diffusers state-dict keys, in diffusers' order (what ``model.state_dict()`` lists)."""
        return list(self._keys)

    def logical_keys(self):
        """keys() plus the SwiGLU halves ``<prefix>.ff.value.weight`` / ``<prefix>.ff.gate.weight``."""
        return list(self._entries)

    def __contains__(self, name):
        return name in self._entries

    def __len__(self):
        return len(self._keys)

    def __iter__(self):
        return iter(self._keys)

    def entry(self, name):
        """The :class:`TensorEntry` describing logical tensor ``name``."""
        try:
            return self._entries[name]
        except KeyError:
            raise checkpoint_error(self.path, name, "no such tensor (diffusers names; see keys())") from None

    def dtype(self, name):
        """Stored dtype name of ``name``: "F32" or "BF16"."""
        return self.entry(name).dtype

    def shape(self, name):
        return self.entry(name).shape

    @property
    def nbytes(self):
        """Bytes of all stored parameter tensors (the checkpoint's data size, less the 64-byte
        ``rope.inv_freq`` buffer)."""
        return sum(self._files.info(t).nbytes for t in self._files.names() if t not in BUFFER_TENSORS)

    # -- arrays ----------------------------------------------------------------------------------
    def _raw(self, e):
        if e.dtype == "I8":     # a quantised linear of a single file (weights.comfy_quant)
            return read_int8(self._files, e.source[: -len(".weight")])
        return self._files.get(e.source, dtypes=None)

    def __getitem__(self, name):
        return self.tensor(name)

    def tensor(self, name):
        """Logical tensor ``name`` exactly as the diffusers parameter.

        Returns
        -------
        ndarray of ``entry.shape``, float32 or uint16 (bf16 bits), read-only.  A view into the mapped
        file when ``entry(name).zero_copy``; otherwise an assembled copy (interleaved to_q/to_k/to_v,
        original ff.net.0.proj.weight) — use :meth:`attention_qkv` / :meth:`swiglu` to avoid it.
        """
        e = self.entry(name)
        raw = self._raw(e)
        if e.kind == "direct":
            return raw
        if e.kind == "rows":
            return raw[e.start:e.stop]
        if isinstance(raw, Int8Weight):
            if e.kind != "ff_swap":
                raise checkpoint_error(self.path, e.source, f"{raw.spec.label} rows are stored stacked "
                                       f"[q; k; v] only (qkv_layout={self.qkv_layout!r})")
            half = e.shape[0] // 2
            return Int8Weight.concat([raw[half:], raw[:half]])
        if e.kind == "qkv_interleaved":
            out = self._interleaved_part(raw, e.part).reshape(e.shape)   # copies (strided rows)
        else:  # ff_swap: original [gate; value] -> diffusers [value; gate]
            half = e.shape[0] // 2
            out = np.concatenate([raw[half:], raw[:half]])
        log.debug("%s: assembled a %s copy of %r (%s)", self.path, "x".join(map(str, e.shape)), name, e.kind)
        out.flags.writeable = False
        return out

    def _interleaved_part(self, raw, part):
        c = self.config
        return raw.reshape(c.num_attention_heads, 3, c.attention_head_dim, c.hidden_size)[:, part]

    def attention_qkv(self, prefix):
        """Q, K, V projection weights of one block, without copying.

        Parameters
        ----------
        prefix : str   e.g. "transformer_blocks.3" or "token_refiner.refiner_blocks.0"

        Returns
        -------
        (q, k, v) : ndarrays of shape (num_attention_heads, attention_head_dim, hidden_size)
            Read-only views, float32 or uint16 (bf16 bits).  Row ``h, d`` is output feature
            ``h * attention_head_dim + d`` of diffusers' to_q/to_k/to_v.  C-contiguous for diffusers
            and stacked checkpoints; strided (head stride 3 * head_dim rows) for interleaved ones.
        """
        c = self.config
        shape3 = (c.num_attention_heads, c.attention_head_dim, c.hidden_size)
        out = []
        for p in "qkv":
            e = self.entry(f"{prefix}.attn.to_{p}.weight")
            raw = self._raw(e)
            if e.kind == "qkv_interleaved":
                out.append(self._interleaved_part(raw, e.part))
            elif e.kind == "rows":
                out.append(raw[e.start:e.stop].reshape(shape3))
            else:
                out.append(raw.reshape(shape3))
        return tuple(out)

    def swiglu(self, prefix):
        """The two halves of a block's SwiGLU input projection, without copying.

        Returns
        -------
        (value, gate) : ndarrays of shape (ffn_dim, hidden_size), C-contiguous read-only row views.
            The block computes ``ff.net.2(value @ x * silu(gate @ x))``.
        """
        return (self.tensor(f"{prefix}.ff.value.weight"), self.tensor(f"{prefix}.ff.gate.weight"))

    def fused_qkv(self, prefix):
        """A block's Q, K, V projection rows as one (3 * inner_dim, hidden_size) array and its row order.

        Returns
        -------
        (rows, layout) : rows an ndarray of shape (3 * num_attention_heads * attention_head_dim,
            hidden_size), float32 or uint16 (bf16 bits); layout "interleaved" (per head ``[q k v]``,
            spec §4.2 formula) or "stacked" (``[q; k; v]``).  The original layout's ``attn.qkv_proj``
            as stored (a zero-copy view, layout = :attr:`qkv_layout`); for the diffusers layout a
            stacked copy of to_q/to_k/to_v (three separate tensors on disk).
        """
        e = self.entry(f"{prefix}.attn.to_q.weight")
        if self.layout == "original":
            return self._raw(e), self.qkv_layout
        q, k, v = (self.tensor(f"{prefix}.attn.to_{p}.weight") for p in "qkv")
        out = np.concatenate([q, k, v])
        out.flags.writeable = False
        return out, "stacked"

    def swiglu_gate_value(self, prefix):
        """A block's SwiGLU input projection as one (2 * ffn_dim, hidden_size) array ordered
        ``[gate; value]`` (the original ``mlp.fc1`` order).  Zero-copy for the original layout;
        an assembled copy for the diffusers layout (stored ``[value; gate]``) — there, prefer
        :meth:`swiglu`."""
        e = self.entry(f"{prefix}.ff.net.0.proj.weight")
        if self.layout == "original":
            return self._raw(e)
        value, gate = self.swiglu(prefix)
        out = np.concatenate([gate, value])
        out.flags.writeable = False
        return out

    def qkv_parts(self, prefix):
        """A block's Q, K, V rows as the tensors that hold them, without copying.

        Returns
        -------
        (parts, layout) : the original layout's fused ``attn.qkv_proj`` as ``[rows]`` with
            :attr:`qkv_layout`; the diffusers layout's ``[to_q, to_k, to_v]`` with "stacked".
            Concatenated, the parts are :meth:`fused_qkv`'s rows.
        """
        e = self.entry(f"{prefix}.attn.to_q.weight")
        if self.layout == "original":
            return [self._raw(e)], self.qkv_layout
        return [self.tensor(f"{prefix}.attn.to_{p}.weight") for p in "qkv"], "stacked"

    def swiglu_parts(self, prefix):
        """A block's SwiGLU input rows ordered ``[gate; value]`` as the tensors (or
        halves) that hold them, without copying: ``[fc1]`` for the original layout, ``[gate
        half, value half]`` of the diffusers ``[value; gate]`` tensor.  Concatenated, the
        parts are :meth:`swiglu_gate_value`'s rows."""
        e = self.entry(f"{prefix}.ff.net.0.proj.weight")
        if self.layout == "original":
            return [self._raw(e)]
        value, gate = self.swiglu(prefix)
        return [gate, value]

    def state_dict(self):
        """``{diffusers name: ndarray}`` for every key (copies where :meth:`tensor` copies)."""
        return {k: self.tensor(k) for k in self._keys}

    # -- lifetime --------------------------------------------------------------------------------
    def close(self):
        """Release the mappings (arrays already returned stay valid: they keep their mapping alive)."""
        self._files.close()

    def __enter__(self):
        return self

    def __exit__(self, *exc):
        self.close()

    def __repr__(self):
        c = self.config
        return (f"TransformerCheckpoint({self.path!r}, layout={self.layout}, qkv_layout={self.qkv_layout}, "
                f"dtypes={self.dtype_policy}, layers={c.num_layers}+{c.num_refiner_layers}, "
                f"hidden={c.hidden_size}, {len(self._files)} file(s))")


def open_transformer(path, qkv_layout=None):
    """Open and validate a MiniMax-H3 transformer folder (diffusers or original release layout).

    Parameters
    ----------
    path : str or os.PathLike
        The folder holding ``config.json`` and the weights (``transformer/``, ``FL2VA/transformer/``).
    qkv_layout : {None, "interleaved", "stacked"}
        Row order of the original layout's fused ``attn.qkv_proj.weight``.  None: "interleaved" for a
        sharded folder with an index (the MiniMaxAI release), "stacked" for a single
        ``model.safetensors``.  Ignored for the diffusers layout (separate to_q/to_k/to_v).

    Returns
    -------
    TransformerCheckpoint  (a context manager; ``close()`` releases the mappings)

    Raises
    ------
    CheckpointError
        Missing/ambiguous files, bad config, missing/unexpected tensor, wrong shape or dtype, a
        truncated or malformed safetensors file; the message names the file and the tensor.
    """
    if qkv_layout not in (None, "interleaved", "stacked"):
        raise H3ValueError(f'qkv_layout must be None, "interleaved" or "stacked", got {qkv_layout!r}')
    folder = os.fspath(path)
    if os.path.isfile(folder):
        return _open_single_file(folder, qkv_layout)
    if not os.path.isdir(folder):
        raise checkpoint_error(folder, None, "not a folder or a file (expected a transformer folder with "
                               "config.json or a single .safetensors file)")
    cfg_path = os.path.join(folder, "config.json")
    raw_cfg = load_json(cfg_path, "config")
    cfg = TransformerConfig.from_dict(raw_cfg, cfg_path)
    theta_given = "rope_theta" in raw_cfg
    index, shard_paths = weight_files(folder)
    files = TensorFiles(shard_paths, index)      # every stored tensor once, cross-checked with the index
    try:
        return _build(folder, cfg, cfg_path, index, files, qkv_layout, theta_given)
    except BaseException:
        files.close()
        raise




def _build(folder, cfg, cfg_path, index, files, qkv_layout, theta_given=False, single=False):
    where = files.where                  # stored name -> file path
    table = expected_tensors(cfg)
    dnames = {d for d, _, _, _ in table}
    onames = {o for _, o, _, _ in table}
    # a single file's quantised linears: <layer>.weight (I8) beside <layer>.weight_scale and
    # <layer>.comfy_quant (weights.comfy_quant reads and checks them when the layer is built)
    quantised = {n[: -len(QUANT_BLOB)] + ".weight" for n in where if single and n.endswith(QUANT_BLOB)}
    companions = {q[: -len(".weight")] + sfx for q in quantised for sfx in (QUANT_BLOB, QUANT_SCALE)}
    stored = [n for n in where if n not in BUFFER_TENSORS and n not in companions]
    nd = sum(n in dnames for n in stored)
    no = sum(n in onames for n in stored)
    if nd == 0 and no == 0:
        some = stored[0] if stored else None
        raise checkpoint_error(where[some] if some else folder, some,
                   "no MiniMax-H3 transformer tensor names found (neither diffusers nor original layout)")
    layout = "diffusers" if nd >= no else "original"
    names = dnames if layout == "diffusers" else onames
    hint = (f"({'inferred from the tensor shapes' if single else 'config.json'}: num_layers={cfg.num_layers}, "
            f"num_refiner_layers={cfg.num_refiner_layers}, {layout} layout)")
    extra = sorted(n for n in stored if n not in names)
    if extra:
        more = f" (and {len(extra) - 1} more)" if len(extra) > 1 else ""
        raise checkpoint_error(where[extra[0]], extra[0], f"unexpected tensor{more} {hint}")
    wfile = index[0] if index is not None else files.paths[0]
    seen = set()
    missing = []
    for d, o, _, _ in table:
        n = d if layout == "diffusers" else o
        if n not in where and n not in seen:
            missing.append(n)
        seen.add(n)
    if missing:
        more = f" (and {len(missing) - 1} more)" if len(missing) > 1 else ""
        raise checkpoint_error(wfile, missing[0], f"missing tensor{more} {hint}")

    if layout == "original":
        if qkv_layout is None:
            qkv_layout = "interleaved" if index is not None else "stacked"
            if index is not None or single:
                # the kind decides: sharded with an index = MiniMaxAI's release (interleaved),
                # one file = Comfy-Org's repacks (stacked); nothing to say at info level
                log.debug("%s: fused attn.qkv_proj rows %s (%s)", folder, qkv_layout,
                          "sharded release folder" if index is not None else "single file")
            else:
                # one unindexed file in a folder: a repack of either kind, truly ambiguous
                report_once(folder, "fused attn.qkv_proj rows assumed stacked [q; k; v] (one unindexed "
                                    "file, as Comfy-Org's repacks); if the output is noise, the file "
                                    "interleaves them per head: DiT.from_pretrained(qkv_layout="
                                    "'interleaved')")
        else:
            log.info("%s: fused attn.qkv_proj rows %s (qkv_layout argument)", folder, qkv_layout)
    else:
        if qkv_layout is not None:
            log.debug("%s: qkv_layout=%r ignored for the diffusers layout", folder, qkv_layout)
        qkv_layout = None

    # shapes: stored tensors against what the config implies
    for d, o, shape, role in table:
        n = d if layout == "diffusers" else o
        want = shape
        if layout == "original" and role is not None and role[0] == "qkv":
            want = (3 * shape[0], shape[1])
        info = files.info(n)
        if info.shape != want:
            raise checkpoint_error(where[n], n, f"shape {list(info.shape)} but config implies {list(want)} {hint}")

    dtype_policy = _dtype_policy(table, layout, files, single, quantised)

    rope = None
    if ROPE_INV_FREQ in where:
        if layout == "original":
            rope = _stored_rope_inv_freq(files, where[ROPE_INV_FREQ], cfg, cfg_path,
                                         theta_given)
        else:
            log.debug("%s: %r stored in a diffusers-layout folder is ignored (diffusers computes it from "
                      "rope_theta=%r)", where[ROPE_INV_FREQ], ROPE_INV_FREQ, cfg.rope_theta)
    elif layout == "original":
        log.debug("%s: no %r stored; RoPE frequencies from rope_theta=%r", folder, ROPE_INV_FREQ, cfg.rope_theta)

    # logical entries
    entries = {}
    I, F = cfg.inner_dim, cfg.ffn_dim
    for d, o, shape, role in table:
        n = d if layout == "diffusers" else o
        info = files.info(n)
        e = TensorEntry(d, shape, info.dtype, where[n], n)
        if layout == "original" and role is not None and role[0] == "qkv":
            p = role[1]
            if qkv_layout == "stacked":
                e.kind, e.start, e.stop = "rows", p * I, (p + 1) * I
                e.note = f"rows [{p * I}, {(p + 1) * I}) of stacked {n}"
            else:
                e.kind, e.part, e.zero_copy = "qkv_interleaved", p, False
                e.note = (f"part {p} of per-head interleaved {n}; use attention_qkv() for a strided "
                          f"zero-copy view (heads, head_dim, hidden)")
        elif layout == "original" and role is not None and role[0] == "ff":
            e.kind, e.zero_copy = "ff_swap", False
            e.note = f"{n} is [gate; value]; assembled [value; gate] copy; use swiglu() / .ff.value/.ff.gate views"
        entries[d] = e
        if role is not None and role[0] == "ff":
            prefix = d[: -len("ff.net.0.proj.weight")]
            vstart = 0 if layout == "diffusers" else F
            gstart = F - vstart
            for half, start in (("value", vstart), ("gate", gstart)):
                entries[f"{prefix}ff.{half}.weight"] = TensorEntry(
                    f"{prefix}ff.{half}.weight", (F, cfg.hidden_size), info.dtype, where[n], n, "rows",
                    start, start + F, note=f"SwiGLU {half}: rows [{start}, {start + F}) of {n}")
    log.debug("%s: %s layout, %d tensors in %d file(s), dtypes %s", folder, layout, len(table),
              len(files.paths), dtype_policy)
    return TransformerCheckpoint(folder, cfg, layout, qkv_layout, files, entries, dtype_policy, rope)


def _open_single_file(path, qkv_layout):
    """A transformer in one file (Comfy-Org's repacks, a diffusers state dict saved alone):
    no config.json, so the configuration comes from the tensors' shapes."""
    from .single_file import detect_component
    kind = detect_component(path, "transformer")
    files = TensorFiles([path], prefix=kind.prefix)
    try:
        cfg = TransformerConfig.from_dict(infer_config(files, kind.naming, path), path)
        report_once(path, "; ".join(kind.assumed))
        return _build(path, cfg, path, None, files, qkv_layout, single=True)
    except BaseException:
        files.close()
        raise


def infer_config(files, naming, path="<file>"):
    """A transformer config (diffusers spelling) from the shapes of its tensors, for files
    that carry none.  What shapes cannot tell (norm eps, patch size, RoPE theta, the timestep
    sinusoid width of a curve-form file) comes from the released configuration shipped in
    the package.  CheckpointError names a tensor that is missing or whose shape does not
    divide as the architecture needs."""
    from .released import released_config
    rel = released_config("transformer")

    def shape(dname, oname, ndim=2):
        return files.shape(dname if naming == "diffusers" else oname, ndim)

    def count(dprefix, oprefix):
        p = dprefix if naming == "diffusers" else oprefix
        k = 0
        while files.has(f"{p}{k}.norm1.weight"):
            k += 1
        return k

    def div(a, b, what, name):
        if b <= 0 or a % b:
            raise checkpoint_error(path, name, f"{what}: {a} is not a multiple of {b}")
        return a // b

    H, vpd = shape("proj_in.weight", "video_patch_proj.weight")
    patch = tuple(rel["patch_size"])
    cfg = dict(rel, hidden_size=H, patch_size=list(patch),
               in_channels=div(vpd, math.prod(patch), "video patch width / patch size", "proj_in.weight"))
    cfg["audio_in_channels"] = shape("audio_proj_in.weight", "audio_patch_proj.weight")[1]
    cfg["text_dim"] = shape("context_embedder.weight", "condition_proj.weight")[1]
    D = shape("transformer_blocks.0.attn.norm_q.weight", "blocks.0.attn.q_norm.weight", 1)[0]
    if naming == "diffusers":
        inner = shape("transformer_blocks.0.attn.to_q.weight", None)[0]
    else:
        inner = div(shape(None, "blocks.0.attn.qkv_proj.weight")[0], 3, "fused qkv rows / 3",
                    "blocks.0.attn.qkv_proj.weight")
    cfg["attention_head_dim"] = D
    cfg["num_attention_heads"] = div(inner, D, "attention width / head_dim", "blocks.0.attn.q_norm.weight")
    cfg["num_layers"] = count("transformer_blocks.", "blocks.")
    cfg["num_refiner_layers"] = count("token_refiner.refiner_blocks.", "token_refiner.blocks.")
    cfg["ffn_dim"] = div(shape("transformer_blocks.0.ff.net.0.proj.weight", "blocks.0.mlp.fc1.weight")[0], 2,
                         "SwiGLU rows / 2", "blocks.0.mlp.fc1.weight")
    if files.has(ADALN_TABLE):
        cfg["adaln_curve_grid"], cfg["time_embed_dim"] = shape(ADALN_TABLE, ADALN_TABLE)
    else:
        cfg["time_embed_hidden_dim"], cfg["freq_dim"] = shape("time_embedder.linear_1.weight",
                                                             "time_embedder.proj_in.weight")
        cfg["time_embed_dim"] = shape("time_embedder.linear_2.weight", "time_embedder.proj_out.weight")[0]
    if files.has(ROPE_INV_FREQ):
        cfg["rope_freq_dim"] = shape(ROPE_INV_FREQ, ROPE_INV_FREQ, 1)[0]
    return cfg


def _dtype_policy(table, layout, files, single, quantised=()):
    """A folder's dtypes follow one of three policies (the released F32/BF16 mix, all F32,
    all BF16); a single file (a re-publication: Comfy-Org's keep F16 AdaLN projections and an
    F32 curve table beside BF16 blocks) may hold any float dtype per tensor ("file")."""
    names = [d if layout == "diffusers" else o for d, o, _, _ in table]
    if single:
        for n in names:
            got = files.info(n).dtype
            if got not in SINGLE_FILE_DTYPES + GGUF_TYPES and not (got == "I8" and n in quantised):
                raise checkpoint_error(files.path_of(n), n, f"dtype {got}: expected one of "
                                       f"{', '.join(SINGLE_FILE_DTYPES)}")
        return "file"
    policies = {"released": lambda d: "F32" if fp32_in_release(d) else "BF16",
                "fp32": lambda d: "F32", "bf16": lambda d: "BF16"}
    bad = {pol: [(n, fn(d)) for (d, _, _, _), n in zip(table, names) if files.info(n).dtype != fn(d)]
           for pol, fn in policies.items()}
    ok = [p for p in policies if not bad[p]]
    if not ok:
        pol = min(policies, key=lambda p: len(bad[p]))
        n, want = bad[pol][0]
        raise checkpoint_error(files.path_of(n), n, f"dtype {files.info(n).dtype} but a {pol} checkpoint "
                               f"stores it as {want} (accepted: released mix of F32/BF16, all F32, all BF16)")
    return ok[0]


def _theta_inv_freq(rope_freq_dim, theta):
    """``1 / theta ** (arange(0, 2F, 2) / 2F)`` in float32 (diffusers' ``MiniMaxH3RotaryPosEmbed``)."""
    ar = np.arange(0, 2 * rope_freq_dim, 2, dtype=np.float32) / np.float32(2 * rope_freq_dim)
    return (np.float32(1.0) / (np.float32(theta) ** ar)).astype(np.float32)


def _stored_rope_inv_freq(f, path, cfg, cfg_path, theta_given):
    """The original layout's ``rope.inv_freq``, validated: an owned read-only float32 copy.

    The release stores the frequencies its model computes with (a float32 buffer of
    ``rope_inv_freq_len`` entries) and no ``rope_theta``; that tensor, not a θ, defines the model, so
    it is used as stored.  Should the config also give ``rope_theta`` and the two disagree, the stored
    tensor still wins (the weights were trained with it) and a warning says so.
    """
    name = ROPE_INV_FREQ
    info = f.info(name)
    F = cfg.rope_freq_dim
    if info.dtype != "F32":
        raise checkpoint_error(path, name, f"dtype {info.dtype} but the release stores the RoPE frequencies as F32")
    if info.shape != (F,):
        raise checkpoint_error(path, name, f"shape {list(info.shape)} but config rope_inv_freq_len={F} ({cfg_path}) "
                               f"implies [{F}]")
    inv = np.array(f.get(name, dtypes=None), dtype=np.float32, copy=True)
    bad = np.flatnonzero(~np.isfinite(inv) | (inv <= 0))
    if bad.size:
        raise checkpoint_error(path, name, f"RoPE frequencies must be finite and positive; element {int(bad[0])} is "
                               f"{float(inv[bad[0]])!r}")
    inv.flags.writeable = False
    default = _theta_inv_freq(F, cfg.rope_theta)
    same = np.allclose(inv, default, rtol=1e-6, atol=0)
    if theta_given and not same:
        log.warning("%s: stored %r differs from config rope_theta=%r (%s); using the stored frequencies",
                    path, name, cfg.rope_theta, cfg_path)
    elif not same:
        log.info("%s: stored %r differs from the theta=%r default; using the stored frequencies",
                 path, name, cfg.rope_theta)
    return inv
