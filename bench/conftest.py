"""Benchmark plumbing: every benchmark sits in a group with one baseline (role
"baseline") and its candidates, all on identical inputs.  After the run this hook adds,
per entry, `ratio = baseline_median / median` and the work rate (GFLOP/s or GB/s), so
bench/report.py can print the table.  Timings are never asserted."""
import os

import numpy as np
import pytest

BENCH_THREADS = int(os.environ.get("H3CY_BENCH_THREADS", "2"))


def pytest_benchmark_update_json(config, benchmarks, output_json):
    groups = {}
    for b in output_json["benchmarks"]:
        groups.setdefault(b["group"], []).append(b)
    for group, items in groups.items():
        base = [b for b in items if b.get("extra_info", {}).get("role") == "baseline"]
        base_median = base[0]["stats"]["median"] if base else None
        for b in items:
            info = b.setdefault("extra_info", {})
            med = b["stats"]["median"]
            if base_median:
                info["ratio"] = base_median / med
            if "flop" in info:
                info["gflops"] = info["flop"] / med / 1e9
            if "bytes" in info:
                info["gbps"] = info["bytes"] / med / 1e9
            info.setdefault("threads", BENCH_THREADS)


@pytest.fixture(scope="session")
def torch_mod():
    """torch for the side-by-side reference rows (a test extra, never an h3cy dependency)."""
    try:
        import torch
    except ImportError:
        return None
    torch.set_num_threads(BENCH_THREADS)
    return torch


@pytest.fixture(scope="session")
def threads():
    return BENCH_THREADS


def pytest_configure(config):
    np.random.seed(0)
