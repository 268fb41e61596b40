"""Write safetensors files from numpy arrays (for the demo model and tools; no torch).

``arrays`` maps names to numpy arrays: float32 -> F32, float16 -> F16, int64 -> I64,
uint16 with ``bf16=True`` names -> BF16 (raw bfloat16 bits, see :mod:`h3cy.ops.bf16`).
"""
import json
import os
import struct

import numpy as np

_DT = {np.dtype(np.float32): "F32", np.dtype(np.float16): "F16", np.dtype(np.int64): "I64",
       np.dtype(np.int32): "I32", np.dtype(np.uint8): "U8"}


def save_file(path, arrays, bf16=(), metadata=None):
    """Write ``arrays`` (name -> ndarray) to ``path``; names in ``bf16`` hold uint16 bits
    stored as BF16.  The file is written under a temporary name and renamed."""
    header, blobs, off = {}, [], 0
    for name, a in arrays.items():
        a = np.ascontiguousarray(a)
        if name in bf16:
            if a.dtype != np.uint16:
                raise ValueError(f"{name}: bf16 tensors are given as uint16 bits, got {a.dtype}")
            dt = "BF16"
        else:
            dt = _DT.get(a.dtype)
            if dt is None:
                raise ValueError(f"{name}: unsupported dtype {a.dtype}")
        b = a.astype(a.dtype.newbyteorder("<"), copy=False).tobytes()
        header[name] = {"dtype": dt, "shape": list(a.shape), "data_offsets": [off, off + len(b)]}
        blobs.append(b)
        off += len(b)
    if metadata:
        header["__metadata__"] = {str(k): str(v) for k, v in metadata.items()}
    raw = json.dumps(header, separators=(",", ":")).encode("utf-8")
    raw += b" " * (-len(raw) % 8)
    tmp = os.fspath(path) + ".partial"
    with open(tmp, "wb") as f:
        f.write(struct.pack("<Q", len(raw)))
        f.write(raw)
        for b in blobs:
            f.write(b)
    os.replace(tmp, path)


def save_sharded(folder, arrays, n_shards, stem="model", bf16=()):
    """Split ``arrays`` over ``n_shards`` files ``{stem}-0000i-of-0000n.safetensors`` plus
    ``{stem}.safetensors.index.json`` (the release layout)."""
    names = list(arrays)
    per = max(1, -(-len(names) // n_shards))
    weight_map, total = {}, 0
    for i in range(n_shards):
        part = names[i * per:(i + 1) * per]
        fname = f"{stem}-{i + 1:05d}-of-{n_shards:05d}.safetensors"
        save_file(os.path.join(folder, fname), {n: arrays[n] for n in part}, bf16=set(bf16) & set(part))
        for n in part:
            weight_map[n] = fname
            total += arrays[n].nbytes
    with open(os.path.join(folder, f"{stem}.safetensors.index.json"), "w") as f:
        json.dump({"metadata": {"total_size": total}, "weight_map": weight_map}, f, indent=1)
