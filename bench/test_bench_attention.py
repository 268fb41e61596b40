"""Attention throughput at the H3 DiT shape: S tokens, 56 heads x 128, 2 threads.

Group per S; baseline = torch scaled_dot_product_attention in fp32 when torch is
installed (else a blocked numpy softmax(QK^T)V); candidates = h3cy on every ISA path
this host has.  FLOPs counted as 4*S^2*D*H (the two matmuls).

    pytest bench/test_bench_attention.py --benchmark-json=bench/results/attn.json
"""
import math
import os

import numpy as np
import pytest

import h3cy

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
