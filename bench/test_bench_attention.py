"""Attention throughput at the H3 DiT shape: S tokens, 56 heads x 128, 2 threads.

Group per S; baseline = torch scaled_dot_product_attention in fp32 when torch is
installed (else a blocked numpy softmax(QK^T)V); candidates = h3cy on every ISA path
this host has.  FLOPs counted as 4*S^2*D*H (the two matmuls).  A second group times bf16
models' attention (bf16_inputs: AMX bf16 tiles where the CPU has them) against torch's
bf16 scaled_dot_product_attention.

    pytest bench/test_bench_attention.py --benchmark-json=bench/results/attn.json
"""
import math
import os

import numpy as np
import pytest

import h3cy
from h3cy.ops.bf16 import round_bf16

HEADS, D = 56, 128
SEQS = [int(s) for s in os.environ.get("H3CY_BENCH_S", "2048").split(",")]
_cache = {}


def inputs(S):
    if S not in _cache:
        rng = np.random.default_rng(0)
        _cache.clear()
        _cache[S] = tuple(rng.standard_normal((S, HEADS, D), dtype=np.float32) for _ in range(3))
    return _cache[S]


def numpy_attention(q, k, v, rows=None):
    S = q.shape[0]
    rows = range(S) if rows is None else rows
    out = np.empty((len(rows), HEADS, D), np.float32)
    sc = 1.0 / math.sqrt(D)
    for h in range(HEADS):
        s = (q[rows, h] @ k[:, h].T) * sc
        s = np.exp(s - s.max(axis=1, keepdims=True))
        out[:, h] = (s / s.sum(axis=1, keepdims=True)) @ v[:, h]
    return out


@pytest.mark.parametrize("S", SEQS)
def test_reference(benchmark, S, torch_mod):
    q, k, v = inputs(S)
    benchmark.group = f"attention[S={S},H={HEADS},D={D}]"
    flop = 4.0 * S * S * D * HEADS
    if torch_mod is not None:
        torch = torch_mod
        tq, tk, tv = (torch.from_numpy(a).permute(1, 0, 2).contiguous() for a in (q, k, v))
        fn = lambda: torch.nn.functional.scaled_dot_product_attention(tq, tk, tv)  # noqa: E731
        benchmark.extra_info.update(role="baseline", impl="torch sdpa fp32", flop=flop)
        with torch.inference_mode():
            benchmark.pedantic(fn, rounds=3, warmup_rounds=1)
    else:
        benchmark.extra_info.update(role="baseline", impl="numpy", flop=flop)
        benchmark.pedantic(lambda: numpy_attention(q, k, v), rounds=1, warmup_rounds=0)


@pytest.mark.parametrize("isa", [i for i in h3cy.ops.available_isas() if i != "ref"])
@pytest.mark.parametrize("S", SEQS)
def test_h3cy(benchmark, S, isa, threads):
    q, k, v = inputs(S)
    att = h3cy.ops.Attention(isa=isa, threads=threads)
    out = np.empty_like(q)
    rows = [0, S // 2, S - 1]
    got = att(q, k, v, out=out)[rows]
    want = numpy_attention(q, k, v, rows)
    assert np.max(np.abs(got - want)) < 1e-4, "h3cy attention disagrees with numpy before timing"
    benchmark.group = f"attention[S={S},H={HEADS},D={D}]"
    benchmark.extra_info.update(role=f"h3cy {isa}", impl=f"h3cy ({att.isa})",
                                flop=4.0 * S * S * D * HEADS, isa=att.isa)
    benchmark.pedantic(lambda: att(q, k, v, out=out), rounds=3, warmup_rounds=1)


# ---- bf16 models (h3_attn_args.bf16_inputs): q, k, v hold bf16 values; on AMX the products
# run on bf16 tiles (csrc/attn_amx.c), elsewhere the float32 kernels run.  Baseline: torch's
# bf16 scaled_dot_product_attention on the same values.
def inputs_bf16(S):
    return tuple(round_bf16(a) for a in inputs(S))


@pytest.mark.parametrize("S", SEQS)
def test_reference_bf16(benchmark, S, torch_mod):
    if torch_mod is None:
        pytest.fail("the bf16 attention baseline needs torch (the test extras install it)")
    torch = torch_mod
    q, k, v = inputs_bf16(S)
    tq, tk, tv = (torch.from_numpy(a).permute(1, 0, 2).contiguous().bfloat16() for a in (q, k, v))
    fn = lambda: torch.nn.functional.scaled_dot_product_attention(tq, tk, tv)  # noqa: E731
    benchmark.group = f"attention bf16[S={S},H={HEADS},D={D}]"
    benchmark.extra_info.update(role="baseline", impl="torch sdpa bf16", flop=4.0 * S * S * D * HEADS)
    with torch.inference_mode():
        benchmark.pedantic(fn, rounds=3, warmup_rounds=1)


@pytest.mark.parametrize("isa", [i for i in h3cy.ops.available_isas() if i != "ref"])
@pytest.mark.parametrize("S", SEQS)
def test_h3cy_bf16_inputs(benchmark, S, isa, threads):
    from h3cy import _kernels
    q, k, v = inputs_bf16(S)
    out = np.empty_like(q)
    pool = h3cy.ops.ThreadPool(threads)
    run = lambda: _kernels.attention(q, k, v, out, 1.0 / math.sqrt(D), False, isa, pool, True)  # noqa: E731
    run()
    rows = [0, S // 2, S - 1]
    want = numpy_attention(q, k, v, rows)
    # bf16 numerators on AMX: ~1e-3 relative (bench/results/amx_attention_bf16.txt)
    assert np.max(np.abs(out[rows] - want)) < 1e-2 * np.max(np.abs(want)), "disagrees with numpy"
    benchmark.group = f"attention bf16[S={S},H={HEADS},D={D}]"
    benchmark.extra_info.update(role=f"h3cy {isa} bf16_inputs", impl=f"h3cy ({isa}, bf16 inputs)",
                                flop=4.0 * S * S * D * HEADS, isa=isa)
    benchmark.pedantic(run, rounds=3, warmup_rounds=1)
