"""int8 "convrot" GEMM (Comfy's rotated int8 files: x rotated by the block Hadamard of
G = 256, quantised per row, h3cy's int8 GEMM) at the MiniMax-H3 DiT shapes, M = 2048 and
M = 128, 2 threads.

Groups: one per (shape, M); baseline = h3cy's own int8 on the same float weights;
candidates = convrot int8 (rotation included), torch F.linear fp32 and torch's int8
dynamic-quantised Linear.  Outputs are checked for agreement before timing.

    pytest bench/test_bench_convrot.py --benchmark-json=bench/results/convrot.json
    python bench/report.py bench/results/convrot.json
(bench/convrot_gemm.py prints the same comparison as a table, alternating the calls.)
"""
import warnings

import numpy as np
import pytest

import h3cy
from convrot_gemm import GROUP, SHAPES, convrot_weights
from gemm_cases import last_case, row_error, selected

SHAPES, MS = selected(SHAPES, "H3CY_BENCH_CONVROT_M", "2048,128")


def case(name, M):
    def build():
        N, K = SHAPES[name]
        rng = np.random.default_rng(0)
        w = rng.standard_normal((N, K), dtype=np.float32) * 0.02
        x = rng.standard_normal((M, K), dtype=np.float32)
        return w, x, convrot_weights(w)
    return last_case((name, M), build)


def _check(y, w, x):
    assert row_error(y, w, x) < 3e-2


@pytest.mark.parametrize("M", MS)
@pytest.mark.parametrize("shape", list(SHAPES))
@pytest.mark.parametrize("impl", ["int8", "convrot"])
def test_h3cy(benchmark, shape, M, impl, threads):
    w, x, (q, s) = case(shape, M)
    warnings.simplefilter("ignore", RuntimeWarning)
    if impl == "int8":
        lin = h3cy.ops.Linear(w, weights="int8", threads=threads)
    else:
        lin = h3cy.ops.Linear.from_int8(q, s, rot_group=GROUP, threads=threads)
    out = np.empty((M, w.shape[0]), np.float32)
    _check(lin(x, out=out), w, x)
    benchmark.group = f"convrot[{shape}, M={M}]"
    benchmark.extra_info.update(role="baseline" if impl == "int8" else "convrot int8 (rotation included)",
                                impl=f"h3cy {impl} ({lin.isa})", flop=2.0 * M * w.shape[0] * w.shape[1])
    benchmark.pedantic(lambda: lin(x, out=out), rounds=3, warmup_rounds=1)


@pytest.mark.parametrize("M", MS)
@pytest.mark.parametrize("shape", list(SHAPES))
@pytest.mark.parametrize("dtype", ["fp32", "int8dyn"])
def test_torch(benchmark, shape, M, dtype, torch_mod):
    if torch_mod is None:
        pytest.skip("torch not installed (the side-by-side rows need it)")
    torch = torch_mod
    w, x, _ = case(shape, M)
    tw, tx = torch.from_numpy(w), torch.from_numpy(x)
    if dtype == "fp32":
        def run():
            with torch.inference_mode():
                return torch.nn.functional.linear(tx, tw)
    else:
        lin = torch.nn.Linear(w.shape[1], w.shape[0], bias=False)
        with torch.no_grad():
            lin.weight.copy_(tw)
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")
            qm = torch.ao.quantization.quantize_dynamic(torch.nn.Sequential(lin), {torch.nn.Linear},
                                                        dtype=torch.qint8)

        def run():
            with torch.inference_mode():
                return qm(tx)
    _check(run().numpy(), w, x)
    benchmark.group = f"convrot[{shape}, M={M}]"
    benchmark.extra_info.update(role=f"torch {dtype}", impl=f"torch {dtype}", flop=2.0 * M * w.shape[0] * w.shape[1])
    benchmark.pedantic(run, rounds=3, warmup_rounds=1)
