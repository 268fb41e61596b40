"""Checkpoint tensors used in place by a linear (zero-copy), shared by the DiT and the text
encoder.

A linear in ``bf16`` mode multiplies bf16 checkpoint tensors as stored (its inputs are
rounded to bf16, so bf16 x bf16 kernels are exact); one in ``fp32`` mode multiplies bf16
tensors widened inside the kernel by float32 inputs exactly (``f32_exact``: never AMX's
or VDPBF16PS's bf16 x bf16 products) -- the fp32 weights the checkpoint stands for, at
half their memory -- or float32 tensors as stored.  A weight may come as up to three
tensors whose rows concatenate to it (``h3_linear_attach_parts``): the diffusers layout's
``to_q``/``to_k``/``to_v``, a SwiGLU ``[gate; value]`` pair from two tensors or halves.
"""
import numpy as np

from .. import _kernels

from .. import ops
from ..ops.bf16 import bf16_bits_to_f32


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
