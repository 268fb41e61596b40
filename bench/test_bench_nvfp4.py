"""NVFP4 GEMM (Comfy's nvfp4 text encoder layers run as stored, csrc/gemm_nvfp4.c) at the
Qwen3-VL-32B text encoder's shapes and the MiniMax-H3 DiT's, M = 2048 and M = 128.

Groups: one per (shape, M); baseline = h3cy int4 on the same weights (the issue's target:
NVFP4 >= 0.8 x int4); candidates = NVFP4, h3cy int8, torch F.linear fp32.  Outputs are
checked for agreement before timing.

    H3CY_BENCH_SHAPES=te_q,te_up pytest bench/test_bench_nvfp4.py --benchmark-json=bench/results/nvfp4.json
    python bench/report.py bench/results/nvfp4.json
(bench/nvfp4_gemm.py prints the same comparison as a table, alternating the calls.)
"""
import warnings

import numpy as np
import pytest

from gemm_cases import last_case, row_error, selected
from nvfp4_gemm import BOUND, SHAPES, linears

SHAPES, MS = selected(SHAPES, "H3CY_BENCH_NVFP4_M", "2048,128")


def case(name, M, threads):
    def build():
        N, K = SHAPES[name]
        rng = np.random.default_rng(0)
        warnings.simplefilter("ignore", RuntimeWarning)
        lins, w = linears(N, K, threads, rng)
        return lins, w, rng.standard_normal((M, K), dtype=np.float32)
    return last_case((name, M), build)


def _check(y, w, x, bound):
    assert row_error(y, w, x) < bound


@pytest.mark.parametrize("M", MS)
@pytest.mark.parametrize("shape", list(SHAPES))
@pytest.mark.parametrize("impl", ["h3cy int4", "h3cy nvfp4", "h3cy int8"])
def test_h3cy(benchmark, shape, M, impl, threads):
    lins, w, x = case(shape, M, threads)
    lin = lins[impl]
    out = np.empty((M, w.shape[0]), np.float32)
    _check(lin(x, out=out), w, x, BOUND[impl])
    benchmark.group = f"nvfp4[{shape}, M={M}]"
    benchmark.extra_info.update(role="baseline" if impl == "h3cy int4" else impl, impl=f"{impl} ({lin.isa})",
                                flop=2.0 * M * w.shape[0] * w.shape[1])
    benchmark.pedantic(lambda: lin(x, out=out), rounds=3, warmup_rounds=1)


@pytest.mark.parametrize("M", MS)
@pytest.mark.parametrize("shape", list(SHAPES))
def test_torch_fp32(benchmark, shape, M, threads, torch_mod):
    if torch_mod is None:
        pytest.skip("torch not installed (the side-by-side rows need it)")
    torch = torch_mod
    _, w, x = case(shape, M, threads)
    tw, tx = torch.from_numpy(w), torch.from_numpy(x)

    def run():
        with torch.inference_mode():
            return torch.nn.functional.linear(tx, tw)
    _check(run().numpy(), w, x, 1e-4)
    benchmark.group = f"nvfp4[{shape}, M={M}]"
    benchmark.extra_info.update(role="torch fp32", impl="torch fp32", flop=2.0 * M * w.shape[0] * w.shape[1])
    benchmark.pedantic(run, rounds=3, warmup_rounds=1)
