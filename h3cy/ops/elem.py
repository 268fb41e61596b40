"""h3cy.ops — element-wise and row ops, and number-format conversions.

Every function takes ``isa=None`` (the process default, see :func:`h3cy.ops.resolve_isa`)
and ``threads=None`` (the configured thread count; work is split over rows).  The C
entry reports which kernels ran; each function checks that this is the path it asked
for (``amx`` runs the AVX-512 kernels) and raises :class:`~h3cy.errors.H3Error`
otherwise, so a test that passes ``isa="avx2"`` has proved that AVX2 code ran.

Inputs must be C-contiguous arrays of the stated dtype; nothing is copied.  Outputs
are new arrays unless ``out=`` is given; where stated, ``out`` may be the input itself.
"""
import numpy as np

from .. import _kernels as _k
from ..errors import H3Error, H3ValueError
from ._base import need_array, out_array, pool_for, resolve_isa

__all__ = ["rms_norm", "rope", "silu", "gelu_tanh", "swiglu", "adaln_modulate",
           "to_bf16", "from_bf16", "to_f16", "from_f16", "elem_kernel_isa", "hadamard"]

_DT_F32, _DT_BF16, _DT_F16 = 0, 1, 2
_ACT_SILU, _ACT_GELU_TANH = 0, 1


def elem_kernel_isa(isa=None):
    """Name of the kernel set the element-wise ops run for ``isa`` (``amx`` -> ``avx512``:
    the C library's h3_isa_vector)."""
    return _k.isa_vector(resolve_isa(isa))


def _run(fn, isa, threads, *args):
    """Call a _kernels.elem_* wrapper on the resolved path and check the path that ran."""
    name = resolve_isa(isa)
    ran = fn(*args, name, pool_for(threads))
    want = _k.isa_vector(name)
    if ran != want:
        raise H3Error(f"{fn.__name__}: asked for the {name!r} path but the {ran!r} kernels ran")


def _rows2d(a, n):
    """View a C-contiguous array as (rows, n) without copying."""
    return a.reshape(-1, n) if a.size else a.reshape(0, n)


def rms_norm(x, weight=None, eps=1e-6, out=None, isa=None, threads=None):
    """RMSNorm over the last axis: ``x * (1 / sqrt(mean(x**2) + eps)) * weight``.

    Float32 in torch's operation order (as diffusers' ``RMSNorm``).

    Parameters
    ----------
    x : ndarray of shape (..., n), float32
    weight : ndarray of shape (n,), float32, optional
    eps : float, default 1e-6
    out : ndarray of shape (..., n), float32, optional
        May be ``x`` itself (in place).

    Returns
    -------
    out : ndarray of shape (..., n), float32
    """
    need_array(x, "x", np.float32)
    if x.ndim < 1:
        raise H3ValueError("x must have at least 1 dimension, got a scalar")
    n = x.shape[-1]
    if weight is not None:
        need_array(weight, "weight", np.float32, 1, (n,))
    out = out_array(out, "out", x.shape)
    _run(_k.elem_rmsnorm, isa, threads, _rows2d(x, n), weight, _rows2d(out, n), float(eps))
    return out


def rope(x, cos, sin, rot_dim=None, isa=None, threads=None):
    """Rotate-half RoPE, in place, on the first ``rot_dim`` channels of every head.

    With ``half = rot_dim // 2``, ``x1 = x[..., :half]``, ``x2 = x[..., half:rot_dim]``:
    ``x[..., :half] = x1*cos - x2*sin`` and ``x[..., half:rot_dim] = x2*cos + x1*sin``,
    i.e. torch's ``x*cos + rotate_half(x)*sin`` with cos/sin repeated over both halves.

    Parameters
    ----------
    x : ndarray of shape (rows, heads, head_dim), float32, modified in place
    cos, sin : ndarray of shape (rows, rot_dim // 2), float32
        Per-row angle tables (one row per sequence position of x).
    rot_dim : int, optional
        Even, ``2 <= rot_dim <= head_dim``; default ``2 * cos.shape[1]``.

    Returns
    -------
    x : the same array
    """
    need_array(x, "x", np.float32, 3)
    if not x.flags.writeable:
        raise H3ValueError("x is read-only (rope works in place)")
    rows, heads, head_dim = x.shape
    need_array(cos, "cos", np.float32, 2)
    if rot_dim is None:
        rot_dim = 2 * cos.shape[1]
    if isinstance(rot_dim, bool) or not isinstance(rot_dim, (int, np.integer)):
        raise H3ValueError(f"rot_dim must be an int, got {rot_dim!r}")
    rot_dim = int(rot_dim)
    if rot_dim < 2 or rot_dim % 2 or rot_dim > head_dim:
        raise H3ValueError(f"rot_dim must be even and in [2, head_dim = {head_dim}], got {rot_dim}")
    need_array(cos, "cos", np.float32, 2, (rows, rot_dim // 2))
    need_array(sin, "sin", np.float32, 2, (rows, rot_dim // 2))
    _run(_k.elem_rope, isa, threads, x, cos, sin, rot_dim)
    return x


def _act(x, out, act, isa, threads):
    need_array(x, "x", np.float32)
    out = out_array(out, "out", x.shape)
    _run(_k.elem_activation, isa, threads, x.reshape(-1), out.reshape(-1), act)
    return out


def silu(x, out=None, isa=None, threads=None):
    """SiLU ``x / (1 + exp(-x))`` element-wise.

    x : ndarray of any shape, float32; out : same shape (may be ``x``).  Returns out.
    """
    return _act(x, out, _ACT_SILU, isa, threads)


def gelu_tanh(x, out=None, isa=None, threads=None):
    """GELU, tanh approximation (torch ``gelu(approximate="tanh")``), element-wise:
    ``0.5 x (1 + tanh(sqrt(2/pi) (x + 0.044715 x**3)))``.

    x : ndarray of any shape, float32; out : same shape (may be ``x``).  Returns out.
    """
    return _act(x, out, _ACT_GELU_TANH, isa, threads)


def swiglu(x, out=None, isa=None, threads=None):
    """SwiGLU of a ``[gate; value]`` pair along the last axis: ``silu(g) * v``.

    Parameters
    ----------
    x : ndarray of shape (..., 2h), float32
        ``x[..., :h]`` is the gate, ``x[..., h:]`` the value.
    out : ndarray of shape (..., h), float32, optional

    Returns
    -------
    out : ndarray of shape (..., h), float32
    """
    need_array(x, "x", np.float32)
    if x.ndim < 1 or x.shape[-1] % 2 or x.shape[-1] == 0:
        raise H3ValueError(f"x must have an even, non-zero last dimension (2h), got shape {x.shape}")
    h = x.shape[-1] // 2
    out = out_array(out, "out", x.shape[:-1] + (h,))
    _run(_k.elem_swiglu, isa, threads, _rows2d(x, 2 * h), _rows2d(out, h))
    return out


def adaln_modulate(x, scale, shift, row_table=None, out=None, isa=None, threads=None):
    """AdaLN modulation ``x * (1 + scale[t]) + shift[t]`` with ``t = row_table[i]`` per row.

    Parameters
    ----------
    x : ndarray of shape (rows, n), float32
    scale, shift : ndarray of shape (n,) or (T, n), float32
        A table of T modulation rows (e.g. one per timestep or token type).
    row_table : ndarray of shape (rows,), int32, optional
        Table row of each x row, in [0, T).  Required when T > 1; default all row 0.
    out : ndarray of shape (rows, n), float32, optional (may be ``x``)

    Returns
    -------
    out : ndarray of shape (rows, n), float32
    """
    need_array(x, "x", np.float32, 2)
    rows, n = x.shape
    need_array(scale, "scale", np.float32)
    if scale.ndim not in (1, 2):
        raise H3ValueError(f"scale must have shape (n,) or (T, n), got {scale.shape}")
    sc = scale.reshape(1, -1) if scale.ndim == 1 else scale
    need_array(sc, "scale", np.float32, 2, (None, n))
    need_array(shift, "shift", np.float32, scale.ndim, scale.shape)
    sh = shift.reshape(sc.shape)
    if sc.shape[0] < 1:
        raise H3ValueError("scale/shift have no rows")
    if row_table is None:
        if sc.shape[0] != 1:
            raise H3ValueError(f"row_table is required when scale has {sc.shape[0]} rows")
    else:
        need_array(row_table, "row_table", np.int32, 1, (rows,))
    out = out_array(out, "out", (rows, n))
    _run(_k.elem_adaln, isa, threads, x, sc, sh, row_table, out)
    return out


def _convert(src, sdt, out, odtype, odt, isa, threads):
    if out is None:
        out = np.empty(src.shape, dtype=odtype)
    else:
        need_array(out, "out", odtype, src.ndim, src.shape)
        if not out.flags.writeable:
            raise H3ValueError("out is read-only")
    _run(_k.elem_convert, isa, threads, src, sdt, out, odt)
    return out


def to_bf16(x, out=None, isa=None, threads=None):
    """float32 -> bfloat16 bits (round to nearest even; NaN stays NaN), as torch.

    x : ndarray of any shape, float32.  Returns a uint16 array of the same shape.
    """
    need_array(x, "x", np.float32)
    return _convert(x, _DT_F32, out, np.uint16, _DT_BF16, isa, threads)


def from_bf16(bits, out=None, isa=None, threads=None):
    """bfloat16 bits (uint16, any shape) -> float32 (exact)."""
    need_array(bits, "bits", np.uint16)
    return _convert(bits, _DT_BF16, out, np.float32, _DT_F32, isa, threads)


def to_f16(x, out=None, isa=None, threads=None):
    """float32 -> float16 (round to nearest even, overflow -> inf, subnormals kept).

    x : ndarray of any shape, float32.  Returns an np.float16 array of the same shape.
    """
    need_array(x, "x", np.float32)
    return _convert(x, _DT_F32, out, np.float16, _DT_F16, isa, threads)


def from_f16(h, out=None, isa=None, threads=None):
    """float16 (np.float16, or its bits as uint16; any shape) -> float32 (exact)."""
    if isinstance(h, np.ndarray) and h.dtype == np.uint16:
        h = h.view(np.float16)
    need_array(h, "h", np.float16)
    return _convert(h, _DT_F16, out, np.float32, _DT_F32, isa, threads)


def hadamard(x, group, out=None, isa=None, threads=None):
    """The block Hadamard rotation of int8-convrot files: every run of ``group``
    consecutive values along the last axis times ``H = kron^p(H4) / sqrt(group)``,
    ``group = 4**p`` (4 to 4096), ``H4 = [[1,1,1,-1],[1,1,-1,1],[1,-1,1,1],[-1,1,1,1]]``
    (comfy-kitchen's regular Hadamard; symmetric and orthogonal, so applying it twice
    gives ``x`` back).  A fast Walsh-Hadamard transform; every path gives the same bits.

    Parameters
    ----------
    x : ndarray of shape (..., n), float32, n a multiple of ``group``
    group : int
    out : ndarray of shape (..., n), float32, optional — may be ``x`` (in place)

    Returns
    -------
    out : ndarray of shape (..., n), float32
    """
    need_array(x, "x", np.float32)
    if x.ndim < 1:
        raise H3ValueError("x must have at least 1 dimension, got a scalar")
    n = x.shape[-1]
    out = out_array(out, "out", x.shape)
    if out is not x:
        np.copyto(out, x)
    _run(_k.hadamard, isa, threads, _rows2d(out, n), int(group))
    return out
