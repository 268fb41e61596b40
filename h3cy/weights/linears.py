"""How every model builds its linears from checkpoint tensors: one policy for the DiT,
the text encoder and the decoders (:func:`make_linear`).

In order: a linear the converted-weight cache holds is mapped from it; a tensor whose
stored dtype the mode can use is used in place (zero-copy); anything else is converted in
this process (and added to the cache when one is being written).

A linear in ``bf16`` mode multiplies bf16 checkpoint tensors as stored (its inputs are
rounded to bf16, so bf16 x bf16 kernels are exact); one in ``fp32`` mode multiplies bf16
tensors widened inside the kernel by float32 inputs exactly (``f32_exact``: never AMX's
or VDPBF16PS's bf16 x bf16 products) -- the fp32 weights the checkpoint stands for, at
half their memory -- or float32 tensors as stored.  A weight may come as up to three
tensors whose rows concatenate to it (``h3_linear_attach_parts``): the diffusers layout's
``to_q``/``to_k``/``to_v``, a SwiGLU ``[gate; value]`` pair from two tensors or halves.

A weight stored quantised in the file (:class:`h3cy.weights.comfy_quant.Int8Weight`: Comfy's
``int8_tensorwise``, rotated or not) runs as stored in ``int8`` mode -- its int8 values
packed once, activations rotated when the file's are, quantised per row -- and is
dequantised for the other modes, which then convert it as any float weight.  An NVFP4
weight (:class:`~h3cy.weights.comfy_quant.Nvfp4Weight`) runs as stored on the NVFP4 GEMM in
the int modes (its codes and scales borrowed from the mapped file) and is dequantised for
the others.
"""
import logging

import numpy as np

from .. import _config, _kernels
from .. import ops
from ..ops.bf16 import bf16_bits_to_f32
from . import pages
from .comfy_quant import Int8Weight, Nvfp4Weight
from .gguf import GGUFWeight


# GGUF types the 'amx' path runs on the AVX-512 VNNI kernel: those whose scales are per 16
# values (on AMX twice the tile stores per product; the tile kernel measured 0.6-0.9x VNNI for
# them, 16-core SPR, session 26) and the IQ4s (tiles 0.70-0.95x VNNI in both rounds at M = 2048
# and 128, session 28)
_VNNI_ON_AMX = {"Q2_K", "Q3_K", "Q6_K", "IQ4_NL", "IQ4_XS"}


def gguf_isa(isa, types=()):
    """The path a GGUF linear of these type names runs on: ``isa``, except "amx", where the
    AMX tile kernel runs the types with one scale per 32 values and the AVX-512 VNNI kernel
    ("avx512") the others (Q2_K, Q3_K, Q6_K) and the IQ4s -- what measured fastest (docs/gguf.md);
    H3CY_GGUF_TILES=1 / 0 puts every type on the tiles / on VNNI (the same bits, for A/B)."""
    if isa != "amx":
        return isa
    tiles = _config.gguf_tiles()
    if tiles == "auto":
        return "avx512" if any(t in _VNNI_ON_AMX for t in types) else "amx"
    return "amx" if tiles == "on" else "avx512"


def _gguf_linear(w, mode, isa, pool, pair, bias):
    """A GGUF file's quantised rows (a :class:`~h3cy.weights.gguf.GGUFWeight` or a list of
    up to three, possibly of different types) as a linear over the blocks as stored, in the
    int modes ("auto" resolves to int8: a GGUF file runs as stored); None when they cannot
    (other modes, a type h3cy has no GEMM for, float parts mixed in): then the caller
    dequantises them and converts as any float weight."""
    parts = list(w) if isinstance(w, (list, tuple)) else [w]
    if (mode not in ("int8", "int4") or not 1 <= len(parts) <= 3
            or not all(isinstance(p, GGUFWeight) and p.runnable for p in parts)
            or len({p.shape for p in parts}) != 1 or (pair and len(parts) > 2)):
        return None
    N, K = parts[0].shape[0] * len(parts), parts[0].shape[1]
    core = _kernels.linear_attach_gguf([np.ascontiguousarray(p.blocks) for p in parts],
                                       [p.type_id for p in parts], N, K, bias, int(pair),
                                       gguf_isa(isa, [p.type_name for p in parts]), pool)
    return ops.Linear.from_core(core, mode, pool)


def _nvfp4_linear(w, mode, isa, pool, pair, bias):
    """NVFP4 weights (an :class:`~h3cy.weights.comfy_quant.Nvfp4Weight` or a list of up to
    three of one shape) as a linear over the file's codes and scales as stored, in the int
    modes ("auto" resolves to int8: a quantised file runs as stored); None in other modes.
    A layer the GEMM cannot take (K not a multiple of 32; no released layer) is dequantised,
    with a warning."""
    parts = list(w) if isinstance(w, (list, tuple)) else [w]
    if (mode not in ("int8", "int4") or not 1 <= len(parts) <= 3 or (pair and len(parts) > 2)
            or not all(isinstance(p, Nvfp4Weight) for p in parts) or len({p.shape for p in parts}) != 1):
        return None
    if not parts[0].runnable:
        logging.getLogger("h3cy").warning("%s: NVFP4 with K = %d (not a multiple of 32) is dequantised",
                                          parts[0].name, parts[0].shape[1])
        return None
    N, K = parts[0].shape[0] * len(parts), parts[0].shape[1]
    core = _kernels.linear_attach_nvfp4([p.c_part() for p in parts], N, K, bias, int(pair), isa, pool)
    route, min_rows = _config.nvfp4_route()       # H3CY_NVFP4_ROUTE: int8 on amx for A/B
    if route != "auto" or min_rows is not None:
        _kernels.linear_nvfp4_route(core, route, min_rows or 0)
    return ops.Linear.from_core(core, mode, pool)


def linear_in_place(w, mode, isa, pool, pair=False, bias=None):
    """An :class:`h3cy.ops.Linear` over ``w`` (an array, or a list of equal-shape arrays
    whose rows concatenate to the weight) without copying it, or None when this mode
    cannot use these tensors as stored (other modes, mixed dtypes, non-contiguous or
    more than three parts; the caller then converts)."""
    parts = list(w) if isinstance(w, (list, tuple)) else [w]
    dt = parts[0].dtype
    if (mode not in ("bf16", "fp32") or len(parts) > 3
            or not all(p.dtype == dt and p.ndim == 2 and p.flags.c_contiguous and p.shape == parts[0].shape
                       for p in parts)
            or not (dt == np.uint16 or (mode == "fp32" and dt == np.float32))):
        return None
    N, K = parts[0].shape[0] * len(parts), parts[0].shape[1]
    lay = dict(wtype=1 if dt == np.uint16 else 0, group_size=0, act_group=0, pair=int(pair), nr=0,
               N=N, K=K, Kp=K, w_bytes=N * K * dt.itemsize, s_bytes=0,
               bf16_inputs=int(mode == "bf16"), f32_exact=int(mode == "fp32"))
    core = _kernels.linear_attach(lay, parts if len(parts) > 1 else parts[0], None, bias, isa, pool)
    return ops.Linear.from_core(core, mode, pool)


def joined_rows(w):
    """The weight as one array, for the modes that convert it: ``w`` itself, or its parts'
    rows concatenated -- as float32 when the parts' dtypes differ, so that bf16 bits
    (uint16) are never concatenated with float32 values."""
    if not isinstance(w, (list, tuple)):
        return w
    if len(w) == 1:
        return w[0]
    if len({a.dtype for a in w}) > 1:
        w = [bf16_bits_to_f32(a) if a.dtype == np.uint16 else np.asarray(a, np.float32) for a in w]
    return np.concatenate(w)


def int4_group(K, act_group=None):
    """The int4 weight group along K: 128 where K allows (the released shapes do), else 64 or
    32, and one that divides the activation group (an activation scale must cover whole
    weight groups); 32 when none fits (K is padded to it)."""
    for gs in (128, 64, 32):
        if K % gs == 0 and (act_group is None or act_group % gs == 0):
            return gs
    return 32


def make_linear(w, compute, *, mode=None, name=None, cache=None, bias=None, pair=False,
                act_group=None, in_place=True):
    """``(Linear, attached)``: the weight ``w`` ((N, K) float32 or bf16 bits, or a list of
    arrays whose rows concatenate to it) as a linear in ``compute``'s mode, path and pool.

    mode : this linear's weights mode when the component keeps it in another than
        ``compute.weights`` (the decoders' small projections stay fp32)
    name : the linear's name in the converted-weight cache (None: not cached)
    cache : ``(reader, writer)`` of the load's weights.cache.ComponentCache, or None
    bias : (N,) float32 or None
    pair : rows are [gate; value] halves (for the SwiGLU epilogue)
    act_group : int8/int4 input channels per activation scale (None: the whole row)
    in_place : False converts even tensors the mode could use as stored (tests of the
        converting path)

    ``attached`` is True when no weight was copied (mapped from the cache or the checkpoint).
    A linear that was copied (converted or packed) no longer reads ``w``: the pages of ``w``
    that the conversion brought in are dropped from this process's resident set, so a
    converting load holds about its packed weights, not those plus the file (#21: the
    int8-convrot DiT held 2x its file size before).
    """
    lin, attached = _make_linear(w, compute, mode=mode, name=name, cache=cache, bias=bias, pair=pair,
                                 act_group=act_group, in_place=in_place)
    if not attached:
        _release_source(w)
    return lin, attached


def _release_source(w):
    arrays = []
    for p in (w if isinstance(w, (list, tuple)) else [w]):
        if isinstance(p, Int8Weight):
            arrays += [p.q, p.scales]
        elif isinstance(p, np.ndarray):
            arrays.append(p)
    pages.release(arrays)


def _make_linear(w, compute, *, mode, name, cache, bias, pair, act_group, in_place):
    mode, isa, pool = mode or compute.weights, compute.isa, compute.pool
    if isinstance(w, GGUFWeight) or (isinstance(w, (list, tuple)) and any(isinstance(p, GGUFWeight) for p in w)):
        lin = _gguf_linear(w, mode, isa, pool, pair, bias)
        if lin is not None:
            return lin, True
        w = ([p.dequantized() if isinstance(p, GGUFWeight) else p for p in w]
             if isinstance(w, (list, tuple)) else w.dequantized())
    if isinstance(w, Nvfp4Weight) or (isinstance(w, (list, tuple)) and any(isinstance(p, Nvfp4Weight) for p in w)):
        lin = _nvfp4_linear(w, mode, isa, pool, pair, bias)
        if lin is not None:
            return lin, True
    if isinstance(w, Nvfp4Weight):     # a float mode: the float weight it stands for
        w = w.dequantized(isa, pool)
    if isinstance(w, (list, tuple)) and any(isinstance(p, Nvfp4Weight) for p in w):
        w = [p.dequantized(isa, pool) if isinstance(p, (Int8Weight, Nvfp4Weight)) else p for p in w]
    if isinstance(w, (list, tuple)) and any(isinstance(p, Int8Weight) for p in w):
        if len(w) == 1:
            w = w[0]
        elif all(isinstance(p, Int8Weight) for p in w) and len({p.rot_group for p in w}) == 1:
            w = Int8Weight.concat(w)          # rows of one linear (a SwiGLU gate/up pair)
        else:                                 # mixed storage: the float weight they stand for
            w = [p.dequantized(isa, pool) if isinstance(p, Int8Weight) else p for p in w]
    if isinstance(w, Int8Weight):
        if mode == "int8":
            # as stored: the file's int8 values and scales, packed once (not cached: packing
            # is a reshuffle).  Activation scales per whole row, as the format defines them.
            return ops.Linear.from_int8(np.ascontiguousarray(w.q), w.scales, bias=bias,
                                        rot_group=w.rot_group or None, pair=pair, isa=isa,
                                        threads=pool), False
        w = w.dequantized(isa, pool)
    reader, writer = cache if cache is not None else (None, None)
    if reader is not None and name is not None and name in reader:
        return ops.Linear.from_core(reader.attach(name, bias, isa, pool), mode, pool), True
    if in_place:
        lin = linear_in_place(w, mode, isa, pool, pair=pair, bias=bias)
        if lin is not None:
            return lin, True
    w = joined_rows(w)
    if w.dtype == np.float16:
        w = w.astype(np.float32)
    kw = {}
    if act_group is not None and mode in ("int8", "int4"):
        kw["act_group"] = act_group
    if mode == "int4":
        kw["group_size"] = int4_group(w.shape[1], act_group)
    lin = ops.Linear(np.ascontiguousarray(w), bias=bias, weights=mode, isa=isa,
                     weight_dtype="bf16" if w.dtype == np.uint16 else "fp32", threads=pool, pair=pair,
                     bf16_inputs=mode == "bf16", **kw)
    if writer is not None and name is not None:
        writer.add(name, lin.core)
    return lin, False
