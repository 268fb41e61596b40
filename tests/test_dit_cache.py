"""Converted-weight cache files (fp16/int8/int4) and zero-copy bf16 loading."""
import glob
import logging
import os
import shutil

import numpy as np
import pytest

import h3cy
from test_dit_parity import packed_inputs


def _folder(tiny_dit_factory, tmp_path):
    t = tiny_dit_factory("b")
    dst = tmp_path / "transformer"
    # without the caches other tests' loads of the shared folder may have left in it
    shutil.copytree(t.original, dst, ignore=shutil.ignore_patterns("*.h3w", "*.h3w.ok"))
    return t, str(dst)


def _caches(folder):
    return sorted(glob.glob(os.path.join(folder, "*.h3w")))


@pytest.mark.parametrize("weights", ["int8", "int4", "fp16"])
def test_cache_written_once_then_mapped(tiny_dit_factory, tmp_path, weights):
    t, folder = _folder(tiny_dit_factory, tmp_path)
    inputs = packed_inputs(t.config, seed=21)
    first = h3cy.DiT.from_pretrained(folder, weights=weights)
    assert first.linears_attached == 0
    assert len(_caches(folder)) == 1 and os.path.exists(_caches(folder)[0] + ".ok")
    want = first.forward(**inputs)
    second = h3cy.DiT.from_pretrained(folder, weights=weights)
    n_linears = 2 + 5 * 3 + 4 * 2   # context, norm_out + per block (qkv, out, up, down, adaln) + refiner
    assert second.linears_attached == n_linears
    for g, w in zip(second.forward(**inputs), want):
        np.testing.assert_array_equal(g, w)


def test_truncated_or_edited_cache_is_rebuilt(tiny_dit_factory, tmp_path, caplog):
    t, folder = _folder(tiny_dit_factory, tmp_path)
    inputs = packed_inputs(t.config, seed=22)
    want = h3cy.DiT.from_pretrained(folder, weights="int8").forward(**inputs)
    path = _caches(folder)[0]
    with open(path, "r+b") as f:           # truncate
        f.truncate(os.path.getsize(path) - 100)
    with caplog.at_level(logging.WARNING, logger="h3cy"):
        d = h3cy.DiT.from_pretrained(folder, weights="int8")
    assert d.linears_attached == 0 and "unusable" in caplog.text
    for g, w in zip(d.forward(**inputs), want):
        np.testing.assert_array_equal(g, w)
    assert h3cy.DiT.from_pretrained(folder, weights="int8").linears_attached > 0
    with open(path, "r+b") as f:           # edit one byte in place
        f.seek(10)
        b = f.read(1)
        f.seek(10)
        f.write(bytes([b[0] ^ 0xFF]))
    d = h3cy.DiT.from_pretrained(folder, weights="int8")
    assert d.linears_attached == 0
    for g, w in zip(d.forward(**inputs), want):
        np.testing.assert_array_equal(g, w)


def test_changed_source_makes_a_new_cache(tiny_dit_factory, tmp_path):
    t, folder = _folder(tiny_dit_factory, tmp_path)
    h3cy.DiT.from_pretrained(folder, weights="int8")
    shard = sorted(glob.glob(os.path.join(folder, "model-*.safetensors")))[0]
    st = os.stat(shard)
    os.utime(shard, ns=(st.st_atime_ns, st.st_mtime_ns + 10 ** 9))
    d = h3cy.DiT.from_pretrained(folder, weights="int8")
    assert d.linears_attached == 0 and len(_caches(folder)) == 2


def test_cache_dir_argument(tiny_dit_factory, tmp_path):
    t, folder = _folder(tiny_dit_factory, tmp_path)
    where = tmp_path / "elsewhere"
    h3cy.DiT.from_pretrained(folder, weights="int4", cache_dir=str(where))
    assert len(_caches(str(where))) == 1 and not _caches(folder)
    assert h3cy.DiT.from_pretrained(folder, weights="int4", cache_dir=str(where)).linears_attached > 0


def test_bf16_weights_are_mapped_from_the_checkpoint(tiny_dit_factory):
    t = tiny_dit_factory("b")
    before = _caches(t.original)     # other tests' int8 loads of this shared folder write caches
    d = h3cy.DiT.from_pretrained(t.original, weights="bf16")
    # every bf16 linear whose tensor is stored as the kernel reads it is attached in place
    assert d.linears_attached >= 5 * 3
    assert _caches(t.original) == before


@pytest.mark.parametrize("weights", ["bf16", "int8", "fp32"])
def test_streaming_gives_identical_results(tiny_dit_factory, tmp_path, weights):
    t, folder = _folder(tiny_dit_factory, tmp_path)
    inputs = packed_inputs(t.config, seed=23)
    want = h3cy.DiT.from_pretrained(folder, weights=weights).forward(**inputs)
    d = h3cy.DiT.from_pretrained(folder, weights=weights, streaming=True)
    assert d.streaming and all(b is None for b in d.blocks)
    for _ in range(2):   # the reader thread and page release survive repeated forwards
        for g, w in zip(d.forward(**inputs), want):
            np.testing.assert_array_equal(g, w)
    d.close()


def test_streaming_bounds_resident_memory(tmp_path):
    """A model of 8 blocks of ~5.8 MB bf16 each, in the release layout (all weights mapped
    from the checkpoint): streaming keeps the RSS growth of a forward to about two blocks,
    the resident model's grows by every block (run in fresh processes)."""
    import subprocess
    import sys
    from _tiny_dit import write_medium_streaming_model
    folder = str(tmp_path / "medium")   # the release layout: every bf16 weight maps zero-copy
    write_medium_streaming_model(folder)
    code = f"""
import resource, sys, numpy as np
sys.path.insert(0, {os.path.dirname(__file__)!r})
import h3cy
from test_dit_parity import packed_inputs
d = h3cy.DiT.from_pretrained({folder!r}, weights="bf16", streaming=sys.argv[1] == "1", threads=1)
inputs = packed_inputs(d.config, seed=1, L=4, Nv=8, Na=4)
d.prepare_timesteps(inputs["timestep"]); d.release_adaln()
import gc; gc.collect()
def rss():
    with open("/proc/self/status") as f:
        return [int(l.split()[1]) for l in f if l.startswith("VmRSS")][0] * 1024
r0 = rss(); d.forward(**inputs); print(rss() - r0)
"""
    growth = {}
    for s in ("0", "1"):
        out = subprocess.run([sys.executable, "-c", code, s], capture_output=True, text=True, timeout=300)
        assert out.returncode == 0, out.stderr[-2000:]
        growth[s] = int(out.stdout.split()[-1])
    block_bytes = 2 * (3 * 256 * 512 + 512 * 256 + 2 * 1536 * 512 + 512 * 1536)   # bf16
    # resident: the blocks' pages come in during the forward (all 8); streaming drops each
    # block's pages after use, so at most ~2 blocks remain counted
    assert growth["1"] <= 3 * block_bytes, growth
    assert growth["0"] >= 6 * block_bytes, growth
