"""LoRAs merged into the weights (``DiT.load_lora(..., merge=True)``): each adapted linear
becomes ``W' = W + sum_i s_i B_i A_i`` with ``W`` the base as the model holds it
(dequantised), requantised into the same weights mode (int8/int4 with the base's group
and activation-group options, fp16, bf16 or fp32), so that a step costs what the bare base
costs (the run-time addend costs its down and up products on every call).

The merged linears of fp16/int8/int4 models are written to a weight-cache file
(:mod:`h3cy.weights.cache`) keyed by the base weights (the base's own cache key when
loaded by ``from_pretrained``, else a hash of the base's packed bytes), the LoRAs' content
(a hash of every A and B), their effective scales, the mode and the kernel layout; a later
merge of the same LoRAs at the same strengths maps that file instead of requantising.
The base linears are kept: unloading a merged LoRA gives the base back bit for bit.

A GGUF base (``weights="auto"`` on a ``.gguf`` file runs its blocks as stored in the int8
mode) is merged into h3cy's int8: ``W`` is the dequantised blocks, ``W'`` is quantised per
output channel as any int8 linear (no GGUF block type is written back: requantising into
the file's own Q4_K/Q6_K... would need their quantisers, and int8 keeps more of the
adapted weights).  The adapted linears then cost ~1 byte per weight instead of the file's
0.5-1.06.
"""
import hashlib
import json
import os

import numpy as np

from .. import _kernels, ops
from ..errors import H3ValueError
from .cache import CACHED_MODES, CacheWriter, open_cache

__all__ = ["lora_hash", "merge_key", "merged_linears"]

MERGE_FORMAT = 1


def lora_hash(modules):
    """sha256 over a LoRA's modules (target, scale, A and B bytes): its content, whatever
    the file's name or key layout."""
    h = hashlib.sha256()
    for m in modules:
        h.update(m.target.encode())
        h.update(np.float64(m.scale).tobytes())
        h.update(np.ascontiguousarray(m.a).tobytes())
        h.update(np.ascontiguousarray(m.b).tobytes())
    return h.hexdigest()


def merge_key(base_key, pieces, isa):
    """The cache key of one merged set: ``pieces`` {target: [(lora hash, scale), ...]}
    (the base key covers the weights mode)."""
    d = {"base": base_key, "nr": _kernels.int_panel_width(isa),
         "isa_family": "amx" if isa == "amx" else "simd", "format": MERGE_FORMAT,
         "pieces": {t: [[h, float(s)] for h, s in ps] for t, ps in sorted(pieces.items())}}
    return hashlib.sha256(json.dumps(d, sort_keys=True).encode()).hexdigest()


def base_bytes_key(cores):
    """A base key from the packed bytes of the base linears ({target: LinearCore}): for
    models built without a checkpoint's cache key (random or synthetic weights)."""
    h = hashlib.sha256()
    for t in sorted(cores):
        h.update(t.encode())
        exported = _exported(cores[t])
        if exported is None:         # a GGUF linear: its dequantised weights
            h.update(cores[t].dequantized().tobytes())
            continue
        layout, wb, sb = exported
        h.update(json.dumps(layout, sort_keys=True).encode())
        h.update(wb.tobytes())
        if sb is not None:
            h.update(sb.tobytes())
    return h.hexdigest()


def _exported(core):
    """core.export(), or None for a GGUF linear (it reads the file's blocks: no layout of
    its own; ``weights="auto"`` runs GGUF files in the int8 mode, so a merge requantises
    its linears into h3cy's int8 with the default options)."""
    try:
        return core.export()
    except H3ValueError:
        return None


def _merged(lin, core, pieces, pool):
    """One merged Linear: lin's mode and options over core's weights plus the pieces
    [(LoraModule, scale)]."""
    if lin.weights not in ("fp32", "fp16", "bf16", "int8", "int4"):
        raise H3ValueError(f"merge=True: a {lin.weights} linear cannot be requantised; load the LoRA "
                           "without merge")
    if core.lora is not None:
        raise AssertionError("the base core of a merge must carry no run-time LoRA")
    w = core.dequantized().astype(np.float64)
    for m, s in pieces:
        w += float(s) * (m.b.astype(np.float64) @ m.a.astype(np.float64))
    bias = _bias_of(core)
    kw = {}
    exported = _exported(core) if lin.weights in ("int8", "int4") else None
    if exported is not None:
        # the base's int4 group and activation groups, from its C layout (a Linear mapped
        # from a weight cache does not carry them in Python)
        lay = exported[0]
        if lin.weights == "int4" and lay["group_size"]:
            kw["group_size"] = int(lay["group_size"])
        ag = int(lay["act_group"] or 0)
        if 0 < ag < core.K:
            kw["act_group"] = ag
    out = ops.Linear(np.ascontiguousarray(w, np.float32), bias=bias, weights=lin.weights, isa=core.isa,
                     threads=pool, pair=bool(core.pair), bf16_inputs=lin.weights == "bf16", **kw)
    return out


def merged_linears(targets, pieces, key, cache_dir, pool):
    """({target: ops.Linear} merged, the CacheReader the cached ones were mapped from or None).

    targets : {target: (lin, base core)} — the model's Linear (its mode and options) and
        the base LinearCore to merge into
    pieces : {target: [(LoraModule, scale), ...]}
    key : merge_key(...) of this set, or None (nothing cached).  Only fp16/int8/int4
        linears are cached (float32 and bf16 merges are one addition, not worth a file).
    """
    cached = {t: v for t, v in targets.items() if v[0].weights in CACHED_MODES} if key is not None else {}
    out, reader = {}, None
    if cached:
        os.makedirs(cache_dir, exist_ok=True)
        path = os.path.join(cache_dir, f"h3cy-lora-merged-{key[:20]}.h3w")
        reader = open_cache(path, key)
        if reader is not None and all(t in reader for t in cached):
            for t, (lin, core) in cached.items():
                bias = _bias_of(core) if reader.entries[t].get("bias") else None
                out[t] = ops.Linear.from_core(reader.attach(t, bias, core.isa, pool), lin.weights, pool,
                                              group_size=lin.group_size, act_group=lin.act_group)
        else:
            reader = None
            writer = CacheWriter(path, key)
            try:
                for t, (lin, core) in cached.items():
                    out[t] = _merged(lin, core, pieces[t], pool)
                    writer.add(t, out[t].core)
                    writer.entries[t]["bias"] = _bias_of(core) is not None
                writer.finish()
            except BaseException:
                writer.abort()
                raise
    for t, (lin, core) in targets.items():
        if t not in out:
            out[t] = _merged(lin, core, pieces[t], pool)
    return out, reader


def _bias_of(core):
    """The base's bias, exactly: its output for x = 0 (0 quantises to 0 in every mode, and
    the base core carries no run-time LoRA here)."""
    b = np.zeros((1, core.N), np.float32)
    core.forward(np.zeros((1, core.K), np.float32), b, 0)
    return b[0] if np.any(b) else None
