"""Converted-weight cache files: convert a checkpoint's bf16 weights to fp16/int8/int4
once, write them to one file, and map that file on every later load (no conversion, no
copy into anonymous memory).

File (``*.h3w``): 64-byte aligned blobs, then a JSON index, then a 24-byte footer
(index offset, index length, magic).  Beside it a small ``*.h3w.ok`` stamp, written last,
records the finished file's size and mtime: a cache whose stamp is missing or disagrees
(truncated, edited after writing, interrupted while writing) is rebuilt, never used.
The cache key covers every source file (name, size, mtime, a hash of its header), the
weights mode and its options, the panel width of the kernel path and the format version.
"""
import hashlib
import json
import logging
import mmap
import os
import struct
import threading

import numpy as np

from .. import _kernels

log = logging.getLogger("h3cy")

FORMAT_VERSION = 1
_MAGIC = b"H3CYW001"
_FOOTER = struct.Struct("<QQ8s")


def source_key(files, extra):
    """sha256 over the source files' identity and the conversion options."""
    h = hashlib.sha256()
    h.update(json.dumps(extra, sort_keys=True).encode())
    for path in sorted(files):
        st = os.stat(path)
        h.update(os.path.basename(path).encode("utf-8", "surrogatepass"))
        h.update(struct.pack("<qq", st.st_size, st.st_mtime_ns))
        with open(path, "rb") as f:
            n = struct.unpack("<Q", f.read(8) or b"\0" * 8)[0]
            h.update(hashlib.sha256(f.read(min(n, 1 << 27))).digest())
    return h.hexdigest()


def cache_file(folder, cache_dir, mode, key):
    """Where the cache lives: cache_dir if given, else next to the checkpoint when that
    folder is writable, else $H3CY_CACHE_DIR or ~/.cache/h3cy.  A single-file checkpoint
    (``folder`` is the file) sits in a shared models folder (ComfyUI's): its caches go to
    $H3CY_CACHE_DIR or ~/.cache/h3cy."""
    d = cache_dir
    if d is None:
        from .. import _config
        own = os.path.isdir(folder) and os.access(folder, os.W_OK)
        d = folder if own else _config.cache_root()
    os.makedirs(d, exist_ok=True)
    return os.path.join(d, f"h3cy-{mode}-{key[:20]}.h3w")


def _stamp(path):
    st = os.stat(path)
    return {"size": st.st_size, "mtime_ns": st.st_mtime_ns, "format": FORMAT_VERSION}


class CacheReader:
    """A finished, verified cache file mapped read-only; ``attach(name, isa, pool)``
    returns a LinearCore over the mapped bytes (no copy)."""

    def __init__(self, path, key):
        self.path = path
        with open(path + ".ok") as f:
            ok = json.load(f)
        if ok != _stamp(path):
            raise ValueError("stamp does not match the file (truncated or edited)")
        with open(path, "rb") as f:
            self._mm = mmap.mmap(f.fileno(), 0, access=mmap.ACCESS_READ)
        size = len(self._mm)
        if size < _FOOTER.size:
            raise ValueError("file too short")
        off, n, magic = _FOOTER.unpack(self._mm[size - _FOOTER.size:])
        if magic != _MAGIC or off + n + _FOOTER.size != size:
            raise ValueError("bad footer")
        index = json.loads(bytes(self._mm[off:off + n]))
        if index.get("key") != key or index.get("version") != FORMAT_VERSION:
            raise ValueError("cache key or version differs")
        self.entries = index["entries"]
        self._buf = np.frombuffer(self._mm, dtype=np.uint8)

    def __contains__(self, name):
        return name in self.entries

    def attach(self, name, bias, isa, pool):
        e = self.entries[name]
        lay = e["layout"]
        w = self._buf[e["w_off"]:e["w_off"] + lay["w_bytes"]]
        sc = None
        if lay["s_bytes"]:
            sc = self._buf[e["s_off"]:e["s_off"] + lay["s_bytes"]].view(np.float32)
        return _kernels.linear_attach(lay, w, sc, bias, isa, pool)


class CacheWriter:
    """Appends converted linears to ``path + '.tmp'``; ``finish()`` writes the index and
    renames the file into place, then writes the stamp."""

    def __init__(self, path, key):
        self.path = path
        self.key = key
        self._lock = threading.Lock()      # layers are built (and added) on several threads
        self._f = open(path + ".tmp", "wb")
        self._pos = 0
        self.entries = {}

    def _blob(self, arr):
        pad = (-self._pos) % 64
        if pad:
            self._f.write(b"\0" * pad)
            self._pos += pad
        off = self._pos
        self._f.write(memoryview(arr).cast("B"))
        self._pos += arr.nbytes
        return off

    def add(self, name, core):
        layout, wbytes, sbytes = core.export()
        with self._lock:
            e = {"layout": layout, "w_off": self._blob(wbytes)}
            if sbytes is not None:
                e["s_off"] = self._blob(sbytes)
            self.entries[name] = e

    def finish(self):
        index = json.dumps({"version": FORMAT_VERSION, "key": self.key,
                            "entries": self.entries}).encode()
        self._blob(np.frombuffer(index, np.uint8))
        off = self._pos - len(index)
        self._f.write(_FOOTER.pack(off, len(index), _MAGIC))
        self._f.close()
        os.replace(self.path + ".tmp", self.path)
        with open(self.path + ".ok.tmp", "w") as f:
            json.dump(_stamp(self.path), f)
        os.replace(self.path + ".ok.tmp", self.path + ".ok")

    def abort(self):
        try:
            self._f.close()
            os.remove(self.path + ".tmp")
        except OSError:
            pass


def open_cache(path, key):
    """A CacheReader, or None (with the reason logged) when the cache must be (re)built."""
    if not os.path.exists(path):
        return None
    try:
        return CacheReader(path, key)
    except (OSError, ValueError, KeyError, json.JSONDecodeError) as e:
        log.warning("h3cy: weight cache %s is unusable (%s); rebuilding it", path, e)
        for p in (path, path + ".ok"):
            try:
                os.remove(p)
            except OSError:
                pass
        return None


CACHED_MODES = ("fp16", "int8", "int4")


class ComponentCache:
    """The converted-weight cache of one component load (fp16, int8 and int4 weights):
    mapped when a valid file exists, else written as the component builds its linears.

    ``files`` are the checkpoint files the weights come from; ``params`` the component's
    conversion options (they enter the key with the mode, the int kernels' panel width on
    ``isa`` and whether AMX packs them).  The models take ``pair`` = (reader, writer): one
    of the two is None.  Use as a context manager around the build, so that a failed or
    cancelled load removes the half-written file::

        with ComponentCache.open(folder, files, "int8", {...}, cache_dir, isa) as cache:
            cache.prebuild(build_all) if streaming else None   # one part at a time
            model = Model(..., cache=cache.pair)
    """

    def __init__(self, path=None, key=None):
        self.path, self.key = path, key
        self.reader = self.writer = None
        if path is not None:
            self.reader = open_cache(path, key)
            self.writer = CacheWriter(path, key) if self.reader is None else None
            log.info("h3cy: weight cache %s (%s)", path, "mapped" if self.reader else "building")

    @classmethod
    def open(cls, folder, files, mode, params, cache_dir, isa):
        """The cache of these weights; a disabled one (``pair`` None) for modes that use
        the checkpoint's tensors as they are."""
        if mode not in CACHED_MODES or cache_dir is False:    # False: no cache file at all
            return cls()
        key = source_key(files, dict(params, mode=mode, nr=_kernels.int_panel_width(isa),
                                     isa_family="amx" if isa == "amx" else "simd"))
        return cls(cache_file(folder, cache_dir, mode, key), key)

    @property
    def pair(self):
        """(reader, writer) for the model's linears, or None when nothing is cached."""
        return None if self.path is None else (self.reader, self.writer)

    def prebuild(self, build_all):
        """Streaming loads: write the whole cache first (``build_all(pair)`` builds every
        part once, one at a time, so only one part is converted in memory), then map it."""
        if self.writer is None:
            return
        build_all(self.pair)
        self.writer.finish()
        self.writer = None
        self.reader = open_cache(self.path, self.key)

    def finish(self):
        if self.writer is not None:
            self.writer.finish()
            self.writer = None

    def __enter__(self):
        return self

    def __exit__(self, exc_type, exc, tb):
        if exc_type is not None and self.writer is not None:
            self.writer.abort()
            self.writer = None
        return False
