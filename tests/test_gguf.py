"""GGUF: the reader (header, metadata, tensor infos, alignment, errors), the block
decoders against the ``gguf`` package's numpy dequantiser, and the GGUF linear's GEMM
against float64 on the same quantised activations."""
import os
import struct

import numpy as np
import pytest

from h3cy import _kernels
from h3cy.errors import CheckpointError
from h3cy.weights.files import TensorFiles
from h3cy.weights.gguf import GGUFFile, GGUFWeight

from _gguf_files import QUANT, TYPES, oracle_dequant, random_blocks, write_gguf

import gguf  # noqa: E402,F401  a test dependency (pyproject [test]): the oracle of the block formats


def _isas():
    return ["ref"] + [i for i in ("avx2", "avxvnni", "avx512", "amx", "neon") if _kernels.isa_supported(i)]


# ---- reader ----------------------------------------------------------------------------------
def test_reader_metadata_and_tensor_infos(tmp_path):
    rng = np.random.default_rng(0)
    q = random_blocks("Q4_K", 6, 512, rng)
    f32 = rng.standard_normal((3, 5)).astype(np.float32)
    meta = [("general.architecture", 8, "minimax_h3"), ("u8", 0, 7), ("i8", 1, -3), ("u16", 2, 600),
            ("i16", 3, -600), ("u32", 4, 70000), ("i32", 5, -70000), ("f32", 6, 1.5), ("b", 7, True),
            ("u64", 10, 1 << 40), ("i64", 11, -(1 << 40)), ("f64", 12, 0.25),
            ("arr_i32", 9, (5, [1, 2, 3])), ("arr_str", 9, (8, ["a", "bc"])),
            ("nested", 9, (9, [(4, [1]), (4, [2, 3])]))]
    path = tmp_path / "m.gguf"
    data_off, offs = write_gguf(path, [("a.weight", "Q4_K", (6, 512), q), ("b", "F32", (3, 5), f32)],
                                meta, alignment=64)
    with GGUFFile(path) as g:
        assert g.version == 3 and g.alignment == 64 and g.data_offset == data_off
        assert g.architecture == "minimax_h3"
        m = g.metadata
        assert (m["u8"], m["i8"], m["u16"], m["i16"], m["u32"], m["i32"]) == (7, -3, 600, -600, 70000, -70000)
        assert m["f32"] == 1.5 and m["b"] is True and m["u64"] == 1 << 40 and m["i64"] == -(1 << 40)
        assert m["f64"] == 0.25 and list(m["arr_i32"]) == [1, 2, 3] and m["arr_str"] == ["a", "bc"]
        assert [list(a) for a in m["nested"]] == [[1], [2, 3]]
        a, b = g.info("a.weight"), g.info("b")
        assert (a.dtype, a.shape, a.offset, a.nbytes, a.row_bytes) == ("Q4_K", (6, 512), offs[0], q.nbytes, 288)
        assert (b.dtype, b.shape, b.offset, b.nbytes) == ("F32", (3, 5), offs[1], 60)
        w = g.get("a.weight")
        assert isinstance(w, GGUFWeight) and w.shape == (6, 512) and not w.blocks.flags.writeable
        np.testing.assert_array_equal(w.blocks, q)
        np.testing.assert_array_equal(g.get("b"), f32)
        np.testing.assert_array_equal(w[2:4].blocks, q[2:4])
    # through the weights layer, as every component reads files
    tf = TensorFiles([path], float_dtypes=("F32",))
    try:
        assert tf.info("a.weight").dtype == "Q4_K"
        np.testing.assert_array_equal(tf.get("b"), f32)
    finally:
        tf.close()


def test_reader_maps_llama_cpp_names(tmp_path):
    rng = np.random.default_rng(1)
    path = tmp_path / "te.gguf"
    write_gguf(path, [("token_embd.weight", "Q8_0", (4, 64), random_blocks("Q8_0", 4, 64, rng)),
                      ("blk.0.attn_q.weight", "Q8_0", (2, 64), random_blocks("Q8_0", 2, 64, rng)),
                      ("blk.0.ffn_norm.weight", "F32", (64,), np.ones(64, np.float32))],
               [("general.architecture", 8, "qwen3vl")])
    with GGUFFile(path) as g:
        assert g.naming == "llama.cpp"
        assert set(g.tensors) == {"model.embed_tokens.weight", "model.layers.0.self_attn.q_proj.weight",
                                  "model.layers.0.post_attention_layernorm.weight"}
        assert g.info("model.layers.0.self_attn.q_proj.weight").stored == "blk.0.attn_q.weight"


def _corrupt_cases(tmp_path):
    rng = np.random.default_rng(2)
    good = tmp_path / "good.gguf"
    q = random_blocks("Q8_0", 4, 64, rng)
    data_off, offs = write_gguf(good, [("w", "Q8_0", (4, 64), q)], [("k", 8, "v")])
    raw = good.read_bytes()
    cases = {}
    for cut in (0, 3, 10, 23, 30, data_off - 1, offs[0] + 5, offs[0] + q.nbytes - 1):
        cases[f"truncated_at_{cut}"] = (raw[:cut], "truncated")
    cases["bad_magic"] = (b"GGUX" + raw[4:], "not a GGUF file")
    cases["version_1"] = (raw[:4] + struct.pack("<I", 1) + raw[8:], "version 1")
    cases["big_endian"] = (raw[:4] + struct.pack(">I", 3) + raw[8:], "big-endian")
    cases["absurd_count"] = (raw[:8] + struct.pack("<Q", 1 << 40) + raw[16:], "absurd counts")
    # tensor info fields: name length 1 ('w') sits after the metadata
    ti = raw.index(struct.pack("<Q", 1) + b"w")
    nd_at, ne0_at = ti + 9, ti + 13
    cases["zero_dims"] = (raw[:nd_at] + struct.pack("<I", 0) + raw[nd_at + 4:], "0 dimensions")
    cases["absurd_dims"] = (raw[:ne0_at] + struct.pack("<Q", 1 << 50) + raw[ne0_at + 8:], "absurd dimensions")
    cases["partial_block"] = (raw[:ne0_at] + struct.pack("<Q", 48) + raw[ne0_at + 8:], "whole Q8_0 blocks")
    type_at = ne0_at + 16
    cases["unknown_type"] = (raw[:type_at] + struct.pack("<I", 99) + raw[type_at + 4:], "unknown ggml type 99")
    cases["misaligned_offset"] = (raw[:type_at + 4] + struct.pack("<Q", 8) + raw[type_at + 12:], "not a multiple of the alignment")
    cases["offset_past_end"] = (raw[:type_at + 4] + struct.pack("<Q", 1 << 20) + raw[type_at + 12:], "past the end")
    kv_type_at = raw.index(b"k") + 1
    cases["unknown_value_type"] = (raw[:kv_type_at] + struct.pack("<I", 77) + raw[kv_type_at + 4:], "unknown value type 77")
    return cases


def test_corrupt_files_raise_checkpoint_errors(tmp_path):
    for name, (data, want) in _corrupt_cases(tmp_path).items():
        p = tmp_path / f"{name}.gguf"
        p.write_bytes(data)
        with pytest.raises(CheckpointError, match=want) as ei:
            GGUFFile(p)
            pytest.fail(f"{name}: no error")
        assert str(p) in str(ei.value), name


def test_bad_alignment_and_overlap(tmp_path):
    rng = np.random.default_rng(3)
    q = random_blocks("Q8_0", 2, 32, rng)
    p = tmp_path / "al.gguf"
    write_gguf(p, [("w", "Q8_0", (2, 32), q)], [("general.alignment", 4, 24)])
    with pytest.raises(CheckpointError, match="power of two"):
        GGUFFile(p)
    # two tensors at the same offset
    p2 = tmp_path / "ov.gguf"
    write_gguf(p2, [("a", "Q8_0", (2, 32), q), ("b", "Q8_0", (2, 32), q)])
    raw = bytearray(p2.read_bytes())
    at = raw.index(struct.pack("<Q", 1) + b"b") + 9 + 4 + 16 + 4
    raw[at:at + 8] = struct.pack("<Q", 0)
    p2.write_bytes(bytes(raw))
    with pytest.raises(CheckpointError, match="overlap"):
        GGUFFile(p2)


def test_fuzz_header_never_crashes(tmp_path):
    """Random byte flips in the header: a CheckpointError or a valid file, nothing else
    (the long run, H3CY_FUZZ_CASES=100000, covers the >= 100k cases)."""
    rng = np.random.default_rng(4)
    good = tmp_path / "good.gguf"
    data_off, _ = write_gguf(good, [("w", "Q4_K", (2, 256), random_blocks("Q4_K", 2, 256, rng)),
                                    ("n", "F32", (8,), np.ones(8, np.float32))],
                             [("general.architecture", 8, "x"), ("a", 9, (4, [1, 2]))])
    raw = good.read_bytes()
    n = int(os.environ.get("H3CY_FUZZ_CASES", "500"))
    p = tmp_path / "f.gguf"
    for _ in range(n):
        b = bytearray(raw)
        for _ in range(int(rng.integers(1, 4))):
            b[int(rng.integers(0, data_off))] = int(rng.integers(0, 256))
        if rng.random() < 0.2:
            b = b[:int(rng.integers(0, len(b)))]
        p.write_bytes(bytes(b))
        try:
            with GGUFFile(p) as g:
                for name in g.tensors:
                    g.get(name)
        except CheckpointError:
            pass


# ---- block decoders ---------------------------------------------------------------------------
@pytest.mark.parametrize("type_name", list(TYPES))
def test_dequant_matches_gguf_package(tmp_path, type_name):
    """Every type decodes bit for bit as the gguf package's numpy dequantiser (a wrong
    nibble order or scale packing shows as O(1) differences)."""
    rng = np.random.default_rng(5)
    K, N = 512, 5
    if TYPES[type_name][1] > 1:
        b = random_blocks(type_name, N, K, rng)
    else:
        b = rng.standard_normal((N, K)).astype(np.float32)
        b = {"F32": b, "F16": b.astype(np.float16), "BF16": (b.view(np.uint32) >> 16).astype(np.uint16)}[type_name]
    p = tmp_path / "d.gguf"
    write_gguf(p, [("w", type_name, (N, K), b)])
    with GGUFFile(p) as g:
        w = g.get("w")
        got = w.dequantized() if isinstance(w, GGUFWeight) else np.asarray(w)
    if type_name in ("F32", "F16"):
        want = b.astype(np.float32)
    elif type_name == "BF16":
        want = (b.astype(np.uint32) << 16).view(np.float32)
        got = (np.asarray(got).astype(np.uint32) << 16).view(np.float32)
    else:
        want = oracle_dequant(type_name, b, (N, K))
    np.testing.assert_array_equal(got, want)


# ---- the GEMM ---------------------------------------------------------------------------------
def quant_act(x):
    """The activation quantiser as documented (per row, per group of 256 values, the last
    group the rest of the row: d = max|x| / 127, q = rint(x / d)), in numpy float32: returns
    q, d (M, groups) and the float32 values the GEMM effectively multiplies."""
    M, K = x.shape
    q = np.empty((M, K), np.float32)
    ds = []
    for g0 in range(0, K, 256):
        xb = x[:, g0:g0 + 256].astype(np.float32)
        d = (np.abs(xb).max(axis=1, keepdims=True) / np.float32(127)).astype(np.float32)
        with np.errstate(invalid="ignore", divide="ignore"):
            q[:, g0:g0 + 256] = np.where(d > 0, np.rint(xb / d), 0).clip(-127, 127)
        ds.append(d)
    d = np.concatenate(ds, axis=1)
    return q, d, q * np.repeat(d, 256, axis=1)[:, :K]


@pytest.mark.parametrize("type_name", QUANT)
@pytest.mark.parametrize("isa", _isas())
def test_gemm_matches_float64_on_quantised_activations(tmp_path, type_name, isa):
    """h3cy's GGUF GEMM vs float64 (x quantised as documented) @ W (the gguf package's
    dequantisation)^T: rel L2 <= 1e-5 (observed 5e-8..1.3e-7: float32 accumulation); a
    wrong sub-block scale or offset gives > 1e-2.  Against the unquantised x the error is
    the activation quantisation's (bound 3e-2, below).  M = 1, 17, 130, 1100
    (not multiples of the micro-kernels' 2/8 rows; 1100 past one of the driver's row blocks,
    which hold 256-1024 rows by K: gemm_gguf.c gguf_rows_per_block), N = 53
    (a partial 16-column panel; on avx512, whose kernel takes 32 columns, one full and one of
    21: the x2 kernel's second panel partial), K over a full and a partial 512-input K block (544: a last
    activation group of 32 values); every
    path's result is the reference's bit for bit, on 1 and 2 threads (the amx path's Q4_K and
    Q5_K: to 1e-6, their own order)."""
    rng = np.random.default_rng(6)
    N, K = 53, (768 if TYPES[type_name][1] == 256 else 544)
    b = random_blocks(type_name, N, K, rng)
    W = oracle_dequant(type_name, b, (N, K)).astype(np.float64)
    bias = rng.standard_normal(N).astype(np.float32)
    pool = _kernels.ThreadPool(2)
    core = _kernels.linear_attach_gguf([b], [TYPES[type_name][0]], N, K, bias, 0, isa, pool)
    ref = _kernels.linear_attach_gguf([b], [TYPES[type_name][0]], N, K, bias, 0, "ref", _kernels.ThreadPool(1))
    for M in (1, 17, 130, 1100):
        x = rng.standard_normal((M, K)).astype(np.float32)
        x[0, :256] = 0.0                                   # an all-zero activation group
        x[-1, 7] = 40.0                                    # an outlier channel
        q, d, xq = quant_act(x)
        qc, dc = np.empty((M, K), np.int8), np.empty((M, -(-K // 256)), np.float32)
        _kernels.gguf_quant_act(x, qc, dc)
        np.testing.assert_array_equal(qc, q.astype(np.int8))
        np.testing.assert_array_equal(dc, d)
        y = np.full((M, N), np.nan, np.float32)
        core.forward(x, y, 0)
        want = xq.astype(np.float64) @ W.T + bias
        rel = np.linalg.norm(y - want) / np.linalg.norm(want)
        assert rel <= 1e-5, (M, rel)
        full = x.astype(np.float64) @ W.T + bias
        # the activation quantisation's own error: observed 2e-3..2.1e-2 (the most with Q5_1
        # and the row holding the 40-sigma outlier, which coarsens its whole 256-value group;
        # per 32, before groups, it was <= 6.3e-3); a wrong scale, group or offset gives O(1)
        assert np.linalg.norm(y - full) / np.linalg.norm(full) <= 3e-2
        y_ref = np.empty_like(y)
        ref.forward(x, y_ref, 0)
        if isa == "amx" and type_name in ("Q4_K", "Q5_K"):
            # the AMX path's K-quant order (csrc/gguf_impl.h): exact integer super-block sums,
            # not the reference's bits; observed ~2e-7 of the largest output (the emulation
            # test), a wrong scale or min is off by 1e-2 or more
            assert np.abs(y - y_ref).max() <= 1e-6 * np.abs(y_ref).max()
        else:
            np.testing.assert_array_equal(y, y_ref)        # the same bits on every path and thread count
    np.testing.assert_array_equal(core.dequantized(), W.astype(np.float32))


@pytest.mark.parametrize("isa", _isas())
def test_gemm_parts_pair_and_residual(isa):
    """Rows in parts of different types (a mixed "_M" q/k/v), a SwiGLU pair from two
    tensors, and the gated residual epilogue, against float64."""
    rng = np.random.default_rng(7)
    M, K, H = 5, 512, 6
    pool = _kernels.ThreadPool(2)
    types = ["Q4_K", "Q6_K", "Q8_0"]
    parts = [random_blocks(t, H, K, rng) for t in types]
    W = np.concatenate([oracle_dequant(t, p, (H, K)) for t, p in zip(types, parts)]).astype(np.float64)
    x = rng.standard_normal((M, K)).astype(np.float32)
    xq = quant_act(x)[2].astype(np.float64)
    core = _kernels.linear_attach_gguf(parts, [TYPES[t][0] for t in types], 3 * H, K, None, 0, isa, pool)
    y = np.empty((M, 3 * H), np.float32)
    core.forward(x, y, 0)
    want = xq @ W.T
    assert np.linalg.norm(y - want) / np.linalg.norm(want) <= 1e-5
    # gated residual: y = resid + gate[row] * (x W^T)
    resid = rng.standard_normal((M, 3 * H)).astype(np.float32)
    gate = rng.standard_normal((2, 3 * H)).astype(np.float32)
    rows = np.array([1, 0, 1, 1, 0], np.int32)
    y2 = np.empty_like(y)
    core.forward(x, y2, 2, resid=resid, gate=gate, gate_row=rows)
    want2 = resid + gate[rows] * want
    assert np.linalg.norm(y2 - want2) / np.linalg.norm(want2) <= 1e-5
    # SwiGLU pair [gate; value] from two tensors
    bias = rng.standard_normal(2 * H).astype(np.float32)
    pc = _kernels.linear_attach_gguf(parts[:2], [TYPES[t][0] for t in types[:2]], 2 * H, K, bias, 1, isa, pool)
    y3 = np.empty((M, H), np.float32)
    pc.forward(x, y3, 1)
    g = xq @ W[:H].T + bias[:H]
    v = xq @ W[H:2 * H].T + bias[H:]
    want3 = g / (1 + np.exp(-g)) * v
    assert np.linalg.norm(y3 - want3) / np.linalg.norm(want3) <= 1e-5


def _fused_outputs(rng, x, H, fused, pair):
    """[the gated residual epilogue over a 3-part fused linear (3 H rows), the SwiGLU pair
    (2 H rows)] for x, with rng's residual and gate table"""
    M = x.shape[0]
    resid = rng.standard_normal((M, 3 * H)).astype(np.float32)
    gate = rng.standard_normal((2, 3 * H)).astype(np.float32)
    y2 = np.empty((M, 3 * H), np.float32)
    fused.forward(x, y2, 2, resid=resid, gate=gate, gate_row=(np.arange(M) % 2).astype(np.int32))
    y3 = np.empty((M, H), np.float32)
    pair.forward(x, y3, 1)
    return [y2, y3]


def _route_ab(monkeypatch, rng, var, off, on, cores, run, flag):
    """run() over cores() made with h3cy._config's var at off, then at on, on the same inputs
    (rng's state replayed): (results off, results on, that state).  Every core's flag (the
    route it reports) is false off and true on."""
    from h3cy import _config
    monkeypatch.setattr(_config, var, off)
    a = cores()
    assert not any(getattr(c, flag) for c in a)
    state = rng.bit_generator.state
    want = run(a)
    monkeypatch.setattr(_config, var, on)
    b = cores()
    assert all(getattr(c, flag) for c in b)
    rng.bit_generator.state = state
    return want, run(b), state


@pytest.mark.parametrize("isa", _isas())
def test_q8_0_tile_route_keeps_the_bits(monkeypatch, isa):
    """The Q8_0 tile route (csrc/gguf_q8d_amx.c: the file's blocks in place as the tiles' A
    operand, the activations in the 16-row tile layout, the float sums transposed), which
    all-Q8_0 linears take on the amx path, forced on this path (H3CY_GGUF_Q8D=2: its scalar
    kernel off AMX) so that the driver's side is tested on any machine: the same bits as the
    panel route for row counts around the 16-row tiles and past a row block (1100), a
    partial 16-column panel (N = 53), a last activation group of 32 inputs (K = 544), the
    bias, the gated residual and SwiGLU epilogues over fused parts, 1 and 2 threads, 1 and 4
    panels a pass."""
    from h3cy import _config
    rng = np.random.default_rng(17)
    N, K, H = 53, 544, 21
    q8 = TYPES["Q8_0"][0]
    b = random_blocks("Q8_0", N, K, rng)
    bias = rng.standard_normal(N).astype(np.float32)
    parts = [random_blocks("Q8_0", H, K, rng) for _ in range(3)]

    def cores():
        return (_kernels.linear_attach_gguf([b], [q8], N, K, bias, 0, isa, _kernels.ThreadPool(2)),
                _kernels.linear_attach_gguf(parts, [q8] * 3, 3 * H, K, None, 0, isa, _kernels.ThreadPool(1)),
                _kernels.linear_attach_gguf(parts[:2], [q8] * 2, 2 * H, K, bias[:2 * H], 1, isa,
                                            _kernels.ThreadPool(2)))

    def run(cs):
        out = []
        for M in (1, 16, 17, 130, 1100):
            x = rng.standard_normal((M, K)).astype(np.float32)
            y = np.empty((M, N), np.float32)
            cs[0].forward(x, y, 0)
            out += [y] + _fused_outputs(rng, x, H, cs[1], cs[2])
        return out

    want, got, state = _route_ab(monkeypatch, rng, "_ENV_GGUF_Q8D", "0", "2", cores, run, "gguf_q8d")
    for g, w in zip(got, want):
        np.testing.assert_array_equal(g, w)
    # 4 panels a pass, as on amx: the fused parts' 21 rows are panels of 16 and 5, so one pass
    # holds two partial panels (each copied into the thread's buffer in turn)
    monkeypatch.setattr(_config, "_ENV_GGUF_GROUP", "4")
    rng.bit_generator.state = state
    got = run(cores())
    for g, w in zip(got, want):
        np.testing.assert_array_equal(g, w)
    # a linear with a part of another type never takes it
    mixed = _kernels.linear_attach_gguf([parts[0], random_blocks("Q4_0", H, K, rng)], [q8, TYPES["Q4_0"][0]],
                                        2 * H, K, None, 0, isa, _kernels.ThreadPool(1))
    assert not mixed.gguf_q8d


@pytest.mark.parametrize("isa", _isas())
def test_kq_tile_route_keeps_the_order(monkeypatch, isa):
    """The K-quants' tile route (all-Q4_K/Q5_K linears: the activations in the kernel's 32-row
    tile layout, csrc/gguf_kq_amx.c), which the amx path takes by default, forced on this path
    (H3CY_GGUF_KQ=3: its scalar kernel off AMX) so that the driver's side is tested on any
    machine, against the rows in place (KQ=1): on amx the same bits; elsewhere, where KQ=1 is
    the common order, within 1e-6 of the largest output (the kq order's own rounding, observed
    ~2e-7; a wrong row tile, chunk or zero row is off by 1e-2 or more).  Row counts around the
    32-row tiles and past a row block (1100), a partial 16-column panel (N = 53), two K blocks
    (K = 768), the bias, the gated residual and SwiGLU epilogues over fused Q4_K / Q5_K parts,
    1 and 2 threads, 1 and 4 panels a pass; a linear with a part of another type never takes it."""
    from h3cy import _config
    rng = np.random.default_rng(19)
    N, K, H = 53, 768, 21
    q4, q5 = TYPES["Q4_K"][0], TYPES["Q5_K"][0]
    b4, b5 = random_blocks("Q4_K", N, K, rng), random_blocks("Q5_K", N, K, rng)
    bias = rng.standard_normal(N).astype(np.float32)
    parts = [random_blocks(t, H, K, rng) for t in ("Q4_K", "Q5_K", "Q4_K")]

    def cores():
        return (_kernels.linear_attach_gguf([b4], [q4], N, K, bias, 0, isa, _kernels.ThreadPool(2)),
                _kernels.linear_attach_gguf([b5], [q5], N, K, None, 0, isa, _kernels.ThreadPool(1)),
                _kernels.linear_attach_gguf(parts, [q4, q5, q4], 3 * H, K, None, 0, isa, _kernels.ThreadPool(2)),
                _kernels.linear_attach_gguf(parts[:2], [q4, q5], 2 * H, K, bias[:2 * H], 1, isa,
                                            _kernels.ThreadPool(2)))

    def run(cs):
        out = []
        for M in (1, 16, 17, 33, 130, 1100):
            x = rng.standard_normal((M, K)).astype(np.float32)
            for c in cs[:2]:
                y = np.empty((M, N), np.float32)
                c.forward(x, y, 0)
                out.append(y)
            out += _fused_outputs(rng, x, H, cs[2], cs[3])
        return out

    def same(got, want):
        for g, w in zip(got, want):
            if isa == "amx":
                np.testing.assert_array_equal(g, w)
            else:
                assert np.abs(g - w).max() <= 1e-6 * np.abs(w).max()

    want, got, state = _route_ab(monkeypatch, rng, "_ENV_GGUF_KQ", "1", "3", cores, run, "gguf_kq_tiles")
    same(got, want)
    monkeypatch.setattr(_config, "_ENV_GGUF_GROUP", "4")
    rng.bit_generator.state = state
    same(run(cores()), want)
    monkeypatch.setattr(_config, "_ENV_GGUF_KQ", "2")   # the default: the route on amx only
    assert all(c.gguf_kq_tiles == (isa == "amx") for c in cores())
    monkeypatch.setattr(_config, "_ENV_GGUF_KQ", "3")
    mixed = _kernels.linear_attach_gguf([parts[0], random_blocks("Q6_K", H, K, rng)], [q4, TYPES["Q6_K"][0]],
                                        2 * H, K, None, 0, isa, _kernels.ThreadPool(1))
    assert not mixed.gguf_kq_tiles


def test_attach_refuses_bad_input():
    pool = _kernels.ThreadPool(1)
    b = random_blocks("Q4_K", 2, 256, np.random.default_rng(8))
    with pytest.raises(ValueError):
        _kernels.linear_attach_gguf([b], [0], 2, 256, None, 0, "ref", pool)      # F32 is not quantised
    with pytest.raises(ValueError):
        _kernels.linear_attach_gguf([b], [12], 2, 512, None, 0, "ref", pool)     # wrong byte count
    with pytest.raises(ValueError):
        _kernels.linear_attach_gguf([b], [16], 2, 256, None, 0, "ref", pool)     # IQ2_XXS: not read
