"""Shared fixtures.  Kernel tests parametrise over every ISA path this host can run;
a path the host lacks is skipped with its name (the one accepted reason to skip)."""
import atexit
import os
import shutil
import tempfile

import numpy as np
import pytest

# weight caches of single-file checkpoints (and of read-only folders) go to h3cy's cache
# folder: the tests' go to a temporary one, never to the user's ~/.cache/h3cy
if "H3CY_CACHE_DIR" not in os.environ:
    os.environ["H3CY_CACHE_DIR"] = tempfile.mkdtemp(prefix="h3cy-test-cache-")
    atexit.register(shutil.rmtree, os.environ["H3CY_CACHE_DIR"], ignore_errors=True)

import h3cy  # noqa: E402  (reads H3CY_CACHE_DIR at import)
from h3cy import _kernels  # noqa: E402

ALL_ISAS = list(_kernels.ISA_NAMES)
HOST_ISAS = h3cy.ops.available_isas()
IN_CI = os.environ.get("CI") == "true"


def missing_tool(reason):
    """An optional toolchain is absent: a failure under CI=true (CI installs it), a skip
    naming the Debian package elsewhere."""
    if IN_CI:
        pytest.fail(f"CI=true but {reason}")
    pytest.skip(reason)


def isa_params(include_ref=True):
    """pytest params for every ISA name; unsupported ones are skipped with a reason."""
    out = []
    for name in ALL_ISAS:
        if name == "ref" and not include_ref:
            continue
        marks = []
        if name not in HOST_ISAS:
            marks.append(pytest.mark.skip(reason=f"ISA path '{name}' not available on this CPU"))
        out.append(pytest.param(name, marks=marks, id=name))
    return out


# ---- the tiny random reference models, built once per session (tests/_tiny_*.py) -------------
@pytest.fixture(scope="session")
def tiny_dit_factory(tmp_path_factory):
    """``get(name) -> TinyDit`` for a TINY_CONFIGS name; each config is built once per session."""
    import _tiny_dit
    cache = {}

    def get(name):
        if name not in cache:
            cache[name] = _tiny_dit.build(name, str(tmp_path_factory.mktemp(f"tiny_dit_{name}")))
        return cache[name]
    return get


@pytest.fixture(scope="session")
def tiny_vae(tmp_path_factory):
    """The tiny video VAE in both layouts (TinyVae)."""
    import _tiny_vae
    return _tiny_vae.build(str(tmp_path_factory.mktemp("tiny_vae")))


@pytest.fixture(scope="session")
def tiny_te(tmp_path_factory):
    """The 51-layer tiny Qwen3-VL text encoder folder (bf16, with the released tokenizer)."""
    import _tiny_text_encoder
    return _tiny_text_encoder.build(str(tmp_path_factory.mktemp("tiny_text_encoder")))


@pytest.fixture(scope="session")
def tiny_pipeline(tiny_dit_factory, tmp_path_factory):
    """A whole tiny MiniMax-H3 in both folder layouts (TinyPipeline)."""
    import _tiny_pipeline
    return _tiny_pipeline.build(tiny_dit_factory("p"), str(tmp_path_factory.mktemp("tiny_pipeline")))


@pytest.fixture
def rng():
    return np.random.default_rng(1234)


@pytest.fixture(scope="session")
def vae_released_head(tmp_path_factory):
    """A tiny video VAE with the released head width (64): a single file says nothing of the
    head width (the decoder's q/k norms have no weights), so h3cy takes the released one."""
    import _tiny_vae
    return _tiny_vae.build(str(tmp_path_factory.mktemp("vae64")), decoder_num_attention_heads=1,
                           decoder_attention_head_dim=64)


@pytest.fixture(scope="session")
def comfy_files(tiny_pipeline, tiny_dit_factory, vae_released_head, tmp_path_factory):
    """The tiny pipeline's four components as Comfy-Org-style single files (tests/_comfy_files),
    with ``reference``: h3cy.load arguments giving the same model from folders."""
    import _comfy_files as cf
    d = tmp_path_factory.mktemp("comfy_files")
    tp = tiny_pipeline
    return {
        "dit": cf.save(cf.dit_state(tiny_dit_factory("p")), d / "h3_dit_bf16.safetensors", cf.COMFY_PREFIX),
        "text_encoder": cf.text_encoder_file(os.path.join(tp.diffusers, "text_encoder"), d / "h3_te.safetensors"),
        "video_vae": cf.video_vae_file(vae_released_head, d / "h3_video_vae.safetensors"),
        "audio_vae": cf.audio_vae_file(os.path.join(tp.diffusers, "audio_vae"), d / "h3_audio_vae.safetensors"),
        "reference": dict(path=tp.release, video_vae=vae_released_head.original),
    }
