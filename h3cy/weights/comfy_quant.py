"""ComfyUI's quantised linears (``<layer>.comfy_quant`` blobs), read as stored.

A quantised layer of a Comfy-Org file is three tensors: ``<layer>.weight`` (the quantised
values), ``<layer>.weight_scale`` and ``<layer>.comfy_quant``, a U8 tensor holding UTF-8
JSON such as ``{"format": "int8_tensorwise", "convrot": true, "convrot_groupsize": 256}``
(the keys may also sit under ``"params"``; the group defaults to 256).

h3cy runs ``int8_tensorwise`` as stored: I8 ``[N, K]`` values with one float scale per row
(``[N, 1]`` or ``[N]``) or per tensor (``[]`` / ``[1]``).  With ``convrot`` the values
are ``W H`` quantised, ``H`` the block Hadamard of :func:`h3cy.ops.hadamard` (Comfy's
"regular" Hadamard built from Kronecker powers of H4, normalised), so a linear rotates its
input rows by ``H`` before quantising them and multiplies: ``x W^T = (x H)(W H)^T``.
``nvfp4`` (the text encoder's default download) is read by :func:`read_nvfp4` and runs as
stored on h3cy's NVFP4 GEMM in the int modes (``"auto"`` resolves to one): the file's codes
and scales are borrowed, nothing is widened in memory; other modes dequantise it.
Anything else is refused with a CheckpointError naming the tensor and the format.
"""
import json
from dataclasses import dataclass

import numpy as np

from .files import checkpoint_error

__all__ = ["QuantSpec", "Int8Weight", "Nvfp4Weight", "parse_blob", "read_int8", "read_nvfp4", "read_quant",
           "is_quantised", "RUNNABLE_FORMATS", "CONVERTED_FORMATS"]

BLOB = ".comfy_quant"
SCALE = ".weight_scale"
RUNNABLE_FORMATS = ("int8_tensorwise",)     # what read_int8 accepts: run as stored
CONVERTED_FORMATS = ("nvfp4",)              # what read_nvfp4 accepts: run on the NVFP4 GEMM
SCALE_DTYPES = ("F32", "BF16", "F16")


@dataclass(frozen=True)
class QuantSpec:
    """A ``comfy_quant`` blob, parsed.

    format : str            e.g. "int8_tensorwise", "nvfp4"
    convrot : bool          the weights are stored rotated (int8 "convrot")
    group : int             the rotation's group (convrot; else 0)
    full_precision : bool   ``full_precision_matrix_mult`` (Comfy dequantises and runs a
                            float GEMM; h3cy runs the int8 GEMM either way)
    """
    format: str
    convrot: bool = False
    group: int = 0
    full_precision: bool = False

    @property
    def label(self):
        """"int8_tensorwise+convrot(256)", "nvfp4", ..."""
        return self.format + (f"+convrot({self.group})" if self.convrot else "")


def parse_blob(raw, path, name):
    """The :class:`QuantSpec` of a blob's bytes (a U8/I8 array); CheckpointError naming
    ``name`` when it is not UTF-8 JSON of an object with a string ``format``, or its
    convrot group is not an integer."""
    try:
        d = json.loads(bytes(np.asarray(raw).tobytes()).decode("utf-8"))
    except (UnicodeDecodeError, ValueError, RecursionError) as e:
        raise checkpoint_error(path, name, f"comfy_quant blob is not JSON: {str(e)[:120]}") from None
    if not isinstance(d, dict):
        raise checkpoint_error(path, name, "comfy_quant blob is not a JSON object")
    params = d.get("params") if isinstance(d.get("params"), dict) else {}
    fmt = d.get("format")
    if not isinstance(fmt, str) or not fmt:
        raise checkpoint_error(path, name, f"comfy_quant blob has no format string (format={fmt!r})")

    def opt(key, default):
        return d[key] if key in d else params.get(key, default)

    convrot = opt("convrot", False)
    if not isinstance(convrot, bool):
        raise checkpoint_error(path, name, f"format {fmt!r}: convrot must be true or false, got {convrot!r}")
    group = opt("convrot_groupsize", 256) if convrot else 0
    if isinstance(group, bool) or not isinstance(group, int):
        raise checkpoint_error(path, name, f"format {fmt!r}: convrot_groupsize must be an integer, got {group!r}")
    return QuantSpec(fmt, convrot, group, bool(opt("full_precision_matrix_mult", False)))


@dataclass(frozen=True)
class Int8Weight:
    """One ``int8_tensorwise`` linear of a file, as stored: ``W = q * scales[:, None]``,
    rotated back by ``H`` when ``rot_group`` is set.

    name : str                  the layer (``blocks.0.attn.qkv_proj``)
    q : ndarray (N, K) int8     a read-only view into the mapped file
    scales : ndarray (N,) float32 (a per-tensor scale repeated)
    rot_group : int             0, or the convrot group (``q`` holds ``W H``)
    spec : QuantSpec
    """
    name: str
    q: np.ndarray
    scales: np.ndarray
    rot_group: int
    spec: QuantSpec

    @property
    def shape(self):
        return self.q.shape

    @property
    def dtype(self):
        return self.q.dtype

    def __getitem__(self, rows):
        """Rows ``rows`` (a slice) of the weight: a view, with their scales."""
        if not isinstance(rows, slice):
            raise TypeError("Int8Weight rows are taken with a slice")
        return Int8Weight(self.name, self.q[rows], self.scales[rows], self.rot_group, self.spec)

    @staticmethod
    def concat(parts):
        """The rows of ``parts`` (Int8Weights of one layer) as one (a copy)."""
        p0 = parts[0]
        return Int8Weight(p0.name, np.concatenate([p.q for p in parts]),
                          np.concatenate([p.scales for p in parts]), p0.rot_group, p0.spec)

    def take_rows(self, ids):
        """Rows ``ids`` of ``W`` in float32 (an embedding lookup: only those rows are read)."""
        w = self.q[ids].astype(np.float32) * self.scales[ids][:, None]
        if self.rot_group:
            from ..ops import hadamard
            hadamard(w, self.rot_group, out=w)
        return w

    def dequantized(self, isa=None, threads=None):
        """The float32 weight ``W`` (N, K) the file stands for (rotated back), for modes
        that convert it; O(N K) memory."""
        from ..ops import hadamard
        w = self.q.astype(np.float32) * self.scales[:, None]
        if self.rot_group:
            hadamard(w, self.rot_group, out=w, isa=isa, threads=threads)
        return w


def is_quantised(files, layer):
    """True when ``<layer>.weight`` is stored quantised (a blob beside it, or a non-float
    dtype)."""
    return files.has(layer + BLOB) or (files.has(layer + ".weight")
                                       and files.info(layer + ".weight").dtype not in SCALE_DTYPES)


def read_int8(files, layer, shape=None):
    """The :class:`Int8Weight` of ``layer`` in ``files`` (a weights.files.TensorFiles),
    checked: a blob of a runnable format, an I8 2-D weight (of ``shape`` if given), a
    float scale per row or per tensor, a convrot group that is a power of 4 (4..4096)
    dividing K.  CheckpointError naming the tensor and the format otherwise."""
    wname, sname, bname = layer + ".weight", layer + SCALE, layer + BLOB
    path = files.path_of(wname)
    if not files.has(bname):
        dt = files.info(wname).dtype if files.has(wname) else "?"
        raise checkpoint_error(path, files.stored_name(wname),
                               f"dtype {dt} without a comfy_quant blob: no format to read it by")
    spec = parse_blob(files.get(bname, dtypes=("U8", "I8")), files.path_of(bname), files.stored_name(bname))
    label = spec.label
    if spec.format not in RUNNABLE_FORMATS:
        raise checkpoint_error(path, files.stored_name(bname),
                               f"format {label!r} is not supported yet (h3cy runs "
                               f"{', '.join(RUNNABLE_FORMATS)}, with or without convrot)")
    if not files.has(wname):
        raise checkpoint_error(path, files.stored_name(wname), f"missing tensor (format {label!r})")
    info = files.info(wname)
    if info.dtype != "I8" or len(info.shape) != 2 or 0 in info.shape:
        raise checkpoint_error(path, files.stored_name(wname),
                               f"format {label!r} needs a 2-D I8 weight, got {info.dtype} {list(info.shape)}")
    if shape is not None and tuple(info.shape) != tuple(shape):
        raise checkpoint_error(path, files.stored_name(wname),
                               f"format {label!r}: shape {list(info.shape)} but the config implies {list(shape)}")
    N, K = info.shape
    if not files.has(sname):
        raise checkpoint_error(path, files.stored_name(sname), f"missing tensor (format {label!r} needs a scale)")
    sinfo = files.info(sname)
    if sinfo.dtype not in SCALE_DTYPES or tuple(sinfo.shape) not in ((), (1,), (N,), (N, 1)):
        raise checkpoint_error(files.path_of(sname), files.stored_name(sname),
                               f"format {label!r} needs a float scale of shape [{N}, 1], [{N}] or [] "
                               f"(per row or per tensor), got {sinfo.dtype} {list(sinfo.shape)}")
    raw = files.get(sname, dtypes=SCALE_DTYPES)
    if sinfo.dtype == "BF16":
        from ..ops.bf16 import bf16_bits_to_f32
        scales = bf16_bits_to_f32(np.ascontiguousarray(raw).reshape(-1))
    else:
        scales = np.asarray(raw, dtype=np.float32).reshape(-1)
    scales = np.ascontiguousarray(np.broadcast_to(scales, (N,)), dtype=np.float32)
    if not np.all(np.isfinite(scales)):
        raise checkpoint_error(files.path_of(sname), files.stored_name(sname),
                               f"format {label!r}: scale {int(np.argmin(np.isfinite(scales)))} is not finite")
    if spec.convrot:
        g = spec.group
        if g < 4 or g > 4096 or g & (g - 1) or (g.bit_length() - 1) % 2 or K % g:
            raise checkpoint_error(path, files.stored_name(bname),
                                   f"format {label!r}: the rotation group must be a power of 4 "
                                   f"(4..4096) dividing the {K} input features")
    q = files.get(wname, dtypes=("I8",))
    return Int8Weight(layer, q, scales, spec.group if spec.convrot else 0, spec)


# ---- NVFP4 ---------------------------------------------------------------------------------
# E2M1 codes: bit 3 the sign, 0..7 the magnitudes (comfy-kitchen float_utils / eager E2M1_LUT)
E2M1 = np.array([0.0, 0.5, 1.0, 1.5, 2.0, 3.0, 4.0, 6.0,
                 -0.0, -0.5, -1.0, -1.5, -2.0, -3.0, -4.0, -6.0], np.float32)


def _e4m3_table():
    """float8_e4m3fn byte -> float32 (no infinities; 0x7f / 0xff are NaN)."""
    b = np.arange(256)
    sign = np.where(b & 0x80, -1.0, 1.0)
    e, m = (b >> 3) & 0xF, b & 0x7
    v = np.where(e == 0, m / 8.0 * 2.0 ** -6, (1 + m / 8.0) * 2.0 ** (e - 7.0))
    v = np.where((b & 0x7F) == 0x7F, np.nan, v)
    return (sign * v).astype(np.float32)


E4M3 = _e4m3_table()


def unswizzle_offsets(rows, cols):
    """Index into cuBLAS's blocked scale layout (comfy-kitchen ``to_blocked``: 128 x 4 tiles,
    each stored as [32][4][4]) of every element of the plain (rows, cols) scale matrix."""
    ncb = -(-cols // 4)
    r = np.arange(rows)[:, None]
    c = np.arange(cols)[None, :]
    return (((r // 128) * ncb + c // 4) * 32 + r % 32) * 16 + ((r % 128) // 32) * 4 + c % 4


@dataclass(frozen=True)
class Nvfp4Weight:
    """One ``nvfp4`` linear of a file, as stored (comfy-kitchen ``TensorCoreNVFP4Layout``):

    packed : ndarray (roundup(N, 16), roundup(K, 16) / 2) uint8 — two E2M1 codes per byte,
        the even (first) element in the high nibble
    block_scales : ndarray uint8 — float8_e4m3 scales of 16 consecutive inputs each, in
        cuBLAS's blocked layout over (roundup(N, 128), roundup(K / 16, 4))
    scale_2 : float — the per-tensor scale
    pre_quant_scale : ndarray (K,) float32 or None — AWQ: the input is multiplied by it
    W[n, k] = E2M1[code(n, k)] * e4m3(scale[n, k // 16]) * scale_2 (* pre_quant_scale[k],
    folded in: ``(x * s) W^T = x (W diag s)^T``)
    """
    name: str
    shape: tuple
    packed: np.ndarray
    block_scales: np.ndarray
    scale_2: float
    pre_quant_scale: np.ndarray
    spec: QuantSpec

    @property
    def dtype(self):
        return np.dtype(np.float32)

    @property
    def runnable(self):
        """True when the NVFP4 GEMM takes this layer as stored (K a multiple of 32: its
        activation blocks; every layer of the released text encoder)."""
        return self.shape[1] % 32 == 0

    def c_part(self):
        """``(codes, blocked scales, scale_2, pre_scale)`` as
        :func:`h3cy._kernels.linear_attach_nvfp4` takes them: views of the mapped file."""
        return (self.packed, np.ascontiguousarray(self.block_scales).reshape(-1), self.scale_2,
                self.pre_quant_scale)

    def dequantized(self, isa=None, threads=None):
        """The float32 weight (N, K) the layer multiplies by (AWQ scale folded in)."""
        N, K = self.shape
        Kp = self.packed.shape[1] * 2
        codes = np.empty((N, Kp), np.uint8)
        p = self.packed[:N]
        codes[:, 0::2] = p >> 4
        codes[:, 1::2] = p & 0x0F
        nb = Kp // 16
        blk = E4M3[self.block_scales.reshape(-1)[unswizzle_offsets(N, nb)]] * np.float32(self.scale_2)
        w = (E2M1[codes].reshape(N, nb, 16) * blk[:, :, None]).reshape(N, Kp)[:, :K]
        if self.pre_quant_scale is not None:
            w = w * self.pre_quant_scale[None, :]
        return np.ascontiguousarray(w, np.float32)


def _float_vector(files, name, n, label):
    info = files.info(name)
    if info.dtype not in SCALE_DTYPES or tuple(info.shape) not in ((n,), (1, n)):
        raise checkpoint_error(files.path_of(name), files.stored_name(name),
                               f"format {label!r} needs a float vector of {n}, got {info.dtype} {list(info.shape)}")
    raw = files.get(name, dtypes=SCALE_DTYPES)
    if info.dtype == "BF16":
        from ..ops.bf16 import bf16_bits_to_f32
        v = bf16_bits_to_f32(np.ascontiguousarray(raw).reshape(-1))
    else:
        v = np.asarray(raw, np.float32).reshape(-1)
    if not np.all(np.isfinite(v)):
        raise checkpoint_error(files.path_of(name), files.stored_name(name), f"format {label!r}: not finite")
    return np.ascontiguousarray(v, np.float32)


def read_nvfp4(files, layer, shape):
    """The :class:`Nvfp4Weight` of ``layer`` (true shape ``shape`` = (N, K), from the
    model's configuration: the packed tensors are padded), checked: U8 codes of
    [roundup(N, 16), roundup(K, 16) / 2], F8_E4M3 block scales of [roundup(N, 128),
    roundup(K / 16, 4)] (finite), an F32 per-tensor ``weight_scale_2``, an optional
    ``pre_quant_scale`` of K floats.  CheckpointError naming the tensor and format."""
    N, K = shape
    wname, bname = layer + ".weight", layer + BLOB
    spec = parse_blob(files.get(bname, dtypes=("U8", "I8")), files.path_of(bname), files.stored_name(bname))
    label = spec.label
    if spec.format != "nvfp4":
        raise checkpoint_error(files.path_of(bname), files.stored_name(bname), f"format {label!r}: expected nvfp4")

    def need(name, dtype, want):
        if not files.has(name):
            raise checkpoint_error(files.path_of(wname), files.stored_name(name), f"missing tensor (format {label!r})")
        info = files.info(name)
        if info.dtype != dtype or tuple(info.shape) not in want:
            raise checkpoint_error(files.path_of(name), files.stored_name(name),
                                   f"format {label!r} needs {dtype} {list(want[0])} for a [{N}, {K}] weight, "
                                   f"got {info.dtype} {list(info.shape)}")
        return files.get(name, dtypes=(dtype,))
    r16 = lambda v, m: -(-v // m) * m      # noqa: E731
    Kp = r16(K, 16)
    packed = need(wname, "U8", [(r16(N, 16), Kp // 2)])
    scales = need(layer + SCALE, "F8_E4M3", [(r16(N, 128), r16(Kp // 16, 4))])
    if np.any((scales & 0x7F) == 0x7F):
        raise checkpoint_error(files.path_of(layer + SCALE), files.stored_name(layer + SCALE),
                               f"format {label!r}: a block scale is NaN")
    s2 = need(layer + ".weight_scale_2", "F32", [(), (1,)])
    s2 = float(np.asarray(s2, np.float32).reshape(-1)[0])
    if not np.isfinite(s2):
        raise checkpoint_error(files.path_of(layer + ".weight_scale_2"), files.stored_name(layer + ".weight_scale_2"),
                               f"format {label!r}: not finite")
    pqs = None
    if files.has(layer + ".pre_quant_scale"):
        pqs = _float_vector(files, layer + ".pre_quant_scale", K, label)
    return Nvfp4Weight(layer, (N, K), packed, scales, s2, pqs, spec)


def read_quant(files, layer, shape=None):
    """:func:`read_int8` or :func:`read_nvfp4`, by the layer's blob."""
    bname = layer + BLOB
    if files.has(bname):
        spec = parse_blob(files.get(bname, dtypes=("U8", "I8")), files.path_of(bname), files.stored_name(bname))
        if spec.format == "nvfp4":
            if shape is None:
                raise checkpoint_error(files.path_of(bname), files.stored_name(bname),
                                       "format 'nvfp4' here: its true shape is not known")
            return read_nvfp4(files, layer, shape)
    return read_int8(files, layer, shape)
