"""Build and run bench/avxvnni_gemm_vs_peak.c (csrc/ built as the C tests build it) and
summarise issue #23's AVX-VNNI figure: the avxvnni int8 GEMM as a fraction of vpdpbusd's
measured peak.  Two summaries, since a shared machine's noise only ever slows a loop down:
the median of each round's own ratio, and the best GEMM over the best peak.

    python3 bench/avxvnni_gemm_vs_peak.py [--m 512] [--rounds 3] [--runs 3]
"""
import argparse
import re
import statistics
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT / "tests" / "c"))
import cbuild  # noqa: E402


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--m", type=int, default=512)
    ap.add_argument("--rounds", type=int, default=2, help="rounds per process")
    ap.add_argument("--runs", type=int, default=3, help="processes, one after another")
    a = ap.parse_args()
    exe = cbuild.build("bench_avxvnni", extra=["-O2"], jobs=8, driver=ROOT / "bench" / "avxvnni_gemm_vs_peak.c")
    rows = []
    for _ in range(a.runs):
        out = subprocess.run([str(exe), str(a.m), str(a.rounds)], capture_output=True, text=True, check=True).stdout
        print(out, end="", flush=True)
        rows += [tuple(float(v) for v in re.search(r"peak ([\d.]+).*ukr ([\d.]+).*gemm ([\d.]+)", ln).groups())
                 for ln in out.splitlines() if ln.startswith("round")]
    pk, uk, gm = zip(*rows)
    print(f"gemm / peak: median of {len(rows)} same-round ratios {statistics.median(g / p for p, _, g in rows):.3f}, "
          f"best / best {max(gm) / max(pk):.3f} ({max(gm):.1f} / {max(pk):.1f} GOP/s); "
          f"micro-kernel best / best {max(uk) / max(pk):.3f}")


if __name__ == "__main__":
    main()
