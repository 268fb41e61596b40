"""Read a LoRA file for the MiniMax-H3 transformer and map it onto h3cy's linears.

A LoRA adapts a linear ``y = x W^T`` to ``y = x W^T + s (x A^T) B^T`` with ``A`` (r, K),
``B`` (N, r) and ``s = alpha / r``.  h3cy never merges it into ``W``: the transformer
attaches the pairs to its linears as low-rank addends run inside the GEMM
(:meth:`h3cy.DiT.load_lora`), so the base stays int8/int4/bf16 and untouched.

Key layouts read (every one on diffusers, original/Comfy or kohya-underscore module names,
behind any of the prefixes in ``PREFIXES``):

* diffusers / PEFT (``save_lora_adapter``, ``save_lora_weights``):
  ``<module>.lora_A.weight`` / ``<module>.lora_B.weight``; alpha from the file's
  ``lora_adapter_metadata`` (``lora_alpha``, ``alpha_pattern``, ``use_rslora``; the
  pipeline-level ``transformer.``-prefixed spelling too), else ``alpha = r``;
* kohya / ComfyUI: ``<module>.lora_down.weight`` / ``<module>.lora_up.weight`` (also
  ``lora.down``/``lora.up``, ``lora_linear_layer.down``/``up``) and ``<module>.alpha``;
  ``lora_A``/``lora_B`` behind ``diffusion_model.`` as ComfyUI's own LoRA saver writes them.

Module names are the ones ``h3cy.weights.transformer.expected_tensors`` lists for the
checkpoint (diffusers and original spellings of every linear).  Rows are mapped to the
linear h3cy runs: ``to_q``/``to_k``/``to_v`` into the fused QKV (interleaved per head or
stacked, as the base stores it), diffusers' ``ff.net.0.proj`` ``[value; gate]`` into the
``[gate; value]`` SwiGLU pair, and an original-name ``attn.qkv_proj`` is read as ComfyUI's
model holds it, stacked ``[q; k; v]``.  Any key that is not one of these, a module the model
does not have, an ``A`` without its ``B`` or a shape that disagrees raises
:class:`h3cy.CheckpointError` naming the keys, before anything is applied.
"""
import json
import math
import os
from dataclasses import dataclass

import numpy as np

from ..ops.bf16 import bf16_bits_to_f32
from .files import checkpoint_error
from .safetensors import SafetensorsFile
from .transformer import TransformerConfig, expected_tensors

__all__ = ["LoraModule", "read_lora", "lora_targets"]

# stripped from the front of a module name, tried in this order
PREFIXES = ("", "transformer.", "diffusion_model.", "model.diffusion_model.", "base_model.model.",
            "model.")
# kohya's underscore spelling: "lora_unet_" + module name with "." -> "_"
UNDERSCORE_PREFIXES = ("lora_unet_", "lora_transformer_")
_DOWN = (".lora_A.weight", ".lora_down.weight", ".lora.down.weight", ".lora_linear_layer.down.weight")
_UP = (".lora_B.weight", ".lora_up.weight", ".lora.up.weight", ".lora_linear_layer.up.weight")
_ALPHA = ".alpha"
METADATA_KEY = "lora_adapter_metadata"


@dataclass
class LoraModule:
    """One adapted linear of a LoRA file, in h3cy's terms.

    key : str — the module as the file names it (for messages)
    target : str — the h3cy linear it adapts (``transformer_blocks.3.attn.qkv``, ...)
    a : (r, K) float32
    b : (N, r) float32 — rows in the target linear's logical order, zero where the module
        does not reach (to_q's rows of the fused QKV)
    scale : float — alpha / r (alpha / sqrt(r) for rsLoRA)
    """
    key: str
    target: str
    a: np.ndarray
    b: np.ndarray
    scale: float


def lora_targets(config, qkv_layout):
    """Every module name a LoRA may use -> (target linear, rows, N, K): ``rows`` maps the
    module's output rows to the target's logical rows (None: the same rows).

    config : the transformer config (dict in diffusers or original spelling)
    qkv_layout : "interleaved" | "stacked" — how the base's fused QKV rows are ordered
    """
    cfg = config if isinstance(config, TransformerConfig) else TransformerConfig.from_dict(dict(config))
    I, D, F = cfg.inner_dim, cfg.attention_head_dim, cfg.ffn_dim
    # our logical QKV row of (part p, row i of to_p)
    i = np.arange(I)
    if qkv_layout == "interleaved":
        qkv_rows = [(i // D) * 3 * D + p * D + (i % D) for p in range(3)]
    else:
        qkv_rows = [p * I + i for p in range(3)]
    stacked_to_ours = np.concatenate(qkv_rows)       # a stacked [q; k; v] row r -> ours
    swap = np.concatenate([np.arange(F) + F, np.arange(F)])   # [value; gate] row -> [gate; value]
    out = {}
    for dname, oname, shape, role in expected_tensors(cfg):
        if not dname.endswith(".weight") or len(shape) != 2:
            continue
        dmod, omod = dname[:-len(".weight")], oname[:-len(".weight")]
        N, K = shape
        if role is None:
            out[dmod] = out[omod] = (dmod, None, N, K)
        elif role[0] == "qkv":
            block = dmod[:-len(".to_q")]                       # "<prefix>.attn"
            out[dmod] = (block + ".qkv", qkv_rows[role[1]], N, K)
            out[omod] = (block + ".qkv", stacked_to_ours, 3 * I, K)
        else:                                                   # ("ff", None)
            block = dmod[:-len(".net.0.proj")]                 # "<prefix>.ff"
            out[dmod] = (block + ".gate_value", swap, N, K)
            out[omod] = (block + ".gate_value", None, N, K)
    return out


def _f32(arr):
    if arr.dtype == np.uint16:
        return bf16_bits_to_f32(arr)
    return np.ascontiguousarray(arr, dtype=np.float32)


def _lora_file(path):
    path = os.fspath(path)
    if os.path.isdir(path):
        names = sorted(n for n in os.listdir(path) if n.endswith(".safetensors"))
        if "pytorch_lora_weights.safetensors" in names:
            names = ["pytorch_lora_weights.safetensors"]
        if len(names) != 1:
            raise checkpoint_error(path, None, f"a LoRA folder must hold one .safetensors file, found {names}")
        path = os.path.join(path, names[0])
    if not os.path.isfile(path):
        raise checkpoint_error(path, None, "LoRA file not found")
    return path


def _peft_metadata(meta):
    """lora_alpha, alpha_pattern, use_rslora from diffusers' metadata (or Nones)."""
    raw = meta.get(METADATA_KEY)
    if raw is None:
        return None, {}, False
    d = json.loads(raw)
    if any(k.startswith("transformer.") for k in d):   # save_lora_weights: pipeline-level keys
        d = {k[len("transformer."):]: v for k, v in d.items() if k.startswith("transformer.")}
    if d.get("use_dora"):
        raise ValueError("DoRA adapters (use_dora) are not supported")
    return d.get("lora_alpha"), dict(d.get("alpha_pattern") or {}), bool(d.get("use_rslora"))


def _resolve(module, targets, underscore):
    for p in PREFIXES:
        if module.startswith(p) and module[len(p):] in targets:
            return module[len(p):]
    for p in UNDERSCORE_PREFIXES:
        if module.startswith(p) and module[len(p):] in underscore:
            return underscore[module[len(p):]]
    return None


def read_lora(path, config, qkv_layout):
    """Parse a LoRA file (or a folder holding one) against a transformer config.

    Returns a list of :class:`LoraModule`.  Raises :class:`h3cy.CheckpointError` naming the
    offending keys (unknown layout, unmatched module, missing half, wrong shape).
    """
    path = _lora_file(path)
    targets = lora_targets(config, qkv_layout)
    underscore = {k.replace(".", "_"): k for k in targets}
    with SafetensorsFile(path) as f:
        try:
            peft_alpha, alpha_pattern, rslora = _peft_metadata(f.metadata)
        except (ValueError, TypeError) as e:
            raise checkpoint_error(path, METADATA_KEY, str(e)) from None
        parts, unknown = {}, []
        for key in f.keys():
            for kind, sufs in (("down", _DOWN), ("up", _UP), ("alpha", (_ALPHA,))):
                suf = next((s for s in sufs if key.endswith(s)), None)
                if suf is not None:
                    parts.setdefault(key[:-len(suf)], {})[kind] = key
                    break
            else:
                unknown.append(key)
        if unknown:
            raise checkpoint_error(path, None, f"{len(unknown)} keys are not LoRA down/up/alpha tensors "
                                               f"(nothing applied): {_names(unknown)}")
        modules, unmatched = [], []
        for module, kinds in parts.items():
            name = _resolve(module, targets, underscore)
            if name is None:
                unmatched.append(module)
                continue
            if "down" not in kinds or "up" not in kinds:
                raise checkpoint_error(path, module, "has " + " and ".join(sorted(kinds)) +
                                       " but not both the down (A) and up (B) weights")
            target, rows, N, K = targets[name]
            a, b = _f32(f.get(kinds["down"])), _f32(f.get(kinds["up"]))
            if a.ndim != 2 or b.ndim != 2 or a.shape[1] != K or b.shape[0] != N or b.shape[1] != a.shape[0]:
                raise checkpoint_error(path, module, f"A {a.shape} and B {b.shape} do not fit a "
                                                     f"({N}, {K}) linear: expected A (r, {K}), B ({N}, r)")
            r = a.shape[0]
            if "alpha" in kinds:
                alpha = float(_f32(np.asarray(f.get(kinds["alpha"]))).reshape(-1)[0])
            else:
                alpha = _pattern_alpha(name, alpha_pattern, peft_alpha)
            scale = 1.0 if alpha is None else (alpha / math.sqrt(r) if rslora else alpha / r)
            tgt_n = _target_rows(targets, target)
            if rows is None and tgt_n == N:
                bb = np.ascontiguousarray(b)
            else:
                bb = np.zeros((tgt_n, r), np.float32)
                bb[np.arange(N) if rows is None else rows] = b
            modules.append(LoraModule(module, target, np.ascontiguousarray(a), bb, float(scale)))
        if unmatched:
            raise checkpoint_error(path, None, f"{len(unmatched)} LoRA modules match no linear of this "
                                               f"transformer (nothing applied): {_names(unmatched)}")
        if not modules:
            raise checkpoint_error(path, None, "holds no LoRA weights")
    return modules


def _target_rows(targets, target):
    """Logical rows of an h3cy linear (the fused QKV: 3 x inner)."""
    for name, (t, rows, N, K) in targets.items():
        if t == target and rows is None:
            return N
    return max(N if rows is None else int(rows.max()) + 1
               for t, rows, N, K in targets.values() if t == target)


def _pattern_alpha(module, pattern, default):
    """PEFT's alpha_pattern: a key matching the module name (whole, or its tail after a dot)."""
    for k, v in pattern.items():
        if module == k or module.endswith("." + k):
            return float(v)
    return None if default is None else float(default)


def _names(keys, n=8):
    keys = sorted(keys)
    return ", ".join(keys[:n]) + (f" and {len(keys) - n} more" if len(keys) > n else "")
