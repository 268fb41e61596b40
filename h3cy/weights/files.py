"""What every component reader shares: checkpoint errors that name the file and the tensor,
JSON files read once with a size cap, the registry of tensor-file readers (one per on-disk
format), a component folder's weight files found by name, and those files mapped as one
name -> tensor table with checked reads.

A reader opens one file and offers ``.path``, ``.tensors`` (name -> info with ``.dtype``, a
safetensors dtype name, ``.shape`` and ``.nbytes``), ``.get(name)`` (a read-only ndarray) and
``.close()``.  Everything above this module (the transformer's layouts, the text encoder, the
decoders, model-folder discovery) reads through :class:`TensorFiles`, so a new format plugs in
with one :func:`register_reader` call and every component can read it.
"""
import copy
import json
import logging
import os
import threading

from ..errors import CheckpointError
from .safetensors import SafetensorsFile

log = logging.getLogger("h3cy")

_READERS = {}                 # file-name suffix -> opener(path) -> reader


def checkpoint_error(path, tensor, msg):
    """A CheckpointError "path: tensor 'name': msg" (or "path: msg"), with ``.path`` and
    ``.tensor`` set for callers that report them."""
    where = f"{path}: tensor {tensor!r}: " if tensor is not None else f"{path}: "
    e = CheckpointError(where + msg)
    e.path, e.tensor = path, tensor
    return e


_JSON_CACHE = {}              # real path -> (bytes, parsed object): config and index files only
_JSON_LOCK = threading.Lock()


_REPORTED = set()   # (path, message) pairs already logged at info level by this process


def report_once(path, message):
    """Log what a load assumed about ``path`` at info level once per process, at debug level
    after that: a pipeline reopens its components for every generation (and ComfyUI's loader
    checks them first), and the same line 27 times in one server run is noise."""
    first = (path, message) not in _REPORTED
    _REPORTED.add((path, message))
    (log.info if first else log.debug)("%s: %s", path, message)


def load_json(path, what):
    """A component's JSON file (config, index), read with a 64 MB cap; CheckpointError
    naming the file and ``what`` it is when it cannot be read or parsed.

    Parsed once: a pipeline checks the configs when it opens a folder and each component
    reads its own when it is built; while the file's bytes are the ones parsed before, the
    caller gets a copy of that parse (an edited file is parsed again)."""
    try:
        with open(path, "rb") as f:
            raw = f.read(64 << 20)
    except OSError as e:
        raise checkpoint_error(path, None, f"cannot read {what}: {e.strerror or e}") from e
    key = os.path.realpath(path)
    with _JSON_LOCK:
        hit = _JSON_CACHE.get(key)
    if hit is not None and hit[0] == raw:
        return copy.deepcopy(hit[1])
    try:
        obj = _parse(raw)
    except (UnicodeDecodeError, ValueError, RecursionError) as e:
        raise checkpoint_error(path, None, f"{what} is not valid JSON: {str(e)[:200]}") from None
    if len(raw) <= 1 << 20:               # configs and indexes; a huge file is not kept
        with _JSON_LOCK:
            if len(_JSON_CACHE) >= 64:
                _JSON_CACHE.clear()
            _JSON_CACHE[key] = (raw, copy.deepcopy(obj))
    return obj


def _parse(raw):
    return json.loads(raw.decode("utf-8"))


# -- readers ---------------------------------------------------------------------------------
def register_reader(suffix, opener):
    """Let every component read files whose name ends with ``suffix`` (e.g. ``".gguf"``);
    ``opener(path)`` returns a reader (see the module docstring) or raises CheckpointError."""
    if not isinstance(suffix, str) or not suffix.startswith(".") or not callable(opener):
        raise TypeError("register_reader(suffix, opener): suffix like '.gguf', opener callable")
    _READERS[suffix] = opener


def weight_suffixes():
    """The file-name suffixes a reader is registered for."""
    return tuple(_READERS)


def open_tensor_file(path):
    """Open one tensor file with the reader registered for its suffix."""
    path = os.fspath(path)
    for suffix, opener in _READERS.items():
        if path.endswith(suffix):
            return opener(path)
    raise checkpoint_error(path, None, f"no reader for this kind of file (readable: {', '.join(_READERS)})")


register_reader(".safetensors", SafetensorsFile)


def _open_gguf(path):
    from .gguf import GGUFFile
    return GGUFFile(path)


register_reader(".gguf", _open_gguf)


def find_weights(folder, candidates):
    """The weight files of a component folder: exactly one of ``candidates`` (file names; a
    name ending in ``.index.json`` is a shard index) must be present.

    Returns ``(index, paths)``: ``index`` is ``(index path, parsed index)`` or None, ``paths``
    the files to open, in index order.  CheckpointError when none or several are present, or
    when the index is malformed or names a file outside the folder."""
    present = [n for n in candidates if os.path.isfile(os.path.join(folder, n))]
    if not present:
        names = " or ".join(candidates) if len(candidates) < 3 else \
            ", ".join(candidates[:-1]) + " or " + candidates[-1]
        raise checkpoint_error(folder, None, f"no weights: expected {names}")
    if len(present) > 1:
        raise checkpoint_error(folder, None, f"ambiguous weights: found {', '.join(present)}; keep one")
    path = os.path.join(folder, present[0])
    if not present[0].endswith(".index.json"):
        return None, [path]
    idx = load_json(path, "index")
    wm = idx.get("weight_map") if isinstance(idx, dict) else None
    if not isinstance(wm, dict) or not wm:
        raise checkpoint_error(path, None, "index has no 'weight_map' object")
    shards = []
    for key, fname in wm.items():
        if (not isinstance(fname, str) or not fname or fname in (".", "..")
                or os.path.basename(fname) != fname or "\\" in fname or "\0" in fname):
            raise checkpoint_error(path, key, f"weight_map file name {fname!r} must be a plain file name in the folder")
        if fname not in shards:
            shards.append(fname)
    return (path, idx), [os.path.join(folder, s) for s in shards]


class TensorFiles:
    """The tensor files of one component as one name -> tensor table, with reads that check
    dtype and shape (CheckpointError naming the file and the tensor).

    ``TensorFiles(paths, index)`` opens every file now; a tensor stored twice is an error and,
    with an ``index`` (from :func:`find_weights`), the index must list exactly the stored
    tensors.  ``lazy=True`` (an index is then required) opens a shard on the first read of a
    tensor the index places in it, so a component that needs only part of a checkpoint (the
    text encoder's first 50 layers) maps only those shards.  ``prefix`` (eager only) keeps
    the tensors whose stored name starts with it and names them without it (a single file
    holding ``model.diffusion_model.*``, or several components under their own prefixes).
    A failed open closes what it had opened."""

    def __init__(self, paths, index=None, lazy=False, prefix="", float_dtypes=("F32", "BF16")):
        self.paths, self.index, self.lazy = [os.fspath(p) for p in paths], index, lazy
        self.prefix = prefix
        self.float_dtypes = float_dtypes      # what get() accepts by default
        self._open = {}                       # path -> reader
        self._lock = threading.Lock()
        self._closed = False
        if lazy:
            if index is None or prefix:
                raise ValueError("TensorFiles(lazy=True) needs an index and no prefix")
            folder = os.path.dirname(index[0])
            self.where = {k: os.path.join(folder, v) for k, v in index[1]["weight_map"].items()}
            return
        self.where = {}                       # name -> path
        try:
            for p in self.paths:
                f = self._open[p] = open_tensor_file(p)
                for n in f.tensors:
                    if not n.startswith(prefix):
                        continue
                    n = n[len(prefix):]
                    if n in self.where:
                        raise checkpoint_error(p, n, f"tensor also stored in {self.where[n]}")
                    self.where[n] = p
            if index is not None:
                self._check_index()
        except BaseException:
            self.close()
            raise

    def _check_index(self):
        ipath, idx = self.index
        wm, base = idx["weight_map"], os.path.basename(ipath)
        for name, fname in wm.items():
            got = self.where.get(name)
            if got is None:
                raise checkpoint_error(os.path.join(os.path.dirname(ipath), fname), name,
                                       f"listed in {base} but not stored in that file")
            if os.path.basename(got) != fname:
                raise checkpoint_error(got, name, f"{base} says it is in {fname}")
        for name, p in self.where.items():
            if name not in wm:
                raise checkpoint_error(p, name, f"stored but not listed in {base}")
        meta = idx.get("metadata")
        total = meta.get("total_size") if isinstance(meta, dict) else None
        have = sum(self.info(n).nbytes for n in self.where)
        if total is not None and total != have:
            log.warning("%s: metadata.total_size=%r but the shards hold %d bytes of tensors", ipath, total, have)

    def file(self, path):
        """The reader of ``path`` (opened now when lazy)."""
        with self._lock:
            f = self._open.get(path)
            if f is None:
                if self._closed:
                    raise checkpoint_error(path, None, "file is closed")
                f = self._open[path] = open_tensor_file(path)   # CheckpointError names the file
            return f

    def names(self):
        """Every tensor name (stored, or listed in a lazy index)."""
        return list(self.where)

    def __contains__(self, name):
        return self.has(name)

    def has(self, name):
        p = self.where.get(name)
        return p is not None and (not self.lazy or name in self.file(p).tensors)

    def stored_name(self, name):
        """The name ``name`` has in its file (with the prefix)."""
        return self.prefix + name

    def path_of(self, name):
        """The file holding ``name`` (the index, or the first file, when no file does)."""
        p = self.where.get(name)
        if p is not None:
            return p
        return self.index[0] if self.index is not None else (self.paths[0] if self.paths else "?")

    def info(self, name):
        """The tensor's header entry (dtype, shape, nbytes); CheckpointError if it is absent."""
        if not self.has(name):
            raise checkpoint_error(self.path_of(name), name, "missing tensor")
        return self.file(self.where[name]).tensors[self.prefix + name]

    def shape(self, name, ndim, why="needed to infer the configuration"):
        """The stored shape of ``name``, checked to have ``ndim`` non-zero dimensions
        (CheckpointError naming the tensor and ``why`` it is read otherwise)."""
        if not self.has(name):
            raise checkpoint_error(self.path_of(name), self.stored_name(name), f"missing tensor ({why})")
        s = tuple(self.info(name).shape)
        if len(s) != ndim or 0 in s:
            raise checkpoint_error(self.path_of(name), self.stored_name(name),
                                   f"shape {list(s)}: expected {ndim} non-zero dimensions")
        return s

    def get(self, name, shape=None, dtypes="float"):
        """The tensor as stored (BF16 as uint16 bits), a read-only view into the mapping,
        after checking its dtype is one of ``dtypes`` ("float": the ``float_dtypes`` given at
        open; None: any) and its shape is ``shape`` (if given)."""
        if dtypes == "float":
            dtypes = self.float_dtypes
        info = self.info(name)
        p = self.where[name]
        if dtypes is not None and info.dtype not in dtypes:
            raise checkpoint_error(p, name, f"dtype {info.dtype}: expected {' or '.join(dtypes)}")
        if shape is not None and tuple(info.shape) != tuple(shape):
            raise checkpoint_error(p, name, f"shape {list(info.shape)} but the config implies {list(shape)}")
        return self.file(p).get(self.prefix + name)

    def close(self):
        with self._lock:
            self._closed = True
            for f in self._open.values():
                f.close()
            self._open.clear()
