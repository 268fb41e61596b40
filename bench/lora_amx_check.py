"""The fused LoRA up product on AMX (the int8 kernel adds u.B^T as it stores its last K
block: csrc/gemm_amx.c ukr_int_lora_amx) against the second pass over the output it
replaced (LoraCore(fused=False), gemm_lora_add) and against a float64 reference, then the
time of each on the DiT's large linears.

Checks, per shape (asserted, so a wrong kernel stops the run):
  - the LoRA's part of the output (y with the LoRA - y without it, the same base bits)
    against (x.A^T * scale).B^T in float64, max |err| / max |ref|: the float down product
    (int_down=False, bf16 tiles: ~2^-8 relative of the LoRA's part) <= 1e-2; the default
    down product on AMX, from the base's int8-quantised rows (LoraCore int_down), <= twice
    the int8 base's own error measured the same way (at least 1e-2);
  - fused and second pass: the same values (np.array_equal; the same tile sums added in
    the same order).
Times: base, base + LoRA by the second pass, fused, fused with the float down product,
and base + the down product alone (a LoRA whose B is all zero: u = x.A^T is computed, no
column has a rank, so nothing is added) from the int8 rows and in float, alternated
rounds, median; the ratios are what to read.

    PYTHONPATH=$PWD python bench/lora_amx_check.py                      # 16-core AMX: both shapes
    PYTHONPATH=$PWD python bench/lora_amx_check.py --isa ref --M 100 --K 1100 --N 200 --threads 2

On another path than amx, "fused" asks for the path's fused kernel (the reference table
has one, as the AMX kernel's spec; AVX2/AVX-512 have none: the same code as the old way).
"""
import argparse
import os
import sys

import numpy as np

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from lora_linear_profile import median_time  # noqa: E402  (one timer for both LoRA scripts)


def check_and_time(M, K, N, R, isa, threads, repeat, rounds, seed=0):
    from h3cy import _kernels
    from h3cy.ops import Linear
    rng = np.random.default_rng(seed)
    W = (rng.standard_normal((N, K), dtype=np.float32) * 0.02).astype(np.float32)
    A = (rng.standard_normal((R, K), dtype=np.float32) * 0.01).astype(np.float32)
    B = (rng.standard_normal((N, R), dtype=np.float32) * 0.01).astype(np.float32)
    scale = np.ones(R, np.float32)
    x = rng.standard_normal((M, K), dtype=np.float32)
    lin = Linear(W, weights="int8", isa=isa, threads=threads)
    zero = np.zeros_like(B)
    # int_down=None: the path's default (on AMX the down product from the base's int8 rows)
    cores = {"old": _kernels.LoraCore(A, B, scale, isa=isa, fused=False),
             "new": _kernels.LoraCore(A, B, scale, isa=isa, fused=True),
             "fdown": _kernels.LoraCore(A, B, scale, isa=isa, fused=True, int_down=False),
             "down": _kernels.LoraCore(A, zero, scale, isa=isa, fused=True),
             "fdown0": _kernels.LoraCore(A, zero, scale, isa=isa, fused=True, int_down=False)}
    base = lin(x)
    ref = (x.astype(np.float64) @ A.T.astype(np.float64)) * scale @ B.T.astype(np.float64)
    xw = x.astype(np.float64) @ W.T.astype(np.float64)
    base_err = float(np.abs(base - xw).max() / np.abs(xw).max())   # the int8 base's own error
    out = {}
    for name, core in cores.items():
        lin.core.set_lora(core)
        out[name] = lin(x)
    lin.core.set_lora(None)
    for name in ("down", "fdown0"):
        assert np.array_equal(out.pop(name), base), "a LoRA with B = 0 changed the output"
    assert np.array_equal(lin(x), base), "detaching the LoRA did not give the base bits back"
    denom = np.abs(ref).max()
    errs = {name: float(np.abs((y - base) - ref).max() / denom) for name, y in out.items()}
    ndiff = int(np.count_nonzero(out["new"] != out["old"]))
    # the float down product on bf16 tiles: ~2^-8 relative of the LoRA's part (bound 1e-2);
    # from the base's int8 rows: the base's own int8 error (bound twice that, at least 1e-2)
    int_bound = max(1e-2, 2 * base_err)
    print(f"int8 linear M={M} K={K} N={N}, LoRA rank {R}, ISA {isa}, {threads} threads")
    print(f"  LoRA part vs float64, max rel err: default down {errs['new']:.3g} (bound {int_bound:.3g}; "
          f"the int8 base's own error {base_err:.3g}), float down {errs['fdown']:.3g} (bound 1e-2)")
    print(f"  fused vs second pass: {ndiff} of {out['new'].size} elements differ"
          + (f" (max |diff| {np.abs(out['new'] - out['old']).max():.3g})" if ndiff else ""))
    assert errs["new"] <= int_bound, f"fused LoRA off the reference by {errs['new']:.3g}"
    assert errs["fdown"] <= 1e-2, f"float-down LoRA off the reference by {errs['fdown']:.3g}"
    assert ndiff == 0, "the fused LoRA does not give the second pass's values"
    ts = {"base": [], "old": [], "new": [], "fdown": [], "down": [], "fdown0": []}
    for _ in range(rounds):                  # alternated: base, old, new, ..., base, ...
        for name in ts:
            lin.core.set_lora(cores.get(name))
            ts[name].append(median_time(lambda: lin(x), repeat))
    lin.core.set_lora(None)
    tb = float(np.median(ts["base"]))
    for name, label in (("base", "base"), ("old", "+LoRA 2nd pass"), ("new", "+LoRA fused"),
                        ("fdown", "+LoRA fused, float down"), ("down", "+down product only"),
                        ("fdown0", "+float down only")):
        t = float(np.median(ts[name]))
        print(f"  {label:24s} {t * 1e3:8.1f} ms  ratio {t / tb:.3f}  (+{(t - tb) * 1e3:.1f} ms)")
    return errs, ts


def main(argv=None):
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--M", type=int, default=1872)
    p.add_argument("--K", type=int, default=5376)
    p.add_argument("--N", type=int, nargs="*", default=[28672, 5376])
    p.add_argument("--R", type=int, default=64)
    p.add_argument("--isa", default="amx")
    p.add_argument("--threads", type=int, default=16)
    p.add_argument("--repeat", type=int, default=5, help="timed calls per measurement (median)")
    p.add_argument("--rounds", type=int, default=3, help="alternated rounds (median of their medians)")
    a = p.parse_args(argv)
    sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
    from lora_overhead import cpu_name
    print(f"CPU: {cpu_name()}")
    for N in a.N:
        check_and_time(a.M, a.K, N, a.R, a.isa, a.threads, a.repeat, a.rounds)
    return 0


if __name__ == "__main__":
    sys.exit(main())
