"""h3cy's GGUF GEMM against ggml's, same machine, same threads, one run: issue #24's table.

For each GGUF type (Q8_0, Q6_K, Q5_K, Q4_K, Q3_K by default) and shape, four or five
implementations in alternated rounds (every one once per round, best of --reps calls, the
median of the rounds' bests, so a machine whose speed drifts still gives fair ratios).  Each
implementation's timed calls follow one untimed call of its own, back to back, as ggml_mm
times ggml's (its warm-up, then the reps): so each reads its weights from wherever its own
last call left them.  (Until session 30 h3cy's calls came straight after ggml's without one:
with --reps 1 at M = 128 h3cy read its weights from memory where ggml read its own from the
last-level cache -- h3cy Q4_K at te_q 2026 GFLOP/s in that table against 3877 in an
in-process A/B of the same call.)

* h3cy GGUF: the GGUF linear over blocks as stored (``_kernels.linear_attach_gguf``, what
  ``DiT.from_pretrained(FILE.gguf)`` builds through weights/linears.py), on h3cy's default ISA
  path (``--isa`` to choose);
* ggml sdcpp / ggml best: bench/ggml_gemm/ggml_mm built by bench/ggml_gemm/build.sh from the
  ggml commit stable-diffusion.cpp pins -- sd.cpp's configuration (weights in the default CPU
  buffer, no llamafile) and ggml's best (llamafile sgemm, weights in the AMX / CPU_REPACK extra
  buffer where it takes the type); both run as long-lived child processes (``--serve``) with
  the same thread count;
* h3cy int8 and int4 (group 128) on a float weight of the same shape, once per shape.

Shapes: the DiT's four (qkv, out, up, down) at each ``--m`` (default 2048) and the Qwen3-VL-32B
text encoder's five (te_q, te_kv, te_o, te_up, te_down) at each ``--te-m`` (default 128), or the
``--shapes`` given.  GFLOP/s counts 2 per multiply-add.  The weights are random valid blocks
(h3cy) and ggml's quantisation of random floats (ggml); the speed does not depend on the values.

    python3 bench/ggml_gemm/build.sh /path/to/ggml-src /tmp/ggml-bin        # once
    PYTHONPATH=$PWD python3 bench/gguf_vs_ggml.py --ggml-bin /tmp/ggml-bin --threads 16 \\
        [--types Q8_0,Q6_K,Q5_K,Q4_K,Q3_K] [--m 2048] [--te-m 128] [--shapes qkv,te_q]
        [--rounds 3] [--reps 3] [--isa avx512] [--json results.jsonl]

Targets (issue #24): h3cy GGUF >= 3 x ggml sdcpp and >= 1.5 x ggml best for every type;
Q8_0 within 10% of h3cy int8 (Q8_0/int8 >= 0.9); Q4_K within 15% of h3cy int4 (>= 0.85).
"""
import argparse
import json
import os
import platform
import statistics
import subprocess
import sys
import tempfile
import time
import warnings

import numpy as np

import h3cy
from h3cy import _kernels
from h3cy.weights.linears import gguf_isa
from h3cy.ops.measurement import cpu_model

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, HERE)
sys.path.insert(0, os.path.join(os.path.dirname(HERE), "tests"))
from nvfp4_gemm import SHAPES  # noqa: E402  the DiT's and the text encoder's (N, K)
from text_layer_ab import best_of  # noqa: E402
from _gguf_files import TYPES, random_blocks  # noqa: E402  random valid blocks, as the GGUF tests build them

DIT = ("qkv", "out", "up", "down")
TE = ("te_q", "te_kv", "te_o", "te_up", "te_down")
SETTLE = 0.05   # s asleep before each timed call: the other implementation's idle threads stop spinning


def warm_best_of(fn, reps):
    """ggml_mm's protocol for an h3cy call: settle, one untimed call, then the best of reps
    timed calls back to back."""
    time.sleep(SETTLE)
    fn()
    return best_of(fn, reps)


try:   # bench/gguf_gemm.py (the h3cy-side GGUF table) builds the same linear on h3cy's default path
    from gguf_gemm import gguf_linear as _gguf_gemm_linear  # noqa: E402
except ImportError:
    _gguf_gemm_linear = None


def h3cy_gguf_linear(type_name, N, K, pool, isa, rng):
    """h3cy's GGUF linear over random valid (N, K) blocks of ``type_name``, as the loader
    builds it (weights/linears.py: linear_attach_gguf + Linear.from_core): bench/gguf_gemm.py's
    gguf_linear where it exists and the path is the default one, else the same here."""
    if _gguf_gemm_linear is not None and isa == h3cy.ops.active_isa():
        return _gguf_gemm_linear(type_name, N, K, pool, rng)[0]
    blocks = random_blocks(type_name, N, K, rng)
    core = _kernels.linear_attach_gguf([blocks], [TYPES[type_name][0]], N, K, None, 0,
                                       gguf_isa(isa, [type_name]), pool)  # the loader's kernel
    lin = h3cy.ops.Linear.from_core(core, "int8", pool)
    lin._keep = blocks        # the core points into the blocks
    return lin


class GGMLServer:
    """One bench/ggml_gemm/ggml_mm --serve child: a request "TYPE N K M REPS" per line, one
    JSON result per line back."""

    def __init__(self, path, threads):
        if not os.access(path, os.X_OK):
            raise SystemExit(f"{path}: not found; build it with bench/ggml_gemm/build.sh GGML_SRC DIR")
        self.log = tempfile.TemporaryFile("w+")
        self.p = subprocess.Popen([path, "--serve", "--threads", str(threads)], stdin=subprocess.PIPE,
                                  stdout=subprocess.PIPE, stderr=self.log, text=True, bufsize=1)
        self.info = json.loads(self.p.stdout.readline())

    def run(self, type_name, N, K, M, reps):
        self.p.stdin.write(f"{type_name} {N} {K} {M} {reps}\n")
        line = self.p.stdout.readline()
        if not line:
            self.log.seek(0)
            raise RuntimeError(f"ggml_mm died: {self.log.read()[-2000:]}")
        r = json.loads(line)
        if "error" in r:
            raise RuntimeError(f"ggml_mm {type_name} {N}x{K} M={M}: {r['error']}")
        # the result's row 0 against a double dot of ggml's dequantised weight: the
        # activation quantisation's error is ~1e-2 (observed 5e-3..8e-3); a wrong layout ~1
        if not r["check_rel"] < 0.05:
            raise RuntimeError(f"ggml_mm {type_name} {N}x{K}: result off by {r['check_rel']} (rel L2)")
        return r

    def close(self):
        self.p.stdin.close()
        self.p.wait(timeout=60)


def plan(args):
    """[(shape name, M)] to measure."""
    if args.shapes:
        return [(s, M) for s in args.shapes.split(",") for M in args.m + args.te_m]
    return [(s, M) for M in args.m for s in DIT] + [(s, M) for M in args.te_m for s in TE]


def measure(shape, M, args, servers, pool, isa, rng, emit):
    """{impl: median seconds} and the ggml result records for one shape and M."""
    N, K = SHAPES[shape]
    types = [t for t in args.types if K % TYPES[t][1] == 0]
    x = rng.standard_normal((M, K), dtype=np.float32)
    out = np.empty((M, N), np.float32)
    runs = {}
    for t in types:
        lin = h3cy_gguf_linear(t, N, K, pool, isa, rng)
        runs[f"h3cy {t}"] = (lambda lin=lin: lin(x, out=out))
    if not args.no_int:
        w = rng.standard_normal((N, K), dtype=np.float32) * 0.02
        for m in ("int8", "int4"):
            kw = {"group_size": 128} if m == "int4" else {}
            lin = h3cy.ops.Linear(w, weights=m, threads=pool, isa=isa, **kw)
            runs[f"h3cy {m}"] = (lambda lin=lin: lin(x, out=out))
        del w
    for fn in runs.values():
        fn()      # warm-up: first touch of outputs and workspaces
    names = list(runs) + [f"ggml {c} {t}" for t in types for c in servers]
    times, recs = {k: [] for k in names}, {}
    for _ in range(args.rounds):
        for t in types:     # h3cy and ggml of one type back to back
            times[f"h3cy {t}"].append(warm_best_of(runs[f"h3cy {t}"], args.reps))
            for c, srv in servers.items():
                time.sleep(SETTLE)
                r = srv.run(t, N, K, M, args.reps)
                times[f"ggml {c} {t}"].append(r["ms_min"] * 1e-3)
                recs[f"ggml {c} {t}"] = r
        for m in ("int8", "int4"):
            if f"h3cy {m}" in runs:
                times[f"h3cy {m}"].append(warm_best_of(runs[f"h3cy {m}"], args.reps))
    med = {k: statistics.median(v) for k, v in times.items()}
    flop = 2.0 * M * N * K
    for k, v in times.items():
        emit({"impl": k, "shape": shape, "M": M, "N": N, "K": K, "threads": args.threads,
              "isa": isa if k.startswith("h3cy") else None, "s_rounds": v, "s_median": med[k],
              "gflops": flop / med[k] * 1e-9,
              "buft": recs[k]["buft"] if k in recs else None})
    return med, recs, types


def fmt(v, nd=1):
    return "–" if v is None or v != v else f"{v:.{nd}f}"


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--ggml-bin", required=True, help="build.sh's OUTDIR (holds sdcpp/ggml_mm and best/ggml_mm)")
    ap.add_argument("--threads", type=int, default=2)
    ap.add_argument("--types", type=lambda s: s.split(","), default=["Q8_0", "Q6_K", "Q5_K", "Q4_K", "Q3_K"])
    ap.add_argument("--m", type=lambda s: [int(v) for v in s.split(",") if v], default=[2048],
                    help="M for the DiT's shapes")
    ap.add_argument("--te-m", type=lambda s: [int(v) for v in s.split(",") if v], default=[128],
                    help="M for the text encoder's shapes ('' for none)")
    ap.add_argument("--shapes", default=None, help=f"instead: these of {','.join(SHAPES)} at every --m and --te-m")
    ap.add_argument("--configs", default="sdcpp,best")
    ap.add_argument("--rounds", type=int, default=3)
    ap.add_argument("--reps", type=int, default=3)
    ap.add_argument("--isa", default=None, help="h3cy path (default: h3cy's choice for this CPU)")
    ap.add_argument("--no-int", action="store_true", help="leave out h3cy int8/int4")
    ap.add_argument("--json", default=None, help="also write every measurement as a JSON line to this file")
    args = ap.parse_args()
    bad = [t for t in args.types if t not in TYPES or TYPES[t][1] == 1]
    if bad:
        ap.error(f"not a GGUF block type: {bad}")
    warnings.simplefilter("ignore", RuntimeWarning)
    isa = args.isa or h3cy.ops.active_isa()
    pool = _kernels.ThreadPool(args.threads)
    rng = np.random.default_rng(0)
    jf = open(args.json, "w") if args.json else None

    def emit(rec):
        if jf:
            jf.write(json.dumps(rec) + "\n")
            jf.flush()

    servers = {c: GGMLServer(os.path.join(args.ggml_bin, c, "ggml_mm"), args.threads) for c in args.configs.split(",")}
    feats = [f for f in h3cy.ops.cpu_features() if f.startswith(("avx", "amx", "asimd", "sve", "f16c", "fma"))]
    head = {"cpu": cpu_model(), "machine": platform.machine(), "cpu_features": feats, "threads": args.threads,
            "h3cy_isa": isa, "rounds": args.rounds, "reps": args.reps,
            "ggml": {c: s.info for c, s in servers.items()}}
    emit({"header": head})
    print(f"# {cpu_model()} ({platform.machine()}; {' '.join(sorted(feats))}), {args.threads} threads; h3cy isa {isa}")
    for c, s in servers.items():
        f = s.info["features"]
        print(f"# ggml {c}: {' '.join(k for k, v in f.items() if v == '1')}; extra buffers {s.info['extra_bufts']}")
    print(f"# best of {args.reps} calls, median of {args.rounds} alternated rounds; GFLOP/s (2 per multiply-add)\n")
    cfgs = list(servers)
    cols = ["shape", "M", "type", "h3cy GGUF"] + [f"ggml {c}" for c in cfgs] + \
        [f"h3cy / ggml {c}" for c in cfgs] + ["h3cy int8", "h3cy int4", "Q8_0/int8 or Q4_K/int4"]
    print("| " + " | ".join(cols) + " |")
    print("|" + "---|" * len(cols))
    totals = {}      # (M, type) -> {impl: summed median seconds} over the shapes
    try:
        for shape, M in plan(args):
            med, recs, types = measure(shape, M, args, servers, pool, isa, rng, emit)
            N, K = SHAPES[shape]
            gf = {k: 2.0 * M * N * K / v * 1e-9 for k, v in med.items()}
            for t in types:
                tot = totals.setdefault((M, t), {})
                row = [f"{shape} {N}x{K}", str(M), t, fmt(gf[f"h3cy {t}"])]
                for c in cfgs:
                    buft = recs[f"ggml {c} {t}"]["buft"]
                    row.append(fmt(gf[f"ggml {c} {t}"]) + ("" if buft == "CPU" else f" ({buft})"))
                for c in cfgs:
                    row.append(fmt(med[f"ggml {c} {t}"] / med[f"h3cy {t}"], 2))
                ref = {"Q8_0": "int8", "Q4_K": "int4"}.get(t)
                row += [fmt(gf.get("h3cy int8")), fmt(gf.get("h3cy int4")),
                        fmt(med[f"h3cy {ref}"] / med[f"h3cy {t}"], 2) if ref and f"h3cy {ref}" in med else "–"]
                print("| " + " | ".join(row) + " |", flush=True)
                for k in [f"h3cy {t}", "h3cy int8", "h3cy int4"] + [f"ggml {c} {t}" for c in cfgs]:
                    if k in med:
                        tot[k] = tot.get(k, 0.0) + med[k]
        print("\nAll shapes of one M together (summed medians): speed ratios")
        print("| M | type | " + " | ".join(f"h3cy / ggml {c}" for c in cfgs) + " | Q8_0/int8 or Q4_K/int4 |")
        print("|" + "---|" * (3 + len(cfgs)))
        for (M, t), tot in totals.items():
            ref = {"Q8_0": "h3cy int8", "Q4_K": "h3cy int4"}.get(t)
            print(f"| {M} | {t} | " + " | ".join(fmt(tot[f'ggml {c} {t}'] / tot[f'h3cy {t}'], 2) for c in cfgs)
                  + f" | {fmt(tot[ref] / tot[f'h3cy {t}'], 2) if ref in tot else '–'} |")
    finally:
        for s in servers.values():
            s.close()
        if jf:
            jf.close()


if __name__ == "__main__":
    main()
