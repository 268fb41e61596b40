"""Checkpoint loading: h3cy.weights.safetensors (strict mmap reader) and h3cy.weights.transformer (transformer folders).

Oracle: the parameters of tiny random diffusers MiniMaxH3Transformer3DModel models (tests/_tiny_dit.py),
saved by diffusers in its own layout and converted to the original release layout by inverting diffusers'
converter (itself checked against the converter).  Every tensor must match bit for bit.
"""
import gc
import json
import logging
import math
import mmap
import os
import shutil
import struct

import numpy as np
import pytest

import h3cy
from h3cy.weights.transformer import (TransformerConfig, expected_tensors, fp32_in_release, open_transformer)
from h3cy.errors import CheckpointError, H3ValueError
from h3cy.weights.safetensors import MAX_HEADER_BYTES, SafetensorsFile

from _tiny_dit import TINY_CONFIGS


def _theta_inv_freq(F, theta):
    """diffusers' MiniMaxH3RotaryPosEmbed.inv_freq (torch float32), as a numpy array."""
    import torch
    return (1.0 / (theta ** (torch.arange(0, 2 * F, 2, dtype=torch.float32) / (2 * F)))).numpy()

HERE = os.path.dirname(os.path.abspath(__file__))
SCHEMA = os.path.join(HERE, "data", "h3_schema")   # the real release's configs and index files
FOLDERS = ["diffusers_fp32", "diffusers_fp32_sharded", "diffusers_bf16", "diffusers_allbf16",
           "original", "original_single"]


# ---------------------------------------------------------------------------------------------
# helpers
# ---------------------------------------------------------------------------------------------
def write_safetensors(path, tensors, metadata=None, header_pad_to=8, lead_pad=0, raw_header=None):
    """Write a safetensors file by hand.  ``tensors``: list of (name, dtype, shape, bytes) in data order.
    ``lead_pad`` bytes of padding go before the header's end so the data section starts unaligned."""
    header, data, off = {}, b"", 0
    for name, dtype, shape, buf in tensors:
        header[name] = {"dtype": dtype, "shape": list(shape), "data_offsets": [off, off + len(buf)]}
        data += buf
        off += len(buf)
    if metadata is not None:
        header["__metadata__"] = metadata
    hb = raw_header if raw_header is not None else json.dumps(header).encode()
    if header_pad_to:
        hb += b" " * (-(8 + len(hb)) % header_pad_to)
    hb += b" " * lead_pad
    with open(path, "wb") as f:
        f.write(struct.pack("<Q", len(hb)) + hb + data)
    return path


def read_header(path):
    with open(path, "rb") as f:
        (n,) = struct.unpack("<Q", f.read(8))
        return json.loads(f.read(n)), n


def rewrite_header(path, header):
    """Replace the header of ``path`` keeping the data section bytes as they are."""
    with open(path, "rb") as f:
        (n,) = struct.unpack("<Q", f.read(8))
        f.seek(8 + n)
        data = f.read()
    hb = json.dumps(header).encode()
    hb += b" " * (-(8 + len(hb)) % 8)
    with open(path, "wb") as f:
        f.write(struct.pack("<Q", len(hb)) + hb + data)


def mapped(path):
    """True when ``path`` is currently mmap'd into this process."""
    real = os.path.realpath(path)
    with open("/proc/self/maps", encoding="utf-8", errors="replace") as f:
        return any(line.rstrip("\n").endswith(real) for line in f)


def rss_bytes():
    with open("/proc/self/status") as f:
        for line in f:
            if line.startswith("VmRSS:"):
                return int(line.split()[1]) * 1024
    raise AssertionError("no VmRSS")


def reaches_mmap(arr):
    """Walk arr.base (ndarray -> memoryview.obj -> ...) and report whether an mmap owns the memory."""
    b = arr
    for _ in range(10):
        b = b.base if isinstance(b, np.ndarray) else getattr(b, "obj", None)
        if isinstance(b, mmap.mmap):
            return True
        if b is None:
            return False
    return False


def expected_params(t, folder):
    if folder in ("diffusers_fp32", "diffusers_fp32_sharded"):
        return t.params
    if folder == "diffusers_allbf16":
        return t.params_allbf16
    return t.params_bf16   # diffusers_bf16 and both original folders hold the released mix


def assert_names(err, path, tensor=None):
    """The CheckpointError names the file (and the tensor), in its message and attributes."""
    msg = str(err.value)
    assert os.fspath(path) in msg, msg
    assert err.value.path == os.fspath(path), (err.value.path, path)
    if tensor is not None:
        assert repr(tensor) in msg, msg
        assert err.value.tensor == tensor


# ---------------------------------------------------------------------------------------------
# both layouts, every tensor
# ---------------------------------------------------------------------------------------------
@pytest.mark.parametrize("folder", FOLDERS)
@pytest.mark.parametrize("cfg", list(TINY_CONFIGS))
def test_every_tensor_matches_diffusers(tiny_dit_factory, cfg, folder):
    t = tiny_dit_factory(cfg)
    want = expected_params(t, folder)
    with open_transformer(getattr(t, folder)) as ckpt:
        assert ckpt.keys() == list(want)          # diffusers' state_dict order, nothing extra
        assert ckpt.config == TransformerConfig.from_dict(t.config)
        assert ckpt.layout == ("original" if folder.startswith("original") else "diffusers")
        assert ckpt.qkv_layout == {"original": "interleaved", "original_single": "stacked"}.get(folder)
        assert ckpt.dtype_policy == {"diffusers_fp32": "fp32", "diffusers_fp32_sharded": "fp32",
                                     "diffusers_allbf16": "bf16"}.get(folder, "released")
        nontrivial = 0
        for name, w in want.items():
            got = ckpt[name]
            assert got.dtype == w.dtype and got.shape == w.shape, name
            assert np.array_equal(got, w), name
            assert ckpt.dtype(name) == ("F32" if w.dtype == np.float32 else "BF16")
            assert not got.flags.writeable
            nontrivial += int(np.count_nonzero(w) > w.size // 2)
        assert nontrivial == len(want)
        F = t.config["ffn_dim"]
        for prefix in _block_prefixes(t.config):
            value, gate = ckpt.swiglu(prefix)
            proj = want[prefix + ".ff.net.0.proj.weight"]
            assert np.array_equal(value, proj[:F]) and np.array_equal(gate, proj[F:])
            q, k, v = ckpt.attention_qkv(prefix)
            for p, arr in zip("qkv", (q, k, v)):
                assert np.array_equal(arr.reshape(-1, arr.shape[-1]), want[f"{prefix}.attn.to_{p}.weight"])


def _block_prefixes(c):
    return ([f"token_refiner.refiner_blocks.{j}" for j in range(c["num_refiner_layers"])]
            + [f"transformer_blocks.{b}" for b in range(c["num_layers"])])


@pytest.mark.parametrize("folder", ["diffusers_bf16", "original", "original_single"])
def test_views_are_zero_copy(tiny_dit_factory, folder):
    """qkv and SwiGLU halves are views into the mapped file in every layout; only the documented
    cases (interleaved to_q/k/v, original ff.net.0.proj) are assembled copies."""
    t = tiny_dit_factory("b")
    c = t.config
    with open_transformer(getattr(t, folder)) as ckpt:
        for prefix in _block_prefixes(c):
            q, k, v = ckpt.attention_qkv(prefix)
            for arr in (q, k, v):
                assert arr.shape == (c["num_attention_heads"], c["attention_head_dim"], c["hidden_size"])
                assert reaches_mmap(arr)
                assert arr.flags.c_contiguous == (folder != "original")
            value, gate = ckpt.swiglu(prefix)
            for arr in (value, gate):
                assert arr.shape == (c["ffn_dim"], c["hidden_size"])
                assert reaches_mmap(arr) and arr.flags.c_contiguous
            if folder == "original":   # interleaved: q, k, v share one fused buffer, D rows apart
                assert np.may_share_memory(q, k) and not np.shares_memory(q, k)
                assert q.strides[0] == 3 * c["attention_head_dim"] * c["hidden_size"] * 2
            for p in "qkv":
                e = ckpt.entry(f"{prefix}.attn.to_{p}.weight")
                assert e.zero_copy == (folder != "original")
                assert reaches_mmap(ckpt[e.name]) == e.zero_copy
            e = ckpt.entry(f"{prefix}.ff.net.0.proj.weight")
            assert e.zero_copy == (folder == "diffusers_bf16")
            if not e.zero_copy:
                assert "swiglu()" in e.note
            assert reaches_mmap(ckpt[e.name]) == e.zero_copy
        for name in ckpt.keys():
            if ckpt.entry(name).zero_copy:
                assert reaches_mmap(ckpt[name]), name


# ---------------------------------------------------------------------------------------------
# qkv layout detection and override
# ---------------------------------------------------------------------------------------------
def test_qkv_layout_detection_is_logged_once(tiny_dit_factory, caplog, tmp_path):
    """The fused-QKV row order is said at info level only where it was really assumed (one
    unindexed file in a folder: a repack of either kind), and once per folder per process
    (a pipeline reopens its transformer for every generation); the sharded release decides
    it (interleaved), so nothing is said there."""
    t = tiny_dit_factory("a")
    original, single = str(tmp_path / "original"), str(tmp_path / "original_single")
    shutil.copytree(t.original, original)
    shutil.copytree(t.original_single, single)
    for _ in range(3):
        with caplog.at_level(logging.INFO, logger="h3cy"):
            open_transformer(original).close()
            open_transformer(single).close()
    msgs = [r.getMessage() for r in caplog.records if r.name == "h3cy" and r.levelno >= logging.INFO]
    assert not any("qkv_proj" in m and original + ":" in m for m in msgs), msgs
    assert sum("assumed stacked" in m and single in m for m in msgs) == 1, msgs


@pytest.mark.parametrize("folder,override", [("original", "stacked"), ("original_single", "interleaved")])
def test_qkv_layout_override(tiny_dit_factory, folder, override):
    """The wrong layout reorders q/k/v rows (so the override really is applied); the right one,
    given explicitly, matches diffusers."""
    t = tiny_dit_factory("c")
    c = t.config
    H, D, I = c["num_attention_heads"], c["attention_head_dim"], c["num_attention_heads"] * c["attention_head_dim"]
    natural = "interleaved" if folder == "original" else "stacked"
    name = "transformer_blocks.1.attn.to_k.weight"
    with open_transformer(getattr(t, folder), qkv_layout=natural) as ckpt:
        assert np.array_equal(ckpt[name], t.params_bf16[name])
        fused, _ = ckpt.fused_qkv("transformer_blocks.1")   # the stored fused rows
    with open_transformer(getattr(t, folder), qkv_layout=override) as ckpt:
        assert ckpt.qkv_layout == override
        got = ckpt[name]
        assert not np.array_equal(got, t.params_bf16[name])
        if override == "stacked":
            assert np.array_equal(got, fused[I:2 * I])
        else:
            assert np.array_equal(got, fused.reshape(H, 3, D, -1)[:, 1].reshape(I, -1))
    with pytest.raises(H3ValueError):
        open_transformer(t.original, qkv_layout="fused")


def test_qkv_layout_ignored_for_diffusers(tiny_dit_factory):
    t = tiny_dit_factory("a")
    with open_transformer(t.diffusers_bf16, qkv_layout="interleaved") as ckpt:
        assert ckpt.qkv_layout is None
        assert np.array_equal(ckpt["transformer_blocks.0.attn.to_v.weight"],
                              t.params_bf16["transformer_blocks.0.attn.to_v.weight"])


# ---------------------------------------------------------------------------------------------
# config normalisation and the real release's tensor tables
# ---------------------------------------------------------------------------------------------
def test_real_configs_normalise_alike():
    with open(os.path.join(SCHEMA, "diffusers", "config.json")) as f:
        dcfg = TransformerConfig.from_dict(json.load(f))
    with open(os.path.join(SCHEMA, "original", "config.json")) as f:
        ocfg = TransformerConfig.from_dict(json.load(f))
    assert dcfg == ocfg
    assert (dcfg.num_attention_heads, dcfg.attention_head_dim, dcfg.hidden_size, dcfg.num_layers,
            dcfg.num_refiner_layers, dcfg.ffn_dim, dcfg.in_channels, dcfg.audio_in_channels,
            dcfg.patch_size, dcfg.text_dim, dcfg.freq_dim, dcfg.time_embed_hidden_dim,
            dcfg.time_embed_dim, dcfg.rope_freq_dim, dcfg.rope_theta) == (
        56, 128, 5376, 50, 2, 14336, 24, 32, (1, 2, 2), 5120, 256, 5376, 2688, 16, 10000.0)
    assert dcfg.inner_dim == 7168 and dcfg.video_patch_dim == 96 and dcfg.adaln_out_features == 96768


@pytest.mark.parametrize("layout", ["diffusers", "original"])
def test_tensor_table_matches_release_index(layout):
    """Names from expected_tensors() are exactly the release's index keys, and shapes × released
    dtypes reproduce its total_size to the byte (spec §4.2: 638 / 535 tensors)."""
    index = ("diffusion_pytorch_model.safetensors.index.json" if layout == "diffusers"
             else "model.safetensors.index.json")
    with open(os.path.join(SCHEMA, layout, index)) as f:
        idx = json.load(f)
    with open(os.path.join(SCHEMA, layout, "config.json")) as f:
        cfg = TransformerConfig.from_dict(json.load(f))
    table = expected_tensors(cfg)
    total = 0
    names = {}
    for d, o, shape, role in table:
        name = d if layout == "diffusers" else o
        if layout == "original" and role is not None and role[0] == "qkv":
            shape = (3 * shape[0], shape[1])
        names[name] = shape
        size = math.prod(shape) * (4 if fp32_in_release(d) else 2)
        total += size if layout == "diffusers" or role is None or role[1] in (None, 0) else 0
    if layout == "original":
        names["rope.inv_freq"] = (16,)
        total += 16 * 4
    assert set(names) == set(idx["weight_map"])
    assert len(names) == (638 if layout == "diffusers" else 535)
    assert total == idx["metadata"]["total_size"]


def test_original_names_agree_with_diffusers_converter(tiny_dit_factory):
    """expected_tensors' original names renamed by diffusers' converter give its diffusers names."""
    import torch  # a test extra, always installed with the reference implementations
    from diffusers.loaders.single_file_utils import convert_minimax_h3_transformer_checkpoint_to_diffusers
    cfg = TINY_CONFIGS["b"]
    table = expected_tensors(TransformerConfig.from_dict(cfg))
    fake = {}
    for d, o, shape, role in table:
        if role is not None and role[0] == "qkv":
            shape = (3 * shape[0], shape[1])
        fake[o] = torch.zeros(shape)
    back = convert_minimax_h3_transformer_checkpoint_to_diffusers(fake, config=cfg, qkv_layout="interleaved")
    assert {n: tuple(v.shape) for n, v in back.items()} == {d: s for d, _, s, _ in table}


def test_config_spellings_and_errors(tmp_path):
    p = str(tmp_path / "config.json")
    base = dict(TINY_CONFIGS["a"])
    assert TransformerConfig.from_dict(base).rope_theta == 10000.0
    both = dict(base, ffn_hidden_size=base["ffn_dim"])
    assert TransformerConfig.from_dict(both) == TransformerConfig.from_dict(base)
    bad_cases = [
        ({k: v for k, v in base.items() if k != "num_layers"}, "num_layers"),
        (dict(base, ffn_hidden_size=base["ffn_dim"] + 1), "disagree"),
        (dict(base, hidden_size=0), "hidden_size"),
        (dict(base, hidden_size=True), "hidden_size"),
        (dict(base, num_layers=1.5), "num_layers"),
        (dict(base, norm_eps=float("nan")), "norm_eps"),
        (dict(base, patch_size=[1, 2]), "patch_size"),
        (dict(base, rope_freq_dim=3), "rope_freq_dim"),        # 18 > head_dim 16
        (dict(base, adaln_out_features=7), "adaln_out_features"),
        ([1, 2], "JSON object"),
    ]
    for d, word in bad_cases:
        with pytest.raises(CheckpointError) as e:
            TransformerConfig.from_dict(d, p)
        assert p in str(e.value) and word in str(e.value), str(e.value)


# ---------------------------------------------------------------------------------------------
# paths, alignment, mmap
# ---------------------------------------------------------------------------------------------
@pytest.mark.parametrize("folder", ["original", "diffusers_fp32_sharded"])
def test_unicode_folder(tiny_dit_factory, tmp_path, folder):
    t = tiny_dit_factory("a")
    dst = tmp_path / "模型权重 MiniMax-H3" / "变换器"
    shutil.copytree(getattr(t, folder), dst)
    want = expected_params(t, folder)
    with open_transformer(dst) as ckpt:
        assert all(np.array_equal(ckpt[k], want[k]) for k in want)
        assert all(os.path.dirname(f) == str(dst) for f in ckpt.files)


def test_unaligned_offsets_load_correctly(tmp_path, caplog):
    """U8[3] first pushes BF16 and F32 tensors to odd offsets; they come back aligned and equal."""
    rng = np.random.default_rng(5)
    bits = rng.integers(0, 2**16, size=(2, 3), dtype=np.uint16)
    f32 = rng.standard_normal(5).astype(np.float32)
    path = write_safetensors(str(tmp_path / "odd.safetensors"), [
        ("u8", "U8", (3,), b"\x01\x02\x03"),
        ("bf16", "BF16", (2, 3), bits.tobytes()),
        ("f32", "F32", (5,), f32.tobytes()),
    ], header_pad_to=8)                    # data section 8-aligned; U8[3] shifts the rest by 3
    with caplog.at_level(logging.DEBUG, logger="h3cy"):
        with SafetensorsFile(path) as f:
            assert f.info("bf16").offset % 2 == 1
            got_b, got_f = f.get("bf16"), f.get("f32")
            assert got_b.flags.aligned and got_f.flags.aligned
            assert np.array_equal(got_b, bits) and np.array_equal(got_f, f32)
            assert list(f.get("u8")) == [1, 2, 3] and reaches_mmap(f.get("u8"))   # aligned: a view
            assert not got_b.flags.writeable
    assert any("not 2-byte aligned" in r.getMessage() and "'bf16'" in r.getMessage() for r in caplog.records)


def test_aligned_tensors_are_views_and_outlive_close(tmp_path):
    vals = np.arange(12, dtype=np.float32).reshape(3, 4)
    path = write_safetensors(str(tmp_path / "a.safetensors"),
                             [("w", "F32", (3, 4), vals.tobytes()), ("empty", "F32", (0, 4), b"")],
                             metadata={"format": "pt"})
    f = SafetensorsFile(path)
    assert f.metadata == {"format": "pt"}
    w = f.get("w")
    assert reaches_mmap(w) and np.array_equal(w, vals) and w.flags.aligned
    assert f.get("empty").shape == (0, 4)
    assert not f.closed
    f.close()                               # a view is alive: the mapping stays
    assert f.closed
    assert mapped(path) and np.array_equal(w, vals)
    with pytest.raises(CheckpointError) as e:
        f.get("w")
    assert_names(e, path, "w")
    del w
    gc.collect()
    assert not mapped(path)                 # last view gone: unmapped


def test_mmap_does_not_copy_200mb(tmp_path):
    """Opening a ~200 MB file and taking a view of its tensor must not read it: RSS grows far less."""
    n = 50_000_000                          # F32 -> 200 MB, written sparse (no disk, no page cache)
    hb = json.dumps({"big": {"dtype": "F32", "shape": [n], "data_offsets": [0, 4 * n]}}).encode()
    hb += b" " * (-(8 + len(hb)) % 8)
    path = str(tmp_path / "big.safetensors")
    with open(path, "wb") as f:
        f.write(struct.pack("<Q", len(hb)) + hb)
        f.truncate(8 + len(hb) + 4 * n)
    before = rss_bytes()
    f = SafetensorsFile(path)
    arr = f.get("big")
    grown = rss_bytes() - before
    assert arr.shape == (n,) and reaches_mmap(arr)
    assert grown < 16 << 20, grown
    assert float(arr[-1]) == 0.0
    del arr
    f.close()


def test_real_scale_checkpoint_sparse(tmp_path):
    """Full-size release shapes (56 heads, 50 blocks, 66 GB) in sparse shards laid out per the real
    index: opening validates every header and maps 66 GB with little RSS."""
    with open(os.path.join(SCHEMA, "original", "model.safetensors.index.json")) as f:
        idx = json.load(f)
    with open(os.path.join(SCHEMA, "original", "config.json")) as f:
        cfgd = json.load(f)
    cfg = TransformerConfig.from_dict(cfgd)
    shapes = {"rope.inv_freq": ((16,), "F32")}
    for d, o, shape, role in expected_tensors(cfg):
        if role is not None and role[0] == "qkv":
            shape = (3 * shape[0], shape[1])
        shapes[o] = (shape, "F32" if fp32_in_release(d) else "BF16")
    folder = tmp_path / "FL2VA" / "transformer"
    folder.mkdir(parents=True)
    shutil.copy(os.path.join(SCHEMA, "original", "config.json"), folder)
    shutil.copy(os.path.join(SCHEMA, "original", "model.safetensors.index.json"), folder)
    by_file = {}
    for name, fname in idx["weight_map"].items():
        by_file.setdefault(fname, []).append(name)
    inv_freq = _theta_inv_freq(16, 10000.0)          # the release's stored RoPE frequencies
    for fname, names in by_file.items():
        header, off = {}, 0
        for name in names:
            shape, dt = shapes[name]
            size = math.prod(shape) * (4 if dt == "F32" else 2)
            header[name] = {"dtype": dt, "shape": list(shape), "data_offsets": [off, off + size]}
            off += size
        hb = json.dumps(header).encode()
        hb += b" " * (-(8 + len(hb)) % 8)
        with open(folder / fname, "wb") as f:
            f.write(struct.pack("<Q", len(hb)) + hb)
            f.truncate(8 + len(hb) + off)
            if "rope.inv_freq" in header:          # the one tensor read at open: real values
                f.seek(8 + len(hb) + header["rope.inv_freq"]["data_offsets"][0])
                f.write(inv_freq.tobytes())
        assert os.stat(folder / fname).st_blocks * 512 < 1 << 20     # really sparse
    before = rss_bytes()
    with open_transformer(folder) as ckpt:
        assert ckpt.layout == "original" and ckpt.qkv_layout == "interleaved"
        assert ckpt.dtype_policy == "released" and len(ckpt) == 638
        assert ckpt.nbytes == idx["metadata"]["total_size"] - 64
        assert np.array_equal(ckpt.rope_inv_freq, inv_freq)
        q, k, v = ckpt.attention_qkv("transformer_blocks.49")
        assert q.shape == (56, 128, 5376) and q.strides == (384 * 5376 * 2, 5376 * 2, 2)
        value, gate = ckpt.swiglu("transformer_blocks.0")
        assert value.shape == gate.shape == (14336, 5376)
        assert ckpt["proj_in.weight"].dtype == np.float32
        del q, k, v, value, gate
    assert rss_bytes() - before < 64 << 20


# ---------------------------------------------------------------------------------------------
# bad checkpoints
# ---------------------------------------------------------------------------------------------
@pytest.fixture
def fp32_copy(tiny_dit_factory, tmp_path):
    t = tiny_dit_factory("a")
    dst = tmp_path / "ckpt"
    shutil.copytree(t.diffusers_fp32, dst)
    return str(dst), os.path.join(str(dst), "diffusion_pytorch_model.safetensors")


@pytest.fixture
def original_copy(tiny_dit_factory, tmp_path):
    t = tiny_dit_factory("a")
    dst = tmp_path / "orig"
    shutil.copytree(t.original, dst)
    return str(dst)


def _fails(folder, **kw):
    with pytest.raises(CheckpointError) as e:
        open_transformer(folder, **kw)
    gc.collect()
    for name in os.listdir(folder):     # nothing half-loaded: every mapping released
        assert not mapped(os.path.join(folder, name)), name
    return e


def _edit_header(path, fn):
    header, _ = read_header(path)
    fn(header)
    rewrite_header(path, header)


def test_missing_tensor(fp32_copy):
    folder, st = fp32_copy
    _edit_header(st, lambda h: h.pop("transformer_blocks.0.attn.to_k.weight"))
    assert_names(_fails(folder), st, "transformer_blocks.0.attn.to_k.weight")


def test_unexpected_tensor(fp32_copy):
    folder, st = fp32_copy
    _edit_header(st, lambda h: h.__setitem__("transformer_blocks.0.attn.to_z.weight",
                                             dict(h["transformer_blocks.0.attn.to_k.weight"])))
    # two entries on the same bytes: caught as an overlap by the reader, or as unexpected
    e = _fails(folder)
    assert e.value.path == st and e.value.tensor in ("transformer_blocks.0.attn.to_z.weight",
                                                     "transformer_blocks.0.attn.to_k.weight")


def test_unexpected_tensor_clean_file(fp32_copy, tmp_path):
    folder, st = fp32_copy
    with open(st, "rb") as f:
        raw = f.read()
    header, n = read_header(st)
    data = raw[8 + n:]
    header["blocks_extra.weight"] = {"dtype": "F32", "shape": [1], "data_offsets": [len(data), len(data) + 4]}
    rewrite_header(st, header)
    with open(st, "ab") as f:
        f.write(b"\0" * 4)
    assert_names(_fails(folder), st, "blocks_extra.weight")


def test_rope_inv_freq_is_read_not_a_parameter(tiny_dit_factory):
    """The release layout's stored rope.inv_freq is read (an owned read-only float32 copy) but is
    not a diffusers parameter; the diffusers layout has none (diffusers computes it from rope_theta)."""
    t = tiny_dit_factory("c")
    want = _theta_inv_freq(t.config["rope_freq_dim"], 10000.0)
    for folder in ("original", "original_single"):
        with open_transformer(getattr(t, folder)) as ckpt:
            assert "rope.inv_freq" not in ckpt and "rope.inv_freq" not in ckpt.keys()
            got = ckpt.rope_inv_freq
            assert got.dtype == np.float32 and np.array_equal(got, want)
            assert not got.flags.writeable and not reaches_mmap(got)
    with open_transformer(t.diffusers_bf16) as ckpt:
        assert ckpt.rope_inv_freq is None


def _rewrite_inv_freq(folder, value):
    """Replace rope.inv_freq (a torch tensor) in the shard of ``folder`` that holds it; returns that
    shard's path."""
    from safetensors.torch import load_file, save_file
    with open(os.path.join(folder, "model.safetensors.index.json")) as f:
        path = os.path.join(folder, json.load(f)["weight_map"]["rope.inv_freq"])
    tensors = load_file(path)
    tensors["rope.inv_freq"] = value
    save_file(tensors, path, metadata={"format": "pt"})
    return path


def _bad_inv_freq_cases():
    import torch
    good = torch.from_numpy(_theta_inv_freq(2, 10000.0))      # config "a": rope_inv_freq_len 2
    nan, inf, zero, neg = good.clone(), good.clone(), good.clone(), good.clone()
    nan[1], inf[0], zero[1], neg[1] = float("nan"), float("inf"), 0.0, -good[1]
    return {
        "too_long": (torch.cat([good, good[:1]]), "rope_inv_freq_len=2"),
        "too_short": (good[:1].clone(), "rope_inv_freq_len=2"),
        "2d": (good[None].clone(), "rope_inv_freq_len=2"),
        "bf16": (good.to(torch.bfloat16), "dtype BF16"),
        "f16": (good.to(torch.float16), "dtype F16"),
        "f64": (good.to(torch.float64), "dtype F64"),
        "nan": (nan, "finite and positive"),
        "inf": (inf, "finite and positive"),
        "zero": (zero, "finite and positive"),
        "negative": (neg, "finite and positive"),
    }


@pytest.mark.parametrize("case", ["too_long", "too_short", "2d", "bf16", "f16", "f64", "nan", "inf", "zero",
                                  "negative"])
def test_bad_stored_rope_inv_freq(original_copy, case):
    value, word = _bad_inv_freq_cases()[case]
    path = _rewrite_inv_freq(original_copy, value)
    e = _fails(original_copy)
    assert_names(e, path, "rope.inv_freq")
    assert word in str(e.value), str(e.value)


def test_stored_rope_inv_freq_wins_over_config_theta(original_copy, caplog):
    """A release-layout config that also gives rope_theta: the stored tensor is what the released
    model computes with, so it is used; a disagreeing theta is warned about, an agreeing one is not."""
    cfg_path = os.path.join(original_copy, "config.json")
    with open(cfg_path) as f:
        cfg = json.load(f)
    stored = _theta_inv_freq(2, 10000.0)
    for theta, warned in ((500.0, True), (10000.0, False)):
        with open(cfg_path, "w") as f:
            json.dump(dict(cfg, rope_theta=theta), f)
        caplog.clear()
        with caplog.at_level(logging.WARNING, logger="h3cy"):
            with open_transformer(original_copy) as ckpt:
                assert ckpt.config.rope_theta == theta
                assert np.array_equal(ckpt.rope_inv_freq, stored)
        msgs = [r.getMessage() for r in caplog.records if r.levelno >= logging.WARNING]
        assert any("rope.inv_freq" in m and "rope_theta=500.0" in m for m in msgs) == warned, msgs


def test_diffusers_layout_ignores_a_stored_inv_freq(fp32_copy):
    """diffusers' inv_freq buffer is non-persistent and computed from rope_theta; a stray
    rope.inv_freq in a diffusers-layout file is ignored, as diffusers ignores it."""
    from safetensors.torch import load_file, save_file
    import torch
    folder, st = fp32_copy
    tensors = load_file(st)
    tensors["rope.inv_freq"] = torch.full((2,), 0.5)
    save_file(tensors, st, metadata={"format": "pt"})
    with open_transformer(folder) as ckpt:
        assert ckpt.layout == "diffusers" and ckpt.rope_inv_freq is None


def test_wrong_shape(fp32_copy):
    folder, st = fp32_copy

    def fn(h):
        e = h["transformer_blocks.0.ff.net.2.weight"]
        r, c = e["shape"]
        e["shape"] = [c, r]              # transposed: same byte count, wrong shape
    _edit_header(st, fn)
    assert_names(_fails(folder), st, "transformer_blocks.0.ff.net.2.weight")


def test_wrong_dtype(fp32_copy):
    folder, st = fp32_copy

    def fn(h):
        e = h["norm_out.norm.weight"]
        e["dtype"] = "I32"               # same itemsize, not a float checkpoint type
    _edit_header(st, fn)
    e = _fails(folder)
    assert_names(e, st, "norm_out.norm.weight")
    assert "I32" in str(e.value)


def test_mixed_dtypes_outside_every_policy(tiny_dit_factory, tmp_path):
    """A float32 norm weight in an otherwise released bf16 checkpoint fits no dtype policy."""
    import torch  # a test extra, always installed with the reference implementations
    from safetensors.torch import load_file, save_file
    t = tiny_dit_factory("a")
    folder = tmp_path / "mix"
    shutil.copytree(t.diffusers_bf16, folder)
    st = str(folder / "diffusion_pytorch_model.safetensors")
    sd = load_file(st)
    sd["transformer_blocks.0.norm2.weight"] = sd["transformer_blocks.0.norm2.weight"].to(torch.float32)
    save_file(sd, st)
    assert_names(_fails(str(folder)), st, "transformer_blocks.0.norm2.weight")


def test_truncated_file(fp32_copy):
    folder, st = fp32_copy
    header, n = read_header(st)
    last = max(header, key=lambda k: header[k]["data_offsets"][1] if k != "__metadata__" else -1)
    size = os.path.getsize(st)
    with open(st, "r+b") as f:
        f.truncate(size - 3)
    e = _fails(folder)
    assert_names(e, st, last)
    assert "truncated" in str(e.value)


def test_header_lies_about_offsets(fp32_copy):
    folder, st = fp32_copy
    header, _ = read_header(st)
    name = min((k for k in header if k != "__metadata__"), key=lambda k: header[k]["data_offsets"][0])

    def fn(h):
        b, e = h[name]["data_offsets"]
        h[name]["data_offsets"] = [b + 4, e + 4]     # now overlaps its neighbour
    _edit_header(st, fn)
    e = _fails(folder)
    assert e.value.path == st and "overlap" in str(e.value)
    assert name in str(e.value)


@pytest.mark.parametrize("change,tensor", [
    (dict(num_layers=2), "transformer_blocks.1.norm1.weight"),          # missing
    (dict(num_refiner_layers=0), "token_refiner.refiner_blocks.0.attn.norm_k.weight"),   # unexpected (sorted)
    (dict(ffn_dim=47), "token_refiner.refiner_blocks.0.ff.net.0.proj.weight"),   # shape
    (dict(text_dim=25), "context_embedder.weight"),
])
def test_config_does_not_match_tensors(fp32_copy, change, tensor):
    folder, st = fp32_copy
    cpath = os.path.join(folder, "config.json")
    with open(cpath) as f:
        cfg = json.load(f)
    cfg.update(change)
    with open(cpath, "w") as f:
        json.dump(cfg, f)
    e = _fails(folder)
    assert e.value.tensor == tensor and repr(tensor) in str(e.value)
    assert e.value.path == st
    assert "config" in str(e.value)


def test_original_config_mismatch(original_copy):
    cpath = os.path.join(original_copy, "config.json")
    with open(cpath) as f:
        cfg = json.load(f)
    cfg["ffn_hidden_size"] += 8
    with open(cpath, "w") as f:
        json.dump(cfg, f)
    e = _fails(original_copy)
    assert e.value.tensor == "token_refiner.blocks.0.mlp.fc1.weight"


def test_index_problems(original_copy):
    ipath = os.path.join(original_copy, "model.safetensors.index.json")
    with open(ipath) as f:
        idx = json.load(f)
    name = "blocks.0.mlp.fc2.weight"
    right = idx["weight_map"][name]
    wrong = next(v for v in idx["weight_map"].values() if v != right)

    def write(wm):
        with open(ipath, "w") as f:
            json.dump(dict(idx, weight_map=wm), f)

    write(dict(idx["weight_map"], **{name: wrong}))                     # index points elsewhere
    e = _fails(original_copy)
    assert e.value.tensor == name and right in e.value.path and wrong in str(e.value)
    write({k: v for k, v in idx["weight_map"].items() if k != name})   # stored but unlisted
    assert _fails(original_copy).value.tensor == name
    write(dict(idx["weight_map"], **{"blocks.0.extra": "model-00009-of-00009.safetensors"}))
    e = _fails(original_copy)                                          # shard file missing
    assert "model-00009-of-00009.safetensors" in e.value.path and "cannot open" in str(e.value)
    write(dict(idx["weight_map"], **{name: "../" + right}))             # not a plain file name
    assert_names(_fails(original_copy), ipath, name)
    with open(ipath, "w") as f:
        f.write("{not json")
    assert_names(_fails(original_copy), ipath)


def test_folder_problems(tiny_dit_factory, tmp_path):
    t = tiny_dit_factory("a")
    empty = tmp_path / "empty"
    empty.mkdir()
    assert_names(_fails_plain(empty), str(empty / "config.json"))       # no config
    shutil.copy(os.path.join(t.diffusers_fp32, "config.json"), empty)
    assert_names(_fails_plain(empty), str(empty))                        # no weights
    shutil.copy(os.path.join(t.diffusers_fp32, "diffusion_pytorch_model.safetensors"), empty)
    shutil.copy(os.path.join(t.original, "model.safetensors.index.json"), empty)
    e = _fails_plain(empty)                                              # two candidates
    assert "ambiguous" in str(e.value)
    assert_names(_fails_plain(tmp_path / "nope"), str(tmp_path / "nope"))
    assert isinstance(e.value, ValueError) and isinstance(e.value, h3cy.H3Error)


def _fails_plain(folder):
    with pytest.raises(CheckpointError) as e:
        open_transformer(folder)
    return e


# ---------------------------------------------------------------------------------------------
# the reader on hand-made headers (table of cases)
# ---------------------------------------------------------------------------------------------
def _entry(dtype="F32", shape=(2,), offs=(0, 8)):
    return {"dtype": dtype, "shape": list(shape), "data_offsets": list(offs)}


HEADER_CASES = [
    # (id, header bytes or obj, data length, tensor named in the error or None, word in message)
    ("not_utf8", b"\xff\xfe{}", 0, None, "UTF-8"),
    ("not_json", b"{\"a\": ", 0, None, "JSON"),
    ("nan", b'{"a": {"dtype": "F32", "shape": [NaN], "data_offsets": [0, 0]}}', 0, None, "JSON"),
    ("duplicate", b'{"a": {"dtype": "U8", "shape": [], "data_offsets": [0, 1]}, "a": {}}', 1, None, "duplicate"),
    ("nested", b"[" * 100000 + b"]" * 100000, 0, None, "JSON"),
    ("list", [1, 2], 0, None, "object"),
    ("entry_not_object", {"a": 3}, 0, "a", "object"),
    ("missing_key", {"a": {"dtype": "F32", "shape": [2]}}, 8, "a", "missing"),
    ("extra_key", {"a": dict(_entry(), extra=1)}, 8, "a", "unknown"),
    ("unknown_dtype", {"a": _entry(dtype="F4")}, 8, "a", "dtype"),
    ("dtype_not_str", {"a": _entry(dtype=7)}, 8, "a", "dtype"),
    ("negative_dim", {"a": _entry(shape=(-2,))}, 8, "a", "shape"),
    ("bool_dim", {"a": {"dtype": "U8", "shape": [True], "data_offsets": [0, 1]}}, 1, "a", "shape"),
    ("float_dim", {"a": {"dtype": "U8", "shape": [1.0], "data_offsets": [0, 1]}}, 1, "a", "shape"),
    ("shape_not_list", {"a": {"dtype": "U8", "shape": 1, "data_offsets": [0, 1]}}, 1, "a", "shape"),
    ("rank_too_high", {"a": {"dtype": "U8", "shape": [1] * 40, "data_offsets": [0, 1]}}, 1, "a", "shape"),
    ("offsets_short", {"a": _entry(offs=(0,))}, 8, "a", "data_offsets"),
    ("offsets_float", {"a": {"dtype": "F32", "shape": [2], "data_offsets": [0.0, 8]}}, 8, "a", "data_offsets"),
    ("begin_after_end", {"a": _entry(offs=(8, 0))}, 8, "a", "begin <= end"),
    ("negative_begin", {"a": _entry(offs=(-8, 0))}, 8, "a", "begin <= end"),
    ("size_mismatch", {"a": _entry(offs=(0, 12))}, 12, "a", "needs 8"),
    ("past_end", {"a": _entry(offs=(8, 16))}, 8, "a", "past the end"),
    ("huge", {"a": {"dtype": "F64", "shape": [2**62, 2**62], "data_offsets": [0, 5]}}, 0, "a", "too large"),
    ("zero_dim_but_huge", {"a": {"dtype": "U8", "shape": [0, 2**40, 2**40], "data_offsets": [0, 0]}}, 0, "a",
     "too large"),
    ("overlap", {"a": _entry(), "b": _entry(offs=(4, 12))}, 12, "b", "overlap"),
    ("metadata_not_str", {"__metadata__": {"k": 1}}, 0, None, "__metadata__"),
]


@pytest.mark.parametrize("case", HEADER_CASES, ids=[c[0] for c in HEADER_CASES])
def test_reader_rejects_bad_headers(tmp_path, case):
    _, header, ndata, tensor, word = case
    hb = header if isinstance(header, bytes) else json.dumps(header).encode()
    path = str(tmp_path / "bad.safetensors")
    with open(path, "wb") as f:
        f.write(struct.pack("<Q", len(hb)) + hb + b"\0" * ndata)
    with pytest.raises(CheckpointError) as e:
        SafetensorsFile(path)
    assert_names(e, path, tensor)
    assert word in str(e.value), str(e.value)


@pytest.mark.parametrize("content,word", [
    (b"", "too small"), (b"\x02\0\0\0\0\0\0", "too small"),
    (struct.pack("<Q", MAX_HEADER_BYTES + 1) + b"{}", "cap"),
    (struct.pack("<Q", 100) + b"{}", "past the end"),
    (struct.pack("<Q", 2**64 - 1), "cap"),
])
def test_reader_rejects_bad_lengths(tmp_path, content, word):
    path = str(tmp_path / "bad.safetensors")
    with open(path, "wb") as f:
        f.write(content)
    with pytest.raises(CheckpointError) as e:
        SafetensorsFile(path)
    assert_names(e, path)
    assert word in str(e.value)


def test_reader_rejects_missing_and_directory(tmp_path):
    for p in (str(tmp_path / "nope.safetensors"), str(tmp_path)):
        with pytest.raises(CheckpointError) as e:
            SafetensorsFile(p)
        assert_names(e, p)
    path = write_safetensors(str(tmp_path / "ok.safetensors"), [("a", "U8", (1,), b"\1")])
    with SafetensorsFile(path) as f, pytest.raises(CheckpointError) as e:
        f.get("b")
    assert_names(e, path, "b")


def test_reader_agrees_with_safetensors_package(tiny_dit_factory):
    """Cross-check against the reference implementation on a real diffusers file."""
    from safetensors.numpy import load_file
    t = tiny_dit_factory("a")
    st = os.path.join(t.diffusers_fp32, "diffusion_pytorch_model.safetensors")
    ref = load_file(st)
    with SafetensorsFile(st) as f:
        assert set(f.keys()) == set(ref)
        for k, v in ref.items():
            assert np.array_equal(f.get(k), v) and f.get(k).dtype == v.dtype


@pytest.mark.parametrize("folder", ["diffusers_bf16", "original", "original_single"])
def test_fused_accessors(tiny_dit_factory, folder):
    """fused_qkv / swiglu_gate_value: the stored fused tensors (zero-copy) for the original layout,
    assembled stacked / [gate; value] copies for diffusers; every layout decodes to the parameters."""
    t = tiny_dit_factory("c")
    c = t.config
    H, D, F = c["num_attention_heads"], c["attention_head_dim"], c["ffn_dim"]
    want = t.params_bf16
    with open_transformer(getattr(t, folder)) as ckpt:
        for prefix in _block_prefixes(c):
            rows, layout = ckpt.fused_qkv(prefix)
            assert rows.shape == (3 * H * D, c["hidden_size"])
            assert layout == {"original": "interleaved"}.get(folder, "stacked")
            assert reaches_mmap(rows) == (folder != "diffusers_bf16")
            parts = (rows.reshape(H, 3, D, -1).transpose(1, 0, 2, 3) if layout == "interleaved"
                     else rows.reshape(3, H, D, -1))
            for i, p in enumerate("qkv"):
                assert np.array_equal(parts[i].reshape(H * D, -1), want[f"{prefix}.attn.to_{p}.weight"])
            gv = ckpt.swiglu_gate_value(prefix)
            proj = want[f"{prefix}.ff.net.0.proj.weight"]
            assert np.array_equal(gv[:F], proj[F:]) and np.array_equal(gv[F:], proj[:F])
            assert reaches_mmap(gv) == (folder != "diffusers_bf16")


class _NpzReader:
    """A second tensor-file format for the registry test: numpy's .npz (float32 only)."""

    class Info:
        def __init__(self, a):
            self.dtype, self.shape, self.nbytes = "F32", tuple(a.shape), a.nbytes

    def __init__(self, path):
        self.path = path
        with np.load(path) as z:
            self.arrays = {k: np.asarray(z[k], np.float32) for k in z.files}
        self.tensors = {k: self.Info(a) for k, a in self.arrays.items()}

    def get(self, name):
        return self.arrays[name]

    def close(self):
        self.arrays = {}


def test_a_registered_reader_serves_the_weights_layer(tmp_path, monkeypatch):
    """A new file format plugs in as one reader: TensorFiles reads through it with the same
    checks, and model-folder discovery lists its tensors; an unknown kind is a clear error."""
    from h3cy.weights import files, model_folder
    a = np.arange(6, dtype=np.float32).reshape(2, 3)
    np.savez(tmp_path / "w.npz", a=a, b=np.ones(4, np.float32))
    with pytest.raises(CheckpointError, match="no reader for this kind of file"):
        files.TensorFiles([str(tmp_path / "w.npz")])
    monkeypatch.setitem(files._READERS, ".npz", _NpzReader)
    assert ".npz" in files.weight_suffixes()
    tf = files.TensorFiles([str(tmp_path / "w.npz")])
    assert np.array_equal(tf.get("a", (2, 3)), a) and tf.has("b") and not tf.has("c")
    with pytest.raises(CheckpointError, match=r"w\.npz: tensor 'a': shape \[2, 3\]"):
        tf.get("a", (3, 2))
    with pytest.raises(CheckpointError, match="tensor 'c': missing"):
        tf.get("c")
    assert model_folder.folder_tensors(str(tmp_path)) == {"a": ("F32", (2, 3)), "b": ("F32", (4,))}
    tf.close()
    with pytest.raises(CheckpointError, match="closed"):
        tf.get("a")


def test_a_tensor_stored_twice_is_an_error(tmp_path):
    from h3cy.weights.files import TensorFiles
    from h3cy.weights.st_write import save_file
    for n in ("x", "y"):
        save_file(str(tmp_path / f"{n}.safetensors"), {"t": np.zeros(2, np.float32)})
    with pytest.raises(CheckpointError, match="tensor 't': tensor also stored in .*x.safetensors"):
        TensorFiles([str(tmp_path / "x.safetensors"), str(tmp_path / "y.safetensors")])
