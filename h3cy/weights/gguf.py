"""A strict, zero-copy reader for GGUF files (numpy + stdlib; no ``gguf`` package), and the
:class:`GGUFWeight` a quantised tensor comes back as.

File format (little-endian; versions 2 and 3): ``"GGUF"`` | u32 version | u64 tensor count |
u64 metadata count | metadata (string key, u32 value type, value; arrays are u32 element
type + u64 count + elements; strings are u64 length + UTF-8 bytes) | tensor infos (string
name, u32 n_dims, u64 ne[n_dims] fastest dimension first, u32 ggml type, u64 offset from the
data section) | padding to ``general.alignment`` (default 32) | data.  A tensor's numpy shape
is ``ne`` reversed: a linear's ``[N, K]`` weight is stored ``ne = [K, N]``, its rows of K
values one after the other, each row whole blocks of its type.

Every check runs when the file is opened: version, counts and string lengths bounded by the
file, known value types, 1..4 dimensions, element counts that do not overflow and split into
whole blocks per row, offsets aligned to the alignment, every tensor inside the file, no two
overlapping, no duplicate names.  Any problem raises :class:`h3cy.CheckpointError` naming the
file and, where there is one, the tensor or key (never a crash, never a partial object).

Ownership: the file is mapped read-only; :meth:`GGUFFile.get` returns read-only views into the
mapping (F32/F16 as float32/float16, BF16 as uint16 bits, quantised types as a
:class:`GGUFWeight` over ``uint8`` rows).  :meth:`GGUFFile.close` unmaps when no view is left.

Names: stable-diffusion.cpp's converter (which wrote the published H3 DiT files of leejet and
unsloth) keeps the source file's tensor names and writes no metadata at all; ComfyUI-GGUF's
converter adds ``general.architecture``; llama.cpp's converter renames a language model's
tensors (``blk.N.attn_q.weight``).  Those are mapped back to the Comfy names
(``model.layers.N.self_attn.q_proj.weight``) here, so the components see one naming
(docs/gguf.md).
"""
import logging
import mmap
import os
import re
import struct

import numpy as np

from ..errors import CheckpointError
from .safetensors import MappedFile

__all__ = ["GGUFFile", "GGUFWeight", "GGML_TYPES", "QUANT_TYPES", "RUNNABLE_TYPES", "READABLE_TYPES",
           "open_gguf"]

log = logging.getLogger("h3cy")

MAGIC = b"GGUF"
MAX_DIMS = 4
MAX_COUNT = 1 << 24            # tensors or metadata entries (a 33B model has ~2k tensors)
DEFAULT_ALIGNMENT = 32

# ggml type id -> (name, values per block, bytes per block): the GGUF specification's table.
GGML_TYPES = {
    0: ("F32", 1, 4), 1: ("F16", 1, 2), 2: ("Q4_0", 32, 18), 3: ("Q4_1", 32, 20),
    6: ("Q5_0", 32, 22), 7: ("Q5_1", 32, 24), 8: ("Q8_0", 32, 34), 9: ("Q8_1", 32, 36),
    10: ("Q2_K", 256, 84), 11: ("Q3_K", 256, 110), 12: ("Q4_K", 256, 144), 13: ("Q5_K", 256, 176),
    14: ("Q6_K", 256, 210), 15: ("Q8_K", 256, 292), 16: ("IQ2_XXS", 256, 66), 17: ("IQ2_XS", 256, 74),
    18: ("IQ3_XXS", 256, 98), 19: ("IQ1_S", 256, 50), 20: ("IQ4_NL", 32, 18), 21: ("IQ3_S", 256, 110),
    22: ("IQ2_S", 256, 82), 23: ("IQ4_XS", 256, 136), 24: ("I8", 1, 1), 25: ("I16", 1, 2),
    26: ("I32", 1, 4), 27: ("I64", 1, 8), 28: ("F64", 1, 8), 29: ("IQ1_M", 256, 56), 30: ("BF16", 1, 2),
    34: ("TQ1_0", 256, 54), 35: ("TQ2_0", 256, 66), 39: ("MXFP4", 32, 17),
}
TYPE_IDS = {v[0]: k for k, v in GGML_TYPES.items()}
# plain (one value per element) types -> numpy dtype of get()'s array
PLAIN = {"F32": np.dtype("<f4"), "F16": np.dtype("<f2"), "BF16": np.dtype("<u2"), "F64": np.dtype("<f8"),
         "I8": np.dtype("i1"), "I16": np.dtype("<i2"), "I32": np.dtype("<i4"), "I64": np.dtype("<i8")}
QUANT_TYPES = tuple(v[0] for v in GGML_TYPES.values() if v[1] > 1)
# the quantised types h3cy's GGUF GEMM runs as stored (csrc/gguf_ref.c), which are all it reads
RUNNABLE_TYPES = ("Q4_0", "Q4_1", "Q5_0", "Q5_1", "Q8_0", "Q2_K", "Q3_K", "Q4_K", "Q5_K", "Q6_K",
                  "IQ4_NL", "IQ4_XS")
READABLE_TYPES = RUNNABLE_TYPES

# metadata value types: id -> (name, struct format or None)
_VTYPES = {0: ("u8", "<B"), 1: ("i8", "<b"), 2: ("u16", "<H"), 3: ("i16", "<h"), 4: ("u32", "<I"),
           5: ("i32", "<i"), 6: ("f32", "<f"), 7: ("bool", "<?"), 8: ("str", None), 9: ("array", None),
           10: ("u64", "<Q"), 11: ("i64", "<q"), 12: ("f64", "<d")}
_NP_VTYPES = {0: "<u1", 1: "<i1", 2: "<u2", 3: "<i2", 4: "<u4", 5: "<i4", 6: "<f4", 7: "<u1",
              10: "<u8", 11: "<i8", 12: "<f8"}

# llama.cpp's names for a Qwen3 language model -> the Comfy names (TensorFiles' "model." prefix)
_LLAMA_NAMES = [
    (re.compile(r"^token_embd\.(weight)$"), r"model.embed_tokens.\1"),
    (re.compile(r"^output_norm\.(weight)$"), r"model.norm.\1"),
    (re.compile(r"^output\.(weight)$"), r"lm_head.\1"),
    (re.compile(r"^blk\.(\d+)\.attn_norm\.(weight)$"), r"model.layers.\1.input_layernorm.\2"),
    (re.compile(r"^blk\.(\d+)\.ffn_norm\.(weight)$"), r"model.layers.\1.post_attention_layernorm.\2"),
    (re.compile(r"^blk\.(\d+)\.attn_q_norm\.(weight)$"), r"model.layers.\1.self_attn.q_norm.\2"),
    (re.compile(r"^blk\.(\d+)\.attn_k_norm\.(weight)$"), r"model.layers.\1.self_attn.k_norm.\2"),
    (re.compile(r"^blk\.(\d+)\.attn_q\.(weight|bias)$"), r"model.layers.\1.self_attn.q_proj.\2"),
    (re.compile(r"^blk\.(\d+)\.attn_k\.(weight|bias)$"), r"model.layers.\1.self_attn.k_proj.\2"),
    (re.compile(r"^blk\.(\d+)\.attn_v\.(weight|bias)$"), r"model.layers.\1.self_attn.v_proj.\2"),
    (re.compile(r"^blk\.(\d+)\.attn_output\.(weight)$"), r"model.layers.\1.self_attn.o_proj.\2"),
    (re.compile(r"^blk\.(\d+)\.ffn_gate\.(weight)$"), r"model.layers.\1.mlp.gate_proj.\2"),
    (re.compile(r"^blk\.(\d+)\.ffn_up\.(weight)$"), r"model.layers.\1.mlp.up_proj.\2"),
    (re.compile(r"^blk\.(\d+)\.ffn_down\.(weight)$"), r"model.layers.\1.mlp.down_proj.\2"),
]


def llama_to_comfy(name):
    """A llama.cpp tensor name as Comfy names it (unchanged when no rule matches)."""
    for pat, rep in _LLAMA_NAMES:
        if pat.match(name):
            return pat.sub(rep, name)
    return name


def _err(path, tensor, msg):
    where = f"{path}: tensor {tensor!r}: " if tensor is not None else f"{path}: "
    e = CheckpointError(where + msg)
    e.path, e.tensor = path, tensor
    return e


class GGUFTensorInfo:
    """One tensor's entry: ``name`` (as h3cy names it), ``stored`` (the file's name),
    ``dtype`` (ggml type name, "F32", "Q4_K", ...), ``type_id``, ``shape`` (numpy order),
    ``offset`` (absolute), ``nbytes``, ``row_bytes`` (bytes per row of the last dimension)."""
    __slots__ = ("name", "stored", "dtype", "type_id", "shape", "offset", "nbytes", "row_bytes")

    def __init__(self, name, stored, dtype, type_id, shape, offset, nbytes, row_bytes):
        self.name, self.stored, self.dtype, self.type_id = name, stored, dtype, type_id
        self.shape, self.offset, self.nbytes, self.row_bytes = shape, offset, nbytes, row_bytes

    def __repr__(self):
        return f"GGUFTensorInfo({self.name!r}, {self.dtype}, {list(self.shape)}, offset={self.offset})"


class _Cursor:
    """Bounded little-endian reads over the mapping; any overrun is a CheckpointError."""

    def __init__(self, buf, path, size):
        self.buf, self.path, self.size, self.pos = buf, path, size, 0

    def need(self, n, what):
        if n < 0 or self.pos + n > self.size:
            raise _err(self.path, None, f"truncated: {what} needs {n} bytes at offset {self.pos}, "
                                        f"the file has {self.size}")

    def unpack(self, fmt, what):
        n = struct.calcsize(fmt)
        self.need(n, what)
        v = struct.unpack_from(fmt, self.buf, self.pos)
        self.pos += n
        return v[0] if len(v) == 1 else v

    def string(self, what):
        n = self.unpack("<Q", what + " length")
        self.need(n, what)
        raw = bytes(self.buf[self.pos:self.pos + n])
        self.pos += n
        try:
            return raw.decode("utf-8")
        except UnicodeDecodeError:
            raise _err(self.path, None, f"{what} at offset {self.pos - n} is not UTF-8") from None

    def value(self, vtype, key, depth=0):
        if vtype not in _VTYPES:
            raise _err(self.path, None, f"metadata {key!r}: unknown value type {vtype}")
        name, fmt = _VTYPES[vtype]
        if fmt is not None:
            return self.unpack(fmt, f"metadata {key!r}")
        if name == "str":
            return self.string(f"metadata {key!r}")
        if depth > 2:
            raise _err(self.path, None, f"metadata {key!r}: arrays nested too deep")
        etype, count = self.unpack("<IQ", f"metadata {key!r} array header")
        if etype in _NP_VTYPES:       # numbers: one bounded read, no per-element loop
            dt = np.dtype(_NP_VTYPES[etype])
            self.need(count * dt.itemsize, f"metadata {key!r} array of {count}")
            arr = np.frombuffer(self.buf, dt, count, self.pos).copy()
            self.pos += count * dt.itemsize
            return arr.astype(bool) if etype == 7 else arr
        if count > self.size:         # every element takes at least one byte
            raise _err(self.path, None, f"metadata {key!r}: array of {count} elements is larger than the file")
        return [self.value(etype, key, depth + 1) for _ in range(count)]


class GGUFFile(MappedFile):
    """One GGUF file, mapped and validated (see the module docstring).

    Attributes
    ----------
    path : str
    version : int
    metadata : dict      key -> value (numbers, str, lists, numeric arrays as ndarrays)
    alignment : int
    data_offset : int
    tensors : dict       h3cy name -> :class:`GGUFTensorInfo` (file order)
    architecture : str or None   ``general.architecture``
    naming : str         "stored" or "llama.cpp" (names mapped back to Comfy's)
    """

    def __init__(self, path):
        self.path = os.fspath(path)
        self._mm = None
        self._open = False
        try:
            with open(self.path, "rb") as fh:
                size = os.fstat(fh.fileno()).st_size
                if size < 24:
                    raise _err(self.path, None, f"truncated: {size} bytes, a GGUF header needs 24")
                self._mm = mmap.mmap(fh.fileno(), 0, access=mmap.ACCESS_READ)
        except OSError as e:
            raise _err(self.path, None, f"cannot read: {e.strerror or e}") from e
        try:
            self._parse(size)
        except BaseException:
            self._mm.close()
            self._mm = None
            raise
        self._open = True

    def _parse(self, size):
        c = _Cursor(self._mm, self.path, size)
        if bytes(self._mm[:4]) != MAGIC:
            raise _err(self.path, None, f"not a GGUF file (magic {bytes(self._mm[:4])!r}, expected b'GGUF')")
        c.pos = 4
        self.version = c.unpack("<I", "version")
        if self.version not in (2, 3):
            swapped = struct.unpack("<I", struct.pack(">I", self.version))[0]
            why = " (a big-endian file)" if swapped in (2, 3) else ""
            raise _err(self.path, None, f"GGUF version {self.version}{why}: h3cy reads little-endian versions 2 and 3")
        n_tensors, n_kv = c.unpack("<QQ", "counts")
        if n_tensors > MAX_COUNT or n_kv > MAX_COUNT:
            raise _err(self.path, None, f"absurd counts: {n_tensors} tensors, {n_kv} metadata entries")
        self.metadata = {}
        for _ in range(n_kv):
            key = c.string("metadata key")
            vtype = c.unpack("<I", f"metadata {key!r} type")
            if key in self.metadata:
                raise _err(self.path, None, f"metadata key {key!r} appears twice")
            self.metadata[key] = c.value(vtype, key)
        align = self.metadata.get("general.alignment", DEFAULT_ALIGNMENT)
        if isinstance(align, (bool, np.ndarray, list, str, float)) or not 1 <= int(align) <= 1 << 20 \
                or int(align) & (int(align) - 1):
            raise _err(self.path, None, f"general.alignment = {align!r}: expected a power of two up to 1 MiB")
        self.alignment = int(align)
        self.architecture = self.metadata.get("general.architecture")
        raw = []
        for _ in range(n_tensors):
            name = c.string("tensor name")
            nd = c.unpack("<I", f"tensor {name!r} dimension count")
            if not 1 <= nd <= MAX_DIMS:
                raise _err(self.path, name, f"{nd} dimensions (1..{MAX_DIMS})")
            ne = [c.unpack("<Q", f"tensor {name!r} dimensions") for _ in range(nd)]
            tid, off = c.unpack("<IQ", f"tensor {name!r} type and offset")
            raw.append((name, ne, tid, off))
        self.data_offset = -(-c.pos // self.alignment) * self.alignment
        if self.data_offset > size:
            raise _err(self.path, None, f"truncated: the data section starts at {self.data_offset}, "
                                        f"the file has {size} bytes")
        stored_names = [r[0] for r in raw]
        self.naming = "llama.cpp" if any(n.startswith("blk.") for n in stored_names) else "stored"
        self.tensors = {}
        spans = []
        for name, ne, tid, off in raw:
            if tid not in GGML_TYPES:
                raise _err(self.path, name, f"unknown ggml type {tid}")
            tname, blk, bsize = GGML_TYPES[tid]
            if any(d > 1 << 40 for d in ne):
                raise _err(self.path, name, f"absurd dimensions {ne}")
            count = 1
            for d in ne:
                count *= d
            if ne[0] % blk:
                raise _err(self.path, name, f"rows of {ne[0]} values are not whole {tname} blocks of {blk}")
            row_bytes = ne[0] // blk * bsize
            nbytes = count // max(ne[0], 1) * row_bytes if ne[0] else 0
            if off % self.alignment:
                raise _err(self.path, name, f"offset {off} is not a multiple of the alignment {self.alignment}")
            start = self.data_offset + off
            if start + nbytes > size:
                raise _err(self.path, name, f"truncated: bytes [{start}, {start + nbytes}) lie past the end "
                                            f"of the file ({size} bytes)")
            hname = llama_to_comfy(name) if self.naming == "llama.cpp" else name
            if hname in self.tensors:
                raise _err(self.path, name, "tensor name appears twice")
            shape = tuple(int(d) for d in reversed(ne))
            orig = self.metadata.get(f"comfy.gguf.orig_shape.{name}")
            if orig is not None:
                # ComfyUI-GGUF's converter stores tensors of more than 4 dimensions (the
                # vision tower's Conv3d) reshaped, with their true shape under this key
                if not isinstance(orig, np.ndarray) or orig.ndim != 1 or orig.size > 8 or np.any(orig < 0) \
                        or int(np.prod(orig.astype(np.int64))) != count or (blk > 1 and int(orig[-1]) != ne[0]):
                    raise _err(self.path, name, f"comfy.gguf.orig_shape {orig!r} does not fit its {count} values")
                shape = tuple(int(d) for d in orig)
            self.tensors[hname] = GGUFTensorInfo(hname, name, tname, tid, shape, start, nbytes, row_bytes)
            if nbytes:
                spans.append((start, start + nbytes, name))
        spans.sort()
        for (a0, a1, an), (b0, b1, bn) in zip(spans, spans[1:]):
            if b0 < a1:
                raise _err(self.path, bn, f"its bytes overlap those of {an!r}")

    # -- reading ---------------------------------------------------------------------------------
    def info(self, name):
        try:
            return self.tensors[name]
        except KeyError:
            raise _err(self.path, name, "no such tensor in this file") from None

    def get(self, name):
        """Tensor ``name``: a read-only ndarray of its shape for plain types (BF16 as uint16
        bits), a :class:`GGUFWeight` for quantised ones."""
        info = self.info(name)
        if not self._open:
            raise _err(self.path, name, "file is closed")
        if info.dtype in PLAIN:
            dt = PLAIN[info.dtype]
            count = info.nbytes // dt.itemsize
            if count == 0:
                arr = np.empty(info.shape, dt)
                arr.flags.writeable = False
                return arr
            return np.frombuffer(self._mm, dt, count, info.offset).reshape(info.shape)
        rows = info.nbytes // info.row_bytes if info.row_bytes else 0
        blocks = np.frombuffer(self._mm, np.uint8, info.nbytes, info.offset).reshape(rows, info.row_bytes)
        return GGUFWeight(name, info.dtype, info.type_id, blocks, (rows, info.shape[-1]), self.path)


def open_gguf(path):
    return GGUFFile(path)


class GGUFWeight:
    """A quantised tensor of a GGUF file, as stored: ``blocks`` (N, row_bytes) uint8, a
    read-only view into the mapping, standing for the float32 weight of ``shape`` (N, K)
    (a tensor of more dimensions is seen as rows of its last one).

    ``w[a:b]`` is rows a..b (a view); :meth:`dequantized` the float32 weight."""

    def __init__(self, name, type_name, type_id, blocks, shape, path=None):
        self.name, self.type_name, self.type_id = name, type_name, type_id
        self.blocks, self.path = blocks, path
        self.shape = tuple(shape)

    @property
    def dtype(self):
        return np.dtype(np.float32)

    @property
    def ndim(self):
        return 2

    @property
    def runnable(self):
        """Whether the GGUF GEMM runs these blocks as stored."""
        return self.type_name in RUNNABLE_TYPES

    def __repr__(self):
        return f"GGUFWeight({self.name!r}, {self.type_name}, {list(self.shape)})"

    def __getitem__(self, rows):
        if not isinstance(rows, slice) or rows.step not in (None, 1):
            raise TypeError("GGUFWeight rows are taken with a contiguous slice")
        b = self.blocks[rows]
        return GGUFWeight(self.name, self.type_name, self.type_id, b, (b.shape[0], self.shape[1]), self.path)

    def _check_runnable(self):
        if self.type_name not in READABLE_TYPES:
            raise _err(self.path or "<gguf>", self.name,
                       f"GGUF type {self.type_name} is not supported yet (h3cy reads {', '.join(READABLE_TYPES)}, "
                       "F32, F16 and BF16)")

    def take_rows(self, ids):
        """Rows ``ids`` of the float32 weight (an embedding lookup: only those rows decoded)."""
        from .. import _kernels
        self._check_runnable()
        ids = np.asarray(ids, np.int64).reshape(-1)
        out = np.empty((ids.size, self.shape[1]), np.float32)
        for i, r in enumerate(ids):
            _kernels.gguf_dequant(self.type_id, np.ascontiguousarray(self.blocks[r]), self.shape[1], out[i])
        return out

    def dequantized(self, isa=None, threads=None):
        """The float32 weight (N, K); O(N K) memory."""
        from .. import _kernels
        self._check_runnable()
        out = np.empty(self.shape, np.float32)
        if out.size:
            _kernels.gguf_dequant(self.type_id, np.ascontiguousarray(self.blocks).reshape(-1), out.size,
                                  out.reshape(-1))
        return out
