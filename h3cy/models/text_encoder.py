"""h3cy.models.text_encoder — the prompt encoder of MiniMax-H3: the Qwen3-VL-32B text stack up to
``hidden_states[50]`` (spec §3.2), read from a ``text_encoder/`` folder that
``Qwen3VLForConditionalGeneration.save_pretrained`` wrote (one ``model.safetensors`` or a
sharded index), memory-mapped.  Only the token embeddings and layers ``0 .. output_layer-1``
are read: never the final norm, the LM head or the vision tower.

Weights modes (as :class:`h3cy.DiT`):

- ``fp32``: weights widened to float32, activations float32 throughout;
- ``bf16``: bf16 weights (mapped in place when the file holds bf16), and every activation
  rounded to bf16 where transformers' bf16 model rounds it (linear outputs, the two
  roundings of Qwen's RMSNorm, RoPE, attention output, silu and the SwiGLU product, each
  residual add), so the output matches transformers loaded with ``dtype=torch.bfloat16``
  up to GEMM summation order;
- ``fp16`` / ``int8`` / ``int4``: weights stored in that format, activations float32;
  int8/int4 quantise activations per row with one scale per 1024 input channels where the
  row allows (Qwen's residual stream has outlier channels).

Text-only positions are ``0 .. L-1`` on all three MRoPE axes, so the interleaved MRoPE
reduces to 1-D RoPE (``tests/test_text_encoder.py`` checks this against transformers).

With images (``encode(ids, images=...)``, :meth:`TextEncoder.presentation`), the vision tower
(:mod:`h3cy.models.vision_tower`, built on first use) gives the image tokens' embeddings and
the deepstack features added to those rows after layers 0, 1, 2; positions are the 3-D
MRoPE ones (:mod:`h3cy.models.mrope`).
"""
import concurrent.futures
import logging
import os
import threading

import numpy as np

from .. import _kernels
from ..weights import pages as _pages
from .. import ops
from ..weights.comfy_quant import Int8Weight, read_quant
from ..weights.gguf import GGUFWeight, READABLE_TYPES as GGUF_TYPES
from ..weights.files import TensorFiles, find_weights, load_json, report_once
from ..weights.linears import make_linear
from ..ops.bf16 import bf16_bits_to_f32, round_bf16
from .._progress import Ticker
from .mrope import rope_inv_freq, rope_tables
from ..errors import CheckpointError, H3ValueError

log = logging.getLogger("h3cy")

OUTPUT_LAYER = 50           # hidden_states[50] = output of layers[49] (spec §3.2)
PREFIX = "model.language_model."
SINGLE, INDEX = "model.safetensors", "model.safetensors.index.json"
_LAYER_TENSORS = ("input_layernorm", "post_attention_layernorm", "self_attn.q_proj",
                  "self_attn.k_proj", "self_attn.v_proj", "self_attn.o_proj", "self_attn.q_norm",
                  "self_attn.k_norm", "mlp.gate_proj", "mlp.up_proj", "mlp.down_proj")
_FLOAT_DTYPES = ("F32", "BF16", "F16")


def _err(path, msg):
    return CheckpointError(f"{path}: {msg}")


class TextConfig:
    """The fields of ``config.json``'s ``text_config`` the encoder uses."""

    def __init__(self, d, path):
        tc = d.get("text_config", d) if isinstance(d, dict) else None
        if not isinstance(tc, dict):
            raise _err(path, "config.json has no text_config object")

        def need(name, kind=int):
            v = tc.get(name)
            if isinstance(v, bool) or not isinstance(v, kind) or (kind is int and v < 1):
                raise _err(path, f"text_config.{name} must be a positive {kind.__name__}, got {v!r}")
            return v

        self.hidden_size = need("hidden_size")
        self.intermediate_size = need("intermediate_size")
        self.num_hidden_layers = need("num_hidden_layers")
        self.num_attention_heads = need("num_attention_heads")
        self.num_key_value_heads = tc.get("num_key_value_heads") or self.num_attention_heads
        self.vocab_size = need("vocab_size")
        self.head_dim = tc.get("head_dim") or self.hidden_size // self.num_attention_heads
        eps = tc.get("rms_norm_eps", 1e-6)
        if isinstance(eps, bool) or not isinstance(eps, (int, float)) or not eps >= 0:
            raise _err(path, f"text_config.rms_norm_eps must be a number >= 0, got {eps!r}")
        self.rms_norm_eps = float(eps)
        if tc.get("hidden_act", "silu") != "silu":
            raise _err(path, f"text_config.hidden_act {tc.get('hidden_act')!r} is not supported (silu)")
        if tc.get("attention_bias"):
            raise _err(path, "text_config.attention_bias = true is not supported")
        # transformers 5 writes rope_parameters; 4.x checkpoints (the release) rope_theta +
        # rope_scaling.  transformers' default theta for this model is 5e5.
        rp = tc.get("rope_parameters") or tc.get("rope_scaling") or {}
        theta = tc.get("rope_theta", rp.get("rope_theta", 500000.0))
        rtype = rp.get("rope_type", rp.get("type", "default"))
        if rtype != "default":
            raise _err(path, f"rope_type {rtype!r} is not supported (default)")
        if isinstance(theta, bool) or not isinstance(theta, (int, float)) or not theta > 0:
            raise _err(path, f"rope_theta must be a positive number, got {theta!r}")
        self.rope_theta = float(theta)
        self.mrope_section = rp.get("mrope_section")
        H, Hk, D = self.num_attention_heads, self.num_key_value_heads, self.head_dim
        if not isinstance(Hk, int) or Hk < 1 or H % Hk or D % 2 or D > 256:
            raise _err(path, f"unsupported attention geometry: heads={H}, kv_heads={Hk}, head_dim={D} "
                             "(heads must be a multiple of kv_heads, head_dim even and <= 256)")

    def to_dict(self):
        return dict(self.__dict__)


class TextEncoderSource:
    """The encoder folder's tensors: validated up front (names, shapes, dtypes of everything
    the encoder will read); a sharded folder maps only the shards those tensors are in."""

    def __init__(self, folder, output_layer):
        self.folder = folder
        self._single = os.path.isfile(folder)
        if self._single:
            # one file (Comfy-Org's): the stack's tensors under "model.", no config.json
            kind = _single_file_kind(folder)
            self._files = TensorFiles([folder], prefix="model." if kind.naming == "comfy" else PREFIX)
            cfg_path = folder
            try:
                self.config = TextConfig(infer_text_config(self._files, folder), folder)
            except BaseException:
                self._files.close()
                raise
            report_once(folder, "; ".join(kind.assumed))
        else:
            cfg_path = os.path.join(folder, "config.json")
            self.config = TextConfig(load_json(cfg_path, "config"), cfg_path)
        c = self.config
        if output_layer > c.num_hidden_layers:
            if self._single:
                self._files.close()
            raise _err(cfg_path, f"the text stack has {c.num_hidden_layers} layers; hidden_states"
                                 f"[{output_layer}] needs at least {output_layer}")
        if self._single:
            index, paths = None, [folder]
        else:
            index, paths = find_weights(folder, (SINGLE, INDEX))
        self.index = index[0] if index is not None else None
        Hd, F, H, Hk, D = (c.hidden_size, c.intermediate_size, c.num_attention_heads,
                           c.num_key_value_heads, c.head_dim)
        self.shapes = {PREFIX + "embed_tokens.weight": (c.vocab_size, Hd)}
        per = {"input_layernorm": (Hd,), "post_attention_layernorm": (Hd,),
               "self_attn.q_proj": (H * D, Hd), "self_attn.k_proj": (Hk * D, Hd),
               "self_attn.v_proj": (Hk * D, Hd), "self_attn.o_proj": (Hd, H * D),
               "self_attn.q_norm": (D,), "self_attn.k_norm": (D,), "mlp.gate_proj": (F, Hd),
               "mlp.up_proj": (F, Hd), "mlp.down_proj": (Hd, F)}
        for layer in range(output_layer):
            for t in _LAYER_TENSORS:
                self.shapes[f"{PREFIX}layers.{layer}.{t}.weight"] = per[t]
        if not self._single:
            self._files = TensorFiles(paths, index, lazy=index is not None)
        # a single file's quantised linears (Comfy's int8 "convrot"): read as stored
        self._quant = {}                      # stored name -> shape
        try:
            for name, shape in self.shapes.items():
                st = self._stored(name)
                if self._single and st.endswith(".weight") and self._files.has(st[:-len("weight")] + "comfy_quant"):
                    read_quant(self._files, st[:-len(".weight")], shape)   # checked now, read when built
                    self._quant[st] = shape
                    continue
                if (self._single and self._files.has(st) and self._files.info(st).dtype in GGUF_TYPES
                        and len(shape) == 2):
                    # a GGUF file's quantised linear (weights.gguf.GGUFWeight): run as stored
                    self._files.get(st, shape, GGUF_TYPES)
                    continue
                self._files.get(st, shape, _FLOAT_DTYPES)   # present, float, its shape
        except BaseException:
            self.close()
            raise

    def _stored(self, name):
        """A transformers name (``model.language_model.*``) as the files name it."""
        return name[len(PREFIX):] if self._single else name

    @property
    def shards(self):
        """The weight files the encoder reads (a sharded folder: only those holding its tensors)."""
        return sorted({self._files.path_of(self._stored(n)) for n in self.shapes})

    @property
    def files(self):
        """The files the encoder reads: config.json, the index if any, the needed shards."""
        if self._single:
            return self.shards
        extra = [os.path.join(self.folder, "config.json")] + ([self.index] if self.index else [])
        return extra + self.shards

    def get(self, name):
        """The tensor as stored (BF16 as uint16 bits), a read-only view into the mapping; a
        quantised linear as a :class:`h3cy.weights.comfy_quant.Int8Weight`."""
        st = self._stored(name)
        if st in self._quant:
            return read_quant(self._files, st[:-len(".weight")], self._quant[st])
        return self._files.get(st, dtypes=None)

    def close(self):
        self._files.close()


def _single_file_kind(path):
    from ..weights.single_file import detect_component
    kind = detect_component(path, "text_encoder")
    if "nvfp4" in kind.quant:
        kind.assumed.append("NVFP4 linears run as stored on the NVFP4 GEMM in the int modes (auto: int8); "
                            "other modes dequantise them at load")
    kind.assumed.append("configuration inferred from the tensor shapes; norm eps and RoPE from the "
                        "released configuration")
    return kind


def infer_text_config(files, path):
    """A Qwen3-VL text config (``{"text_config": {...}}``) from the shapes of the stack's
    tensors (``files`` names them ``embed_tokens.weight``, ``layers.N.*``), the rest from the
    released configuration shipped in the package."""
    from ..weights.released import released_config
    tc = dict(released_config("text_encoder")["text_config"])

    def shape(name, ndim=2):
        return files.shape(name, ndim)

    tc["vocab_size"], tc["hidden_size"] = shape("embed_tokens.weight")
    n = 0
    while files.has(f"layers.{n}.input_layernorm.weight"):
        n += 1
    D = shape("layers.0.self_attn.q_norm.weight", 1)[0]
    q, k = shape("layers.0.self_attn.q_proj.weight")[0], shape("layers.0.self_attn.k_proj.weight")[0]
    if D <= 0 or q % D or k % D:
        raise _err(path, f"q_proj rows {q} and k_proj rows {k} are not multiples of the q_norm width {D}")
    tc.update(num_hidden_layers=n, head_dim=D, num_attention_heads=q // D, num_key_value_heads=k // D,
              intermediate_size=shape("layers.0.mlp.gate_proj.weight")[0])
    return {"text_config": tc}


def _f32(a):
    if isinstance(a, GGUFWeight):
        return a.dequantized()
    if a.dtype == np.uint16:
        return bf16_bits_to_f32(a)
    return np.ascontiguousarray(a, dtype=np.float32)


def _is_gguf(w):
    return isinstance(w, GGUFWeight) or (isinstance(w, (list, tuple)) and any(isinstance(p, GGUFWeight) for p in w))


class _Layer:
    """One decoder layer's weights in the encoder's weights mode, and its C core."""

    def __init__(self, enc, src, layer):
        p = f"{PREFIX}layers.{layer}."
        mk, vec = enc._linear, enc._vector
        self.linears = {}
        for t in ("q_proj", "k_proj", "v_proj", "o_proj"):
            self.linears[t] = mk(src.get(p + f"self_attn.{t}.weight"), name=p + f"self_attn.{t}")
        if enc.round_bf16:
            gate = mk(src.get(p + "mlp.gate_proj.weight"), name=p + "mlp.gate_proj")
            up = mk(src.get(p + "mlp.up_proj.weight"), name=p + "mlp.up_proj")
            gate_up = None
            self.linears.update(gate_proj=gate, up_proj=up)
        else:
            gate = up = None
            gate_up = enc._pair(src, p)
            self.linears["gate_up"] = gate_up
        self.linears["down_proj"] = mk(src.get(p + "mlp.down_proj.weight"), name=p + "mlp.down_proj")
        self.norms = [vec(src.get(p + n + ".weight")) for n in
                      ("input_layernorm", "post_attention_layernorm", "self_attn.q_norm", "self_attn.k_norm")]
        L = self.linears
        c = enc.config
        self.core = _kernels.QwenLayerCore(
            L["q_proj"].core, L["k_proj"].core, L["v_proj"].core, L["o_proj"].core,
            gate_up.core if gate_up is not None else None, gate.core if gate is not None else None,
            up.core if up is not None else None, L["down_proj"].core, *self.norms,
            c.num_attention_heads, c.num_key_value_heads, enc._pool)

    def storage(self):
        out = []
        for lin in self.linears.values():
            if lin.core.storage is not None:
                out.extend(lin.core.storage)
        return out


class TextEncoder:
    """The Qwen3-VL text stack up to ``hidden_states[output_layer]``.  Build with
    :meth:`from_pretrained`; run with :meth:`encode` (token ids) or :func:`h3cy.encode_prompt`."""

    @classmethod
    def from_pretrained(cls, path, weights="auto", streaming=False, threads=None, isa=None,
                        cache_dir=None, output_layer=OUTPUT_LAYER):
        """Open a ``text_encoder/`` folder (config.json + model.safetensors or a sharded index).

        Parameters
        ----------
        path : str or os.PathLike
        weights : {"auto", "bf16", "fp32", "fp16", "int8", "int4"} — "auto" (the default),
            as the pipeline and :meth:`h3cy.DiT.from_pretrained`: linears stored quantised
            run as stored; a float checkpoint the faster of bf16 and int8 on this CPU that
            fits memory (:mod:`h3cy.weights.auto`)
        streaming : bool — map and build one layer at a time (the next on a reader thread
            while the current one computes) and release its pages after use; same results,
            bit for bit, as resident loading
        threads : int, optional — default :func:`h3cy.get_num_threads`
        isa : str, optional — kernel path (default: ``H3CY_ISA`` or the best available)
        cache_dir : str, optional — where the fp16/int8/int4 converted-weight cache goes
            (default: next to the checkpoint if writable, else ~/.cache/h3cy); False: none
        output_layer : int — return ``hidden_states[output_layer]`` (default 50, spec §3.2)

        Raises
        ------
        CheckpointError — missing/unreadable files, bad config, a missing tensor or one of the
            wrong shape or dtype (the message names the file and the tensor), fewer layers than
            ``output_layer``
        """
        from ..weights.cache import ComponentCache
        if isinstance(output_layer, bool) or not isinstance(output_layer, (int, np.integer)) or output_layer < 0:
            raise H3ValueError(f"output_layer must be an int >= 0, got {output_layer!r}")
        folder = os.fspath(path)
        if not os.path.exists(folder):
            raise _err(folder, "not a folder or a file (expected a text_encoder folder with config.json "
                               "or a single .safetensors file)")
        # a GGUF file with weights="auto" runs every tensor as stored: quantised blocks on the
        # GGUF GEMM (the int8 mode "auto" resolves to), float tensors as float32 (decided
        # before "auto" resolves to that int8 mode)
        as_stored = weights == "auto" and folder.endswith(".gguf")
        if weights == "auto":      # the file, this CPU's measurement and the memory decide
            from ..weights.auto import auto_weights
            weights = auto_weights("text_encoder", folder, isa, streaming=bool(streaming),
                                   output_layer=int(output_layer))
        compute = ops.Compute.resolve(weights, isa, threads)     # the one resolution of this load
        src = TextEncoderSource(folder, int(output_layer))
        src.as_stored = as_stored
        try:
            shards = src.shards
            params = dict(kind="qwen3vl_text", layers=int(output_layer))
            # run as stored, nothing is converted: no weight-cache file
            with (ComponentCache() if as_stored else
                  ComponentCache.open(folder, shards, compute.weights, params, cache_dir, compute.isa)) as cache:
                if streaming:
                    def build_all(pair):   # every layer converted once, one at a time
                        tmp = cls(src, compute, int(output_layer), pair, streaming=True)
                        for layer in range(tmp.num_layers):
                            _Layer(tmp, src, layer)
                    cache.prebuild(build_all)
                enc = cls(src, compute, int(output_layer), cache.pair, streaming)
                cache.finish()
            enc._cache_writer = None
            if not streaming:
                src.close()   # the layers' and the embedding table's views keep the mappings
            return enc
        except BaseException:
            src.close()
            raise

    def __init__(self, source, compute, output_layer, cache, streaming):
        self.config = source.config
        self.path = source.folder
        self.compute = compute
        self.weights = compute.weights
        self.isa = compute.isa
        self.output_layer = output_layer
        self.num_layers = output_layer
        self.round_bf16 = self.weights == "bf16"
        self._pool = compute.pool
        self.threads = compute.threads
        self._source = source
        self._cache_reader, self._cache_writer = cache if cache is not None else (None, None)
        self._as_stored = getattr(source, "as_stored", False)
        self._build_lock = threading.Lock()
        self._run_lock = threading.Lock()
        self.files = source.files
        self.inv_freq = rope_inv_freq(self.config.head_dim, self.config.rope_theta)
        self._embed = source.get(PREFIX + "embed_tokens.weight")
        self._ws = None
        self._vision = self._vision_config = self._image_processor = None
        self._tokenizer = None
        self.streaming = bool(streaming)
        self._stream_ex = None
        if self.streaming:
            self.layers = [None] * self.num_layers
        else:
            n = self.num_layers
            with concurrent.futures.ThreadPoolExecutor(max(1, min(self.threads, n or 1))) as ex:
                self.layers = list(ex.map(lambda i: _Layer(self, source, i), range(n)))

    # ---- weights ---------------------------------------------------------------------
    def _linear(self, w, name, pair=False, bias=None):
        """A checkpoint weight in this encoder's mode (h3cy.weights.linears.make_linear); int
        modes take one activation scale per 1024 input channels where K allows."""
        ag = None      # (w is None: mapped from the cache, which knows its own layout)
        if w is not None and self.weights in ("int8", "int4"):
            K = (w[0] if isinstance(w, (list, tuple)) else w).shape[1]
            ag = 1024 if K % 1024 == 0 else None
        if self._as_stored and w is not None and not _is_gguf(w):
            # a GGUF file's float tensor, as stored: float32 (not cached: nothing converted)
            lin, _ = make_linear(w, self.compute, mode="fp32", pair=pair, bias=bias)
            return lin
        lin, _ = make_linear(w, self.compute, name=name, cache=(self._cache_reader, self._cache_writer),
                             pair=pair, act_group=ag, bias=bias)
        return lin

    def _pair(self, src, p):
        """gate_proj and up_proj as one pair linear (rows [gate; up]), for the SwiGLU epilogue."""
        name = p + "mlp.gate_up"
        if self._cache_reader is not None and name in self._cache_reader:
            return self._linear(None, name, pair=True)
        g, u = src.get(p + "mlp.gate_proj.weight"), src.get(p + "mlp.up_proj.weight")
        return self._linear([g, u], name, pair=True)     # in place where the mode allows

    def _vector(self, a):
        v = _f32(a)
        return round_bf16(v) if self.round_bf16 else np.ascontiguousarray(v)

    def _build_stream_layer(self, i):
        layer = _Layer(self, self._source, i)
        _pages.prefetch(layer.storage())
        return layer

    def _iter_layers(self):
        if not self.streaming:
            yield from self.layers
            return
        if self._stream_ex is None:
            self._stream_ex = concurrent.futures.ThreadPoolExecutor(1, thread_name_prefix="h3cy-text-stream")
        yield from _pages.stream(self._stream_ex, self._build_stream_layer, self.num_layers)

    # ---- the forward ---------------------------------------------------------------------
    @property
    def tokenizer(self):
        """The tokenizer found next to the encoder: its own folder if it has tokenizer files,
        else the release layout's sibling ``../tokenizer/``."""
        if self._tokenizer is None:
            from .tokenizer import Tokenizer
            for d in (self.path, os.path.join(os.path.dirname(os.path.abspath(self.path)), "tokenizer")):
                if os.path.isfile(os.path.join(d, "tokenizer.json")) or os.path.isfile(os.path.join(d, "vocab.json")):
                    self._tokenizer = Tokenizer.from_pretrained(d)
                    break
            else:
                raise CheckpointError(f"{self.path}: no tokenizer files here or in ../tokenizer; "
                                      "pass tokenizer=h3cy.Tokenizer.from_pretrained(folder)")
        return self._tokenizer

    def embed(self, input_ids):
        """Token embeddings ``hidden_states[0]``: (L,) ids -> (L, hidden) float32."""
        ids = np.asarray(input_ids)
        if ids.ndim == 2 and ids.shape[0] == 1:
            ids = ids[0]
        if ids.ndim != 1 or (ids.size and not np.issubdtype(ids.dtype, np.integer)):
            raise H3ValueError(f"input_ids must be a 1-D sequence of ints, got shape {ids.shape} {ids.dtype}")
        if ids.size == 0:
            raise H3ValueError("input_ids is empty (an empty prompt has no encoding)")
        V = self.config.vocab_size
        if ids.min() < 0 or ids.max() >= V:
            raise H3ValueError(f"token ids must be in [0, {V}), got range [{ids.min()}, {ids.max()}]")
        ids = ids.astype(np.int64)
        x = (self._embed.take_rows(ids) if isinstance(self._embed, (Int8Weight, GGUFWeight))
             else _f32(self._embed[ids]))
        if self.round_bf16:
            round_bf16(x, out=x)
        return np.ascontiguousarray(x, np.float32)

    # ---- images --------------------------------------------------------------------------
    @property
    def vision(self):
        """The vision tower (:class:`h3cy.models.vision_tower.VisionTower`), built on first use
        in this encoder's weights mode (CheckpointError when the checkpoint has none)."""
        if self._vision is None:
            from .vision_tower import VisionTower
            with self._build_lock:
                if self._vision is None:
                    self._vision = VisionTower.load(self)
        return self._vision

    @property
    def image_processor(self):
        """The Qwen3-VL image processor (the shipped release settings)."""
        if self._image_processor is None:
            from .image_processor import ImageProcessor
            self._image_processor = ImageProcessor.default()
        return self._image_processor

    @property
    def vision_config(self):
        """The checkpoint's vision_config (no weights read); CheckpointError without one."""
        if self._vision_config is None:
            from .vision_tower import VisionConfig
            if os.path.isfile(self.path):
                raise _err(self.path, "a single-file text encoder carries no vision tower; images need "
                                      "the text_encoder/ folder of the release")
            cfg_path = os.path.join(self.path, "config.json")
            self._vision_config = VisionConfig(load_json(cfg_path, "config"), cfg_path)
        return self._vision_config

    def prepare_images(self, images):
        """``(PIL images, grids)``: each image checked and converted to RGB (numpy (H, W, 3)
        uint8, a path or a PIL image; h3cy.models.image_processor.load_vision_image) and its
        patch grid — cheap, so bad input fails before any heavy work."""
        from .image_processor import load_vision_image
        if isinstance(images, (str, os.PathLike, np.ndarray)) or not hasattr(images, "__len__"):
            raise H3ValueError("images must be a list (of numpy arrays, paths or PIL images)")
        vc = self.vision_config
        proc = self.image_processor
        if proc.patch_size != vc.patch_size or proc.merge_size != vc.spatial_merge_size or \
                proc.temporal_patch_size != vc.temporal_patch_size:
            raise _err(self.path, f"the vision tower's patch {vc.patch_size}/merge {vc.spatial_merge_size}/"
                                  f"temporal {vc.temporal_patch_size} differ from the processor's")
        prepared = [load_vision_image(im, f"images[{i}]") for i, im in enumerate(images)]
        return prepared, [proc.grid(im) for im in prepared]

    def presentation(self, prompt, images=(), tokenizer=None):
        """MiniMax-H3's fl2va presentation (diffusers' MiniMaxH3FL2VATextEncoderStep): per image
        ``"<Picture i>: "`` (tag 1), then its vision block ``<|vision_start|>``, one
        ``<|image_pad|>`` per merged patch, ``<|vision_end|>`` (tag 0); then the prompt verbatim
        (tag 1).  Returns ``(ids, tags int64, prepared images, grids)``."""
        tok = tokenizer if tokenizer is not None else self.tokenizer
        ids, tags = [], []
        prepared, grids = self.prepare_images(images) if len(images) else ([], [])
        if prepared:
            vc = self.vision_config
            unit = vc.spatial_merge_size ** 2
            for i, (t, h, w) in enumerate(grids):
                label = list(tok.encode(f"<Picture {i + 1}>: "))
                block = [vc.vision_start_token_id] + [vc.image_token_id] * (t * h * w // unit) + [vc.vision_end_token_id]
                ids += label + block
                tags += [1] * len(label) + [0] * len(block)
        p = list(tok.encode(prompt))
        ids += p
        tags += [1] * len(p)
        return ids, np.asarray(tags, np.int64), prepared, grids

    def token_tags(self, input_ids):
        """Per-row tags of a token sequence: 0 for a vision block's rows (its image tokens and
        the <|vision_start|> / <|vision_end|> around them), 1 for text."""
        ids = np.asarray(input_ids).reshape(-1)
        tags = np.ones(ids.shape[0], np.int64)
        if not np.any(ids == self._image_token_id()):
            return tags
        vc = self.vision_config
        from .mrope import image_runs
        for s, e in image_runs(ids, vc.image_token_id):
            tags[s:e] = 0
            if s > 0 and ids[s - 1] == vc.vision_start_token_id:
                tags[s - 1] = 0
            if e < ids.shape[0] and ids[e] == vc.vision_end_token_id:
                tags[e] = 0
        return tags

    def _image_token_id(self):
        try:
            return self.vision_config.image_token_id
        except CheckpointError:
            return 151655

    # ---- the forward ---------------------------------------------------------------------
    def encode(self, input_ids, on_progress=None, cancel=None, images=None, return_tags=False):
        """``hidden_states[output_layer]`` of a token sequence (batch 1).

        Parameters
        ----------
        input_ids : sequence of int, shape (L,) (or (1, L))
        on_progress : callable(done, total, phase), optional — after vision blocks (phase
            "vision", when there are images) and layers (phase "encode"), at most ~20 times a
            second and always after the last one of each phase
        cancel : h3cy.CancelToken, optional — checked before each block and layer; raises Cancelled
        images : list, optional — keyframes (numpy (H, W, 3) uint8, paths or PIL images), one
            per run of ``<|image_pad|>`` tokens in ``input_ids``, in order; each run must hold
            the image's token count (:meth:`presentation` builds such ids).  Their embeddings
            from the vision tower replace those tokens', the tower's deepstack features are
            added to those rows after the first layers, and positions are Qwen3-VL's 3-D MRoPE
            ones, as transformers' ``Qwen3VLModel`` does with ``pixel_values``
        return_tags : bool — also return the per-row tags (:meth:`token_tags`)

        Returns
        -------
        ndarray of shape (L, hidden_size), float32 (bf16 values in bf16 mode); with
        return_tags, ``(states, tags int64 (L,))``
        """
        ids = np.asarray(input_ids)
        h = self.embed(ids)
        ids = ids.reshape(-1)
        S = h.shape[0]
        deep, rows = [], None
        if images is not None and len(images):
            prepared, grids = self.prepare_images(images)
            vc = self.vision_config
            from .mrope import positions_3d, mrope_tables
            pos = positions_3d(ids, grids, vc.image_token_id, vc.spatial_merge_size)
            cos, sin = mrope_tables(pos, self.inv_freq, self.config.mrope_section)
        else:
            if images is not None and not hasattr(images, "__len__"):
                raise H3ValueError("images must be a list (of numpy arrays, paths or PIL images)")
            prepared = []
            cos, sin = rope_tables(np.arange(S), self.inv_freq)
        total = self.num_layers
        eps = self.config.rms_norm_eps
        with self._run_lock:
            if prepared:
                vt = self.vision
                proc = self.image_processor
                pv = [proc(im) for im in prepared]
                embeds, deep = vt.forward(np.concatenate([p for p, _ in pv]), [g for _, g in pv],
                                          on_progress=on_progress, cancel=cancel)
                rows = np.flatnonzero(ids == vc.image_token_id).astype(np.int64)
                h[rows] = embeds
            ticker = Ticker(total, "encode", on_progress, cancel, what="encode")
            ticker.step = lambda: ticker.done
            ticker.check()
            for i, layer in enumerate(self._iter_layers()):
                need = layer.core.workspace_bytes(S) + 64
                if self._ws is None or self._ws.nbytes < need:
                    self._ws = None
                    self._ws = np.empty(need, np.uint8)
                layer.core.forward(h, eps, int(self.round_bf16), self._ws, cos, sin)
                if i < len(deep):     # deepstack: the tower's features join the image rows
                    _kernels.rows_add(h, rows, deep[i], int(self.round_bf16))
                ticker.tick()
            if total == 0 and on_progress is not None:
                on_progress(0, 0, "encode")
        if return_tags:
            return h, self.token_tags(ids)
        return h

    __call__ = encode

    def close(self):
        """Release the reader thread and the checkpoint mappings."""
        if self._stream_ex is not None:
            self._stream_ex.shutdown(wait=True)
            self._stream_ex = None
        self._source.close()

    def __repr__(self):
        return (f"TextEncoder({self.path!r}, weights={self.weights!r}, layers={self.num_layers}, "
                f"isa={self.isa!r}, threads={self.threads}, streaming={self.streaming})")
