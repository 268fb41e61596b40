"""One full-size Qwen3-VL-32B text decoder layer (hidden 5120, 64/8 heads of 128, MLP 25600,
random weights) per weights mode, beside transformers' Qwen3VLTextDecoderLayer in torch fp32
and bf16 (group "text_layer[L]", baseline torch bf16).  The table with ratios, accuracy and the
50-layer extrapolation comes from bench/text_layer_table.py (bench/results/text_layer.json).

    H3CY_BENCH_L=32,128 pytest bench/test_bench_text_layer.py --benchmark-json=bench/results/text_layer_bench.json
"""
import os

import numpy as np
import pytest

import sys
sys.path.insert(0, os.path.dirname(__file__))
import text_layer_table as tl  # noqa: E402
from h3cy.models.text_encoder import rope_inv_freq, rope_tables

LS = [int(s) for s in os.environ.get("H3CY_BENCH_L", "32,128").split(",")]
MODES = os.environ.get("H3CY_BENCH_MODES", "bf16,int8,int4,fp32").split(",")
THREADS = int(os.environ.get("H3CY_THREADS", "2"))
_w = {}


def weights():
    if "t" not in _w:
        _w["t"] = tl.layer_weights()
    return _w["t"]


@pytest.mark.parametrize("L", LS)
@pytest.mark.parametrize("mode", MODES)
def test_text_layer_h3cy(benchmark, L, mode):
    enc, layer = tl.h3cy_layer(weights(), mode, THREADS)
    x0 = np.random.default_rng(1).standard_normal((L, tl.HID), dtype=np.float32)
    cos, sin = rope_tables(np.arange(L), rope_inv_freq(tl.HD, 5e6))
    ws = np.empty(layer.core.workspace_bytes(L) + 64, np.uint8)
    benchmark.group = f"text_layer[{L}]"
    benchmark.extra_info.update(role=f"h3cy_{mode}", threads=THREADS)

    def run():
        h = x0.copy()
        layer.core.forward(h, 1e-6, int(mode == "bf16"), ws, cos, sin)
        return h
    out = benchmark.pedantic(run, rounds=2, warmup_rounds=1)
    assert np.all(np.isfinite(out))
