"""h3cy.models.dit — the MiniMax-H3 diffusion transformer (``MiniMaxH3Transformer3DModel``).

``DiT.forward`` takes diffusers' arguments with diffusers' meaning (batch 1) and returns
``(video_velocity, audio_velocity)`` as float32 arrays.  Weights modes:

- ``fp32``: every weight widened to float32, activations float32 (the reference for the
  quantised modes);
- ``bf16``: bf16 weights as released, and the activations rounded to bf16 wherever
  diffusers (loaded as released) rounds them (spec §4.6), so it matches that run;
- ``fp16`` / ``int8`` / ``int4``: the bf16 weights stored in that format, activations
  float32.  int8/int4 quantise activations per row, with finer scales (one per
  ``ffn_act_group`` channels) on the FFN down-projection input, which carries outliers.

The float32 tensors of the release (patch projections, timestep MLP, output heads) stay
float32 in every mode.
"""
import logging
import os
import threading
from dataclasses import dataclass

import numpy as np

from .. import _config
from .. import _kernels
from .. import ops
from ..weights import pages as _pages
from ..weights.comfy_quant import Int8Weight
from ..weights.gguf import GGUFWeight
from ..weights.linears import make_linear
from ..ops.bf16 import bf16_bits_to_f32, round_bf16
from ..errors import H3Error, H3ValueError

log = logging.getLogger("h3cy")

MODALITY_NUM = 3  # token tags: 0 video, 1 text, 2 audio

# float32 constants of torch 2.13 CPU (spec Appendix B), used when the config matches.
_ROPE_INV_FREQ_16 = np.array([int(h, 16) for h in (
    "3f800000 3f0ff59a 3ea1e89b 3e361887 3dcccccd 3d6655c2 3d0186e3 3c91ad39 "
    "3c23d70a 3bb8449c 3b4f3e38 3ae91528 3a83126f 3a136a16 39a5cb60 393a7753").split()],
    dtype=np.uint32).view(np.float32)


def rope_inv_freq(rope_freq_dim, theta):
    """``1 / theta ** (arange(0, 2F, 2) / 2F)`` in float32, as diffusers computes it."""
    if rope_freq_dim == 16 and theta == 10000.0:
        return _ROPE_INV_FREQ_16.copy()
    ar = np.arange(0, 2 * rope_freq_dim, 2, dtype=np.float32) / np.float32(2 * rope_freq_dim)
    return (np.float32(1.0) / (np.float32(theta) ** ar)).astype(np.float32)


def _source_inv_freq(source, cfg):
    """The RoPE frequencies of a weight source: its stored ``rope_inv_freq`` (the original release's
    ``rope.inv_freq``, what the released model computes with) when it has one, else computed from
    ``rope_theta`` as diffusers does.  Every RoPE table (forward, the Cython loop, streaming,
    with_weights siblings) is built from this one array."""
    F = cfg["rope_freq_dim"]
    stored = getattr(source, "rope_inv_freq", None)
    if stored is None:
        return rope_inv_freq(F, float(cfg["rope_theta"]))
    inv = np.array(stored, dtype=np.float32, copy=True)
    if inv.shape != (F,):
        raise H3ValueError(f"rope_inv_freq must have shape ({F},) (rope_freq_dim), got {inv.shape}")
    if not np.all(np.isfinite(inv)) or np.any(inv <= 0):
        raise H3ValueError(f"rope_inv_freq must be finite and positive, got {inv.tolist()}")
    inv.flags.writeable = False
    return inv


def timestep_embedding(timestep, dim):
    """diffusers ``Timesteps(dim, flip_sin_to_cos=True, downscale_freq_shift=0)``: float32
    ``[cos(t f_k), sin(t f_k)]`` with ``f_k = exp(-ln(1e4) k / (dim/2))``.  (U,) -> (U, dim)."""
    half = dim // 2
    exponent = np.float32(-np.log(10000.0)) * np.arange(half, dtype=np.float32)
    exponent = (exponent / np.float32(half)).astype(np.float32)
    freqs = np.exp(exponent).astype(np.float32)
    emb = np.asarray(timestep, np.float32)[:, None] * freqs[None, :]
    return np.concatenate([np.cos(emb), np.sin(emb)], axis=1).astype(np.float32)


def adaln_curve_input(table, t):
    """The curve form's AdaLN input at timestep ``t`` (t = 1 - sigma in [0, 1]): the table
    [G, r] read at ``pos = clamp(t, 0, 1) * (G - 1)``, linearly between rows
    ``i0 = min(floor(pos), G - 2)`` and ``i0 + 1`` (so t = 1 lands on the last row with
    weight 1); float32, the two-sided lerp torch uses (exact at both ends).  No SiLU: the
    table samples the time embedder's SiLU output already."""
    G = table.shape[0]
    if G < 2:
        raise H3ValueError(f"adaln_t_table needs at least 2 rows, got {G}")
    pos = np.float32(min(max(float(np.float32(t)), 0.0), 1.0)) * np.float32(G - 1)
    i0 = min(int(np.floor(pos)), G - 2)
    w = np.float32(pos - np.float32(i0))
    a, b = table[i0].astype(np.float32), table[i0 + 1].astype(np.float32)
    if w < np.float32(0.5):
        out = a + w * (b - a)
    else:
        out = b - (b - a) * (np.float32(1.0) - w)
    return np.ascontiguousarray(out, np.float32)


def _f32(a):
    """A weight as float32 (bf16 bits widened exactly; a file's int8 linear dequantised)."""
    if isinstance(a, (Int8Weight, GGUFWeight)):
        return a.dequantized()
    if a.dtype == np.uint16:
        return bf16_bits_to_f32(a)
    return np.ascontiguousarray(a, dtype=np.float32)


def _is_gguf(w):
    return isinstance(w, GGUFWeight) or (isinstance(w, (list, tuple)) and any(isinstance(p, GGUFWeight) for p in w))


class _Block:
    """One transformer (or refiner) block's weights, converted for the chosen mode.
    ``adaln``: also build the AdaLN projection; ``main``: the attention/FFN weights."""

    def __init__(self, dit, src, prefix, adaln, main=True):
        mk = dit._linear
        self.adaln = None
        if adaln:
            self.adaln = dit._adaln_linear(src, prefix + "adaln_proj.linear")
        if not main:
            dit._lora_block(self, prefix)
            return
        self.norm1 = _f32(src.get(prefix + "norm1.weight"))
        self.norm2 = _f32(src.get(prefix + "norm2.weight"))
        qkv, self.qkv_layout = src.qkv(prefix + "attn.")
        self.qkv = mk(qkv, name=prefix + "attn.qkv")
        self.norm_q = _f32(src.get(prefix + "attn.norm_q.weight"))
        self.norm_k = _f32(src.get(prefix + "attn.norm_k.weight"))
        self.out = mk(src.get(prefix + "attn.to_out.0.weight"), name=prefix + "attn.to_out.0")
        self.up = mk(src.ffn_up(prefix + "ff."), pair=True, name=prefix + "ff.gate_value")
        self.down = mk(src.get(prefix + "ff.net.2.weight"), act_group=dit.ffn_act_group,
                       name=prefix + "ff.net.2")
        self.build_core(dit)
        dit._lora_block(self, prefix)

    def build_core(self, dit):
        """The C block driver over the current linears (rebuilt when a merged LoRA swaps
        one of them)."""
        self.core = _kernels.DitBlockCore(
            self.qkv.core, int(self.qkv_layout == "interleaved"), self.out.core, self.up.core,
            self.down.core, self.norm1, self.norm2, self.norm_q, self.norm_k, dit._pool)

    # the block's linears under the names LoRA targets use (h3cy.weights.lora)
    LORA_NAMES = (("attn.qkv", "qkv"), ("attn.to_out.0", "out"), ("ff.gate_value", "up"),
                  ("ff.net.2", "down"), ("adaln_proj.linear", "adaln"))

    def storage(self):
        """The mapped arrays this block's attached linears read (for page advice)."""
        out = []
        for lin in (getattr(self, n, None) for n in ("qkv", "out", "up", "down", "adaln")):
            if lin is not None and lin.core.storage is not None:
                out.extend(lin.core.storage)
        return out


class _CheckpointSource:
    """Adapts a :class:`h3cy.weights.transformer.TransformerCheckpoint` to the weight-source
    interface the model consumes (``config``, ``get``, ``qkv``, ``ffn_up``)."""

    def __init__(self, ckpt):
        self.ckpt = ckpt
        self.config = ckpt.config.to_dict()
        # the release's stored RoPE frequencies (validated), or None: computed from rope_theta
        self.rope_inv_freq = ckpt.rope_inv_freq
        self.as_stored = getattr(ckpt, "as_stored", False)

    def get(self, name):
        return self.ckpt.tensor(name)

    def qkv(self, prefix):
        """The [3*inner, hidden] rows as a list of the mapped tensors holding them (one
        fused tensor, or the diffusers layout's to_q/to_k/to_v), and their layout
        ("stacked" or "interleaved")."""
        return self.ckpt.qkv_parts(prefix[: -len(".attn.")])

    def ffn_up(self, prefix):
        """The [2*ffn, hidden] rows ordered [gate; value], as a list of the mapped tensors
        (or halves) holding them."""
        return self.ckpt.swiglu_parts(prefix[: -len(".ff.")])


@dataclass(frozen=True)
class LoopBinding:
    """A DiT's prepared state for one denoising run (:meth:`DiT.loop_binding`).

    adaln : per timestep, (blocks, final 1+scale, final shift): blocks[b] is the six
        (3, hidden) float32 modulation rows (shift, 1+scale, gate for attention, then MLP)
    blocks : the blocks' C cores (``DitBlockCore``), resident or attached to the maps
    pages : streaming only — (offsets (blocks+1,) int64, starts, lengths (R,) uint64, owners):
        block b's mapped byte ranges, advised in and out by the loop; else None
    proj_in, audio_proj_in, proj_out, audio_proj_out : ``LinearCore``
    norm_out : (hidden,) float32; text_rows : (L, hidden); cos, sin : (S, rot_dim/2)
    the rest : the kernel path, rounding and attention choices, shapes and epsilons, and the
        thread pool the model owns
    """
    adaln: list
    blocks: list
    pages: tuple
    proj_in: object
    audio_proj_in: object
    proj_out: object
    audio_proj_out: object
    norm_out: np.ndarray
    text_rows: np.ndarray
    cos: np.ndarray
    sin: np.ndarray
    isa: str
    round_bf16: bool
    attn_bf16: bool
    heads: int
    head_dim: int
    rot_dim: int
    ffn_dim: int
    norm_eps: float
    qk_norm_eps: float
    final_norm_eps: float
    pool: object


class DiT:
    """The MiniMax-H3 transformer on the CPU.  Build with :meth:`from_pretrained`."""

    # On AMX, a run-time LoRA beside an int8/int4/bf16 base multiplies on bf16 tiles (True)
    # or in float32 on AVX-512 (False): an A/B switch for bench/lora_overhead.py --lora-isa.
    lora_amx_tiles = True
    # On AMX, the up product of a LoRA on an int8/int4 linear runs inside the int kernel's
    # final store (True: one write of the output) or in a second pass over the output
    # (False, as before: the same values): an A/B switch for bench/lora_overhead.py
    # --unfused and bench/lora_amx_check.py.  No effect on other paths.
    lora_fused = True
    # The down product x.A^T of a LoRA on an int8/int4 linear runs on the int kernel
    # from the base's own int8-quantised x (True, on every path) or from float x (False: bf16
    # tiles on AMX, float32 elsewhere): an A/B switch for bench/lora_overhead.py
    # --float-down.  No effect on a float base.
    lora_int_down = True

    @classmethod
    def from_pretrained(cls, path, weights="auto", threads=None, streaming=False, cache_dir=None,
                        qkv_layout=None, isa=None, ffn_act_group=None, attention=None):
        """Load a transformer folder: diffusers layout (``transformer/``) or the original
        release (``FL2VA/transformer``, ``Ref2VA/transformer``), memory-mapped.

        Parameters
        ----------
        path : str or os.PathLike — the folder (any Unicode name)
        weights : {"auto", "bf16", "fp32", "fp16", "int8", "int4"} — "auto" (the default):
            linears stored quantised run as stored (int8); a float checkpoint runs the
            faster of bf16 and int8 by this CPU's stored measurement (``h3cy selfcheck``;
            without one int8, the static rule) that fits memory, int4 when neither fits
            (:mod:`h3cy.weights.auto`); bf16 and fp32 use
            the checkpoint's tensors in place (fp32 widens bf16 ones inside the kernel and
            multiplies float32 activations exactly); the others convert once (cached)
        threads : int, optional — default :func:`h3cy.get_num_threads`
        streaming : bool — keep only a few blocks' weights resident: each block is built
            (mapped from the checkpoint or the weight cache, or converted) when needed, the
            next one on a reader thread while the current one computes, and its pages are
            released after use.  Same results, bit for bit, as resident loading.  In
            h3cy.denoise, mapped sources (fp32/bf16 tensors of either layout, fp16/int8/
            int4 from the weight cache) are attached up front and paged per block in the
            Cython loop.
        qkv_layout : {None, "interleaved", "stacked"} — how an original fused QKV is laid
            out (default: sharded release folder -> interleaved, single file -> stacked)
        isa : str, optional — kernel path (default: ``H3CY_ISA`` or the best available)
        ffn_act_group : int, optional — int8/int4: FFN down-projection input channels per
            activation scale (default 1024 where ffn_dim allows, as h3.c; else whole row)
        cache_dir : str, optional — where the converted-weight cache of fp16/int8/int4
            goes (default: next to the checkpoint, else ~/.cache/h3cy); it is mapped on
            later loads and rebuilt when stale, truncated or edited.  False: no cache file
            (converted in memory at every load; merged LoRAs too)
        attention : {None, "auto", "fp32", "bf16"} — products inside the attention
            (see :func:`h3cy.ops.attention_bf16`): by default bf16 models follow the
            reference's bf16 attention, int8/int4 models multiply bf16 pairs where the CPU
            has bf16 dot products (AMX, AVX512-BF16), fp32/fp16 models float32; "fp32"
            keeps float32 products for int8/int4 too.  ``H3CY_ATTENTION`` sets the default.
        """
        from ..weights.transformer import open_transformer
        from ..weights.cache import ComponentCache
        # a GGUF file with weights="auto" runs every tensor as stored: its quantised blocks on
        # the GGUF GEMM (the int8 mode "auto" resolves to), its float tensors as float32
        # (decided before "auto" resolves to that int8 mode)
        as_stored = weights == "auto" and os.fspath(path).endswith(".gguf")
        if weights == "auto":      # the file, this CPU's measurement and the memory decide
            from ..weights.auto import auto_weights
            weights = auto_weights("transformer", path, isa, streaming=bool(streaming))
        compute = ops.Compute.resolve(weights, isa, threads)     # the one resolution of this load
        ckpt = open_transformer(path, qkv_layout=qkv_layout)
        ckpt.as_stored = as_stored
        try:
            files = [os.path.join(ckpt.path, f) if not os.path.isabs(f) else f for f in ckpt.files]
            params = dict(ffn_act_group=ffn_act_group, qkv=ckpt.qkv_layout)
            # run as stored, nothing is converted (blocks and float tensors are used from the
            # mapped file): no weight-cache file
            with (ComponentCache() if as_stored else
                  ComponentCache.open(ckpt.path, files, compute.weights, params, cache_dir, compute.isa)) as cache:
                if streaming:
                    def build_all(pair):   # every block converted once, one at a time
                        src = _CheckpointSource(ckpt)
                        tmp = cls(src, ffn_act_group=ffn_act_group, cache=pair, streaming=True,
                                  compute=compute)
                        for b in range(tmp.config["num_layers"]):
                            _Block(tmp, src, f"transformer_blocks.{b}.", adaln=True)
                    cache.prebuild(build_all)
                model = cls(_CheckpointSource(ckpt), ffn_act_group=ffn_act_group, cache=cache.pair,
                            streaming=streaming, attention=attention, compute=compute)
                cache.finish()
            model._cache_writer = None
            model._weights_key = cache.key      # base identity of merged-LoRA caches (None: not cached)
            model._merge_cache_dir = cache_dir
            # with_weights() loads siblings in other modes on the same path and pool
            model._load_args = dict(path=path, threads=compute.pool, streaming=streaming,
                                    cache_dir=cache_dir, qkv_layout=qkv_layout, isa=compute.isa,
                                    ffn_act_group=ffn_act_group, attention=attention)
            return model
        except BaseException:
            ckpt.close()
            raise
        finally:
            if not streaming:
                ckpt.close()

    def __init__(self, source, weights="bf16", threads=None, isa=None, ffn_act_group=None,
                 cache=None, streaming=False, attention=None, compute=None):
        # weights mode, kernel path and the model's own pool, resolved once (from_pretrained
        # passes its own); every layer below gets them from here
        compute = compute or ops.Compute.resolve(weights, isa, threads)
        self.compute = compute
        weights = compute.weights
        # bf16 products in the attention (C blocks and the Python reference path alike)
        self.attn_bf16 = ops.attention_bf16(attention, weights)
        cfg = source.config
        self.config = cfg
        self.weights = weights
        self.isa = compute.isa
        self._pool = compute.pool
        self.threads = compute.threads
        self.round_bf16 = weights == "bf16"
        self.heads = cfg["num_attention_heads"]
        self.head_dim = cfg["attention_head_dim"]
        self.hidden = cfg["hidden_size"]
        self.inner = self.heads * self.head_dim
        self.rot_dim = 6 * cfg["rope_freq_dim"]
        if self.rot_dim > self.head_dim:
            raise H3ValueError(f"6 * rope_freq_dim = {self.rot_dim} exceeds attention_head_dim = {self.head_dim}")
        ffn = cfg["ffn_dim"]
        if ffn_act_group is None and weights in ("int8", "int4"):
            # one activation scale per 1024 FFN-down input channels (as h3.c), or per
            # multiple of 8 that divides the row for small models
            ffn_act_group = 1024 if ffn % 1024 == 0 else None
        self.ffn_act_group = ffn_act_group if weights in ("int8", "int4") else None
        # (reader, writer) of a converted-weight cache file (h3cy.weights.cache), or None
        self._cache_reader, self._cache_writer = cache if cache is not None else (None, None)
        self.linears_attached = 0   # linears mapped from a cache or the checkpoint (no copy)
        # a GGUF file loaded with weights="auto": float tensors stay float (fp32 mode)
        self._as_stored = getattr(source, "as_stored", False)
        # what the last h3cy.denoise over this DiT ran: {"loop": "cython" | "python", ...}
        self.loop_stats = None
        self._build_lock = threading.Lock()   # blocks are built on several threads
        self.generate_lock = threading.Lock()  # one denoising loop at a time (h3cy.denoise)
        f32 = self._linear_f32
        self.proj_in = f32(source.get("proj_in.weight"), source.get("proj_in.bias"))
        self.audio_proj_in = f32(source.get("audio_proj_in.weight"), source.get("audio_proj_in.bias"))
        # the AdaLN input: the time embedder's SiLU output, or (the pruned curve form of
        # Comfy-Org's files) a [grid, rank] table over t in [0, 1] with rank-r projections
        self.adaln_curve = None
        self.time_1 = self.time_2 = None
        if cfg.get("adaln_curve_grid"):
            self.adaln_curve = _f32(source.get("adaln_t_table"))
        else:
            self.time_1 = f32(source.get("time_embedder.linear_1.weight"), source.get("time_embedder.linear_1.bias"))
            self.time_2 = f32(source.get("time_embedder.linear_2.weight"), source.get("time_embedder.linear_2.bias"))
        self.proj_out = f32(source.get("proj_out.weight"), source.get("proj_out.bias"))
        self.audio_proj_out = f32(source.get("audio_proj_out.weight"), source.get("audio_proj_out.bias"))
        self.context_embedder = self._linear(source.get("context_embedder.weight"),
                                             bias=_f32(source.get("context_embedder.bias")),
                                             name="context_embedder")
        self.refiner = [_Block(self, source, f"token_refiner.refiner_blocks.{j}.", adaln=False)
                        for j in range(cfg["num_refiner_layers"])]
        self.refiner_norm = _f32(source.get("token_refiner.final_norm.weight"))
        self.streaming = bool(streaming)
        self._source = source
        # how the fused QKV rows are ordered ("interleaved" | "stacked"): LoRAs map onto it
        self.qkv_layout = source.qkv("transformer_blocks.0.attn.")[1]
        if self.streaming:
            # blocks are built when needed (the next one on a reader thread while the
            # current one computes) and dropped after use: a few blocks resident at a time
            self.blocks = [None] * cfg["num_layers"]
            self._stream_ex = None
        else:
            # converting 33B weights is the slow part of a first load: build the blocks on
            # as many threads as the model computes with (creation releases the GIL)
            import concurrent.futures
            n = cfg["num_layers"]
            with concurrent.futures.ThreadPoolExecutor(max(1, min(self.threads, n))) as ex:
                self.blocks = list(ex.map(
                    lambda b: _Block(self, source, f"transformer_blocks.{b}.", adaln=True), range(n)))
        self.norm_out = _f32(source.get("norm_out.norm.weight"))
        self.norm_out_linear = self._adaln_linear(source, "norm_out.linear")
        self.inv_freq = _source_inv_freq(source, cfg)
        self._attn = ops.Attention(scale=1.0 / np.sqrt(self.head_dim), isa=self.isa, threads=self._pool,
                                   bf16=self.attn_bf16)
        self._tables = {}          # timestep value (float32 bits) -> prepared AdaLN tables
        self._ws = None            # block workspace, kept between forwards
        # A/B switch: H3CY_DIT_PYTHON=1 runs each block op by op from Python (the
        # readable reference of the C block driver)
        self._python_blocks = _config.dit_python_blocks()
        self._adaln_released = False

    # ---- weights ---------------------------------------------------------------------
    def _linear(self, w, bias=None, pair=False, act_group=None, name=None, mode=None):
        """A checkpoint weight in this model's mode (h3cy.weights.linears.make_linear):
        mapped from the weight cache, used in place, or converted (and cached)."""
        if mode is None and self._as_stored and not _is_gguf(w):
            mode = "fp32"
        cache = (self._cache_reader, self._cache_writer) if mode is None else None
        lin, attached = make_linear(w, self.compute, name=name, cache=cache, bias=bias, pair=pair,
                                    act_group=act_group, mode=mode,
                                    in_place=not self.config.get("_no_zero_copy"))
        if attached:
            with self._build_lock:
                self.linears_attached += 1
        return lin

    def _adaln_linear(self, source, name):
        """A block's (or the final layer's) AdaLN projection.  The curve form's are rank r
        (8 in the published files): float32 whatever the mode, as ComfyUI runs them (a
        [96768, 8] GEMV per block per timestep, computed once per timestep)."""
        w, b = source.get(name + ".weight"), _f32(source.get(name + ".bias"))
        if self.adaln_curve is not None:
            return self._linear(_f32(w), bias=b, mode="fp32")
        return self._linear(w, bias=b, name=name)

    def _linear_f32(self, w, b):
        return ops.Linear(_f32(w), bias=_f32(b), weights="fp32", isa=self.isa, threads=self._pool)

    # ---- LoRA ----------------------------------------------------------------------------
    # top-level linears under the names LoRA targets use (h3cy.weights.lora)
    _LORA_TOP = {"proj_in": "proj_in", "audio_proj_in": "audio_proj_in",
                 "context_embedder": "context_embedder", "time_embedder.linear_1": "time_1",
                 "time_embedder.linear_2": "time_2", "norm_out.linear": "norm_out_linear",
                 "proj_out": "proj_out", "audio_proj_out": "audio_proj_out"}

    @staticmethod
    def _lora_time_path(target):
        """Whether a linear feeds the AdaLN tables (which are precomputed per timestep)."""
        return target.endswith("adaln_proj.linear") or target == "norm_out.linear" or \
            target.startswith("time_embedder.")

    def load_lora(self, path, strength=1.0, name=None, merge=False):
        """Apply a LoRA file at run time: each adapted linear computes
        ``y = x W^T + strength * scale * (x A^T) B^T`` inside its GEMM (before its bias and
        fused epilogue), in the C block cores, the Cython loop and the Python path alike.
        The base weights are not changed or copied (they stay int8/int4/bf16, mapped and
        shareable); the pairs are kept in float32.

        Parameters
        ----------
        path : str or os.PathLike — a ``.safetensors`` LoRA (or a folder holding one): PEFT /
            diffusers ``lora_A``/``lora_B`` or kohya/ComfyUI ``lora_down``/``lora_up``/``alpha``
            keys on diffusers, original (Comfy) or kohya-underscore names
            (:mod:`h3cy.weights.lora`)
        strength : float — the multiplier (0 leaves the model's results bit for bit)
        name : str, optional — how to refer to it later (default: the file's stem)
        merge : bool — merge into the weights instead: each adapted linear is rebuilt as
            ``W + strength * scale * B A`` in the model's weights mode (int8/int4
            requantised with the base's options), so a step costs what the bare base costs;
            fp16/int8/int4 merges are cached in a weight-cache file keyed by the base, the
            LoRA's content and the strength (:mod:`h3cy.weights.lora_merge`).  The base
            linears are kept for unloading (bit for bit); not on a streaming DiT.

        Returns the name.  A key that matches nothing raises :class:`h3cy.CheckpointError`
        naming it, and nothing is applied.  A LoRA on the AdaLN projections, the final
        layer's modulation or the time embedder recomputes the AdaLN tables; it is refused
        on the curve (pruned) form, whose file lacks the time embedding those act on, and
        after :meth:`release_adaln`.
        """
        from ..weights.lora import read_lora
        if name is None:
            name = os.path.splitext(os.path.basename(os.fspath(path).rstrip("/")))[0]
        loras = self.__dict__.setdefault("_loras", {})
        if name in loras:
            raise H3ValueError(f"a LoRA named {name!r} is loaded already; unload_lora({name!r}) first "
                               "or pass another name=")
        modules = read_lora(path, self.config, self.qkv_layout)
        time_path = sorted({m.target for m in modules if self._lora_time_path(m.target)})
        if time_path and self.adaln_curve is not None:
            raise H3ValueError(
                f"LoRA {name!r} adapts {', '.join(time_path)}, but this transformer is the curve "
                "form (pruned AdaLN: adaln_t_table): its file lacks the time embedding those "
                "weights act on, so the LoRA cannot be applied; use the full (unpruned) base")
        if time_path and self._adaln_released:
            raise H3Error(f"LoRA {name!r} adapts the AdaLN projections, whose weights were "
                          "released (release_adaln); load LoRAs before releasing them")
        if merge and self.streaming:
            raise H3ValueError(f"LoRA {name!r}: merge=True needs a resident transformer (streaming "
                               "builds its blocks on the fly); load it without merge")
        entry = {"modules": modules, "strength": float(strength), "path": os.fspath(path),
                 "merge": bool(merge)}
        if merge:
            from ..weights.lora_merge import lora_hash
            entry["hash"] = lora_hash(modules)
        loras[name] = entry
        try:
            self._lora_changed()
        except BaseException:
            del loras[name]
            self._lora_changed()
            raise
        return name

    def unload_lora(self, name):
        """Remove a LoRA: with none left, every linear is the plain base again, bit for bit."""
        loras = self.__dict__.get("_loras", {})
        if name not in loras:
            raise H3ValueError(f"no LoRA named {name!r} is loaded (loaded: {sorted(loras)})")
        del loras[name]
        self._lora_changed()

    def set_lora_strength(self, name, strength):
        """Change a loaded LoRA's strength (0 switches it off without unloading it)."""
        loras = self.__dict__.get("_loras", {})
        if name not in loras:
            raise H3ValueError(f"no LoRA named {name!r} is loaded (loaded: {sorted(loras)})")
        loras[name]["strength"] = float(strength)
        self._lora_changed()

    @property
    def loras(self):
        """The loaded LoRAs: {name: strength}, in load order."""
        return {k: v["strength"] for k, v in self.__dict__.get("_loras", {}).items()}

    def _lora_changed(self):
        """Rebuild the low-rank addend of every adapted linear (several LoRAs on one linear
        are one addend with their ranks side by side) and attach them; linears no active
        LoRA reaches are detached (plain base).  AdaLN tables are recomputed when the time
        path changed.  Siblings made by with_weights follow."""
        old = self.__dict__.get("_lora_cores", {})
        pieces, merged = {}, {}
        for entry in self.__dict__.get("_loras", {}).values():
            if entry["strength"] == 0.0:
                continue
            dest = merged if entry.get("merge") else pieces
            for m in entry["modules"]:
                dest.setdefault(m.target, []).append((m, entry["strength"] * m.scale, entry.get("hash")))
        swapped = self._apply_merges(merged)
        cores = {}
        for target, ps in pieces.items():
            lin = self._lora_linear(target)
            a = np.ascontiguousarray(np.concatenate([m.a for m, _, _ in ps]), np.float32)
            b = np.ascontiguousarray(np.concatenate([m.b for m, _, _ in ps], axis=1), np.float32)
            sc = np.concatenate([np.full(m.a.shape[0], s, np.float32) for m, s, _ in ps])
            cores[target] = {"parts": (a, b, sc)}   # addends made per path on attach (_lora_core)
        self._lora_cores = cores
        for target in set(old) | set(cores) | swapped:
            lin = self._lora_linear(target)
            if lin is not None:
                lin.core.set_lora(self._lora_core(target, lin))
        for blk in (self.__dict__.get("_attached") or [[]])[0]:
            self._lora_block(blk, blk.prefix)
        if any(self._lora_time_path(t) for t in set(old) | set(cores) | swapped):
            self._tables = {}
        for other in self.__dict__.get("_siblings", {}).values():
            if other is not self:
                other._loras = {k: dict(v) for k, v in self._loras.items()}
                other._lora_changed_local()

    def _apply_merges(self, merged):
        """Swap each linear a merged LoRA adapts for its merged copy (h3cy.weights.lora_merge),
        and back to the kept base where none is left; rebuild the C block drivers that hold
        a swapped linear.  Returns the targets swapped either way."""
        from ..weights import lora_merge
        from .. import _config
        base = self.__dict__.setdefault("_merge_base", {})     # target -> the base's LinearCore
        state = self.__dict__.setdefault("_merge_state", {})   # target -> pieces applied
        want = {t: [(h, float(s)) for _, s, h in ps] for t, ps in merged.items()}
        if want == state:
            return set()
        swapped = set(base) | set(want)
        for t in list(base):                                   # back to the base first
            lin = self._lora_linear(t)
            lin._c = base.pop(t)
        state.clear()
        if want:
            targets = {}
            for t in want:
                lin = self._lora_linear(t)
                if lin is None:
                    raise H3ValueError(f"merge=True: {t} is not built (streaming)")
                lin.core.set_lora(None)
                targets[t] = (lin, lin.core)
            key = None
            if any(lin.weights in lora_merge.CACHED_MODES for lin, _ in targets.values()):
                bkey = self.__dict__.get("_weights_key") or lora_merge.base_bytes_key(
                    {t: c for t, (_, c) in targets.items()})
                key = lora_merge.merge_key(bkey, want, self.isa)
            cache_dir = self.__dict__.get("_merge_cache_dir")
            if cache_dir is False:      # no files: the merged weights are made in memory
                key = None
            cache_dir = cache_dir or _config.cache_root()
            lins, reader = lora_merge.merged_linears(
                targets, {t: [(m, s) for m, s, _ in ps] for t, ps in merged.items()}, key, cache_dir,
                self._pool)
            self._merge_reader = reader
            self.lora_merge_cached = reader is not None
            for t, (lin, core) in targets.items():
                base[t] = core
                lin._c = lins[t].core
            state.update(want)
        for blk in [*self.blocks, *(self.__dict__.get("refiner") or [])]:
            if blk is not None and hasattr(blk, "core") and any(
                    getattr(blk, "prefix", "") + suffix in swapped for suffix, _ in _Block.LORA_NAMES):
                blk.build_core(self)
        return swapped

    def _lora_changed_local(self):
        sib = self.__dict__.pop("_siblings", None)
        try:
            self._lora_changed()
        finally:
            if sib is not None:
                self._siblings = sib

    def _lora_linear(self, target):
        """The ops.Linear a LoRA target names, or None (a streaming block not built now)."""
        if target in self._LORA_TOP:
            return getattr(self, self._LORA_TOP[target])
        for prefix, blocks in (("transformer_blocks.", self.blocks),
                               ("token_refiner.refiner_blocks.", self.refiner)):
            if target.startswith(prefix):
                idx, rest = target[len(prefix):].split(".", 1)
                blk = blocks[int(idx)]
                if blk is None:
                    return None
                return getattr(blk, dict(_Block.LORA_NAMES)[rest], None)
        raise H3ValueError(f"unknown LoRA target {target!r}")

    def _lora_block(self, blk, prefix):
        """Attach the current addends to a block's linears (blocks built later: streaming)."""
        blk.prefix = prefix
        cores = self.__dict__.get("_lora_cores") or {}
        for suffix, attr in _Block.LORA_NAMES:
            lin = getattr(blk, attr, None)
            if lin is not None and (cores or lin.core.lora is not None):
                lin.core.set_lora(self._lora_core(prefix + suffix, lin))

    def _lora_isa(self, lin):
        """The path of a LoRA addend on ``lin``.  On AMX it runs on bf16 tiles beside an
        int8/int4/bf16 base; a float32 or fp16 base (float32 products) keeps its LoRA in
        float32 too (AVX-512)."""
        isa = lin.core.isa
        if isa == "amx" and (lin.weights in ("fp32", "fp16") or not self.lora_amx_tiles):
            isa = "avx512"
        return isa

    def _lora_core(self, target, lin):
        """The addend of ``target`` for the linear ``lin`` on that linear's LoRA path (made
        once per path: a streaming block's linear, built after the LoRA was loaded, can
        need another path than the one guessed without it -- a GGUF file's float layers
        run fp32 -- and streaming must give the resident model's bits)."""
        entry = (self.__dict__.get("_lora_cores") or {}).get(target)
        if entry is None:
            return None
        isa = self._lora_isa(lin)
        key = (isa, bool(self.lora_fused), bool(self.lora_int_down))
        if key not in entry:
            entry[key] = _kernels.LoraCore(*entry["parts"], isa=isa, fused=None if self.lora_fused else False,
                                           int_down=None if self.lora_int_down else False)
        return entry[key]

    # ---- small helpers -----------------------------------------------------------------
    def _r(self, x):
        """Round to bf16 in place in bf16 mode (the reference's activation dtype)."""
        if self.round_bf16:
            round_bf16(x, out=x)
        return x

    def _rms(self, x, w, eps):
        y = ops.rms_norm(x, w, eps=eps, isa=self.isa, threads=self._pool)
        return self._r(y)

    def _modulate(self, n, scale1p, shift, rows):
        """n * (1 + scale)[rows] + shift[rows]; scale1p already holds (1 + scale)."""
        if self.round_bf16:
            t = round_bf16(n * scale1p[rows])
            return round_bf16(t + shift[rows])
        return (n * scale1p[rows] + shift[rows]).astype(np.float32)

    def _gate_add(self, h, gate, rows, branch):
        """h + gate[rows] * branch (with the reference's two roundings in bf16 mode)."""
        if self.round_bf16:
            g = round_bf16(gate[rows] * branch)
            return round_bf16(h + g)
        return (h + gate[rows] * branch).astype(np.float32)

    def _rope(self, x, cos, sin):
        """Rotate-half RoPE on the first rot_dim channels of every head of x (S, H, D)."""
        if not self.round_bf16:
            return ops.rope(x, cos, sin, rot_dim=self.rot_dim, isa=self.isa, threads=self._pool)
        half = self.rot_dim // 2
        c = round_bf16(cos)[:, None, :]
        s = round_bf16(sin)[:, None, :]
        x1 = x[:, :, :half].copy()
        x2 = x[:, :, half:self.rot_dim].copy()
        x[:, :, :half] = round_bf16(round_bf16(x1 * c) + round_bf16(-x2 * s))
        x[:, :, half:self.rot_dim] = round_bf16(round_bf16(x2 * c) + round_bf16(x1 * s))
        return x

    def _attention(self, blk, n, cos=None, sin=None):
        """Self-attention of the rows of n (S, hidden) -> (S, inner) before to_out."""
        S = n.shape[0]
        H, D = self.heads, self.head_dim
        qkv = self._r(blk.qkv(n))
        if blk.qkv_layout == "interleaved":
            v4 = qkv.reshape(S, H, 3, D)
            q, k, v = v4[:, :, 0], v4[:, :, 1], v4[:, :, 2]
        else:
            v4 = qkv.reshape(S, 3, H, D)
            q, k, v = v4[:, 0], v4[:, 1], v4[:, 2]
        eps = self.config["qk_norm_eps"]
        q = self._rms(np.ascontiguousarray(q), blk.norm_q, eps)
        k = self._rms(np.ascontiguousarray(k), blk.norm_k, eps)
        v = np.ascontiguousarray(v)
        if cos is not None:
            self._rope(q, cos, sin)
            self._rope(k, cos, sin)
        o = self._attn(q, k, v)
        return self._r(o.reshape(S, self.inner))

    def _ffn(self, blk, n):
        if self.round_bf16:
            gv = self._r(blk.up(n))
            f = gv.shape[1] // 2
            g = round_bf16(ops.silu(np.ascontiguousarray(gv[:, :f]), isa=self.isa, threads=self._pool))
            act = round_bf16(g * gv[:, f:])
        else:
            act = blk.up.swiglu(n)
        return self._r(blk.down(np.ascontiguousarray(act)))

    # ---- AdaLN tables ----------------------------------------------------------------------
    def _temb(self, timestep):
        e = timestep_embedding(timestep, self.config["freq_dim"])
        h = self.time_1(e)
        h = ops.silu(h, out=h, isa=self.isa, threads=self._pool)
        return self.time_2(h)

    # timesteps whose AdaLN tables are computed in one pass: every block's AdaLN weights are
    # read once per pass (a streaming DiT maps them from disk), and the [U, 18 hidden] float32
    # modulation rows of a pass stay small (64 x 96,768 x 4 B = 25 MB at full size)
    ADALN_PASS = 64

    def adaln_tables(self, t_value):
        """Per block: (1+scale, shift, gate) for msa and mlp, [3 modalities, hidden] each;
        and the final (1+scale, shift) [hidden].  Computed for one timestep value (see
        :meth:`prepare_timesteps` for many)."""
        key = np.float32(t_value).view(np.uint32).item()
        if key not in self._tables:
            self.prepare_timesteps([t_value])
        return self._tables[key]

    def prepare_timesteps(self, values):
        """Compute the AdaLN modulation tables for these timestep values, so that forwards
        at them never touch the AdaLN weights.  All of them in one pass over the blocks
        (:attr:`ADALN_PASS` timesteps a GEMM): a 20-step generation's ~40 distinct timesteps
        cost one read of the AdaLN weights, not one read per timestep -- which, streamed,
        was 26 GB from disk per timestep at full size."""
        new = {}
        for v in np.asarray(values, np.float32).reshape(-1):
            key = v.view(np.uint32).item()
            if key not in self._tables:
                new.setdefault(key, v)
        if not new:
            return
        if self._adaln_released:
            v = next(iter(new.values()))
            raise H3Error(f"timestep {float(v)!r} was not prepared before release_adaln(); "
                          "call prepare_timesteps with every timestep you will use")
        keys, ts = list(new), np.array(list(new.values()), np.float32)
        for i in range(0, len(ts), self.ADALN_PASS):
            self._adaln_pass(keys[i:i + self.ADALN_PASS], ts[i:i + self.ADALN_PASS])

    def _adaln_pass(self, keys, ts):
        U, Hd = len(ts), self.hidden
        if self.adaln_curve is not None:
            st = np.stack([adaln_curve_input(self.adaln_curve, t) for t in ts])
        else:
            st = ops.silu(self._temb(ts), isa=self.isa, threads=self._pool)
        st = self._r(np.ascontiguousarray(st, np.float32))
        one = np.float32(1.0)
        blocks = [[] for _ in range(U)]
        for b in range(len(self.blocks)):
            if self.streaming:
                part = _Block(self, self._source, f"transformer_blocks.{b}.", adaln=True, main=False)
                m_all = self._r(part.adaln(st))
                _pages.release(part.storage())
            else:
                m_all = self._r(self.blocks[b].adaln(st))
            m_all = m_all.reshape(U, MODALITY_NUM, 6, Hd)
            for u in range(U):
                m = m_all[u]
                s1p_msa = self._r((one + m[:, 1]).astype(np.float32))
                s1p_mlp = self._r((one + m[:, 4]).astype(np.float32))
                blocks[u].append((m[:, 0].copy(), s1p_msa, m[:, 2].copy(),
                                  m[:, 3].copy(), s1p_mlp, m[:, 5].copy()))
        fin_all = self._r(self.norm_out_linear(st)).reshape(U, 2, Hd)
        for u, key in enumerate(keys):
            fin = fin_all[u]
            self._tables[key] = (blocks[u], self._r((one + fin[1]).astype(np.float32)), fin[0].copy())

    def release_adaln(self):
        """Drop the AdaLN weights (about 13B of the 33B parameters).  Forwards at
        timesteps that were not prepared raise H3Error afterwards."""
        for blk in self.blocks:
            if blk is not None:
                _pages.release(blk.storage() if blk.adaln is not None else [])
                blk.adaln = None
        self.norm_out_linear = None
        self._adaln_released = True

    def with_weights(self, weights):
        """This transformer in another weights mode (for precision plans): loaded once from
        the same checkpoint (fp16/int8/int4 through their cache files, bf16 mapped in place)
        and kept, so switching back and forth costs no reload."""
        weights = ops.resolve_weights(weights)
        if weights == self.weights:
            return self
        siblings = self.__dict__.setdefault("_siblings", {self.weights: self})
        if weights not in siblings:
            args = getattr(self, "_load_args", None)
            if args is None:
                raise H3ValueError("with_weights() needs a DiT made by DiT.from_pretrained")
            other = DiT.from_pretrained(weights=weights, **args)
            siblings[weights] = other
            if self.__dict__.get("_loras"):
                other._loras = {k: dict(v) for k, v in self._loras.items()}
                other._lora_changed()
            other._siblings = siblings
        return siblings[weights]

    def _build_stream_block(self, b):
        blk = _Block(self, self._source, f"transformer_blocks.{b}.", adaln=False)
        _pages.prefetch(blk.storage())
        return blk

    def _iter_blocks(self):
        """The blocks in order; in streaming mode built one ahead on a reader thread and
        their pages released after use."""
        if not self.streaming:
            yield from self.blocks
            return
        import concurrent.futures
        if self._stream_ex is None:
            self._stream_ex = concurrent.futures.ThreadPoolExecutor(1, thread_name_prefix="h3cy-stream")
        yield from _pages.stream(self._stream_ex, self._build_stream_block, len(self.blocks))

    def _stream_attached(self):
        """Streaming DiTs in the Cython loop: every block's core attached up front as views
        into the memory maps (the checkpoint's bf16 tensors, or the weight-cache file of
        fp16/int8/int4), which reads no weight page: pages come in when a block runs and
        the loop releases them after it (page advice in C, as _iter_blocks does through
        _pages).  Returns (blocks, range_off (nb+1,) int64, range_ptr, range_len (R,)
        uint64): block b's mapped arrays are ranges range_off[b]:range_off[b+1], the very
        arrays _pages advises.  None when some block linear is not a mapped view (a
        tensor copied because its file offset was misaligned, a converted mode without a
        cache); those DiTs take the Python loop.  Built once and kept."""
        if not self.streaming:
            return None
        got = self.__dict__.get("_attached")
        if got is not None:
            return got or None
        blocks, off, ptr, ln = [], [0], [], []
        for b in range(len(self.blocks)):
            blk = _Block(self, self._source, f"transformer_blocks.{b}.", adaln=False)
            lins = (blk.qkv, blk.out, blk.up, blk.down)
            if not all(lin.core.storage is not None and _pages.mmap_of(lin.core.storage[0]) is not None
                       for lin in lins):
                _pages.release(blk.storage())
                del blk, blocks
                self._attached = False
                return None
            for a in blk.storage():
                if a is not None and a.nbytes and _pages.mmap_of(a) is not None:
                    ptr.append(a.ctypes.data)
                    ln.append(a.nbytes)
            off.append(len(ptr))
            blocks.append(blk)
        got = (blocks, np.array(off, np.int64), np.array(ptr, np.uint64), np.array(ln, np.uint64))
        self._attached = got
        return got

    def close(self):
        """Release the checkpoint mapping kept for streaming and the reader thread."""
        self._attached = None
        if getattr(self, "_stream_ex", None) is not None:
            self._stream_ex.shutdown(wait=True)
            self._stream_ex = None
        ckpt = getattr(self._source, "ckpt", None)
        if ckpt is not None:
            ckpt.close()

    def _run_core(self, blk, h, rows=None, tables=None, cos=None, sin=None):
        """One block in C (GIL released), h updated in place."""
        need = blk.core.workspace_bytes(h.shape[0], self.heads, self.rot_dim) + 64
        if self._ws is None or self._ws.nbytes < need:
            self._ws = None
            self._ws = np.empty(need, np.uint8)
        cfg = self.config
        blk.core.forward(h, self.heads, self.rot_dim, cfg["norm_eps"], cfg["qk_norm_eps"],
                         int(self.round_bf16), self._ws, rows, tables, cos, sin,
                         attn_bf16=int(self.attn_bf16))

    @property
    def loop_ready(self):
        """Whether a C denoising loop can run this transformer: its blocks run on the C block
        driver (not H3CY_DIT_PYTHON=1) and, when streaming, all attach in place to the maps."""
        return not self._python_blocks and (not self.streaming or self._stream_attached() is not None)

    def loop_binding(self, timesteps, prompt_embeds, position_ids):
        """Everything a C denoising loop needs of this transformer for one run, prepared
        here so that the loop touches no other attribute (see pyx/_loop.pxi):

        timesteps : (U,) float32 — every distinct timestep of the run (AdaLN tables are
            prepared for each, in order)
        prompt_embeds : (L, text_dim) float32 — the text rows are computed once
        position_ids : (S, 3) — the packed rows' (t, h, w) positions

        Returns a :class:`LoopBinding`; it holds references to the arrays and C objects it
        names, so they stay alive while the loop runs.
        """
        keys = np.asarray(timesteps, np.float32).reshape(-1)
        self.prepare_timesteps(keys)
        pages = None
        blocks = [blk.core for blk in self.blocks] if not self.streaming else None
        if self.streaming:
            att = self._stream_attached()
            if att is None:
                raise H3ValueError("this streaming DiT's blocks cannot be attached in place")
            blocks = [blk.core for blk in att[0]]
            pages = (att[1], att[2], att[3], att[0])      # the blocks keep their views alive
        cos, sin = self._rope_tables(position_ids)
        cfg = self.config
        return LoopBinding(
            adaln=[self.adaln_tables(k) for k in keys], blocks=blocks, pages=pages,
            proj_in=self.proj_in.core, audio_proj_in=self.audio_proj_in.core,
            proj_out=self.proj_out.core, audio_proj_out=self.audio_proj_out.core,
            norm_out=self.norm_out, text_rows=self._text_rows(prompt_embeds), cos=cos, sin=sin,
            isa=self.isa, round_bf16=bool(self.round_bf16), attn_bf16=bool(self.attn_bf16),
            heads=self.heads, head_dim=self.head_dim, rot_dim=self.rot_dim, ffn_dim=cfg["ffn_dim"],
            norm_eps=cfg["norm_eps"], qk_norm_eps=cfg["qk_norm_eps"], final_norm_eps=cfg["final_norm_eps"],
            pool=self._pool)

    # ---- forward -----------------------------------------------------------------------------
    def _rope_tables(self, position_ids):
        """cos, sin (S, rot_dim/2) float32 of the (t, h, w) positions (S, 3): [t | h | w]."""
        pos = np.asarray(position_ids)
        p32 = pos.astype(np.float32)
        ang = (p32[:, :, None] * self.inv_freq[None, None, :]).astype(np.float32).reshape(pos.shape[0], -1)
        return np.cos(ang).astype(np.float32), np.sin(ang).astype(np.float32)

    def _text_rows(self, xt):
        """The text rows of the packed sequence: context_embedder, the token refiner and its
        final norm; (L, text_dim) float32 -> (L, hidden).  Independent of the timestep."""
        cfg = self.config
        xt = np.ascontiguousarray(xt, dtype=np.float32)
        xt_in = round_bf16(xt) if self.round_bf16 else xt
        x_txt = self._r(self.context_embedder(np.ascontiguousarray(xt_in)))
        eps, feps = cfg["norm_eps"], cfg["final_norm_eps"]
        for blk in self.refiner:
            if self._python_blocks:
                att = self._r(blk.out(self._attention(blk, self._rms(x_txt, blk.norm1, eps))))
                x_txt = self._r(x_txt + att)
                x_txt = self._r(x_txt + self._ffn(blk, self._rms(x_txt, blk.norm2, eps)))
            else:
                self._run_core(blk, x_txt)
        return self._rms(x_txt, self.refiner_norm, feps)

    def forward(self, hidden_states, audio_hidden_states, encoder_hidden_states, timestep,
                timestep_indices, token_tags, position_ids, video_indices, audio_indices,
                text_indices, after_block=None, active_blocks=None):
        """One denoiser evaluation, with diffusers' ``MiniMaxH3Transformer3DModel.forward``
        arguments (batch 1; a leading batch axis of 1 is accepted and kept).

        Parameters
        ----------
        hidden_states : (1, Nv, in_channels*4) float32 — patchified video rows
        audio_hidden_states : (1, Na, audio_in_channels) float32
        encoder_hidden_states : (1, L, text_dim) float32
        timestep : (U,) float32 — the distinct timestep values in [0, 1]
        timestep_indices, token_tags : (S,) int — per packed row: index into timestep;
            modality 0 video, 1 text, 2 audio
        position_ids : (S, 3) — (t, h, w) rotary coordinates
        video_indices, audio_indices, text_indices : (Nv,), (Na,), (L,) int — row positions
        after_block : callable(done, total), optional — called after each transformer block
            (progress, cancellation: an exception it raises stops the forward unchanged)
        active_blocks : sequence of bool, optional — run only these transformer blocks (the
            others pass the residual stream through): the ``layers=`` speed option

        Returns
        -------
        video : (1, Nv, in_channels*4) float32; audio : (1, Na, audio_in_channels) float32
        """
        cfg = self.config
        batched = np.ndim(hidden_states) == 3
        xv = _batch1(hidden_states, "hidden_states")
        xa = _batch1(audio_hidden_states, "audio_hidden_states")
        xt = _batch1(encoder_hidden_states, "encoder_hidden_states")
        pos = np.asarray(position_ids)
        if pos.ndim != 2 or pos.shape[1] != 3:
            raise H3ValueError(f"position_ids must be (seq_len, 3), got {pos.shape}")
        S = pos.shape[0]
        ti = _index(timestep_indices, "timestep_indices", S)
        tags = _index(token_tags, "token_tags", S)
        vi = _index(video_indices, "video_indices", None)
        ai = _index(audio_indices, "audio_indices", None)
        xi = _index(text_indices, "text_indices", None)
        t = np.asarray(timestep, np.float32).reshape(-1)
        U = t.shape[0]
        if ti.size and (ti.min() < 0 or ti.max() >= U):
            raise H3ValueError(f"timestep_indices must be in [0, {U}), got range [{ti.min()}, {ti.max()}]")
        if tags.size and (tags.min() < 0 or tags.max() > 2):
            raise H3ValueError("token_tags must be 0 (video), 1 (text) or 2 (audio)")
        for name, idx, x in (("video", vi, xv), ("audio", ai, xa), ("text", xi, xt)):
            if idx.shape[0] != x.shape[0]:
                raise H3ValueError(f"{name}_indices has {idx.shape[0]} entries but the {name} input has {x.shape[0]} rows")
            if idx.size and (idx.min() < 0 or idx.max() >= S):
                raise H3ValueError(f"{name}_indices must be in [0, {S})")
        if len(np.unique(np.concatenate([vi, ai, xi]))) != vi.size + ai.size + xi.size:
            raise H3ValueError("video/audio/text indices overlap")
        pv = cfg["in_channels"] * int(np.prod(cfg["patch_size"]))
        for name, x, want in (("hidden_states", xv, pv), ("audio_hidden_states", xa, cfg["audio_in_channels"]),
                              ("encoder_hidden_states", xt, cfg["text_dim"])):
            if x.shape[1] != want:
                raise H3ValueError(f"{name} has {x.shape[1]} channels, expected {want}")
        Hd = self.hidden
        # 1. RoPE tables (float32): angles per axis, [t | h | w]
        cos, sin = self._rope_tables(pos)
        # 2. input projections; text through the refiner
        v = self.proj_in(xv)
        a = self.audio_proj_in(xa)
        x_txt = self._text_rows(xt)
        eps, feps = cfg["norm_eps"], cfg["final_norm_eps"]
        h = np.zeros((S, Hd), np.float32)
        h[xi] = x_txt
        h[vi] = self._r(v)
        h[ai] = self._r(a)
        # 3. AdaLN tables for each distinct timestep, rows = ti*3 + tag
        tabs = [self.adaln_tables(tv) for tv in t]
        rows = (ti * MODALITY_NUM + tags).astype(np.int64)
        rows32 = rows.astype(np.int32)
        if active_blocks is not None and len(active_blocks) != len(self.blocks):
            raise H3ValueError(f"active_blocks has {len(active_blocks)} entries, the model {len(self.blocks)} blocks")
        n_active = len(self.blocks) if active_blocks is None else int(sum(bool(a) for a in active_blocks))
        done = 0
        for b, blk in enumerate(self._iter_blocks()):
            if active_blocks is not None and not active_blocks[b]:
                continue
            tables = tuple(np.concatenate([tab[0][b][k] for tab in tabs]) for k in range(6))
            if self._python_blocks:
                sh_msa, s1_msa, g_msa, sh_mlp, s1_mlp, g_mlp = tables
                n = self._modulate(self._rms(h, blk.norm1, eps), s1_msa, sh_msa, rows)
                h = self._gate_add(h, g_msa, rows, self._r(blk.out(self._attention(blk, n, cos, sin))))
                n = self._modulate(self._rms(h, blk.norm2, eps), s1_mlp, sh_mlp, rows)
                h = self._gate_add(h, g_mlp, rows, self._ffn(blk, n))
            else:
                self._run_core(blk, h, rows32, tables, cos, sin)
            done += 1
            if after_block is not None:
                after_block(done, n_active)
        # 4. final norm (rows by timestep only) and the two fp32 heads on their rows
        fs1 = np.stack([tab[1] for tab in tabs])
        fsh = np.stack([tab[2] for tab in tabs])
        hn = self._modulate(self._rms(h, self.norm_out, feps), fs1, fsh, ti.astype(np.int64))
        video = self.proj_out(np.ascontiguousarray(hn[vi]))
        audio = self.audio_proj_out(np.ascontiguousarray(hn[ai]))
        if batched:
            return video[None], audio[None]
        return video, audio

    __call__ = forward


def _batch1(x, name):
    return np.ascontiguousarray(ops.drop_batch(x, name, "(rows, channels)"), dtype=np.float32)


def _index(a, name, n):
    a = np.asarray(a)
    if a.ndim != 1 or (n is not None and a.shape[0] != n):
        raise H3ValueError(f"{name} must have shape ({n if n is not None else 'n'},), got {a.shape}")
    if a.size and not np.issubdtype(a.dtype, np.integer):
        raise H3ValueError(f"{name} must hold integers, got {a.dtype}")
    return a.astype(np.int64)
