"""Fuzz h3cy.weights.safetensors with hypothesis: mutated headers, offsets, sizes and lengths of a small valid
file must give either correct arrays or CheckpointError — never another exception, a hang or a crash.

Examples per strategy: H3CY_FUZZ_EXAMPLES (default 2000: about 15-20 s for the three strategies on a
shared 2-core CI box).  A long run: ``H3CY_FUZZ_EXAMPLES=35000 pytest tests/test_safetensors_fuzz.py -s``
(3 strategies x 35 000 > 100 000 cases); each test prints the number of cases it ran.
"""
import json
import os
import signal
import struct

import numpy as np
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from h3cy.errors import CheckpointError
from h3cy.weights.safetensors import SafetensorsFile

N_EXAMPLES = int(os.environ.get("H3CY_FUZZ_EXAMPLES", "2000"))
PER_CASE_TIMEOUT_S = 20  # a case that takes this long is a hang

SETTINGS = settings(max_examples=N_EXAMPLES, deadline=None, database=None, print_blob=True,
                    suppress_health_check=list(HealthCheck))


def _valid_file():
    """Header JSON (dict) and data bytes: several dtypes, an odd-offset BF16, a zero-size tensor."""
    rng = np.random.default_rng(0)
    parts = [
        ("u8", "U8", [3], rng.integers(0, 256, 3, dtype=np.uint8).tobytes()),
        ("bf16", "BF16", [2, 2], rng.integers(0, 2**16, 4, dtype=np.uint16).tobytes()),   # offset 3
        ("empty", "F16", [0, 5], b""),
        ("f32", "F32", [2, 3], rng.standard_normal(6).astype(np.float32).tobytes()),
        ("i64", "I64", [2], np.array([-1, 2**40], dtype=np.int64).tobytes()),
        ("b", "BOOL", [1, 1, 1], b"\x01"),
    ]
    header, data = {"__metadata__": {"format": "pt"}}, b""
    for name, dt, shape, buf in parts:
        header[name] = {"dtype": dt, "shape": shape, "data_offsets": [len(data), len(data) + len(buf)]}
        data += buf
    return header, data


BASE_HEADER, BASE_DATA = _valid_file()


def _encode(header, data, pad=True):
    hb = json.dumps(header).encode()
    if pad:
        hb += b" " * (-(8 + len(hb)) % 8)
    return struct.pack("<Q", len(hb)) + hb + data


BASE = _encode(BASE_HEADER, BASE_DATA)
COUNT = {}


class _Hang(Exception):
    pass


def _alarm(signum, frame):
    raise _Hang(f"a fuzz case ran for more than {PER_CASE_TIMEOUT_S} s")


def check_file(path, blob):
    """Open and read every tensor; only CheckpointError may escape.  On success the arrays must hold
    exactly the bytes their header points at."""
    old = signal.signal(signal.SIGALRM, _alarm)
    signal.alarm(PER_CASE_TIMEOUT_S)
    try:
        with open(path, "wb") as f:
            f.write(blob)
        try:
            f = SafetensorsFile(path)
        except CheckpointError as e:
            assert str(e).startswith(path), str(e)
            return
        with f:
            for name in f.keys():
                info = f.info(name)
                arr = f.get(name)
                assert arr.shape == info.shape and arr.nbytes == info.nbytes
                assert arr.tobytes() == blob[info.offset:info.offset + info.nbytes], name
    finally:
        signal.alarm(0)
        signal.signal(signal.SIGALRM, old)


@pytest.fixture(scope="module")
def fuzz_path(tmp_path_factory):
    return str(tmp_path_factory.mktemp("fuzz") / "f.safetensors")


def test_base_file_is_valid(fuzz_path):
    check_file(fuzz_path, BASE)
    with SafetensorsFile(fuzz_path) as f:
        assert len(f) == 6 and f.info("bf16").offset % 2 == 1


# -- strategy 1: raw byte edits anywhere (length prefix, header, data), truncation, appended bytes ---
@SETTINGS
@given(edits=st.lists(st.tuples(st.integers(0, len(BASE) - 1), st.integers(0, 255)), max_size=8),
       cut=st.one_of(st.none(), st.integers(0, len(BASE))),
       tail=st.binary(max_size=16))
def test_fuzz_bytes(fuzz_path, edits, cut, tail):
    blob = bytearray(BASE)
    for pos, val in edits:
        blob[pos] = val
    if cut is not None:
        blob = blob[:cut]
    check_file(fuzz_path, bytes(blob) + tail)
    COUNT["bytes"] = COUNT.get("bytes", 0) + 1


# -- strategy 2: structural JSON edits of one entry's dtype / shape / offsets ------------------------
_json_scalar = st.one_of(
    st.none(), st.booleans(), st.integers(-2**70, 2**70), st.integers(-4, 64),
    st.floats(allow_nan=False, allow_infinity=False), st.text(max_size=6),
    st.sampled_from(["F32", "BF16", "F16", "U8", "I64", "BOOL", "F8_E4M3", "F4", "bf16", ""]))
_json_value = st.recursive(_json_scalar, lambda c: st.one_of(st.lists(c, max_size=4),
                                                             st.dictionaries(st.text(max_size=4), c, max_size=3)),
                           max_leaves=8)
_shape = st.lists(st.integers(-2, 2**40), max_size=4)
_offsets = st.lists(st.one_of(st.integers(-8, 80), st.integers(-2**64, 2**64)), min_size=0, max_size=3)


@SETTINGS
@given(name=st.sampled_from([k for k in BASE_HEADER if k != "__metadata__"] + ["__metadata__", "new"]),
       field=st.sampled_from(["dtype", "shape", "data_offsets", "extra", "drop", "whole"]),
       value=st.one_of(_json_value, _shape, _offsets),
       length_delta=st.one_of(st.just(0), st.integers(-16, 16), st.integers(-2**63, 2**64 - 1)),
       pad=st.booleans())
def test_fuzz_header_fields(fuzz_path, name, field, value, length_delta, pad):
    header = json.loads(json.dumps(BASE_HEADER))
    entry = header.setdefault(name, {"dtype": "U8", "shape": [1], "data_offsets": [0, 1]})
    if field == "drop":
        header.pop(name)
    elif field == "whole":
        header[name] = value
    elif isinstance(entry, dict):
        entry[field] = value
    blob = bytearray(_encode(header, BASE_DATA, pad))
    if length_delta:
        (n,) = struct.unpack("<Q", blob[:8])
        blob[:8] = struct.pack("<Q", (n + length_delta) % 2**64)
    check_file(fuzz_path, bytes(blob))
    COUNT["fields"] = COUNT.get("fields", 0) + 1


# -- strategy 3: consistent-looking headers with random dtypes, shapes and offsets over random data --
@SETTINGS
@given(entries=st.lists(st.tuples(st.sampled_from(["F64", "F32", "F16", "BF16", "I8", "U16", "BOOL", "F8_E5M2"]),
                                  st.lists(st.integers(0, 5), max_size=3),
                                  st.integers(-3, 3)), max_size=6),
       data_len=st.integers(0, 300), gap=st.integers(0, 3))
def test_fuzz_offsets(fuzz_path, entries, data_len, gap):
    header, off = {}, 0
    itemsize = {"F64": 8, "F32": 4, "F16": 2, "BF16": 2, "I8": 1, "U16": 2, "BOOL": 1, "F8_E5M2": 1}
    for i, (dt, shape, skew) in enumerate(entries):
        size = int(np.prod(shape, dtype=np.int64)) * itemsize[dt]
        header[f"t{i}"] = {"dtype": dt, "shape": shape, "data_offsets": [off, off + size + skew]}
        off += size + gap - (skew < 0) * 2        # sometimes overlap, sometimes leave a gap
    data = bytes(range(256)) * (data_len // 256 + 1)
    check_file(fuzz_path, _encode(header, data[:data_len], pad=gap % 2 == 0))
    COUNT["offsets"] = COUNT.get("offsets", 0) + 1


def test_report_counts():
    """Prints how many cases each strategy ran (visible with -s); at least one each."""
    print(f"\nfuzz cases: {COUNT} total {sum(COUNT.values())} (H3CY_FUZZ_EXAMPLES={N_EXAMPLES})")
    assert set(COUNT) == {"bytes", "fields", "offsets"} or not COUNT


# -- strategy 4: a valid single-file transformer (Comfy-Org's layout) with its header edited so
# that every tensor stays readable -- renamed or dropped keys, shapes reshaped to the same
# element count, dtypes swapped for others of the same width -- through detection, the
# configuration inferred from the shapes and the checkpoint's validation: a CheckpointError
# or a checkpoint, never another exception
SAME_WIDTH = {"F32": ["I32", "U32", "F32"], "BF16": ["F16", "I16", "BF16"], "F16": ["BF16", "U16"],
              "I8": ["U8"], "U8": ["I8"]}


@pytest.fixture(scope="module")
def comfy_dit_blob(tiny_dit_factory):
    import _comfy_files
    from safetensors.torch import save
    t = tiny_dit_factory("a")
    sd = _comfy_files.dit_state(t)
    blob = save({k: v.contiguous() for k, v in sd.items()})
    (n,) = struct.unpack("<Q", blob[:8])
    header = json.loads(blob[8:8 + n])
    return header, blob[8 + n:]


@settings(max_examples=max(50, N_EXAMPLES // 10), deadline=None, database=None, print_blob=True,
          suppress_health_check=list(HealthCheck))
@given(data=st.data())
def test_fuzz_single_file_transformer(fuzz_path, comfy_dit_blob, data):
    from h3cy.weights.single_file import detect
    from h3cy.weights.transformer import open_transformer
    header, body = comfy_dit_blob
    header = json.loads(json.dumps(header))
    names = sorted(k for k in header if k != "__metadata__")
    for _ in range(data.draw(st.integers(1, 4))):
        name = data.draw(st.sampled_from(names))
        if name not in header:
            continue
        kind = data.draw(st.sampled_from(["drop", "rename", "reshape", "dtype", "prefix"]))
        e = header[name]
        if kind == "drop":
            del header[name]
        elif kind == "rename":
            header[name + data.draw(st.sampled_from(["x", ".weight", "_"]))] = header.pop(name)
        elif kind == "prefix":
            header["model.diffusion_model." + name] = header.pop(name)
        elif kind == "reshape":
            n = int(np.prod(e["shape"]))
            e["shape"] = data.draw(st.sampled_from([[n], [1, n], [n, 1], list(reversed(e["shape"]))]))
        else:
            e["dtype"] = data.draw(st.sampled_from(SAME_WIDTH.get(e["dtype"], [e["dtype"]])))
    old = signal.signal(signal.SIGALRM, _alarm)
    signal.alarm(PER_CASE_TIMEOUT_S)
    try:
        with open(fuzz_path, "wb") as f:
            f.write(_encode(header, body))
        try:
            detect(fuzz_path)
            open_transformer(fuzz_path).close()
        except CheckpointError as e:
            assert fuzz_path in str(e), str(e)
    finally:
        signal.alarm(0)
        signal.signal(signal.SIGALRM, old)
    COUNT["single_file"] = COUNT.get("single_file", 0) + 1


# -- strategy 5: a tiny transformer whose linears are Comfy int8 ("convrot" or not), with the
# comfy_quant blobs and the scales edited: arbitrary bytes and JSON, wrong formats, groups,
# scale shapes and dtypes -- a CheckpointError naming the tensor or a model that runs, never
# another exception
QUANT_LAYERS = ("blocks.0.attn.qkv_proj", "blocks.0.mlp.fc2")
JSON_BLOBS = st.one_of(
    st.binary(max_size=40),
    st.sampled_from([b"", b"{}", b"[]", b"null", b"\xff\xfe", b'{"format": 3}', b'{"format": ""}',
                     b'{"format": "int8_tensorwise", "convrot": "yes"}',
                     b'{"format": "int8_tensorwise", "convrot": true, "convrot_groupsize": 16.0}',
                     b'{"format": "int8_tensorwise", "params": {"convrot": true}}',
                     b'{"format": "int8_tensorwise", "params": 7}', b'{"format": "nvfp4"}',
                     b'{"format": "float8_e4m3fn"}', b'{"format": "int8_tensorwise", "convrot": true, '
                     b'"convrot_groupsize": 1e400}', b'[' * 5000]),
    st.builds(lambda fmt, conv, g: json.dumps({"format": fmt, "convrot": conv, "convrot_groupsize": g}).encode(),
              st.sampled_from(["int8_tensorwise", "nvfp4", "mxfp8", "int8"]), st.booleans(),
              st.sampled_from([0, 1, 2, 4, 8, 16, 64, 256, -16, 2**40])))


@pytest.fixture(scope="module")
def comfy_int8_state(tiny_dit_factory):
    import _comfy_files
    sd = {k: v.float() for k, v in _comfy_files.dit_state(tiny_dit_factory("a")).items()}
    for layer in QUANT_LAYERS:
        _comfy_files.put_int8(sd, layer, 16)
    return sd


@settings(max_examples=max(30, N_EXAMPLES // 40), deadline=None, database=None, print_blob=True,
          suppress_health_check=list(HealthCheck))
@given(data=st.data())
def test_fuzz_quantised_layers(fuzz_path, comfy_int8_state, data):
    import torch
    import h3cy
    from safetensors.torch import save_file
    sd = dict(comfy_int8_state)
    for _ in range(data.draw(st.integers(1, 3))):
        layer = data.draw(st.sampled_from(QUANT_LAYERS))
        kind = data.draw(st.sampled_from(["blob", "scale_shape", "scale_dtype", "weight", "drop"]))
        if kind == "blob":
            sd[layer + ".comfy_quant"] = torch.tensor(list(data.draw(JSON_BLOBS)), dtype=torch.uint8)
        elif kind == "scale_shape":
            n = comfy_int8_state[layer + ".weight"].shape[0]
            shape = data.draw(st.sampled_from([(), (1,), (n,), (n, 1), (1, n), (n - 1, 1), (n, 2), (0,)]))
            sd[layer + ".weight_scale"] = torch.rand(shape) + data.draw(st.sampled_from([0.0, float("inf")]))
        elif kind == "scale_dtype":
            sd[layer + ".weight_scale"] = comfy_int8_state[layer + ".weight_scale"].to(
                data.draw(st.sampled_from([torch.bfloat16, torch.float16, torch.int32, torch.uint8])))
        elif kind == "weight":
            w = comfy_int8_state[layer + ".weight"]
            sd[layer + ".weight"] = data.draw(st.sampled_from(
                [w.to(torch.uint8), w.float(), w[:-1].contiguous(), w.reshape(-1).contiguous()]))
        else:
            sd.pop(layer + data.draw(st.sampled_from([".weight", ".weight_scale", ".comfy_quant"])), None)
    old = signal.signal(signal.SIGALRM, _alarm)
    signal.alarm(PER_CASE_TIMEOUT_S)
    try:
        save_file({k: v.contiguous() for k, v in sd.items()}, fuzz_path)
        try:
            h3cy.DiT.from_pretrained(fuzz_path, weights=data.draw(st.sampled_from(["int8", "fp32"])), threads=1)
        except CheckpointError as e:
            assert fuzz_path in str(e), str(e)
    finally:
        signal.alarm(0)
        signal.signal(signal.SIGALRM, old)
    COUNT["quantised"] = COUNT.get("quantised", 0) + 1


# -- strategy 6: one NVFP4 layer (Comfy's nvfp4 tensors, AWQ or not) with its codes, block
# scales, per-tensor scale, pre-scale and blob edited -- read and run as stored in the int8
# mode: a CheckpointError naming the file or a linear that runs (finite output for finite
# tensors), never another exception or a crash
NV_N, NV_K = 20, 64


@pytest.fixture(scope="module")
def comfy_nvfp4_state():
    import torch
    import _comfy_files
    g = torch.Generator().manual_seed(4)
    sd = {"l.weight": torch.randn((NV_N, NV_K), generator=g)}
    _comfy_files.put_nvfp4(sd, "l", 0.5 + torch.rand(NV_K, generator=g))
    return sd


@settings(max_examples=max(30, N_EXAMPLES // 40), deadline=None, database=None, print_blob=True,
          suppress_health_check=list(HealthCheck))
@given(data=st.data())
def test_fuzz_nvfp4_layer(fuzz_path, comfy_nvfp4_state, data):
    import torch
    from safetensors.torch import save_file
    from h3cy.ops import Compute
    from h3cy.weights.comfy_quant import read_quant
    from h3cy.weights.files import TensorFiles
    from h3cy.weights.linears import make_linear
    sd = dict(comfy_nvfp4_state)
    base = comfy_nvfp4_state
    for _ in range(data.draw(st.integers(1, 3))):
        kind = data.draw(st.sampled_from(["blob", "codes", "scales", "scale_bytes", "scale_2", "pre", "drop"]))
        if kind == "blob":
            sd["l.comfy_quant"] = torch.tensor(list(data.draw(JSON_BLOBS)), dtype=torch.uint8)
        elif kind == "codes":
            w = base["l.weight"]
            sd["l.weight"] = data.draw(st.sampled_from(
                [w[:, :-1].contiguous(), w[:-1].contiguous(), w.view(torch.int8), w.reshape(-1).contiguous(),
                 torch.randint(0, 256, w.shape, dtype=torch.uint8)]))
        elif kind == "scales":
            s = base["l.weight_scale"]
            sd["l.weight_scale"] = data.draw(st.sampled_from(
                [s[:64].contiguous(), s[:, :2].contiguous(), s.view(torch.uint8), s.float(), s.reshape(-1).contiguous()]))
        elif kind == "scale_bytes":
            s = base["l.weight_scale"].view(torch.uint8).clone()
            s.view(-1)[data.draw(st.integers(0, s.numel() - 1))] = data.draw(st.sampled_from([0x7F, 0xFF, 0x7E, 0x80]))
            sd["l.weight_scale"] = s.view(torch.float8_e4m3fn)
        elif kind == "scale_2":
            sd["l.weight_scale_2"] = data.draw(st.sampled_from(
                [torch.tensor(float("nan")), torch.tensor([1.0, 2.0]), torch.tensor(3, dtype=torch.int32),
                 torch.tensor(float("inf")), torch.tensor(0.0), torch.tensor(-1e-3)]))
        elif kind == "pre":
            sd["l.pre_quant_scale"] = data.draw(st.sampled_from(
                [torch.ones(NV_K - 1), torch.ones(2, NV_K), torch.full((NV_K,), float("inf")),
                 torch.ones(NV_K, dtype=torch.int32), torch.zeros(NV_K, dtype=torch.bfloat16)]))
        else:
            sd.pop("l" + data.draw(st.sampled_from([".weight", ".weight_scale", ".weight_scale_2",
                                                     ".pre_quant_scale", ".comfy_quant"])), None)
    old = signal.signal(signal.SIGALRM, _alarm)
    signal.alarm(PER_CASE_TIMEOUT_S)
    try:
        save_file({k: v.contiguous() for k, v in sd.items()}, fuzz_path)
        files = TensorFiles([fuzz_path], float_dtypes=("F32", "BF16", "F16"))
        try:
            w = read_quant(files, "l", (NV_N, NV_K))
            lin, _ = make_linear(w, Compute.resolve("int8", threads=1))
            y = lin(np.ones((3, NV_K), np.float32))
            assert y.shape == (3, NV_N) and np.all(np.isfinite(y))
        except CheckpointError as e:
            assert fuzz_path in str(e), str(e)
        finally:
            files.close()
    finally:
        signal.alarm(0)
        signal.signal(signal.SIGALRM, old)
    COUNT["nvfp4"] = COUNT.get("nvfp4", 0) + 1
