"""weights="auto" chosen by measurement (#23): the stored per-CPU GEMM measurement of
``h3cy selfcheck``, the static rule without one, the memory, and the once-per-process note
about portable int8 kernels.

Each test writes its measurement files into its own cache folder (``_config._ENV_CACHE_DIR``
patched), so nothing here depends on what this machine has stored.
"""
import json
import os
import subprocess
import sys
import warnings

import pytest

import h3cy
from h3cy import _config
from h3cy.ops import _base, measurement
from h3cy.weights import auto

ISA = h3cy.ops.active_isa()
STATIC = measurement.static_choice(ISA)[0]
HERE = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.dirname(HERE)


@pytest.fixture
def cache(tmp_path, monkeypatch):
    """A fresh cache folder, no warnings said yet in this process."""
    monkeypatch.setattr(_config, "_ENV_CACHE_DIR", str(tmp_path))
    monkeypatch.setitem(measurement._state, "warned", set())
    monkeypatch.setattr(_base, "_warned", set())
    return tmp_path


def write_measurement(seconds, **override):
    """A measurement file for this CPU and path, as selfcheck writes it (``override``
    replaces key fields: another CPU, version, ...)."""
    rec = dict(measurement.measurement_key(ISA))
    rec.update(threads=2, rows=256, shapes={"qkv": [7168, 5376]}, fastest=min(seconds, key=seconds.get),
               seconds=dict(seconds), gop_s={m: 1.0 / s for m, s in seconds.items()}, measured_at="now")
    rec.update(override)
    path = measurement.measurement_path(ISA)
    os.makedirs(os.path.dirname(path), exist_ok=True)
    with open(path, "w") as f:
        json.dump(rec, f)
    return path


INT8_FASTER = {"fp32": 3.0, "bf16": 2.0, "int8": 1.0, "int4": 0.9}
BF16_FASTER = {"fp32": 3.0, "bf16": 1.0, "int8": 2.0, "int4": 1.5}


def room_for(path, component, fitting):
    """Bytes of memory in which exactly the modes of ``fitting`` fit (80% rule)."""
    need = auto.component_need(component, path)
    fits = [need[m] for m in ("bf16", "int8", "int4") if m in fitting]
    misses = [need[m] for m in ("bf16", "int8", "int4") if m not in fitting]
    lo = max(fits) / measurement.FIT_FRACTION if fits else 0
    hi = min(misses) / measurement.FIT_FRACTION if misses else lo * 2
    assert lo < hi, need
    return int((lo + hi) / 2)


@pytest.mark.parametrize("seconds, fitting, want", [
    (INT8_FASTER, ("bf16", "int8", "int4"), "int8"),
    (BF16_FASTER, ("bf16", "int8", "int4"), "bf16"),
    (BF16_FASTER, ("int8", "int4"), "int8"),          # the faster one does not fit
    (INT8_FASTER, ("int4",), "int4"),                 # nothing else fits
    (BF16_FASTER, ("int4",), "int4"),
], ids=["int8-faster", "bf16-faster", "bf16-faster-but-too-big", "only-int4-fits", "only-int4-fits-bf16"])
def test_auto_picks_what_the_stored_measurement_says(cache, comfy_files, monkeypatch, seconds, fitting, want):
    write_measurement(seconds)
    for component, key, cls in (("transformer", "dit", h3cy.DiT), ("text_encoder", "text_encoder", h3cy.TextEncoder)):
        path = comfy_files[key]
        monkeypatch.setattr(auto, "available_memory", lambda p=path, c=component: room_for(p, c, fitting))
        with warnings.catch_warnings():
            warnings.simplefilter("error", RuntimeWarning)      # a usable file: no warning about it
            choice = auto.auto_choice(component, path, ISA)
        assert (choice.mode, choice.source) == (want, "measured"), choice
        model = cls.from_pretrained(path)
        try:
            assert model.weights == want
        finally:
            getattr(model, "close", lambda: None)()


def test_pipeline_and_streaming_follow_the_measurement(cache, comfy_files, monkeypatch):
    write_measurement(BF16_FASTER)
    files = {k: comfy_files[k] for k in ("dit", "text_encoder", "video_vae", "audio_vae")}
    pipe = h3cy.load(**files)
    assert pipe.component_weights == {"text_encoder": "bf16", "transformer": "bf16"} and pipe.weights == "bf16"
    assert pipe.vae_weights == "fp32"                  # the decoders' "auto" is not measured
    # too little memory for bf16 and int8: int4 resident, unless the load streams anyway
    monkeypatch.setattr(auto, "available_memory", lambda: room_for(files["dit"], "transformer", ("int4",)))
    assert h3cy.load(**files, streaming="auto").component_weights["transformer"] == "int4"
    assert h3cy.load(**files, streaming=True).component_weights["transformer"] == "bf16"
    # an explicit mode is never replaced
    assert h3cy.load(**files, weights="int8").component_weights == {"text_encoder": "int8", "transformer": "int8"}


def test_stored_quantised_tensors_run_as_stored(cache, tiny_dit_factory, tmp_path):
    """An int8-convrot file runs int8 whatever the measurement says (bf16 would dequantise
    it); the same model stored float follows the measurement."""
    import _comfy_files as cf
    write_measurement(BF16_FASTER)
    sd = cf.dit_state(tiny_dit_factory("p"))
    path = cf.save(sd, tmp_path / "float.safetensors", cf.COMFY_PREFIX)
    layer = next(k[:-len(".weight")] for k in sd if k.startswith("blocks.0.") and k.endswith(".weight")
                 and sd[k].ndim == 2 and sd[k].shape[1] % 16 == 0)
    qpath = cf.save(cf.put_int8(dict(sd), layer, 16), tmp_path / "int8_convrot.safetensors", cf.COMFY_PREFIX)
    assert auto.auto_choice("transformer", path, ISA).mode == "bf16"
    choice = auto.auto_choice("transformer", qpath, ISA)
    assert (choice.mode, choice.source) == ("int8", "stored")
    dit = h3cy.DiT.from_pretrained(qpath)
    assert dit.weights == "int8"


BAD_FILES = {
    "bad-json": lambda: open(write_measurement(BF16_FASTER), "w").write('{"format": 1, "seconds": {"bf16": '),
    "not-an-object": lambda: open(write_measurement(BF16_FASTER), "w").write("[1, 2, 3]"),
    "missing-key": lambda: _rewrite(lambda r: r.pop("cpu")),
    "no-seconds": lambda: _rewrite(lambda r: r.pop("seconds")),
    "seconds-not-numbers": lambda: _rewrite(lambda r: r["seconds"].update(bf16="fast")),
    "negative-seconds": lambda: _rewrite(lambda r: r["seconds"].update(bf16=-1.0)),
    "other-cpu": lambda: write_measurement(BF16_FASTER, cpu="Some Other CPU 9000"),
    "other-isa": lambda: write_measurement(BF16_FASTER, isa="amx" if ISA != "amx" else "avx2"),
    "other-version": lambda: write_measurement(BF16_FASTER, h3cy="0.0.1"),
    "other-kernels": lambda: write_measurement(BF16_FASTER, kernels="0000000000000000"),
    "other-format": lambda: write_measurement(BF16_FASTER, format=measurement.FORMAT_VERSION + 1),
    "binary": lambda: open(write_measurement(BF16_FASTER), "wb").write(b"\xff\xfe\x00garbage"),
}


def _rewrite(edit):
    path = write_measurement(BF16_FASTER)
    with open(path) as f:
        rec = json.load(f)
    edit(rec)
    with open(path, "w") as f:
        json.dump(rec, f)


def test_missing_measurement_falls_back_to_the_static_rule_silently(cache, comfy_files):
    assert not os.path.exists(measurement.measurement_path(ISA))
    with warnings.catch_warnings():
        warnings.simplefilter("error", RuntimeWarning)
        assert measurement.load_measurement(ISA) is None
        choice = auto.auto_choice("transformer", comfy_files["dit"], ISA)
    assert (choice.mode, choice.source) == (STATIC, "static")
    assert f"static rule for {ISA}" in choice.reason


@pytest.mark.parametrize("bad", list(BAD_FILES))
def test_corrupt_or_foreign_measurement_falls_back_with_one_warning(cache, comfy_files, bad):
    # each file would say bf16 if it were used; the static rule says int8 on every path
    assert STATIC == "int8"
    BAD_FILES[bad]()
    with warnings.catch_warnings(record=True) as w:
        warnings.simplefilter("always")
        assert measurement.load_measurement(ISA) is None
        choices = [auto.auto_choice("transformer", comfy_files["dit"], ISA) for _ in range(3)]
        dit = h3cy.DiT.from_pretrained(comfy_files["dit"])
    assert [(c.mode, c.source) for c in choices] == [("int8", "static")] * 3
    assert dit.weights == "int8"
    said = [str(x.message) for x in w if "stored GEMM measurement" in str(x.message)]
    assert len(said) == 1 and measurement.measurement_path(ISA) in said[0], said


def test_static_rule_names_every_isa_path():
    for name in h3cy._kernels.ISA_NAMES:
        mode, why = measurement.static_choice(name)
        assert name in measurement.STATIC_RULE and mode in ("bf16", "int8") and why


def test_selfcheck_function_stores_what_load_reads(cache):
    rec = h3cy.selfcheck(shapes={"a": (64, 96), "b": (48, 128, 64)}, rows=24, runs=1, threads=1)
    assert rec["path"] == measurement.measurement_path(ISA) and os.path.isfile(rec["path"])
    got = measurement.load_measurement(ISA)
    assert got is not None and got["seconds"] == rec["seconds"] and got["isa"] == ISA
    assert set(got["seconds"]) == {"fp32", "bf16", "int8", "int4"} and all(s > 0 for s in got["seconds"].values())
    assert got["fastest"] == min(("bf16", "int8"), key=got["seconds"].get)
    assert measurement.choose_weights(ISA).mode == got["fastest"]
    assert h3cy.selfcheck(shapes={"a": (64, 96)}, rows=8, runs=1, save=False).get("path") is None
    with pytest.raises(h3cy.H3Error, match="rows"):
        h3cy.selfcheck(shapes={"a": (64, 96)}, rows=0, save=False)


def _cli(*args, cache_dir):
    env = dict(os.environ, H3CY_CACHE_DIR=str(cache_dir), PYTHONPATH=ROOT + os.pathsep + os.environ.get("PYTHONPATH", ""))
    return subprocess.run([sys.executable, "-m", "h3cy", *args], capture_output=True, text=True, env=env,
                          timeout=300, cwd=ROOT)


def test_selfcheck_cli_writes_a_measurement_that_info_reports(tmp_path):
    before = _cli("info", cache_dir=tmp_path)
    assert before.returncode == 0, before.stderr
    assert "none stored" in before.stdout and f"static rule for {ISA}" in before.stdout
    r = _cli("selfcheck", "--size", "32,48,40", "--shapes", "64x96,48x80", "--rows", "16", "--threads", "1",
             cache_dir=tmp_path)
    assert r.returncode == 0, r.stdout + r.stderr
    assert "selfcheck: ok" in r.stdout and "[2/2]" in r.stdout         # progress per shape
    files = os.listdir(tmp_path / "selfcheck")
    assert len(files) == 1 and files[0].startswith(f"gemm-{ISA}-") and files[0].endswith(".json")
    path = str(tmp_path / "selfcheck" / files[0])
    assert f"stored: {path}" in r.stdout
    with open(path) as f:
        rec = json.load(f)
    assert rec["isa"] == ISA and rec["cpu"] == measurement.cpu_model() and rec["rows"] == 16
    assert rec["shapes"] == {"shape0": [64, 96], "shape1": [48, 80]}
    after = _cli("info", cache_dir=tmp_path)
    assert after.returncode == 0, after.stderr
    assert f"measured  : {path}" in after.stdout
    assert f"auto      : {rec['fastest']} for float checkpoints" in after.stdout
    # --no-save times without storing
    other = tmp_path / "other"
    r = _cli("selfcheck", "--size", "32,48,40", "--shapes", "64x96", "--rows", "8", "--threads", "1", "--no-save",
             cache_dir=other)
    assert r.returncode == 0 and "selfcheck: ok" in r.stdout and not (other / "selfcheck").exists()


def test_info_on_a_model_says_what_auto_runs(cache, comfy_files):
    r = _cli("info", comfy_files["dit"], cache_dir=cache)
    assert r.returncode == 0, r.stderr
    assert f"weights='auto' runs this file {STATIC} (static rule for {ISA}" in r.stdout
    write_measurement(BF16_FASTER)
    r = _cli("info", comfy_files["dit"], cache_dir=cache)
    assert "weights='auto' runs this file bf16 (measured on this CPU" in r.stdout, r.stdout


# ---------------------------------------------------------------------------------------------
# the note about portable int8 kernels: facts about this CPU, once per process
# ---------------------------------------------------------------------------------------------
def _notes(calls):
    with warnings.catch_warnings(record=True) as w:
        warnings.simplefilter("always")
        for weights, isa in calls:
            _base._warn_if_portable(weights, isa)
    return [str(x.message) for x in w if "weights run" in str(x.message)]


def test_portable_note_once_per_process_and_states_the_static_choice(cache):
    calls = [("int8", "avx2"), ("int8", "avx2"), ("int4", "avx2"), ("int8", "avx512"), ("bf16", "avx2")]
    msgs = _notes(calls)
    assert len(msgs) == 1
    assert "AVX2 path without VNNI" in msgs[0] and measurement.cpu_model() in msgs[0]
    assert "static rule for avx2" in msgs[0] and "bf16 may be faster" not in msgs[0]
    assert "faster" not in msgs[0].split(";", 2)[-1]        # no claim that another mode is faster
    assert _notes(calls) == []                              # said already in this process


def test_portable_note_calls_bf16_faster_only_when_measured(cache, monkeypatch):
    monkeypatch.setattr(measurement, "measurement_path", lambda isa, root=None: str(cache / f"m-{isa}.json"))
    monkeypatch.setattr(measurement, "measurement_key", lambda isa: {"format": 1, "isa": isa})

    def store(seconds):
        with open(cache / "m-avx2.json", "w") as f:
            json.dump({"format": 1, "isa": "avx2", "seconds": seconds}, f)
        _base._warned.clear()
    store(INT8_FASTER)
    assert _notes([("int8", "avx2")]) == []                 # measured: int8 is the faster, nothing to warn
    store(BF16_FASTER)
    msgs = _notes([("int8", "avx2"), ("int8", "avx2")])
    assert len(msgs) == 1 and "bf16 2.00x faster than int8" in msgs[0]


def test_portable_note_once_in_a_process_loading_several_components(comfy_files, tmp_path):
    """A fresh process on the AVX2 path loads the transformer and the text encoder in int8
    (dozens of linears): one note."""
    if not h3cy.ops.isa_supported("avx2"):
        pytest.skip("ISA path 'avx2' not available on this CPU")
    code = ("import warnings, h3cy; warnings.simplefilter('always');\n"
            "with warnings.catch_warnings(record=True) as w:\n"
            "    warnings.simplefilter('always')\n"
            f"    h3cy.DiT.from_pretrained({comfy_files['dit']!r}, weights='int8', isa='avx2')\n"
            f"    h3cy.TextEncoder.from_pretrained({comfy_files['text_encoder']!r}, weights='int8', isa='avx2')\n"
            f"    h3cy.DiT.from_pretrained({comfy_files['dit']!r}, weights='int4', isa='avx2')\n"
            "print(sum('weights run' in str(x.message) for x in w))")
    env = dict(os.environ, H3CY_CACHE_DIR=str(tmp_path), PYTHONPATH=ROOT + os.pathsep + os.environ.get("PYTHONPATH", ""))
    r = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, env=env, timeout=300)
    assert r.returncode == 0, r.stderr
    assert r.stdout.strip() == "1"
