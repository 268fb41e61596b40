"""Where a LoRA's time goes on one int8 linear: the base GEMM alone, the base with the
LoRA attached, the down product u = x.A^T alone (an fp32 linear [R, K]: one GEMM split
over its R output columns, as the addend ran it before commit c3ec36e; since then the
addend runs it in 128-row chunks on all threads, so this is an estimate) and, by
difference, the up product u.B^T added in the epilogue.  Also prints how many threads a
column-split down product can use (R / NR panels, one per thread).

    PYTHONPATH=$PWD python bench/lora_linear_profile.py --isa avx2 --threads 2
    PYTHONPATH=$PWD python bench/lora_linear_profile.py --M 1872 --K 5376 --N 21504 --R 192 --isa amx --threads 16

Times on a shared, loaded machine are noise: read the ratios of one run, never a time.
"""
import argparse
import sys
import time

import numpy as np

NR = {"ref": 4, "avx2": 16, "avxvnni": 16, "avx512": 32, "amx": 32, "neon": 12}


def median_time(f, repeat):
    f()
    ts = []
    for _ in range(repeat):
        t0 = time.perf_counter()
        f()
        ts.append(time.perf_counter() - t0)
    return float(np.median(ts))


def main(argv=None):
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--M", type=int, default=512)
    p.add_argument("--K", type=int, default=1344)
    p.add_argument("--N", type=int, default=5376)
    p.add_argument("--R", type=int, default=192)
    p.add_argument("--isa", default="avx2")
    p.add_argument("--threads", type=int, default=2)
    p.add_argument("--weights", default="int8")
    p.add_argument("--repeat", type=int, default=5)
    p.add_argument("--lora-isa", nargs="*", default=None,
                   help="also time the LoRA built for these paths beside the base's (an A/B: "
                        "e.g. --isa amx --lora-isa avx512 runs the AMX int8 base with float32 "
                        "AVX-512 LoRA products instead of bf16 tiles)")
    a = p.parse_args(argv)
    from h3cy import _kernels
    from h3cy.ops import Linear
    rng = np.random.default_rng(0)
    W = rng.standard_normal((a.N, a.K), dtype=np.float32) * 0.02
    A = rng.standard_normal((a.R, a.K), dtype=np.float32) * 0.01
    B = rng.standard_normal((a.N, a.R), dtype=np.float32) * 0.01
    x = rng.standard_normal((a.M, a.K), dtype=np.float32)
    lin = Linear(W, weights=a.weights, isa=a.isa, threads=a.threads)
    down = Linear(A, weights="fp32", isa=a.isa, threads=a.threads)
    lo = _kernels.LoraCore(A, B, np.ones(a.R, np.float32), isa=a.isa)
    tb = median_time(lambda: lin(x), a.repeat)
    lin.core.set_lora(lo)
    tl = median_time(lambda: lin(x), a.repeat)
    lin.core.set_lora(None)
    tu = median_time(lambda: down(x), a.repeat)
    macs = a.M * a.K * a.N
    print(f"{a.weights} linear M={a.M} K={a.K} N={a.N}, LoRA rank {a.R}, ISA {a.isa}, {a.threads} threads")
    print(f"MACs vs base: down {a.R / a.N:.3f}, up {a.R / a.K:.3f}")
    print(f"base {tb * 1e3:8.1f} ms")
    print(f"+LoRA {tl * 1e3:7.1f} ms  ratio {tl / tb:.3f}")
    print(f"down  {tu * 1e3:7.1f} ms  ({tu / tb:.3f} of base; threads a column split can use: "
          f"{min(a.threads, -(-a.R // NR.get(a.isa, 16)))} of {a.threads})")
    print(f"up    {(tl - tb - tu) * 1e3:7.1f} ms  ({(tl - tb - tu) / tb:.3f} of base, by difference)")
    print(f"base rate {macs / tb / 1e9:.1f} GMAC/s")
    for other in a.lora_isa or []:
        lo2 = _kernels.LoraCore(A, B, np.ones(a.R, np.float32), isa=other)
        ts = {}
        for _ in range(3):             # alternated: base+LoRA(isa), base+LoRA(other)
            for name, core in ((a.isa, lo), (other, lo2)):
                lin.core.set_lora(core)
                ts.setdefault(name, []).append(median_time(lambda: lin(x), a.repeat))
        lin.core.set_lora(None)
        for name in (a.isa, other):
            t = float(np.median(ts[name]))
            print(f"+LoRA on {name:7s} {t * 1e3:7.1f} ms  ratio {t / tb:.3f}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
