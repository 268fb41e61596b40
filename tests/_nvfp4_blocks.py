"""Random valid NVFP4 tensors as Comfy's files store them (comfy-kitchen's
TensorCoreNVFP4Layout), and an independent float64 decode for the NVFP4 GEMM tests: E2M1 by
its definition, e4m3 by torch's float8_e4m3fn, the blocked scale layout by index arithmetic
written from cuBLAS's description (128 x 4 tiles, each stored as [32][4][4])."""
import numpy as np
import torch

E2M1_MAG = np.array([0.0, 0.5, 1.0, 1.5, 2.0, 3.0, 4.0, 6.0])


def random_part(rows, K, rng, awq=False, pad_rows=0):
    """(codes, blocked scales, scale_2, pre_scale or None): every code byte random, block
    scales random e4m3 bytes in [0x08, 0x77] (normal, positive, below 448; a few
    subnormals and zeros mixed in), K padded to 16 as the files do, ``pad_rows`` extra rows
    (the files pad N to 16)."""
    Kp = -(-K // 16) * 16
    codes = rng.integers(0, 256, (rows + pad_rows, Kp // 2), dtype=np.uint8)
    R, C = -(-rows // 128) * 128, -(-(Kp // 16) // 4) * 4
    scales = rng.integers(0x08, 0x78, R * C, dtype=np.uint8)
    scales[rng.random(R * C) < 0.05] = 0x03            # a subnormal
    scales[rng.random(R * C) < 0.02] = 0x00            # an all-zero block
    s2 = float(rng.uniform(1e-3, 1e-2))
    pre = (0.25 + rng.random(K) * 2).astype(np.float32) if awq else None
    return codes, scales, s2, pre


def plain_scales(blocked, rows, nb):
    """The (rows, nb) scale bytes of a blocked array: row r = 128 t + 32 a + b, column
    c = 4 u + v is stored at tile (t, u), position [b][a][v]."""
    ncb = -(-nb // 4)
    out = np.empty((rows, nb), np.uint8)
    for r in range(rows):
        t, a, b = r // 128, (r % 128) // 32, r % 32
        for c in range(nb):
            out[r, c] = blocked[((t * ncb + c // 4) * 32 + b) * 16 + a * 4 + c % 4]
    return out


def decode(part, rows, K):
    """float64 W [rows, K] (times pre_scale when the part has one)."""
    codes, blocked, s2, pre = part
    hi, lo = codes[:rows] >> 4, codes[:rows] & 15
    c = np.stack([hi, lo], axis=-1).reshape(rows, -1)[:, :K]       # the even input in the high nibble
    vals = np.where(c & 8, -1.0, 1.0) * E2M1_MAG[c & 7]
    nb = codes.shape[1] * 2 // 16
    sb = plain_scales(blocked, rows, nb)
    sc = torch.from_numpy(sb.copy()).view(torch.float8_e4m3fn).double().numpy()
    w = vals * np.repeat(sc, 16, axis=1)[:, :K] * s2
    return w * pre.astype(np.float64)[None, :] if pre is not None else w


def quant_act(x, pre=None):
    """x (times pre, in float32) as the NVFP4 GEMM quantises it: per 32 values d = max|x| /
    127 (float32), q = rint(x / d) clamped to +-127 -> q * d in float64."""
    xs = (x * pre).astype(np.float32) if pre is not None else x
    M, K = xs.shape
    b = xs.reshape(M, K // 32, 32)
    d = (np.abs(b).max(-1) / np.float32(127.0)).astype(np.float32)
    with np.errstate(divide="ignore", invalid="ignore"):
        q = np.where(d[..., None] > 0, np.rint(b / d[..., None]), 0.0)
    return (np.clip(q, -127, 127) * d[..., None].astype(np.float64)).reshape(M, K)


def bf16_act(x, pre=None):
    """x (times pre, in float32) rounded to bf16 as the NVFP4 GEMM's bf16 route rounds it
    (nearest, ties to even) -> float64."""
    xs = np.ascontiguousarray((x * pre).astype(np.float32) if pre is not None else x, np.float32)
    u = xs.view(np.uint32).astype(np.uint64)
    r = ((u + 0x7FFF + ((u >> 16) & 1)) >> 16) << 16
    return r.astype(np.uint32).view(np.float32).astype(np.float64)
