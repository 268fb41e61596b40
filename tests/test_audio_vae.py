"""h3cy.AudioDecoder against diffusers' AutoencoderKLMiniMaxH3Audio (plus the pipeline's
de-normalisation) on tiny random models saved with save_pretrained, in both folder
layouts; weights modes; progress, cancel and error behaviour."""
import os
import shutil

import numpy as np
import pytest

import h3cy
from h3cy import _progress
from h3cy.errors import CheckpointError, H3ValueError

from _compare import assert_nontrivial, max_rel, rel_l2
from _tiny_audio_vae import build, reference_decode
from conftest import isa_params

@pytest.fixture(scope="module")
def tiny(tmp_path_factory):
    """name -> (diffusers model, {layout: folder})"""
    root = tmp_path_factory.mktemp("audio_vae")
    return {name: build(name, str(root / name)) for name in ("a", "b")}


def latents(model, A, seed=0):
    rng = np.random.default_rng(seed)
    return rng.standard_normal((2, model.config.latent_channels, A)).astype(np.float32)


@pytest.mark.parametrize("layout", ["diffusers", "release"])
@pytest.mark.parametrize("isa", isa_params())
@pytest.mark.parametrize("name", ["a", "b"])
def test_decode_matches_diffusers_fp32(tiny, name, isa, layout):
    model, folders = tiny[name]
    lat = latents(model, 13)
    want = reference_decode(model, lat)
    assert_nontrivial(want)
    dec = h3cy.AudioDecoder.from_pretrained(folders[layout], isa=isa, threads=2)
    got = dec.decode(lat)
    assert got.shape == (2, dec.hop * 13) and got.dtype == np.float32
    assert dec.hop == int(np.prod(model.config.decoder_rates))
    assert dec.sample_rate == model.config.sampling_rate
    # observed <= 7e-7 (float32 sums in another order); a wrong tap, pad or weight-norm
    # axis gives > 1e-2
    assert max_rel(got, want) <= 1e-4


def test_clamp_engages_and_single_latent(tiny):
    """Config 'a' is loud enough to hit clamp(-1, 1); A = 1 latent decodes too."""
    model, folders = tiny["a"]
    dec = h3cy.AudioDecoder.from_pretrained(folders["diffusers"], threads=2)
    lat = latents(model, 13, seed=3)
    got = dec.decode(lat)
    assert np.abs(got).max() == 1.0 and (np.abs(got) == 1.0).sum() > 1
    one = latents(model, 1, seed=4)
    want1 = reference_decode(model, one)
    assert_nontrivial(want1)
    assert max_rel(dec.decode(one), want1) <= 1e-4   # observed ~3e-7


@pytest.mark.parametrize("weights,tol", [("bf16", 3e-2), ("fp16", 3e-3), ("int8", 8e-2)])
def test_reduced_weight_modes_are_bounded(tiny, weights, tol):
    model, folders = tiny["b"]
    lat = latents(model, 9)
    want = reference_decode(model, lat)
    got = h3cy.AudioDecoder.from_pretrained(folders["diffusers"], weights=weights, threads=2).decode(lat)
    # rel L2 observed: bf16 5.9e-3, fp16 5.6e-4, int8 1.9e-2 (fp32 is 6e-7: a mode that
    # silently ran fp32 would fail the lower bound)
    e = rel_l2(got, want)
    assert 1e-5 < e <= tol, e


def test_thread_count_does_not_change_the_result_beyond_rounding(tiny):
    model, folders = tiny["b"]
    lat = latents(model, 11)
    one = h3cy.AudioDecoder.from_pretrained(folders["diffusers"], threads=1).decode(lat)
    two = h3cy.AudioDecoder.from_pretrained(folders["diffusers"], threads=2).decode(lat)
    assert max_rel(one, two) <= 1e-5   # chunking changes only the GEMM's small-M path


@pytest.mark.parametrize("weights", ["fp32", "int8"])
def test_im2col_switch_gives_the_same_bits(tiny, weights, monkeypatch):
    """H3CY_CONV_IM2COL=1 (the A/B route that builds the im2col rows) decodes to the same
    bits as the default, which lets the GEMM read them in place."""
    from h3cy import _config
    model, folders = tiny["a"]
    lat = latents(model, 9)
    dec = h3cy.AudioDecoder.from_pretrained(folders["diffusers"], weights=weights, threads=2)
    default = dec.decode(lat)
    monkeypatch.setattr(_config, "_ENV_CONV_IM2COL", True)
    assert _config.conv_im2col()
    assert np.array_equal(dec.decode(lat), default)


@pytest.mark.parametrize("isa", isa_params())
@pytest.mark.parametrize("name", ["a", "b"])
def test_narrow_convolutions_grouped_in_time_agree_with_the_plain_ones(tiny, name, isa, monkeypatch):
    """4-16-channel convolutions run over groups of 32 // C time steps with expanded
    weights (audio_vae._time_grouping).  The expanded weight adds only exact zeros, so a
    float32 decode sums the same products, but its K is longer: the GEMM's K blocks (256
    on AVX2, 384 on AVX-512) and its small-M kernel split the sums elsewhere, so the
    guarantee is agreement to float32 rounding, not bits.  Observed max |diff| 1.8e-7 on
    the AVX2 path (1 ulp in 16% of elements), 0 on AVX-512 for these sizes; a wrong expanded
    weight gives > 1e-2 (tried).  int8 quantises activations per group window instead, so
    it stays close to fp32."""
    from h3cy.models import audio_vae
    model, folders = tiny[name]
    lat = latents(model, 7)
    got = {}
    for grouped in (True, False):
        monkeypatch.setattr(audio_vae, "_GROUP_NARROW_TIME", grouped)
        for weights in ("fp32", "int8"):
            dec = h3cy.AudioDecoder.from_pretrained(folders["diffusers"], weights=weights, isa=isa, threads=2)
            convs = [c for stage in dec.blocks for c1, c2, _ in stage for c in c1 + c2]
            assert any(c.grouped for c in convs) == grouped
            got[grouped, weights] = dec.decode(lat)
    a, b = got[True, "fp32"], got[False, "fp32"]
    assert_nontrivial(b)
    scale = float(np.max(np.abs(b)))
    assert np.max(np.abs(a - b)) <= 2e-6 * max(1.0, scale), np.max(np.abs(a - b))
    # int8 vs fp32: observed 5e-3 (a) and 2.0-2.1e-2 (b) either way (weight and activation
    # rounding)
    for grouped in (True, False):
        assert rel_l2(got[grouped, "int8"], got[grouped, "fp32"]) <= 5e-2


def test_progress_reaches_total_and_is_monotonic(tiny):
    model, folders = tiny["a"]
    dec = h3cy.AudioDecoder.from_pretrained(folders["diffusers"], threads=2)
    seen = []
    dec.decode(latents(model, 5), on_progress=lambda d, t, p: seen.append((d, t, p)))
    total = 2 * (2 + 3 * (1 + 3))   # 2 items x (in_proj+conv_pre, 3 x (ups + 3 AMP), post)
    assert seen and seen[-1] == (total, total, "decode_audio")
    done = [d for d, _, _ in seen]
    assert done == sorted(done) and all(t == total for _, t, _ in seen)


def test_cancel_stops_and_decoder_is_reusable(tiny):
    model, folders = tiny["a"]
    dec = h3cy.AudioDecoder.from_pretrained(folders["diffusers"], threads=2)
    lat = latents(model, 7)
    want = dec.decode(lat)
    token = h3cy.CancelToken()
    calls = []

    def progress(done, total, phase):
        calls.append(done)
        if done >= 3:
            token.cancel()

    import h3cy.models.audio_vae as av
    old, _progress.PROGRESS_INTERVAL = _progress.PROGRESS_INTERVAL, 0.0   # report every unit
    try:
        with pytest.raises(h3cy.Cancelled):
            dec.decode(lat, on_progress=progress, cancel=token)
    finally:
        _progress.PROGRESS_INTERVAL = old
    assert calls[-1] == 3          # stopped right after the unit that set the token
    with pytest.raises(h3cy.Cancelled):   # a set token stops before any work
        dec.decode(lat, cancel=token)
    token.reset()
    np.testing.assert_array_equal(dec.decode(lat, cancel=token), want)


def test_callback_exception_propagates_unchanged(tiny):
    model, folders = tiny["a"]
    dec = h3cy.AudioDecoder.from_pretrained(folders["diffusers"], threads=1)
    boom = RuntimeError("from the callback")

    def progress(done, total, phase):
        raise boom

    with pytest.raises(RuntimeError) as ei:
        dec.decode(latents(model, 3), on_progress=progress)
    assert ei.value is boom


def test_bad_latent_shapes(tiny):
    model, folders = tiny["a"]
    dec = h3cy.AudioDecoder.from_pretrained(folders["diffusers"], threads=1)
    C = model.config.latent_channels
    for bad in (np.zeros((C, 4), np.float32), np.zeros((2, C + 1, 4), np.float32),
                np.zeros((2, C, 0), np.float32), np.zeros((0, C, 4), np.float32)):
        with pytest.raises(H3ValueError, match="latent must have shape"):
            dec.decode(bad)
    with pytest.raises(H3ValueError, match="float"):
        dec.decode(np.array([[["x"] * 4] * C] * 2))
    with pytest.raises(H3ValueError, match="weights"):
        h3cy.AudioDecoder.from_pretrained(folders["diffusers"], weights="int4")


def _copy_without(src, dst, drop=None, reshape=None):
    from safetensors.numpy import load_file, save_file
    shutil.copytree(src, dst)
    f = os.path.join(dst, "diffusion_pytorch_model.safetensors")
    t = load_file(f)
    if drop:
        del t[drop]
    if reshape:
        t[reshape] = t[reshape][..., :-1].copy()
    save_file(t, f)
    return dst


def test_checkpoint_errors(tiny, tmp_path):
    model, folders = tiny["a"]
    src = folders["diffusers"]
    with pytest.raises(CheckpointError, match="not a folder"):
        h3cy.AudioDecoder.from_pretrained(str(tmp_path / "nope"))
    empty = tmp_path / "empty"
    empty.mkdir()
    with pytest.raises(CheckpointError, match="config.json"):
        h3cy.AudioDecoder.from_pretrained(str(empty))
    noweights = tmp_path / "noweights"
    noweights.mkdir()
    shutil.copy(os.path.join(src, "config.json"), noweights)
    with pytest.raises(CheckpointError, match="no weights file"):
        h3cy.AudioDecoder.from_pretrained(str(noweights))
    for missing in ("decoder.resblocks.4.convs2.1.weight_g", "decoder.ups.2.0.bias",
                    "decoder.activation_post.upsample.filter", "dec_in_proj.weight"):
        d = _copy_without(src, str(tmp_path / missing.replace(".", "_")), drop=missing)
        with pytest.raises(CheckpointError, match=missing.replace(".", r"\.")):
            h3cy.AudioDecoder.from_pretrained(d)
    d = _copy_without(src, str(tmp_path / "short"), reshape="decoder.resblocks.0.convs1.0.weight_v")
    with pytest.raises(CheckpointError, match="shape"):
        h3cy.AudioDecoder.from_pretrained(d)
