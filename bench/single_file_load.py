"""Load time and peak memory of a transformer: a Comfy-Org-style pruned BF16 single file
beside the official sharded release, resident and streamed (#20).

The real weights are not on these machines, so ``write`` makes files of the real shapes
(50 blocks of the released config unless ``--layers``) filled with a repeated random
pattern (the values do not matter for loading, and generating 100 GB of fresh random
numbers would dominate):

    python bench/single_file_load.py write /data/h3files [--layers 50] [--misalign]
        -> /data/h3files/pruned_bf16.safetensors     Comfy-Org layout: bare keys, stacked QKV,
                                                      curve-form AdaLN (rank 8, F16), F32 heads
        -> /data/h3files/release/transformer/        the official layout: config.json, 14
                                                      shards + index, interleaved QKV, full AdaLN
    python bench/single_file_load.py run PATH --weights bf16 [--streaming] [--threads 16]
        prints one JSON line: load time, the first (cold: pages dropped first) and second
        forward over a small input (every weight read once), RSS after load and the peak
    python bench/single_file_load.py table RESULTS.jsonl

``write --convrot 256`` writes the pruned file as Comfy-Org's int8-convrot DiT instead
(``pruned_int8_convrot.safetensors``, #21): qkv/out/fc1/fc2 of the 50 main blocks as I8
weights with an F32 per-row ``.weight_scale`` and a ``.comfy_quant`` JSON blob (convrot,
the given group size), everything else as in the BF16 file.  ``run ... --weights auto``
then loads it as stored (packed into h3cy's int8 panels, the file's pages released).

``--misalign`` writes the single file with every tensor one byte off its natural alignment
(as some repacks do): h3cy copies each such tensor once, and ``run`` shows what that costs.
Each ``run`` is one process, so ru_maxrss is that load's own peak.
"""
import argparse
import json
import os
import re
import resource
import struct
import sys
import time

import numpy as np

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
sys.path.insert(0, ROOT)

PATTERN_BYTES = 1 << 26      # 64 MiB of random data, repeated to fill each tensor
CURVE_GRID = 1025


def _released_config(layers):
    from h3cy.weights.released import released_config
    cfg = dict(released_config("transformer"))
    cfg["num_layers"] = layers
    return cfg


CONVROT_LINEARS = re.compile(r"^blocks\.\d+\.(attn\.qkv_proj|attn\.out_proj|mlp\.fc1|mlp\.fc2)\.weight$")


def _convrot_table(table, group):
    """The pruned table with the main blocks' four linears as Comfy int8-convrot tensors."""
    blob = json.dumps({"format": "int8_tensorwise", "convrot": True, "convrot_groupsize": group}).encode()
    out, blobs = [], {}
    for name, dt, shape in table:
        if not CONVROT_LINEARS.match(name):
            out.append((name, dt, shape))
            continue
        base = name[:-len(".weight")]
        out += [(name, "I8", shape), (base + ".weight_scale", "SCALE", (shape[0], 1)),
                (base + ".comfy_quant", "U8", (len(blob),))]
        blobs[base + ".comfy_quant"] = blob
    return out, blobs


def _pattern(dtype):
    rng = np.random.default_rng(0)
    if dtype == "I8":
        return rng.integers(-127, 128, PATTERN_BYTES, dtype=np.int8).tobytes()
    if dtype == "SCALE":     # per-row scales of an int8 weight: positive, ~ |w|max / 127
        return np.full(PATTERN_BYTES // 4, 0.02 * 4 / 127, np.float32).tobytes()
    x = (rng.standard_normal(PATTERN_BYTES // 4) * 0.02).astype(np.float32)
    if dtype == "BF16":
        return (x.view(np.uint32) >> 16).astype(np.uint16).tobytes()
    if dtype == "F16":
        return x.astype(np.float16).tobytes()
    return x.tobytes()


def _tensor_table(cfg, pruned, rank=8):
    """(name, dtype, shape) in file order, original/Comfy names (fused QKV, fused fc1)."""
    from h3cy.weights.transformer import TransformerConfig, expected_tensors, fp32_in_release
    d = dict(cfg)
    if pruned:      # curve form: the table replaces the time embedder, AdaLN is rank-r
        d.update(adaln_curve_grid=CURVE_GRID, time_embed_dim=rank)
    tc = TransformerConfig.from_dict(d)
    seen, out = set(), []
    for dname, oname, shape, role in expected_tensors(tc):
        if oname in seen:
            continue
        seen.add(oname)
        if role is not None and role[0] == "qkv":
            shape = (3 * shape[0], shape[1])
        if pruned:
            dt = ("F16" if ".adaln_proj." in oname else
                  "F32" if fp32_in_release(dname) or oname == "adaln_t_table" else "BF16")
        else:
            dt = "F32" if fp32_in_release(dname) else "BF16"
        out.append((oname, dt, tuple(shape)))
    out.append(("rope.inv_freq", "F32", (cfg["rope_freq_dim"],)))
    return out


def _write(path, table, misalign=False, blobs=None):
    """A safetensors file written tensor by tensor (never the whole file in memory); blobs:
    the exact bytes of some (U8) tensors."""
    sizes = {"BF16": 2, "F16": 2, "F32": 4, "I8": 1, "SCALE": 4, "U8": 1}
    stored = {"SCALE": "F32"}        # a pattern of its own, stored as F32
    blobs = blobs or {}
    header, off = {}, 0
    for name, dt, shape in table:
        n = int(np.prod(shape)) * sizes[dt]
        off += 1 if misalign else 0          # every tensor one byte off its element size
        header[name] = {"dtype": stored.get(dt, dt), "shape": list(shape), "data_offsets": [off, off + n]}
        off += n
    raw = json.dumps(header, separators=(",", ":")).encode()
    raw += b" " * (-len(raw) % 8)
    pats = {dt: _pattern(dt) for dt in sizes if dt != "U8"}
    tmp = path + ".partial"
    with open(tmp, "wb") as f:
        f.write(struct.pack("<Q", len(raw)) + raw)
        for name, dt, shape in table:
            a, b = header[name]["data_offsets"]
            if f.tell() - 8 - len(raw) < a:
                f.write(b"\0" * (a - (f.tell() - 8 - len(raw))))
            if name == "rope.inv_freq":       # validated at load: the real frequencies
                f.write((10000.0 ** (-np.arange(shape[0]) / shape[0])).astype(np.float32).tobytes())
                continue
            if name in blobs:
                f.write(blobs[name])
                continue
            left = b - a
            while left:
                k = min(left, len(pats[dt]))
                f.write(pats[dt][:k])
                left -= k
        f.flush()
        os.fsync(f.fileno())         # clean pages only: run's cold start can drop them
    os.replace(tmp, path)
    return os.path.getsize(path)


def cmd_write(a):
    os.makedirs(a.dir, exist_ok=True)
    cfg = _released_config(a.layers)
    t0 = time.perf_counter()
    if a.shards_only:
        return _write_release(a, cfg)
    table, blobs = _tensor_table(cfg, pruned=True), None
    if a.convrot:
        table, blobs = _convrot_table(table, a.convrot)
        single = os.path.join(a.dir, "pruned_int8_convrot.safetensors")
    else:
        single = os.path.join(a.dir, "pruned_bf16_misaligned.safetensors" if a.misalign else "pruned_bf16.safetensors")
    n1 = _write(single, table, a.misalign, blobs)
    print(f"{single}: {n1 / 1e9:.2f} GB in {time.perf_counter() - t0:.0f} s", flush=True)
    if not a.single_only:
        _write_release(a, cfg)


def _write_release(a, cfg):
    t0 = time.perf_counter()
    tdir = os.path.join(a.dir, "release", "transformer")
    os.makedirs(tdir, exist_ok=True)
    table = _tensor_table(cfg, pruned=False)
    n_shards = max(1, round(14 * a.layers / 50))      # the release: 14 shards for 50 blocks
    per = -(-len(table) // n_shards)
    weight_map, total = {}, 0
    for i in range(n_shards):
        fname = f"model-{i + 1:05d}-of-{n_shards:05d}.safetensors"
        part = table[i * per:(i + 1) * per]
        _write(os.path.join(tdir, fname), part)
        total += sum(int(np.prod(shape)) * (4 if dt == "F32" else 2) for _, dt, shape in part)
        weight_map.update({name: fname for name, _, _ in part})
    with open(os.path.join(tdir, "model.safetensors.index.json"), "w") as f:
        json.dump({"metadata": {"total_size": total}, "weight_map": weight_map}, f)
    with open(os.path.join(tdir, "config.json"), "w") as f:
        json.dump(cfg, f, indent=1)
    print(f"{tdir}: {total / 1e9:.2f} GB in {n_shards} shards, {time.perf_counter() - t0:.0f} s", flush=True)


def _files(path):
    if os.path.isfile(path):
        return [path]
    return [os.path.join(path, n) for n in sorted(os.listdir(path)) if n.endswith(".safetensors")]


def _drop_pages(paths):
    """Evict the files from the page cache (clean pages; no root needed): a cold load."""
    for p in paths:
        fd = os.open(p, os.O_RDONLY)
        try:
            os.posix_fadvise(fd, 0, 0, os.POSIX_FADV_DONTNEED)
        finally:
            os.close(fd)


def _rss_gb():
    with open("/proc/self/status") as f:
        return [int(line.split()[1]) for line in f if line.startswith("VmRSS")][0] / 1e6


def _inputs(cfg, L=16, Nv=32, Na=8):
    rng = np.random.default_rng(0)
    S = L + Nv + Na
    tags = np.array([1] * L + [0] * Nv + [2] * Na, np.int64)
    pv = cfg["in_channels"] * int(np.prod(cfg["patch_size"]))
    return dict(hidden_states=rng.standard_normal((1, Nv, pv)).astype(np.float32),
                audio_hidden_states=rng.standard_normal((1, Na, cfg["audio_in_channels"])).astype(np.float32),
                encoder_hidden_states=rng.standard_normal((1, L, cfg["text_dim"])).astype(np.float32),
                timestep=np.array([0.7], np.float32), timestep_indices=np.zeros(S, np.int64),
                token_tags=tags, position_ids=np.zeros((S, 3), np.float32),
                video_indices=np.arange(L, L + Nv), audio_indices=np.arange(L + Nv, S),
                text_indices=np.arange(L))


def cmd_run(a):
    import h3cy
    paths = _files(a.path)
    _drop_pages(paths)
    t0 = time.perf_counter()
    dit = h3cy.DiT.from_pretrained(a.path, weights=a.weights, streaming=a.streaming, threads=a.threads)
    load_s = time.perf_counter() - t0
    rss_load = _rss_gb()
    x = _inputs(dit.config)
    t0 = time.perf_counter()
    dit.forward(**x)
    cold_s = time.perf_counter() - t0
    t0 = time.perf_counter()
    dit.forward(**x)
    warm_s = time.perf_counter() - t0
    out = dict(path=a.path, form="single file" if os.path.isfile(a.path) else "sharded folder",
               gb_on_disk=round(sum(os.path.getsize(p) for p in paths) / 1e9, 2), weights=dit.weights,
               streaming=bool(a.streaming), threads=dit.threads, isa=dit.isa, layers=dit.config["num_layers"],
               load_s=round(load_s, 2), first_forward_s=round(cold_s, 2), second_forward_s=round(warm_s, 2),
               rss_after_load_gb=round(rss_load, 2), rss_end_gb=round(_rss_gb(), 2),
               peak_rss_gb=round(resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1e6, 2))
    print(json.dumps(out), flush=True)


def cmd_table(a):
    rows = [json.loads(line) for line in open(a.results) if line.startswith("{")]
    for r in rows:
        r["file"] = os.path.basename(r["path"].rstrip("/"))
    cols = ["file", "form", "gb_on_disk", "weights", "streaming", "threads", "isa", "layers", "load_s",
            "first_forward_s", "second_forward_s", "rss_after_load_gb", "peak_rss_gb"]
    print("| " + " | ".join(cols) + " |")
    print("|" + "---|" * len(cols))
    for r in rows:
        print("| " + " | ".join(str(r.get(c, "")) for c in cols) + " |")


def main():
    p = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    sub = p.add_subparsers(dest="cmd", required=True)
    w = sub.add_parser("write")
    w.add_argument("dir")
    w.add_argument("--layers", type=int, default=50)
    w.add_argument("--misalign", action="store_true")
    w.add_argument("--convrot", type=int, default=0, metavar="GROUP",
                   help="write the int8-convrot pruned file (Hadamard group size, e.g. 256) instead")
    w.add_argument("--single-only", action="store_true")
    w.add_argument("--shards-only", action="store_true")
    r = sub.add_parser("run")
    r.add_argument("path")
    r.add_argument("--weights", default="bf16")
    r.add_argument("--streaming", action="store_true")
    r.add_argument("--threads", type=int, default=None)
    t = sub.add_parser("table")
    t.add_argument("results")
    a = p.parse_args()
    {"write": cmd_write, "run": cmd_run, "table": cmd_table}[a.cmd](a)


if __name__ == "__main__":
    main()
