"""What the pytest-benchmark GEMM files (test_bench_nvfp4.py, test_bench_convrot.py,
test_bench_gguf.py) share: the shapes and row counts the environment selects, one built case
kept at a time (full-size weights are large), and the agreement check before timing."""
import os

import numpy as np


def selected(shapes, m_var, m_default):
    """(shapes filtered by H3CY_BENCH_SHAPES, the row counts in m_var or m_default)."""
    only = os.environ.get("H3CY_BENCH_SHAPES")
    if only:
        shapes = {k: v for k, v in shapes.items() if k in only.split(",")}
    return shapes, [int(m) for m in os.environ.get(m_var, m_default).split(",")]


_last = {}


def last_case(key, build):
    """build() for key, memoised; only the latest case is kept."""
    if key not in _last:
        _last.clear()
        _last[key] = build()
    return _last[key]


def row_error(y, w, x, rows=8):
    """Relative L2 error of y's first rows against x . w^T in float64."""
    ref = x[:rows].astype(np.float64) @ w.T.astype(np.float64)
    return np.linalg.norm(y[:rows] - ref) / np.linalg.norm(ref)
