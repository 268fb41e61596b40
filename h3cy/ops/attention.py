"""h3cy.ops — multi-head self-attention (re-exported by h3cy.ops).

``out = softmax(q @ k.T * scale) @ v`` per head, computed with the online (flash)
softmax in float32: memory is O(S * D), never an S x S matrix.

>>> import numpy as np, h3cy
>>> rng = np.random.default_rng(0)
>>> q = rng.standard_normal((100, 4, 64), dtype=np.float32)
>>> kv = rng.standard_normal((100, 2, 64), dtype=np.float32)
>>> att = h3cy.ops.Attention(causal=True)
>>> out = att(q, kv, kv)                       # (100, 4, 64); att.isa names the path
"""
import math

import numpy as np

from .. import _kernels
from ..errors import H3ValueError
from ._base import pool_for, resolve_isa

__all__ = ["Attention", "attention", "attention_workspace_bytes", "MAX_HEAD_DIM"]

MAX_HEAD_DIM = 256


def _rows(x, name, heads=None, d=None, S=None):
    """Check a (S, heads, D) float32 array whose rows are each C-contiguous; the row
    stride may be larger (a view into a fused QKV buffer).  Never copies."""
    if not isinstance(x, np.ndarray):
        raise H3ValueError(f"{name} must be a numpy array, got {type(x).__name__}")
    if x.dtype != np.float32:
        raise H3ValueError(f"{name} must be float32, got {x.dtype.name}")
    if x.ndim != 3:
        raise H3ValueError(f"{name} must have shape (S, heads, D), got shape {x.shape}")
    want = (S, heads, d)
    if any(w is not None and w != g for w, g in zip(want, x.shape)):
        raise H3ValueError(f"{name} has shape {x.shape}, expected "
                           f"({', '.join('?' if w is None else str(w) for w in want)})")
    it = x.itemsize
    if x.shape[0] > 0 and (x.strides[2] != it or x.strides[1] != x.shape[2] * it
                           or (x.shape[0] > 1 and (x.strides[0] < x.shape[1] * x.shape[2] * it
                                                   or x.strides[0] % it))):
        raise H3ValueError(f"{name} must be C-contiguous within each row (strides "
                           f"{x.strides}); use np.ascontiguousarray")
    return x


class Attention:
    """Multi-head self-attention over one sequence, online softmax in float32.

    ``out[i, h] = sum_j softmax_j(scale * q[i, h] . k[j, g]) v[j, g]`` with kv head
    ``g = h // (Hq // Hkv)`` (grouped-query attention); ``causal`` limits row i to keys
    ``j <= i``.

    Parameters
    ----------
    scale : float, optional
        Score scale; default ``1 / sqrt(D)``.
    causal : bool, default False
    isa : str, optional
        Kernel path (``ref``, ``avx2``, ``avxvnni``, ``avx512``, ``amx``, ``neon``); default the
        process default (see :mod:`h3cy.ops`).  ``amx`` runs the AVX-512 attention.
    threads : int, optional
        Threads of the shared pool; default the process default.
    bf16 : bool, default False
        Multiply q, k, v as bf16 (rounded to nearest even) and round the softmax
        numerators to bf16, summing in float32, where the CPU has bf16 dot products (AMX,
        AVX512-BF16) and the attention is non-causal with D a multiple of 32 up to 256;
        elsewhere the float32 kernels run.  Exact for bf16-valued inputs.

    Attributes
    ----------
    isa : str
        The path every call runs.
    threads : int
    """

    def __init__(self, *, scale=None, causal=False, isa=None, threads=None, bf16=False):
        if scale is not None and not (isinstance(scale, (int, float, np.floating))
                                      and math.isfinite(scale)):
            raise H3ValueError(f"scale must be a finite number, got {scale!r}")
        self.scale = None if scale is None else float(scale)
        self.causal = bool(causal)
        self.bf16 = bool(bf16)
        self.isa = resolve_isa(isa)
        self._pool = pool_for(threads)

    @property
    def threads(self):
        return self._pool.threads

    def workspace_bytes(self, S, Hq, Hkv, D):
        """Scratch bytes one call allocates (per-thread tiles; independent of S)."""
        return attention_workspace_bytes(S, Hq, Hkv, D, self.threads)

    def __call__(self, q, k, v, out=None):
        """Attention of q against k, v.

        Parameters
        ----------
        q : ndarray of shape (S, Hq, D), float32
        k, v : ndarray of shape (S, Hkv, D), float32
            ``Hq % Hkv == 0``, ``D <= 256``.  Each array must be C-contiguous within a
            row; rows may be strided, e.g. ``q = qkv[:, 0]`` for ``qkv`` of shape
            (S, 3, H, D).
        out : ndarray of shape (S, Hq, D), float32, optional
            Written in place and returned.  May be ``q`` itself; must not overlap k or v.

        Returns
        -------
        out : ndarray of shape (S, Hq, D), float32
        """
        _rows(q, "q")
        S, Hq, D = q.shape
        if not 1 <= D <= MAX_HEAD_DIM:
            raise H3ValueError(f"head dim D must be in 1..{MAX_HEAD_DIM}, got {D}")
        _rows(k, "k", None, D, S)
        Hkv = k.shape[1]
        _rows(v, "v", Hkv, D, S)
        if Hq == 0 or Hkv == 0 or Hq % Hkv != 0:
            raise H3ValueError(f"q heads ({Hq}) must be a positive multiple of k/v heads ({Hkv})")
        if out is None:
            out = np.empty((S, Hq, D), dtype=np.float32)
        else:
            _rows(out, "out", Hq, D, S)
            if not out.flags.writeable:
                raise H3ValueError("out is read-only")
        if S == 0:
            return out
        scale = self.scale if self.scale is not None else 1.0 / math.sqrt(D)
        _kernels.attention(q, k, v, out, scale, self.causal, self.isa, self._pool, self.bf16)
        return out

    def __repr__(self):
        return (f"Attention(causal={self.causal}, scale={self.scale}, isa={self.isa!r}, "
                f"threads={self.threads})")


def attention(q, k, v, *, scale=None, causal=False, out=None, isa=None, threads=None):
    """``softmax(q k^T * scale) v`` per head: q (S, Hq, D), k/v (S, Hkv, D) -> (S, Hq, D).

    A one-call form of :class:`Attention` (see there for the parameters); use the class
    to learn which path ran (``Attention(...).isa``).
    """
    return Attention(scale=scale, causal=causal, isa=isa, threads=threads)(q, k, v, out=out)


def attention_workspace_bytes(S, Hq, Hkv, D, threads=1):
    """Scratch bytes an attention call with these sizes allocates: per-thread query/key
    tiles, O(threads * D) and independent of S (0 for invalid sizes)."""
    return int(_kernels.attn_workspace_bytes(int(S), int(Hq), int(Hkv), int(D), int(threads)))
