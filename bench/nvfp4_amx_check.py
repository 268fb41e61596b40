"""NVFP4 on AMX (an AMX machine only: Sapphire Rapids or later): checks the bf16 route
(csrc/nvfp4_amx.c, the AVX-512 panel decoder in csrc/nvfp4_avx512.c) against float64, then
times it beside the AVX-512 VNNI route (H3CY_NVFP4_ROUTE=int8) and h3cy's int4, int8 and
bf16 linears on the same weights.

Checks (asserts; exit status 1 on a failure):
  1. the AVX-512 decoder: the bf16 route on isa avx512 (AVX-512 decode, scalar sums) gives
     the reference's (isa ref) bits;
  2. the AMX route against float64 on the bf16-rounded activations (x times the AWQ
     pre-scale, rounded to float, then to bf16): every output within float32 summation's
     bound (K + K/1024 + 2) u sum|x w| (u = 2^-24), and relative L2 <= 1e-6, on small odd
     shapes (rows past M in a tile group, columns past N in a panel, two K blocks, AWQ, a
     part with another scale_2, the SwiGLU pair) and on the timed shapes (rows sampled);
  3. the VNNI route against float64 on int8-quantised activations (rel L2 <= 1e-5).
Timing: best of --calls calls in --rounds alternated rounds, median ms, at the H3 shapes.

    python3 bench/nvfp4_amx_check.py [--threads 16] [--m 2048,128] [--shapes te_q,te_o,qkv,down]
"""
import argparse
import os
import sys
import warnings

import numpy as np

import h3cy
from h3cy import _kernels

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from convrot_gemm import add_timing_args, alternated_ms, machine_line  # noqa: E402
from nvfp4_gemm import SHAPES  # noqa: E402

E2M1 = np.array([0, 0.5, 1, 1.5, 2, 3, 4, 6, -0.0, -0.5, -1, -1.5, -2, -3, -4, -6])


def e4m3(b):
    """float64 of e4m3 (fn) bytes, from the format: (1 + m/8) 2^(e-7), subnormal m/8 2^-6."""
    b = b.astype(np.int64)
    e, m = (b >> 3) & 15, b & 7
    v = np.where(e > 0, (1 + m / 8.0) * np.exp2(e - 7.0), m / 8.0 * 2.0 ** -6)
    return np.where(b & 0x80, -v, v)


def random_part(rows, K, rng, s2, awq):
    codes = rng.integers(0, 256, (rows, K // 2), dtype=np.uint8)
    R, C = -(-rows // 128) * 128, -(-(K // 16) // 4) * 4
    scales = rng.integers(0x08, 0x78, R * C, dtype=np.uint8)
    scales[rng.random(R * C) < 0.05] = 0x03                  # subnormal block scales
    pre = (0.25 + 2 * rng.random(K)).astype(np.float32) if awq else None
    return codes, scales, s2, pre


def decode(part, rows, K):
    """float64 W [rows, K] = e2m1 e4m3 scale_2 (the pre-scale not folded: it multiplies x)."""
    codes, blocked, s2, _ = part
    c = np.stack([codes >> 4, codes & 15], axis=-1).reshape(rows, K)
    ncb = -(-(K // 16) // 4)
    r, b = np.arange(rows)[:, None], np.arange(K // 16)[None, :]
    off = (((r // 128) * ncb + b // 4) * 32 + r % 32) * 16 + ((r % 128) // 32) * 4 + b % 4
    return E2M1[c] * np.repeat(e4m3(blocked[off]), 16, axis=1) * s2


def bf16_act(x, pre):
    xs = np.ascontiguousarray((x * pre).astype(np.float32) if pre is not None else x, np.float32)
    u = xs.view(np.uint32).astype(np.uint64)
    return (((u + 0x7FFF + ((u >> 16) & 1)) >> 16) << 16).astype(np.uint32).view(np.float32).astype(np.float64)


def quant_act(x, pre):
    xs = (x * pre).astype(np.float32) if pre is not None else x
    M, K = xs.shape
    b = xs.reshape(M, K // 32, 32)
    d = (np.abs(b).max(-1) / np.float32(127.0)).astype(np.float32)
    with np.errstate(divide="ignore", invalid="ignore"):
        q = np.where(d[..., None] > 0, np.rint(b / d[..., None]), 0.0)
    return (np.clip(q, -127, 127) * d[..., None].astype(np.float64)).reshape(M, K)


def rel(a, b):
    return float(np.linalg.norm(a - b) / np.linalg.norm(b))


def check_bound(y, xa, W, bias, what):
    K = xa.shape[1]
    exact = xa @ W.T + bias
    bound = (K + K / 1024 + 2) * 2.0 ** -24 * (np.abs(xa) @ np.abs(W).T + np.abs(bias))
    over = np.abs(y - exact) / np.maximum(bound, 1e-300)
    e = rel(y, exact)
    print(f"  {what}: rel L2 {e:.2e}, worst |err| / bound {over.max():.3f}")
    assert over.max() <= 1.0 and e <= 1e-6, what


def core_of(parts, N, K, bias, pair, isa, threads, route):
    core = _kernels.linear_attach_nvfp4(parts, N, K, bias, pair, isa, _kernels.ThreadPool(threads))
    _kernels.linear_nvfp4_route(core, route)
    return core


def run(core, x, N, kind=0):
    y = np.full((x.shape[0], N), np.nan, np.float32)
    core.forward(x, y, kind)
    return y


def checks_small(threads):
    rng = np.random.default_rng(1)
    print("checks (small shapes):")
    for N, K, M, awq in [(37, 288, 5, False), (70, 2112, 33, True), (33, 1056, 67, True), (300, 5120, 129, True)]:
        part = random_part(N, K, rng, float(rng.uniform(1e-3, 1e-2)), awq)
        W = decode(part, N, K)
        x = rng.standard_normal((M, K)).astype(np.float32)
        x[1, 5] = 40.0
        bias = rng.standard_normal(N).astype(np.float32)
        ya = run(core_of([part], N, K, bias, 0, "amx", threads, "bf16"), x, N)
        check_bound(ya, bf16_act(x, part[3]), W, bias, f"amx bf16 route {N}x{K}, M {M}{', AWQ' if awq else ''}")
        yr = run(core_of([part], N, K, bias, 0, "ref", 1, "bf16"), x, N)
        y5 = run(core_of([part], N, K, bias, 0, "avx512", threads, "bf16"), x, N)
        assert np.array_equal(y5, yr), "the AVX-512 bf16 decoder's bits are not the reference's"
        print(f"  avx512 decoder {N}x{K}: the reference's bits")
        yv = run(core_of([part], N, K, bias, 0, "amx", threads, "int8"), x, N)
        e = rel(yv, quant_act(x, part[3]) @ W.T + bias)
        print(f"  amx int8 (VNNI) route {N}x{K}: rel L2 {e:.2e} vs float64 on int8 activations")
        assert e <= 1e-5
    # parts with two scale_2 and pre-scales, the SwiGLU pair
    M, K, H = 45, 1088, 50
    parts = [random_part(H, K, rng, s, awq=i > 0) for i, s in enumerate((3e-3, 7e-3, 1.5e-3))]
    Ws = [decode(p, H, K) for p in parts]
    x = rng.standard_normal((M, K)).astype(np.float32)
    want = np.concatenate([bf16_act(x, p[3]) @ W.T for p, W in zip(parts, Ws)], axis=1)
    y = run(core_of(parts, 3 * H, K, None, 0, "amx", threads, "bf16"), x, 3 * H)
    assert rel(y, want) <= 1e-6, "three parts"
    bias = rng.standard_normal(2 * H).astype(np.float32)
    yp = run(core_of(parts[1:], 2 * H, K, bias, 1, "amx", threads, "bf16"), x, H, kind=1)
    g, v = want[:, H:2 * H] + bias[:H], want[:, 2 * H:] + bias[H:]
    e = rel(yp, g / (1 + np.exp(-g)) * v)
    print(f"  amx bf16 route, three parts / SwiGLU pair: rel L2 {rel(y, want):.2e} / {e:.2e}")
    assert e <= 1e-6, "pair"


def timed_linears(N, K, threads, rng):
    part = random_part(N, K, rng, 1.0 / 256, awq=False)
    pool = _kernels.ThreadPool(threads)
    lins = {}
    for name, route in (("nvfp4 amx", "bf16"), ("nvfp4 vnni", "int8")):
        core = _kernels.linear_attach_nvfp4([part], N, K, None, 0, "amx", pool)
        _kernels.linear_nvfp4_route(core, route)
        lins[name] = h3cy.ops.Linear.from_core(core, "int8", pool)
    W = decode(part, N, K)
    w = W.astype(np.float32)
    lins["int4"] = h3cy.ops.Linear(w, weights="int4", group_size=128, threads=pool)
    lins["int8"] = h3cy.ops.Linear(w, weights="int8", threads=pool)
    lins["bf16"] = h3cy.ops.Linear(w, weights="bf16", threads=pool)
    return lins, W, part


def main():
    ap = argparse.ArgumentParser()
    add_timing_args(ap)
    ap.set_defaults(threads=16)
    ap.add_argument("--m", type=lambda s: [int(v) for v in s.split(",")], default=[2048, 128])
    ap.add_argument("--shapes", default="te_q,te_o,qkv,down")
    ap.add_argument("--check-rows", type=int, default=48, help="rows of each timed shape checked vs float64")
    args = ap.parse_args()
    warnings.simplefilter("ignore", RuntimeWarning)
    if not _kernels.isa_supported("amx"):
        sys.exit("nvfp4_amx_check: this CPU (or OS) has no AMX; run it on Sapphire Rapids or later")
    print(machine_line(args))
    checks_small(args.threads)
    rng = np.random.default_rng(0)
    rows = []
    for name in args.shapes.split(","):
        N, K = SHAPES[name]
        lins, W, part = timed_linears(N, K, args.threads, rng)
        for M in args.m:
            x = rng.standard_normal((M, K), dtype=np.float32)
            y = lins["nvfp4 amx"](x)
            pick = np.unique(np.r_[0:args.check_rows // 2, M - args.check_rows // 2:M])
            check_bound(y[pick].astype(np.float64), bf16_act(x[pick], None), W, np.zeros(N), f"amx route {name} M {M}")
            med = alternated_ms({k: (lambda lin=lin: lin(x)) for k, lin in lins.items()}, args.rounds, args.calls)
            rows.append((name, N, K, M, med))
    print("\n| shape | M | nvfp4 amx | nvfp4 vnni | int4 | int8 | bf16 | amx / int4 speed | vnni / int4 | "
          "amx / vnni | amx / bf16 |")
    print("|---|---|---|---|---|---|---|---|---|---|---|")
    for name, N, K, M, m in rows:
        r = lambda a, b: f"{m[b] / m[a]:.2f}"  # noqa: E731
        print(f"| {name} {N}x{K} | {M} | {m['nvfp4 amx']:.1f} | {m['nvfp4 vnni']:.1f} | {m['int4']:.1f} | "
              f"{m['int8']:.1f} | {m['bf16']:.1f} | {r('nvfp4 amx', 'int4')} | {r('nvfp4 vnni', 'int4')} | "
              f"{r('nvfp4 amx', 'nvfp4 vnni')} | {r('nvfp4 amx', 'bf16')} |")
    print("nvfp4_amx_check: all checks passed")


if __name__ == "__main__":
    main()
