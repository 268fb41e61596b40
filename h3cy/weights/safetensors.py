"""A strict, zero-copy reader for safetensors files (numpy + stdlib; no ``safetensors`` package).

File format: ``u64 little-endian N`` | ``N bytes of UTF-8 JSON header`` | ``data``.  The header maps
each tensor name to ``{"dtype": "BF16", "shape": [rows, cols], "data_offsets": [begin, end]}``, offsets
relative to the start of the data section; the optional ``"__metadata__"`` entry maps str to str.

Every check runs when the file is opened, before any tensor is returned:

* header length ``N`` at most ``MAX_HEADER_BYTES`` (100 MB, as the reference implementation) and
  ``8 + N`` within the file;
* the header is strict UTF-8 JSON (no duplicate keys, no NaN/Infinity), an object whose entries are
  objects with exactly ``dtype``, ``shape`` and ``data_offsets``;
* ``dtype`` is a known name; ``shape`` a list of non-negative ints (rank at most ``MAX_RANK``);
  ``data_offsets`` two ints with ``0 <= begin <= end``, ``end - begin == prod(shape) * itemsize``,
  the end inside the file, and no two tensors' byte ranges overlapping.  Gaps (padding) between
  tensors are allowed.

Every problem raises :class:`h3cy.CheckpointError` whose message starts with the file path and names
the tensor; the exception also carries ``.path`` and ``.tensor`` attributes.

Ownership: the file is mapped read-only with :mod:`mmap` and never read whole.  :meth:`SafetensorsFile.get`
returns read-only numpy views into that mapping (``arr.base`` chain: ndarray -> memoryview -> mmap), so a
view keeps the mapping alive by itself.  :meth:`SafetensorsFile.close` unmaps at once when no view is
left and otherwise just drops the file's own reference, so closing can never invalidate an array a
caller still holds.  bfloat16 tensors come back as ``uint16`` raw bits (the dtype name stays ``"BF16"``);
a tensor whose absolute file offset is not a multiple of its itemsize comes back as an aligned copy
(the one case that copies; logged at debug level on logger ``"h3cy"``).
"""
import json
import logging
import math
import mmap
import os
import struct

import numpy as np

from ..errors import CheckpointError
from . import pages

__all__ = ["DTYPES", "MAX_HEADER_BYTES", "MAX_RANK", "SafetensorsFile", "TensorInfo", "numpy_dtype"]

log = logging.getLogger("h3cy")

MAX_HEADER_BYTES = 100_000_000
MAX_RANK = 32
_MAX_INTP = np.iinfo(np.intp).max

# safetensors dtype name -> numpy dtype of the returned array.  Types numpy lacks are raw bits of the
# same width: BF16 -> uint16, F8_* -> uint8.
DTYPES = {
    "F64": np.dtype("<f8"), "F32": np.dtype("<f4"), "F16": np.dtype("<f2"), "BF16": np.dtype("<u2"),
    "F8_E4M3": np.dtype("u1"), "F8_E5M2": np.dtype("u1"),
    "I64": np.dtype("<i8"), "I32": np.dtype("<i4"), "I16": np.dtype("<i2"), "I8": np.dtype("i1"),
    "U64": np.dtype("<u8"), "U32": np.dtype("<u4"), "U16": np.dtype("<u2"), "U8": np.dtype("u1"),
    "BOOL": np.dtype("?"),
}


def numpy_dtype(name):
    """The numpy dtype that :meth:`SafetensorsFile.get` returns for safetensors dtype ``name``."""
    return DTYPES[name]


class TensorInfo:
    """Header entry of one tensor.

    Attributes
    ----------
    name : str
    dtype : str            safetensors dtype name ("F32", "BF16", ...)
    shape : tuple of int
    begin, end : int       byte range relative to the data section
    offset : int           absolute byte offset of the first element in the file
    nbytes : int
    """
    __slots__ = ("name", "dtype", "shape", "begin", "end", "offset", "nbytes")

    def __init__(self, name, dtype, shape, begin, end, offset):
        self.name, self.dtype, self.shape = name, dtype, shape
        self.begin, self.end, self.offset, self.nbytes = begin, end, offset, end - begin

    def __repr__(self):
        return f"TensorInfo({self.name!r}, {self.dtype}, {list(self.shape)}, offset={self.offset})"


def _err(path, tensor, msg):
    where = f"{path}: tensor {tensor!r}: " if tensor is not None else f"{path}: "
    e = CheckpointError(where + msg)
    e.path, e.tensor = path, tensor
    return e


def _no_duplicates(pairs):
    out = {}
    for k, v in pairs:
        if k in out:
            raise ValueError(f"duplicate key {k!r} in header JSON")
        out[k] = v
    return out


def _reject_constant(name):
    raise ValueError(f"non-finite number {name} in header JSON")


def _is_int(x):
    return isinstance(x, int) and not isinstance(x, bool)


def parse_header(raw, path, data_size):
    """Validate a header and return ``(tensors, metadata)``.

    Parameters
    ----------
    raw : bytes        the ``N`` header bytes
    path : str         file path, for messages only
    data_size : int    bytes after the header (file size - 8 - N)

    Returns
    -------
    tensors : dict str -> TensorInfo (``offset`` relative to the data section until the caller adds it)
    metadata : dict str -> str
    """
    try:
        text = raw.decode("utf-8")
    except UnicodeDecodeError as e:
        raise _err(path, None, f"header is not valid UTF-8 ({e.reason} at byte {e.start})") from None
    try:
        obj = json.loads(text, object_pairs_hook=_no_duplicates, parse_constant=_reject_constant)
    except (ValueError, RecursionError) as e:
        raise _err(path, None, f"header is not valid JSON: {str(e)[:200]}") from None
    if not isinstance(obj, dict):
        raise _err(path, None, f"header must be a JSON object, got {type(obj).__name__}")
    metadata = {}
    tensors = {}
    for name, entry in obj.items():
        if name == "__metadata__":
            if not isinstance(entry, dict) or not all(isinstance(v, str) for v in entry.values()):
                raise _err(path, None, "__metadata__ must be an object of strings")
            metadata = entry
            continue
        if not isinstance(entry, dict):
            raise _err(path, name, f"header entry must be an object, got {type(entry).__name__}")
        keys = set(entry)
        if keys != {"dtype", "shape", "data_offsets"}:
            missing = sorted({"dtype", "shape", "data_offsets"} - keys)
            extra = sorted(keys - {"dtype", "shape", "data_offsets"})
            raise _err(path, name, f"header entry has missing keys {missing} / unknown keys {extra}")
        dtype, shape, offs = entry["dtype"], entry["shape"], entry["data_offsets"]
        if not isinstance(dtype, str) or dtype not in DTYPES:
            raise _err(path, name, f"unknown dtype {dtype!r} (known: {', '.join(DTYPES)})")
        if not isinstance(shape, list) or len(shape) > MAX_RANK:
            raise _err(path, name, f"shape must be a list of at most {MAX_RANK} ints, got {shape!r:.100}")
        if not all(_is_int(d) and d >= 0 for d in shape):
            raise _err(path, name, f"shape entries must be non-negative ints, got {shape!r:.100}")
        if not (isinstance(offs, list) and len(offs) == 2 and all(_is_int(o) for o in offs)):
            raise _err(path, name, f"data_offsets must be [begin, end] ints, got {offs!r:.100}")
        if math.prod(d for d in shape if d) * DTYPES[dtype].itemsize > _MAX_INTP:
            # numpy refuses such a shape even when another dimension is 0
            raise _err(path, name, f"shape {shape!r:.100} is too large for any array")
        begin, end = offs
        if not 0 <= begin <= end:
            raise _err(path, name, f"data_offsets [{begin}, {end}] must satisfy 0 <= begin <= end")
        want = math.prod(shape) * DTYPES[dtype].itemsize
        if end - begin != want:
            raise _err(path, name, f"data_offsets [{begin}, {end}] span {end - begin} bytes but "
                                   f"{dtype} {list(shape)} needs {want}")
        if end > data_size:
            raise _err(path, name, f"data_offsets end {end} is past the end of the data section "
                                   f"({data_size} bytes): file truncated or header lies")
        tensors[name] = TensorInfo(name, dtype, tuple(shape), begin, end, begin)
    # overlaps: sort non-empty ranges by begin; each must start at or after the previous end
    prev = None
    for info in sorted((t for t in tensors.values() if t.nbytes), key=lambda t: (t.begin, t.end)):
        if prev is not None and info.begin < prev.end:
            raise _err(path, info.name, f"bytes [{info.begin}, {info.end}) overlap tensor "
                                        f"{prev.name!r} [{prev.begin}, {prev.end})")
        prev = info
    return tensors, metadata


class MappedFile:
    """What every memory-mapped tensor file shares: ``self._mm`` (the map, or None) and
    ``self._open``; close(), ``closed`` and use as a context manager."""
    _mm = None
    _open = False

    def close(self):
        """Unmap now if no view is alive, else drop this object's reference (views keep the map)."""
        self._open = False
        mm, self._mm = self._mm, None
        if mm is not None:
            try:
                mm.close()
            except BufferError:
                pass  # exported views still use it; it is unmapped when the last one dies

    @property
    def closed(self):
        return not self._open

    def __enter__(self):
        return self

    def __exit__(self, *exc):
        self.close()


class SafetensorsFile(MappedFile):
    """One safetensors file, validated and mapped read-only.

    Parameters
    ----------
    path : str or os.PathLike   any Unicode path

    Raises
    ------
    CheckpointError
        The file is missing, unreadable, truncated, or its header is malformed or inconsistent.

    Examples
    --------
    >>> with SafetensorsFile(path) as f:                       # doctest: +SKIP
    ...     w = f.get("proj_in.weight")      # ndarray view (hidden_size, 96) float32, read-only
    """

    def __init__(self, path):
        self.path = os.fspath(path)
        self._mm = None
        self._open = False
        self.tensors = {}
        self.metadata = {}
        try:
            fh = open(self.path, "rb")
        except OSError as e:
            raise _err(self.path, None, f"cannot open: {e.strerror or e}") from e
        with fh:
            try:
                size = os.fstat(fh.fileno()).st_size
                head = fh.read(8)
                if len(head) < 8 or size < 8:
                    raise _err(self.path, None, f"file is {size} bytes, too small for a safetensors header")
                (n,) = struct.unpack("<Q", head)
                if n > MAX_HEADER_BYTES:
                    raise _err(self.path, None, f"header length {n} exceeds the {MAX_HEADER_BYTES}-byte cap")
                if 8 + n > size:
                    raise _err(self.path, None, f"header length {n} runs past the end of the "
                                                f"{size}-byte file (truncated?)")
                raw = fh.read(n)
                if len(raw) != n:
                    raise _err(self.path, None, f"short read of the {n}-byte header")
                tensors, self.metadata = parse_header(raw, self.path, size - 8 - n)
                for t in tensors.values():
                    t.offset = 8 + n + t.begin
                if size > 8 + n:
                    # mmap of the whole file; pages are only touched when a caller reads a view
                    self._mm = mmap.mmap(fh.fileno(), 0, access=mmap.ACCESS_READ)
                    if len(self._mm) != size:
                        raise _err(self.path, None, f"file changed size while opening ({size} -> {len(self._mm)})")
            except OSError as e:
                self.close()
                raise _err(self.path, None, f"cannot read: {e.strerror or e}") from e
            except CheckpointError:
                self.close()
                raise
        self.tensors = tensors
        self._open = True

    # -- mapping-like access -------------------------------------------------------------------
    def keys(self):
        """Tensor names in header order."""
        return list(self.tensors)

    def __contains__(self, name):
        return name in self.tensors

    def __len__(self):
        return len(self.tensors)

    def info(self, name):
        """The :class:`TensorInfo` of ``name`` (CheckpointError if absent)."""
        try:
            return self.tensors[name]
        except KeyError:
            raise _err(self.path, name, "no such tensor in this file") from None

    def get(self, name):
        """Tensor ``name`` as a read-only numpy array of its header shape.

        Returns
        -------
        ndarray of the header's shape, dtype ``numpy_dtype(info.dtype)`` (BF16 -> uint16 raw bits).
        A zero-copy view into the mapping, except when the file offset is not a multiple of the
        itemsize: then an aligned, read-only copy (logged at debug level).
        """
        info = self.info(name)
        if not self._open:
            raise _err(self.path, name, "file is closed")
        dt = DTYPES[info.dtype]
        count = info.nbytes // dt.itemsize
        if count == 0:
            arr = np.empty(info.shape, dtype=dt)
            arr.flags.writeable = False
            return arr
        arr = np.frombuffer(self._mm, dtype=dt, count=count, offset=info.offset).reshape(info.shape)
        if info.offset % dt.itemsize:
            log.debug("%s: tensor %r at offset %d is not %d-byte aligned; returning an aligned copy",
                      self.path, name, info.offset, dt.itemsize)
            src, arr = arr, arr.copy()
            arr.flags.writeable = False
            # the copy is what the model keeps: drop the mapping's pages it was read from from
            # this process's resident set, or a misaligned file counts twice (measured: 4.7 GB
            # RSS for a 3.15 GB file before, bench/single_file_load.py)
            pages.release([src])
        return arr

    # -- lifetime --------------------------------------------------------------------------------
    def __repr__(self):
        return f"SafetensorsFile({self.path!r}, {len(self.tensors)} tensors)"
