"""A/B of two source trees of h3cy (each built in place): one full-size DiT block forward, one
full-size GEMM and the full-size attention.  One process per tree builds its models once
(a full-size block's random weights take a while), then the two are asked in turn to time
one call at a time: per pair and measurement, one warm-up call each, then old, new, new,
old, old, new ... (--reps calls each, the order swapped every call, so a drift of the
machine's speed within the pair cancels and the two sides' calls are never more than one
call apart); prints each pair's new/old ratio and the median ratio per measurement.  For
refactors that must not change speed (same kernels, other Python around them).

    python3 bench/ab_trees.py --old /path/to/old/tree --new . [--pairs 5] [--threads 2]
        [--what block,gemm,attention]

Each side's figure of a pair is the median (or, --stat min, the minimum) of its --reps
calls, in seconds.  (Until session 24 each side timed all its calls of every measurement in
one go, a few seconds apart from the other side's: host noise on the shared 16-core VM moved
single pairs by up to 15%.)
"""
import argparse
import json
import os
import statistics
import subprocess
import sys

CHILD = r"""
import json, os, sys, time
tree = sys.argv[1]
sys.path[:0] = [tree, os.path.join(tree, "bench")]
import numpy as np
import h3cy
try:
    from synthetic import SyntheticSource
except ImportError:
    from h3cy._synthetic import SyntheticSource
threads, S, M = int(sys.argv[2]), int(sys.argv[3]), int(sys.argv[4])
what = sys.argv[5].split(",")
assert os.path.dirname(h3cy.__file__).startswith(os.path.abspath(tree)), h3cy.__file__
jobs = {}
def block_inputs(cfg):
    rng = np.random.default_rng(0)
    L, Na = 16, 64
    Nv = S - L - Na
    return dict(hidden_states=rng.standard_normal((1, Nv, cfg["in_channels"] * 4)).astype(np.float32),
                audio_hidden_states=rng.standard_normal((1, Na, cfg["audio_in_channels"])).astype(np.float32),
                encoder_hidden_states=rng.standard_normal((1, L, cfg["text_dim"])).astype(np.float32),
                timestep=np.array([0.5], np.float32), timestep_indices=np.zeros(S, np.int64),
                token_tags=np.r_[np.ones(L), 2 * np.ones(Na), np.zeros(Nv)].astype(np.int64),
                position_ids=rng.integers(0, 30, (S, 3)).astype(np.float32),
                video_indices=np.arange(L + Na, S), audio_indices=np.arange(L, L + Na),
                text_indices=np.arange(L))
for mode in ("int8", "bf16"):
    if "block" in what:
        d = h3cy.DiT(SyntheticSource(num_layers=1, num_refiner_layers=0), weights=mode, threads=threads)
        inputs = block_inputs(d.config)
        d.prepare_timesteps([0.5])
        jobs[f"dit_block_{mode}"] = (lambda d=d, inputs=inputs: d.forward(**inputs))
    if "gemm" in what:
        rng = np.random.default_rng(1)
        lin = h3cy.ops.Linear(rng.standard_normal((14336, 5376)).astype(np.float32) * 0.02,
                              weights=mode, threads=threads)
        x = rng.standard_normal((M, 5376)).astype(np.float32)
        y = np.empty((M, 14336), np.float32)
        jobs[f"gemm_{mode}"] = (lambda lin=lin, x=x, y=y: lin(x, out=y))
if "attention" in what:
    # the full-size DiT's attention (56 heads of 128) over S rows, float32 and bf16 products
    rng = np.random.default_rng(2)
    q, k, v = (rng.standard_normal((S, 56, 128)).astype(np.float32) for _ in range(3))
    o = np.empty_like(q)
    for bf16 in (False, True):
        att = h3cy.ops.Attention(threads=threads, bf16=bf16)
        jobs["attention_" + ("bf16" if bf16 else "fp32")] = (lambda att=att: att(q, k, v, out=o))
print("READY " + json.dumps(list(jobs)), flush=True)
for line in sys.stdin:                      # one line from the parent: a job to time once
    f = jobs[line.strip()]
    t = time.perf_counter(); f(); t = time.perf_counter() - t
    print("RESULT " + json.dumps(t), flush=True)
"""


def start(tree, a):
    """The tree's child process, once it has built its models."""
    p = subprocess.Popen([sys.executable, "-c", CHILD, os.path.abspath(tree), str(a.threads), str(a.S), str(a.M),
                          a.what], stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True)
    p.tree = tree
    line = p.stdout.readline()
    if not line.startswith("READY "):
        raise SystemExit(f"{tree}: failed to start (exit {p.wait()})")
    p.jobs = json.loads(line[len("READY "):])
    return p


def huge_mb(p):
    """The child's anonymous memory in transparent huge pages, MB (None off Linux): the
    process started first can get more of them, one suspect for a start-order bias."""
    try:
        with open(f"/proc/{p.pid}/smaps_rollup") as f:
            for line in f:
                if line.startswith("AnonHugePages:"):
                    return int(line.split()[1]) // 1024
    except OSError:
        return None
    return None


def ask(p, job):
    """Seconds of one call of ``job`` in the child ``p``."""
    p.stdin.write(job + "\n")
    p.stdin.flush()
    line = p.stdout.readline()
    if not line.startswith("RESULT "):
        raise SystemExit(f"{p.tree}: failed (exit {p.wait()})")
    return json.loads(line[len("RESULT "):])


def pair(po, pn, job, reps, stat, first_old):
    """(old, new) figures of ``job``: a warm-up call each, then reps calls each, alternated
    call by call (old new new old ... or new old old new ...)."""
    ask(po, job)
    ask(pn, job)
    ts = {po: [], pn: []}
    order = [po, pn] if first_old else [pn, po]
    for r in range(2 * reps):
        c = order[(r + r // 2) % 2]         # ABBA ABBA ...
        ts[c].append(ask(c, job))
    pick = statistics.median if stat == "median" else min
    return pick(ts[po]), pick(ts[pn])


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--old", required=True)
    ap.add_argument("--new", required=True)
    ap.add_argument("--pairs", type=int, default=5)
    ap.add_argument("--threads", type=int, default=2)
    ap.add_argument("--reps", type=int, default=3)
    ap.add_argument("--S", type=int, default=1024, help="packed rows of the block forward")
    ap.add_argument("--M", type=int, default=256, help="rows of the GEMM (K=5376, N=14336)")
    ap.add_argument("--stat", choices=("median", "min"), default="median",
                    help="each side's figure of its --reps calls: the median, or the minimum (steadier "
                    "on a shared VM, where a neighbour only ever adds time)")
    ap.add_argument("--first", choices=("old", "new"), default="old",
                    help="which tree's process starts (allocates its weights) first: a run with each "
                    "shows whether the start order, not the code, favours one side")
    ap.add_argument("--what", default="block,gemm", help="block, gemm, attention, comma-separated "
                    "(building a full-size block's random weights takes minutes on 2 cores)")
    a = ap.parse_args()
    ratios = {}
    if a.first == "old":
        po = start(a.old, a)
        pn = start(a.new, a)
    else:
        pn = start(a.new, a)
        po = start(a.old, a)
    print(f"huge pages after start (MB): old {huge_mb(po)}, new {huge_mb(pn)} ({a.first} started first)", flush=True)
    for p in range(a.pairs):
        old, new = {}, {}
        for k in po.jobs:
            old[k], new[k] = pair(po, pn, k, a.reps, a.stat, first_old=p % 2 == 0)
        for k in old:
            ratios.setdefault(k, []).append(new[k] / old[k])
        print(f"pair {p + 1}: " + "  ".join(f"{k} old {old[k]:.4f}s new {new[k]:.4f}s ({new[k] / old[k]:.3f})"
                                            for k in old), flush=True)
    print(f"huge pages after the pairs (MB): old {huge_mb(po)}, new {huge_mb(pn)}", flush=True)
    for c in (po, pn):
        c.stdin.close()
        c.wait()
    print(f"median new/old over {a.pairs} alternated pairs ({a.threads} threads, {a.stat} of {a.reps} calls):")
    for k, v in ratios.items():
        print(f"  {k:16s} {statistics.median(v):.3f}  (range {min(v):.3f} .. {max(v):.3f})")


if __name__ == "__main__":
    main()
