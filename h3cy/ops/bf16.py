"""bfloat16 helpers in numpy (round to nearest even, as torch), used where h3cy must
reproduce the reference's bf16 roundings of activations."""
import numpy as np


def round_bf16(x, out=None):
    """Round float32 values to the nearest bfloat16 (ties to even), kept as float32.

    x : ndarray float32 (any shape, C-contiguous); out may be x (in place).  NaN stays NaN.
    """
    x = np.asarray(x, dtype=np.float32)
    u = x.view(np.uint32)
    lsb = (u >> 16) & np.uint32(1)
    r = (u + np.uint32(0x7FFF) + lsb) & np.uint32(0xFFFF0000)
    nan = np.isnan(x)
    if nan.any():  # keep NaN a NaN (quiet), whatever the payload
        r = np.where(nan, (u & np.uint32(0xFFFF0000)) | np.uint32(0x00400000), r)
    if out is None:
        return r.view(np.float32)
    out.view(np.uint32)[...] = r
    return out


def bf16_bits_to_f32(bits):
    """uint16 bf16 bit patterns -> float32 (exact)."""
    return (np.asarray(bits, dtype=np.uint16).astype(np.uint32) << 16).view(np.float32)


def f32_to_bf16_bits(x):
    """float32 -> uint16 bf16 bit patterns (round to nearest even)."""
    return (round_bf16(x).view(np.uint32) >> 16).astype(np.uint16)
