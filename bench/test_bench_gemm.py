"""GEMM throughput at the MiniMax-H3 DiT shapes, M = 2048 rows, 2 threads.

Groups: one per weight shape; baseline = numpy float32 matmul (OpenBLAS); candidates =
every h3cy weights mode and, when torch is installed, torch F.linear fp32/bf16/fp16 and
torch's int8 dynamic-quantised Linear.  Outputs are checked for agreement before timing.

    pytest bench/test_bench_gemm.py --benchmark-json=bench/results/gemm.json
    python bench/report.py bench/results/gemm.json
"""
import os

import numpy as np
import pytest

import h3cy

M = int(os.environ.get("H3CY_BENCH_M", "2048"))
SHAPES = {
    "qkv_7168x5376": (7168, 5376),
    "attn_out_5376x7168": (5376, 7168),
    "ffn_up_28672x5376": (28672, 5376),
    "ffn_down_5376x14336": (5376, 14336),
}
only = os.environ.get("H3CY_BENCH_SHAPES")
if only:
    SHAPES = {k: v for k, v in SHAPES.items() if k in only.split(",")}
# bf16in: bf16 weights times bf16-valued inputs (Linear(bf16_inputs=True), the DiT's bf16
# mode, whose GEMM inputs are already rounded as torch's bf16 F.linear rounds them): VDPBF16PS
# or AMX tiles where the CPU has them
MODES = ["fp32", "bf16", "bf16in", "fp16", "int8", "int4"]
BOUND = {"fp32": 1e-4, "bf16": 1e-2, "bf16in": 1e-2, "fp16": 3e-3, "int8": 3e-2, "int4": 1.5e-1}

_cache = {}


def case(name):
    if name not in _cache:
        N, K = SHAPES[name]
        rng = np.random.default_rng(0)
        w = (rng.standard_normal((N, K), dtype=np.float32) * 0.02).astype(np.float32)
        x = rng.standard_normal((M, K), dtype=np.float32)
        _cache.clear()
        _cache[name] = (w, x, None)
    return _cache[name]


def rel(a, b):
    return float(np.linalg.norm(a - b) / np.linalg.norm(b))


@pytest.mark.parametrize("shape", list(SHAPES))
def test_numpy_f32(benchmark, shape):
    w, x, _ = case(shape)
    N, K = w.shape
    wt = np.ascontiguousarray(w.T)
    benchmark.group = f"gemm[{shape}]"
    benchmark.extra_info.update(role="baseline", impl="numpy fp32", flop=2.0 * M * N * K)
    benchmark.pedantic(lambda: x @ wt, rounds=3, warmup_rounds=1)


@pytest.mark.parametrize("mode", MODES)
@pytest.mark.parametrize("shape", list(SHAPES))
def test_h3cy(benchmark, shape, mode, threads):
    w, x, _ = case(shape)
    N, K = w.shape
    kw = {"group_size": 128} if mode == "int4" else {}
    if mode == "bf16in":
        from h3cy.ops.bf16 import round_bf16
        x = round_bf16(x)
        kw = {"bf16_inputs": True}
    lin = h3cy.ops.Linear(w, weights="bf16" if mode == "bf16in" else mode, threads=threads, **kw)
    out = np.empty((M, N), np.float32)
    rows = slice(0, 64)
    want = x[rows].astype(np.float64) @ w.astype(np.float64).T
    got = lin(np.ascontiguousarray(x[rows]))
    assert rel(got, want) < BOUND[mode], "h3cy result disagrees with numpy before timing"
    benchmark.group = f"gemm[{shape}]"
    benchmark.extra_info.update(role=f"h3cy {mode}", impl=f"h3cy {mode} ({lin.isa})",
                                flop=2.0 * M * N * K, isa=lin.isa)
    benchmark.pedantic(lambda: lin(x, out=out), rounds=3, warmup_rounds=1)


@pytest.mark.parametrize("dtype", ["fp32", "bf16", "fp16", "int8dyn"])
@pytest.mark.parametrize("shape", list(SHAPES))
def test_torch(benchmark, shape, dtype, torch_mod):
    if torch_mod is None:
        pytest.skip("torch not installed (reference rows only)")
    torch = torch_mod
    w, x, _ = case(shape)
    N, K = w.shape
    tw, tx = torch.from_numpy(w), torch.from_numpy(x)
    if dtype == "int8dyn":
        lin = torch.nn.Linear(K, N, bias=False)
        with torch.no_grad():
            lin.weight.copy_(tw)
        import warnings
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")
            q = torch.ao.quantization.quantize_dynamic(torch.nn.Sequential(lin), {torch.nn.Linear},
                                                       dtype=torch.qint8)
        fn = lambda: q(tx)  # noqa: E731
    else:
        dt = {"fp32": torch.float32, "bf16": torch.bfloat16, "fp16": torch.float16}[dtype]
        tw2, tx2 = tw.to(dt), tx.to(dt)
        fn = lambda: torch.nn.functional.linear(tx2, tw2)  # noqa: E731
    benchmark.group = f"gemm[{shape}]"
    benchmark.extra_info.update(role=f"torch {dtype}", impl=f"torch {dtype}", flop=2.0 * M * N * K)
    with torch.inference_mode():
        benchmark.pedantic(fn, rounds=3, warmup_rounds=1)
