"""Tiny GGUF files for the tests: an own writer (so corrupt variants can be crafted byte by
byte) and random valid quantised blocks.  The oracle for what the blocks mean is the
``gguf`` package's numpy dequantiser (a test dependency), never h3cy's decoder."""
import struct

import numpy as np

# type name -> (id, values per block, bytes per block, offsets of the f16 scale fields)
TYPES = {
    "F32": (0, 1, 4, ()), "F16": (1, 1, 2, ()), "BF16": (30, 1, 2, ()),
    "Q4_0": (2, 32, 18, (0,)), "Q4_1": (3, 32, 20, (0, 2)), "Q5_0": (6, 32, 22, (0,)),
    "Q5_1": (7, 32, 24, (0, 2)), "Q8_0": (8, 32, 34, (0,)), "Q2_K": (10, 256, 84, (80, 82)),
    "Q3_K": (11, 256, 110, (108,)), "Q4_K": (12, 256, 144, (0, 2)), "Q5_K": (13, 256, 176, (0, 2)),
    "Q6_K": (14, 256, 210, (208,)), "IQ4_NL": (20, 32, 18, (0,)), "IQ4_XS": (23, 256, 136, (0,)),
}
# the quantised types the GGUF GEMM runs (all the quantised ones h3cy reads)
QUANT = [t for t, v in TYPES.items() if v[1] > 1]


def random_blocks(type_name, rows, K, rng, scale=0.01):
    """(rows, K / blk * bytes) uint8: random bytes with every f16 scale field set to a
    finite value in [scale / 4, scale] (so the weights have a sane magnitude)."""
    tid, blk, nb, f16s = TYPES[type_name]
    assert K % blk == 0
    b = rng.integers(0, 256, size=(rows, K // blk, nb), dtype=np.uint8)
    for off in f16s:
        v = rng.uniform(scale / 4, scale, size=(rows, K // blk)).astype(np.float16)
        b[:, :, off:off + 2] = v.view(np.uint8).reshape(rows, K // blk, 2)
    return b.reshape(rows, -1)


def oracle_dequant(type_name, blocks, shape):
    """The float32 weight of ``blocks`` by the gguf package's numpy dequantiser."""
    import gguf
    from gguf import quants
    if type_name == "F32":
        return np.frombuffer(blocks.tobytes(), np.float32).reshape(shape)
    qt = gguf.GGMLQuantizationType[type_name]
    return quants.dequantize(np.ascontiguousarray(blocks), qt).astype(np.float32).reshape(shape)


def _str(s):
    b = s.encode("utf-8")
    return struct.pack("<Q", len(b)) + b


# metadata value: (type id, python value); arrays: (9, (elem type, [values]))
def _val(vt, v):
    fmts = {0: "<B", 1: "<b", 2: "<H", 3: "<h", 4: "<I", 5: "<i", 6: "<f", 7: "<?", 10: "<Q", 11: "<q", 12: "<d"}
    if vt == 8:
        return _str(v)
    if vt == 9:
        et, items = v
        return struct.pack("<IQ", et, len(items)) + b"".join(_val(et, x) for x in items)
    return struct.pack(fmts[vt], v)


def write_gguf(path, tensors, metadata=(), alignment=None, version=3):
    """Write a GGUF file.

    tensors : list of (name, type name, shape (numpy order), raw bytes or ndarray)
    metadata : list of (key, value type id, value)
    Returns the absolute data offset and each tensor's absolute offset (for corruption tests).
    """
    align = alignment or 32
    meta = list(metadata)
    if alignment is not None:
        meta.append(("general.alignment", 4, alignment))
    head = b"GGUF" + struct.pack("<IQQ", version, len(tensors), len(meta))
    for k, vt, v in meta:
        head += _str(k) + struct.pack("<I", vt) + _val(vt, v)
    offs, pos, datas = [], 0, []
    for name, tname, shape, data in tensors:
        raw = data.tobytes() if isinstance(data, np.ndarray) else bytes(data)
        ne = list(reversed(shape))
        head += _str(name) + struct.pack("<I", len(ne)) + b"".join(struct.pack("<Q", d) for d in ne)
        head += struct.pack("<IQ", TYPES[tname][0], pos)
        offs.append(pos)
        datas.append(raw)
        pos += -(-len(raw) // align) * align
    data_off = -(-len(head) // align) * align
    with open(path, "wb") as f:
        f.write(head + b"\0" * (data_off - len(head)))
        for raw, off in zip(datas, offs):
            f.seek(data_off + off)
            f.write(raw)
        f.truncate(data_off + pos)
    return data_off, [data_off + o for o in offs]
