"""GGUF GEMM (the community's quantised H3 files run as stored, csrc/gemm_gguf.c on the panel
driver csrc/gemm_panel.c) for Q8_0, Q6_K, Q5_K, Q4_K and Q3_K, on small shapes that run in
seconds on 2 cores (the full DiT / text-encoder table is bench/gguf_gemm.py's).

Groups: one per (type, shape, M); baseline = h3cy int8 on the same weights (the GGUF blocks'
dequantisation: the issue's target for Q8_0 is >= 0.9 x int8) beside h3cy int4 (Q4_K's
target: >= 0.85 x int4).  Outputs are checked for agreement before timing.

    pytest bench/test_bench_gguf.py --benchmark-json=bench/results/gguf.json
    python bench/report.py bench/results/gguf.json
"""
import warnings

import numpy as np
import pytest

import h3cy
from gemm_cases import last_case, row_error, selected
from gguf_gemm import BOUND, TYPES, gguf_linear

# (N, K): a slice of the DiT's q projection and of its FFN down (K = 5376, 14336 as in the
# released config), small enough for CI-sized runs
SHAPES = {"dit_q_slice": (512, 5376), "dit_down_slice": (256, 14336)}
SHAPES, MS = selected(SHAPES, "H3CY_BENCH_GGUF_M", "256")


def case(type_name, shape, M, threads):
    def build():
        from h3cy import _kernels
        N, K = SHAPES[shape]
        rng = np.random.default_rng(0)
        warnings.simplefilter("ignore", RuntimeWarning)
        pool = _kernels.ThreadPool(threads)
        lin, core = gguf_linear(type_name, N, K, pool, rng)
        w = core.dequantized()
        lins = {"gguf": lin, "h3cy int8": h3cy.ops.Linear(w, weights="int8", threads=pool),
                "h3cy int4": h3cy.ops.Linear(w, weights="int4", group_size=128, threads=pool)}
        return lins, w, rng.standard_normal((M, K), dtype=np.float32)
    return last_case((type_name, shape, M), build)


@pytest.mark.parametrize("M", MS)
@pytest.mark.parametrize("shape", list(SHAPES))
@pytest.mark.parametrize("type_name", TYPES)
@pytest.mark.parametrize("impl", ["h3cy int8", "gguf", "h3cy int4"])
def test_gguf(benchmark, type_name, shape, M, impl, threads):
    lins, w, x = case(type_name, shape, M, threads)
    lin = lins[impl]
    out = np.empty((M, w.shape[0]), np.float32)
    err = row_error(lin(x, out=out), w, x)
    assert err < BOUND[impl.split()[-1]], err
    name = type_name if impl == "gguf" else impl
    benchmark.group = f"gguf[{type_name}, {shape}, M={M}]"
    benchmark.extra_info.update(role="baseline" if impl == "h3cy int8" else name, impl=f"{name} ({lin.isa})",
                                flop=2.0 * M * w.shape[0] * w.shape[1])
    benchmark.pedantic(lambda: lin(x, out=out), rounds=3, warmup_rounds=1)
