"""Print the benchmark table from a pytest-benchmark JSON file, one block per group,
each row with its median, work rate and ratio to the group's baseline.

    python bench/report.py bench/results/gemm.json [more.json ...]
"""
import json
import sys


def main(paths):
    rows = []
    for path in paths:
        with open(path) as f:
            data = json.load(f)
        machine = data.get("machine_info", {})
        print(f"# {path}: {machine.get('cpu', {}).get('brand_raw', '?')}, "
              f"python {machine.get('python_version', '?')}")
        for b in data["benchmarks"]:
            info = b.get("extra_info", {})
            rows.append((b["group"], info.get("impl", b["name"]), b["stats"]["median"],
                         info.get("gflops"), info.get("gbps"), info.get("ratio"),
                         info.get("threads")))
    groups = {}
    for r in rows:
        groups.setdefault(r[0], []).append(r)
    for group in sorted(groups):
        print(f"\n{group}")
        print(f"  {'implementation':32s} {'median s':>10s} {'GFLOP/s':>9s} {'GB/s':>7s} "
              f"{'x baseline':>10s} {'thr':>4s}")
        for _, impl, med, gf, gb, ratio, thr in sorted(groups[group], key=lambda r: r[2]):
            print(f"  {impl:32s} {med:10.4f} {gf if gf is not None else float('nan'):9.1f} "
                  f"{gb if gb is not None else float('nan'):7.1f} "
                  f"{ratio if ratio is not None else float('nan'):10.2f} {thr or '':>4}")


if __name__ == "__main__":
    if len(sys.argv) < 2:
        sys.exit(__doc__)
    main(sys.argv[1:])
