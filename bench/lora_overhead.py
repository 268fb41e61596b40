"""Overhead of a LoRA on one full-size MiniMax-H3 block (hidden 5376, 56 heads x 128, FFN
14336, random weights; bench/synthetic.py), as the ratio of the block's time with the LoRA
to its time without, and the memory the LoRA adds; each rank run beside the base (the
run-time addend) and merged into the weights (``load_lora(merge=True)``: requantised into
the block's mode, cached in the run's work folder).

The LoRA is a random PEFT file (diffusers names, ``lora_A``/``lora_B``, alpha = rank) on
the block's attention (to_q, to_k, to_v, to_out.0) and FFN (ff.net.0.proj, ff.net.2),
the linears the published turbo LoRAs adapt.  One DiT holds the base; the LoRA is loaded
and unloaded on it (unload gives the base bits back, checked), so both sides run the same
base weights on the same inputs.  Runs alternate base, rank 64, rank 128, rank 64 merged,
rank 128 merged, base, ... so a change of machine load hits every column (a merged load
after the first maps the merged-weight cache file: outside the timed run).  Each timed
forward comes after ``--warm`` (default 1) untimed ones since the load: a sampler loads a
LoRA once and runs the block steps x layers times, so the per-step cost is the steady one;
the first forward after the load (the workspace growing for u, a merged copy's pages
faulted in) is shown on its own, as "first run" (its ratio to the base's first run).
"paired" is the median over the repeats of each run's time over the base run of the same
repeat (about a second apart).

Memory: "C pairs" is what the C addends hold (A [R, K] and B packed in NR-column panels in float32
per h3cy linear; a to_q/to_k/to_v LoRA is one fused-QKV addend with 3R ranks, each panel
holding the R ranks of its q, k or v columns), "numpy" the float32 copies DiT keeps of the file's pairs (each
to_q/k/v B zero-padded to the fused rows; kept to rebuild the addends when a strength or
another LoRA changes), "u" the per-call workspace [S, 3R] of the largest addend.  Merged:
"C pairs" is the merged copies of the adapted linears (the base ones are kept for
unloading), "u" nothing.

    python bench/lora_overhead.py                       # S=1872 int8, ranks 64 and 128, all cores
    python bench/lora_overhead.py --S 256 --threads 2 --repeat 3 --out bench/results/x.txt

The pytest-benchmark twin is bench/test_bench_lora.py.
"""
import argparse
import os
import platform
import sys
import tempfile
import time

import numpy as np

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, HERE)

from synthetic import FULL_CONFIG, SyntheticSource  # noqa: E402

TARGETS = ["attn.to_q", "attn.to_k", "attn.to_v", "attn.to_out.0", "ff.net.0.proj", "ff.net.2"]


def lora_shapes(config=FULL_CONFIG):
    """{module: (N, K)} of the adapted linears of block 0 (diffusers names)."""
    H, inner, F = config["hidden_size"], config["num_attention_heads"] * config["attention_head_dim"], config["ffn_dim"]
    nk = {"attn.to_q": (inner, H), "attn.to_k": (inner, H), "attn.to_v": (inner, H),
          "attn.to_out.0": (H, inner), "ff.net.0.proj": (2 * F, H), "ff.net.2": (H, F)}
    return {f"transformer_blocks.0.{t}": nk[t] for t in TARGETS}


def write_lora(path, rank, seed=0, config=FULL_CONFIG):
    """A random PEFT LoRA of ``rank`` on block 0's attention and FFN linears."""
    from h3cy.weights.st_write import save_file
    rng = np.random.default_rng(seed)
    arrays = {}
    for m, (n, k) in lora_shapes(config).items():
        arrays[f"{m}.lora_A.weight"] = (rng.standard_normal((rank, k), dtype=np.float32) * 0.01).astype(np.float32)
        arrays[f"{m}.lora_B.weight"] = (rng.standard_normal((n, rank), dtype=np.float32) * 0.01).astype(np.float32)
    save_file(path, arrays)
    return path


def pairs_bytes(rank, config=FULL_CONFIG, int_down=False):
    """Bytes the C addends hold: A and the packed B in float32 per h3cy linear (to_q/k/v
    fused: 3R ranks, but each B panel holds only the R ranks of its q, k or v columns);
    int_down: plus the int8 copy of A the down product from the base's int8 rows reads (beside
    an int base: R x K bytes per linear)."""
    shapes = lora_shapes(config)
    H = config["hidden_size"]
    qkv_rows = sum(shapes[f"transformer_blocks.0.attn.to_{x}"][0] for x in "qkv")
    held = (3 * rank) * H * (5 if int_down else 4) + rank * qkv_rows * 4
    for t in ("attn.to_out.0", "ff.net.0.proj", "ff.net.2"):
        n, k = shapes[f"transformer_blocks.0.{t}"]
        held += rank * (n + k) * 4 + (rank * k if int_down else 0)
    return held


def block_inputs(S, seed=0):
    """As bench/test_bench_block.py: hidden states, rows, AdaLN tables, RoPE angles."""
    rng = np.random.default_rng(seed)
    H = FULL_CONFIG["hidden_size"]
    h = (rng.standard_normal((S, H), dtype=np.float32) * 0.5).astype(np.float32)
    tags = np.zeros(S, np.int32)
    tags[:6], tags[6:6 + 40] = 1, 2
    tables = [(rng.standard_normal((3, H), dtype=np.float32) * 0.1).astype(np.float32) for _ in range(6)]
    tables[1] += 1.0
    tables[4] += 1.0
    pos = rng.integers(0, 40, (S, 3)).astype(np.float32)
    return h, tags, tuple(tables), pos


class Block:
    """One full-size block (``weights`` mode), its inputs at ``S``, and run() -> output."""

    def __init__(self, S, weights="int8", threads=None):
        from h3cy.models.dit import DiT
        self.dit = DiT(SyntheticSource(num_layers=1, num_refiner_layers=0), weights=weights, threads=threads)
        self.h0, self.rows, self.tables, pos = block_inputs(S)
        ang = (pos[:, :, None] * self.dit.inv_freq[None, None, :]).reshape(S, -1).astype(np.float32)
        self.cos, self.sin = np.cos(ang).astype(np.float32), np.sin(ang).astype(np.float32)

    def run(self):
        h = self.h0.copy()
        self.dit._run_core(self.dit.blocks[0], h, self.rows, self.tables, self.cos, self.sin)
        return h


# A/B variants of the run-time LoRA: (DiT attribute, value); "unfused" gives the fused
# bits, "float down" its own (the down product in float on bf16 tiles, not from the base's
# int8 rows: it differs by the int8 activation error)
VARIANTS = {"unfused": ("lora_fused", False), "float down": ("lora_int_down", False)}


def measure(S=1872, weights="int8", ranks=(64, 128), threads=None, repeat=3, workdir=None, variants=(),
            stat="median", warm=1, merged=True):
    """(isa, [(label, seconds, ratio to base, C pairs bytes, numpy bytes, u bytes, first-run
    ratio, paired ratio)]), base first, after checking that each LoRA changes the output and unloading
    restores it.  variants: names of VARIANTS, each also timed per rank (``unfused``: checked
    to give the fused bits).  stat: each column's figure of its runs, "median" or "min"
    (steadier on a shared host, where a neighbour only ever adds time).  warm: forwards run
    after each load (and after each unload, for the base) before the timed one: a sampler
    loads a LoRA once and then runs the block steps x layers times, so the first forward's
    one-time costs (the workspace growing to hold u, its pages faulted in, a merged copy's
    pages mapped in) are no per-step cost; that first forward is timed on its own (the
    last column) when warm >= 1.  merged: also time each rank merged into the weights.
    Each row also carries the median over the repeats of the column's time over the base's
    in the same repeat (a second apart: the steadier figure when the host's speed drifts)."""
    pick = np.min if stat == "min" else np.median
    blk = Block(S, weights, threads)
    workdir = workdir or tempfile.mkdtemp(prefix="h3cy-lora-bench-")
    files = {r: write_lora(os.path.join(workdir, f"r{r}.safetensors"), r, seed=r) for r in ranks}
    base_out = blk.run()
    numpy_bytes = {}
    for r in ranks:                      # load, first forward (workspace), check, unload
        blk.dit.load_lora(files[r], name=f"r{r}")
        out = blk.run()
        numpy_bytes[r] = sum(m.a.nbytes + m.b.nbytes for m in blk.dit._loras[f"r{r}"]["modules"])
        assert np.all(np.isfinite(out)) and not np.array_equal(out, base_out), "the LoRA changed nothing"
        blk.dit.unload_lora(f"r{r}")
        for v in variants:
            setattr(blk.dit, *VARIANTS[v])
            blk.dit.load_lora(files[r], name=f"r{r}")
            got = blk.run()
            if v == "unfused":
                assert np.array_equal(got, out), "the unfused LoRA gives other values than the fused one"
            assert np.all(np.isfinite(got)) and not np.array_equal(got, base_out), f"{v}: the LoRA changed nothing"
            blk.dit.unload_lora(f"r{r}")
            delattr(blk.dit, VARIANTS[v][0])
    assert np.array_equal(blk.run(), base_out), "unload did not give the base bits back"
    blk.dit._merge_cache_dir = workdir
    merged_bytes = {}
    for r in ranks if merged else ():    # merge once (writes the cache), check, unload
        blk.dit.load_lora(files[r], name=f"r{r}", merge=True)
        out = blk.run()
        merged_bytes[r] = sum(getattr(blk.dit.blocks[0], n).weight_bytes for n in ("qkv", "out", "up", "down"))
        assert np.all(np.isfinite(out)) and not np.array_equal(out, base_out), "the merge changed nothing"
        blk.dit.unload_lora(f"r{r}")
    assert np.array_equal(blk.run(), base_out), "unloading the merge did not give the base bits back"
    cols = [(None, False), *[(r, False) for r in ranks], *[(r, v) for v in variants for r in ranks],
            *[(r, True) for r in ranks if merged]]
    times = {c: [] for c in cols}
    firsts = {c: [] for c in cols}
    for _ in range(repeat):              # alternate: base, r64, r128, (variants,) r64 merged, r128 merged, base, ...
        for r, merge in cols:
            if merge in VARIANTS:
                setattr(blk.dit, *VARIANTS[merge])
            if r is not None:
                blk.dit.load_lora(files[r], name=f"r{r}", merge=merge is True)
            for w in range(warm):
                t0 = time.perf_counter()
                blk.run()
                if w == 0:
                    firsts[(r, merge)].append(time.perf_counter() - t0)
            t0 = time.perf_counter()
            blk.run()
            times[(r, merge)].append(time.perf_counter() - t0)
            if r is not None:
                blk.dit.unload_lora(f"r{r}")
            if merge in VARIANTS:
                delattr(blk.dit, VARIANTS[merge][0])
    base = float(pick(times[(None, False)]))
    base1 = float(pick(firsts[(None, False)])) if warm else float("nan")

    def first(c):                        # the first forward after the load, to the base's
        return float(pick(firsts[c])) / base1 if warm else float("nan")

    def paired(c):                       # median of the repeats' column / base ratios
        return float(np.median(np.array(times[c]) / np.array(times[(None, False)])))
    def row(label, c, held, u):          # one column's table row
        t = float(pick(times[c]))
        return (label, t, t / base, held, numpy_bytes[c[0]], u, first(c), paired(c))
    idown = weights in ("int8", "int4")    # the default int8 down product (every path)
    rows = [("base", base, 1.0, 0, 0, 0, 1.0, 1.0)]
    rows += [row(f"rank {r}", (r, False), pairs_bytes(r, int_down=idown), S * 3 * r * 4) for r in ranks]
    rows += [row(f"r{r} {v}", (r, v), pairs_bytes(r, int_down=idown and v != "float down"), S * 3 * r * 4)
             for v in variants for r in ranks]
    rows += [row(f"r{r} merged", (r, True), merged_bytes[r], 0) for r in (ranks if merged else ())]
    return blk.dit.isa, rows


def cpu_name():
    """The model name and the SIMD features h3cy sees (the name alone can be vague: a
    virtual machine may report just "AMD EPYC")."""
    from h3cy import ops
    name, fam = platform.processor() or platform.machine(), {}
    try:
        with open("/proc/cpuinfo") as f:
            for line in f:
                key, _, val = line.partition(":")
                key = key.strip()
                if key in ("model name", "cpu family", "model") and key not in fam:
                    fam[key] = val.strip()
                if len(fam) == 3:
                    break
    except OSError:
        pass
    name = fam.get("model name", name)
    if "cpu family" in fam:
        name += f", family {fam['cpu family']} model {fam.get('model', '?')}"
    return f"{name} ({' '.join(ops.cpu_features())})"


def main(argv=None):
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--S", type=int, default=1872, help="tokens (default 1872: 512x512, 22 frames)")
    p.add_argument("--weights", default="int8")
    p.add_argument("--ranks", default="64,128")
    p.add_argument("--threads", type=int, default=None, help="default: h3cy's (physical cores)")
    p.add_argument("--repeat", type=int, default=3, help="timed runs per column")
    p.add_argument("--stat", choices=("median", "min"), default="median",
                   help="each column's figure of its runs (min: steadier on a shared host)")
    p.add_argument("--warm", type=int, default=1,
                   help="untimed forwards after each load before the timed one (default 1: the "
                        "steady state a sampler sees; the first is reported in 'first run'; 0: "
                        "time the first forward after the load, as before session 24)")
    p.add_argument("--no-merged", action="store_true", help="skip the merged columns (quicker)")
    p.add_argument("--out", default=None, help="also write the table here")
    p.add_argument("--lora-on-avx512", action="store_true",
                   help="on AMX: the LoRA products in float32 on AVX-512 instead of bf16 tiles (A/B)")
    p.add_argument("--unfused", action="store_true",
                   help="also each rank with the up product in a second pass over the output "
                        "(DiT.lora_fused = False: before the fused AMX store; A/B)")
    p.add_argument("--float-down", action="store_true",
                   help="also each rank with the down product x.A^T in float (DiT.lora_int_down = False: "
                        "bf16 tiles on AMX, before it read the base's int8 rows; A/B)")
    p.add_argument("--note", default=None, help="a line for the table's header (the machine, its load)")
    a = p.parse_args(argv)
    import h3cy
    if a.lora_on_avx512:
        h3cy.DiT.lora_amx_tiles = False
        a.note = ((a.note + "; ") if a.note else "") + "LoRA products on AVX-512 float32 (--lora-on-avx512)"
    threads = a.threads or h3cy.get_num_threads()
    isa, rows = measure(a.S, a.weights, tuple(int(r) for r in a.ranks.split(",")), threads, a.repeat,
                        variants=[v for v, on in (("unfused", a.unfused), ("float down", a.float_down)) if on],
                        stat=a.stat, warm=a.warm, merged=not a.no_merged)
    lines = [f"LoRA overhead on one full-size block: S={a.S}, weights {a.weights}, {threads} threads, "
             f"ISA {isa}, CPU {cpu_name()}, {a.stat} of {a.repeat} alternated runs, each after "
             f"{a.warm} untimed forward(s) since the load",
             "LoRA: PEFT, random, on to_q/to_k/to_v/to_out.0/ff.net.0.proj/ff.net.2 (alpha = rank)",
             *([f"note: {a.note}"] if a.note else []),
             f"{'':10s} {'s/block':>9s} {'vs base':>8s} {'overhead':>9s} {'C pairs MB':>11s} "
             f"{'numpy MB':>9s} {'u MB':>6s} {'first run':>9s} {'paired':>7s}"]
    for label, t, ratio, held, npy, ub, r1, pr in rows:
        lines.append(f"{label:10s} {t:9.3f} {ratio:8.3f} {100 * (ratio - 1):8.1f}% {held / 2**20:11.1f} "
                     f"{npy / 2**20:9.1f} {ub / 2**20:6.1f} {r1:9.3f} {pr:7.3f}")
    text = "\n".join(lines)
    print(text)
    if a.out:
        with open(a.out, "w") as f:
            f.write(text + "\n")
    return 0


if __name__ == "__main__":
    sys.exit(main())
