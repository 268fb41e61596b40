"""h3cy.VideoDecoder against diffusers' AutoencoderKLMiniMaxH3 on a tiny random VAE (tests/_tiny_vae.py),
plus the tile split, the blends, streaming, progress/cancel and bad input."""
import json
import os
import shutil

import numpy as np
import pytest

import h3cy
from h3cy import _kernels
from h3cy.models.video_vae import blend, split_tiles
from _compare import assert_close, assert_nontrivial, max_rel, rel_l2
from _tiny_vae import reference_decode
from conftest import isa_params

# 512x320 px canvas: 3 tile rows x 2 tile columns; T = 12 -> 2 temporal clips, 39 frames
T_, H_, W_ = 12, 32, 20


@pytest.fixture(scope="module")
def latent():
    return np.random.default_rng(7).standard_normal((24, T_, H_, W_)).astype(np.float32)


@pytest.fixture(scope="module")
def want_fp32(tiny_vae, latent):
    return reference_decode(tiny_vae.diffusers, latent, "fp32")


@pytest.fixture(scope="module")
def decoders(tiny_vae):
    cache = {}

    def get(weights, layout="diffusers"):
        key = (weights, layout)
        if key not in cache:
            cache[key] = h3cy.VideoDecoder.from_pretrained(getattr(tiny_vae, layout), weights=weights)
        return cache[key]
    return get


# ---- the geometry helpers -------------------------------------------------------------------
@pytest.mark.parametrize("length, starts, overlaps", [
    (512, [0, 128, 256], [128, 128]),
    (768, [0, 160, 336, 512], [96, 80, 80]),
    (1344, [0, 176, 352, 528, 704, 896, 1088], [80, 80, 80, 80, 64, 64]),
    (1024, [0, 192, 384, 576, 768], [64, 64, 64, 64]),
    (256, [0], []), (64, [0], []),
    (320, [0, 64], [192]),
])
def test_split_tiles_spec_examples(length, starts, overlaps):
    got_s, got_o = split_tiles(length)
    assert (got_s, got_o) == (starts, overlaps)
    if len(got_s) > 1:   # tiles cover the axis exactly
        assert got_s[-1] + 256 == length


def test_split_tiles_matches_diffusers():
    from diffusers import AutoencoderKLMiniMaxH3
    vae = AutoencoderKLMiniMaxH3.__new__(AutoencoderKLMiniMaxH3)
    vae.spatial_compression_ratio = 16
    for length in range(16, 2049, 16):
        s, ln, o = AutoencoderKLMiniMaxH3._split_tiles(vae, length, 256, 64)
        assert split_tiles(length) == (s, o), length


@pytest.mark.parametrize("bf16", [False, True])
@pytest.mark.parametrize("axis, extent", [(0, 5), (1, 128), (2, 80), (1, 300)])
def test_blend_matches_diffusers(axis, extent, bf16):
    import torch
    from diffusers import AutoencoderKLMiniMaxH3
    rng = np.random.default_rng(axis * 1000 + extent)
    shape = [7, 256, 256, 3]
    a = rng.standard_normal(shape).astype(np.float32)
    b = rng.standard_normal(shape).astype(np.float32)
    td = torch.bfloat16 if bf16 else torch.float32
    ta, tb = torch.from_numpy(a).to(td), torch.from_numpy(b).to(td)
    want = AutoencoderKLMiniMaxH3._blend(None, ta, tb, extent, dim=axis).float().numpy()
    a_in, b_in = ta.float().numpy(), tb.float().numpy()
    e = min(extent, shape[axis])
    strip = np.take(a_in, np.arange(shape[axis] - e, shape[axis]), axis=axis)   # only the tail is needed
    got = blend(strip, b_in, extent, axis, bf16=bf16)
    np.testing.assert_array_equal(got, want)
    assert not np.array_equal(got, b_in)
    inplace = b_in.copy()
    assert blend(strip, inplace, extent, axis, bf16=bf16, inplace=True) is inplace
    np.testing.assert_array_equal(inplace, want)


# ---- the LayerNorm kernel ----------------------------------------------------------------------
@pytest.mark.parametrize("isa", isa_params())
@pytest.mark.parametrize("rows, n", [(1, 1), (3, 37), (130, 2048)])
def test_layernorm_matches_torch(isa, rows, n):
    import torch
    rng = np.random.default_rng(rows + n)
    x = (rng.standard_normal((rows, n)) * 3 + 1.5).astype(np.float32)
    w = rng.standard_normal(n).astype(np.float32)
    b = rng.standard_normal(n).astype(np.float32)
    out = np.full((rows + 1, n), 7.0, np.float32)        # guard row must stay 7
    _kernels.elem_layernorm(x, w, b, out[:rows], 1e-5, isa, h3cy.ops.ThreadPool(2))
    want = torch.nn.functional.layer_norm(torch.from_numpy(x), (n,), torch.from_numpy(w),
                                          torch.from_numpy(b), 1e-5).numpy()
    # observed <= 1e-6 relative (float32 rounding of the same formula; double moments)
    assert_close(out[:rows], want, max_rel_tol=2e-6, what="layernorm")
    assert np.all(out[rows] == 7.0)


def test_layernorm_rejects_bad_input():
    x = np.ones((2, 4), np.float32)
    with pytest.raises(h3cy.H3Error):
        _kernels.elem_layernorm(x, None, None, np.empty((3, 4), np.float32), 1e-5, "ref", h3cy.ops.ThreadPool(1))
    with pytest.raises(ValueError):
        _kernels.elem_layernorm(x, np.ones(3, np.float32), None, np.empty((2, 4), np.float32), 1e-5, "ref",
                                h3cy.ops.ThreadPool(1))


# ---- parity with diffusers ------------------------------------------------------------------------
@pytest.mark.parametrize("layout", ["diffusers", "original"])
def test_decode_fp32_matches_diffusers(decoders, latent, want_fp32, layout):
    assert_nontrivial(want_fp32)
    assert 0.05 < np.mean((want_fp32 > 0) & (want_fp32 < 1))   # not all clamped
    got = decoders("fp32", layout).decode(latent)
    assert got.shape == (39, 512, 320, 3) and got.dtype == np.float32
    # observed 6e-7 (float32 summation order); a swapped qkv/ffn half or a wrong blend gives > 1e-1
    assert_close(got, want_fp32, max_rel_tol=1e-4, what=f"fp32 {layout}")
    u8 = np.abs(h3cy.to_uint8(got).astype(int) - h3cy.to_uint8(want_fp32).astype(int))
    assert u8.max() <= 1


@pytest.mark.parametrize("isa", isa_params())
def test_decode_fp32_on_every_isa_path_matches_diffusers(tiny_vae, latent, want_fp32, isa):
    got = h3cy.VideoDecoder.from_pretrained(tiny_vae.diffusers, weights="fp32", isa=isa).decode(latent)
    # the bound of test_decode_fp32_matches_diffusers (observed 6e-7 on the default path)
    assert_close(got, want_fp32, max_rel_tol=1e-4, what=f"fp32 {isa}")


def test_decode_three_clips_matches_diffusers(tiny_vae, decoders):
    """T = 17: three clips, so a clip both reads the previous tail (its head cross-fade)
    and writes its own into the same buffer, region by region over 2 x 1 tiles."""
    z = np.random.default_rng(3).standard_normal((24, 17, 20, 16)).astype(np.float32)
    want = reference_decode(tiny_vae.diffusers, z, "fp32")
    got = decoders("fp32").decode(z, uint8=False)
    assert got.shape == (56, 320, 256, 3)
    assert_close(got, want, max_rel_tol=1e-4, what="3 clips")   # observed 4e-7 (320x320)


def test_decode_untiled_matches_diffusers(tiny_vae, decoders):
    z = np.random.default_rng(3).standard_normal((24, 7, 6, 4)).astype(np.float32)
    want = reference_decode(tiny_vae.diffusers, z, tiling=False)
    got = decoders("fp32").decode(z, tile=False)
    assert_close(got, want, max_rel_tol=1e-4, what="untiled")   # observed ~5e-7


def test_decode_bf16_matches_diffusers_bf16(tiny_vae, decoders, latent, want_fp32):
    want = reference_decode(tiny_vae.diffusers, latent, "bf16")
    got = decoders("bf16").decode(latent)
    # observed rel L2 8.4e-4 (torch's bf16 SDPA rounds its softmax weights to bf16 before the V
    # product; with fp32 attention in the reference the emulation is bit-exact on a clip);
    # bf16 vs the fp32 reference is 2.4e-3
    assert_close(got, want, rel_l2_tol=1e-2, what="bf16")
    assert rel_l2(got, want) < rel_l2(want, want_fp32)
    assert np.abs(h3cy.to_uint8(got).astype(int) - h3cy.to_uint8(want).astype(int)).max() <= 3


@pytest.mark.parametrize("weights, tol", [("fp16", 1e-3), ("int8", 1e-2)])
def test_decode_quantised_modes_bounded(decoders, latent, want_fp32, weights, tol):
    got = decoders(weights).decode(latent)
    # observed rel L2 vs fp32: fp16 4.8e-5, int8 2.2e-3
    assert_close(got, want_fp32, rel_l2_tol=tol, what=weights)
    assert not np.array_equal(got, want_fp32)


def test_original_layout_equals_diffusers_layout_bitwise(decoders, latent):
    z = latent[:, :7, :20, :16]
    a = decoders("bf16", "diffusers").decode(z)
    b = decoders("bf16", "original").decode(z)
    np.testing.assert_array_equal(a, b)


# ---- streaming, progress, cancel ------------------------------------------------------------------
def test_on_frames_streams_identical_frames(decoders, latent):
    dec = decoders("fp32")
    full = dec.decode(latent)
    chunks = []
    assert dec.decode(latent, on_frames=lambda f, i: chunks.append((i, f.copy()))) is None
    assert [i for i, _ in chunks] == [0, 17, 34]
    assert [f.shape[0] for _, f in chunks] == [17, 17, 5]
    np.testing.assert_array_equal(np.concatenate([f for _, f in chunks]), full)


@pytest.mark.parametrize("weights", ["fp32", "bf16"])
def test_uint8_decode_is_to_uint8_of_the_float_decode(decoders, latent, weights):
    """uint8=True converts each stitched tile region (the cross-fade included) as it is
    final: the same bits as converting the float frames afterwards."""
    dec = decoders(weights)
    full = dec.decode(latent)
    u8 = dec.decode(latent, uint8=True)
    assert u8.dtype == np.uint8 and u8.shape == full.shape
    np.testing.assert_array_equal(u8, h3cy.to_uint8(full))
    chunks = []
    assert dec.decode(latent, on_frames=lambda f, i: chunks.append((i, f)), uint8=True) is None
    assert [i for i, _ in chunks] == [0, 17, 34] and all(f.dtype == np.uint8 for _, f in chunks)
    np.testing.assert_array_equal(np.concatenate([f for _, f in chunks]), u8)


def test_streamed_decode_holds_one_clip_not_copies_of_it(decoders, latent):
    """Peak traced (numpy) memory of a streamed decode at 384x320 and 512x320 (2 and 3
    tile rows, 2 clips): weights, tile work and overlap strips do not grow with the canvas
    height, so the growth over 128 canvas rows, in float32 frame-rows, is what a decode
    holds per canvas: one clip of output (17 frames), the raw 5-frame cross-fade tail
    (one buffer, rewritten region by region) and one more overlap strip alive while a
    tile row is replaced (~18).  Measured (deterministic: numpy's own allocations):
    float32 40.4, uint8 27.7 (the clip at a quarter: 17 * 3/4 = 12.75 less).  With two
    tail buffers (previous and next clip): 45.4 / 32.7; the decode that stitched whole
    float clips, copied them for the cross-fade and again for the pixel conversion: 62.4."""
    import tracemalloc
    dec = decoders("fp32")

    def peak(z, uint8):
        dec.decode(z, on_frames=lambda f, i: None, uint8=uint8)    # workspaces sized
        tracemalloc.start()
        try:
            dec.decode(z, on_frames=lambda f, i: None, uint8=uint8)
            return tracemalloc.get_traced_memory()[1]
        finally:
            tracemalloc.stop()
    frame_rows = 12 * 320 * 128        # float32 RGB bytes of 128 canvas rows, one frame
    grow = {u: (peak(latent, u) - peak(latent[:, :, :24], u)) / frame_rows for u in (False, True)}
    assert grow[False] < 43, grow
    assert grow[True] < 31 and grow[True] < grow[False] - 10, grow


def test_progress_counts_blocks_and_ends_at_total(decoders, latent):
    dec = decoders("fp32")
    seen = []
    dec.decode(latent[:, :7, :20, :20], on_progress=lambda d, t, p: seen.append((d, t, p)))
    total = 1 * 4 * 2     # clips x tiles x blocks (320 px: 2 tiles per axis)
    assert seen[-1] == (total, total, "decode_video")
    assert all(a[0] < b[0] for a, b in zip(seen, seen[1:]))


def test_cancel_and_callback_errors_then_reusable(decoders, latent):
    dec = decoders("fp32")
    z = latent[:, :7, :16, :16]
    want = dec.decode(z)
    tok = h3cy.CancelToken()

    seen = []

    def prog(done, total, phase):
        seen.append(done)
        tok.cancel()                     # from the first report on
    with pytest.raises(h3cy.Cancelled):
        dec.decode(latent[:, :7, :20, :20], on_progress=prog, cancel=tok)
    assert seen == [1]                   # stopped at the next block, of 8
    boom = RuntimeError("from the callback")

    def bad(frames, i):
        raise boom
    with pytest.raises(RuntimeError) as ei:
        dec.decode(z, on_frames=bad)
    assert ei.value is boom
    np.testing.assert_array_equal(dec.decode(z), want)


# ---- errors ------------------------------------------------------------------------------------------
@pytest.mark.parametrize("shape, match", [
    ((24, 8, 4, 4), "T = 5n \\+ 2"), ((24, 2, 4, 4), "T = 5n"), ((23, 7, 4, 4), "channels"),
    ((24, 7, 4), "shape"), ((2, 24, 7, 4, 4), "batch"),
])
def test_decode_rejects_bad_latents(decoders, shape, match):
    with pytest.raises(h3cy.errors.H3ValueError, match=match):
        decoders("fp32").decode(np.zeros(shape, np.float32))


def test_missing_or_bad_tensor_is_named(tiny_vae, tmp_path):
    from safetensors.numpy import load_file, save_file
    src = os.path.join(tiny_vae.diffusers, "diffusion_pytorch_model.safetensors")
    sd = load_file(src)
    for mutate, name in (("drop", "decoder.transformer_blocks.1.scale2"),
                         ("shape", "decoder.transformer_blocks.0.attn.to_k.weight")):
        d = tmp_path / mutate
        d.mkdir()
        shutil.copy(os.path.join(tiny_vae.diffusers, "config.json"), d)
        bad = dict(sd)
        if mutate == "drop":
            del bad[name]
        else:
            bad[name] = bad[name][:-1]
        save_file(bad, str(d / "diffusion_pytorch_model.safetensors"))
        with pytest.raises(h3cy.CheckpointError, match=name.replace(".", "\\.")):
            h3cy.VideoDecoder.from_pretrained(d)
    with pytest.raises(h3cy.CheckpointError):
        h3cy.VideoDecoder.from_pretrained(tmp_path / "nowhere")
    with pytest.raises(ValueError):
        h3cy.VideoDecoder.from_pretrained(tiny_vae.diffusers, weights="int3")


def test_to_uint8_rounds_half_to_even():
    x = np.array([0.0, 0.5 / 255, 1.5 / 255, 2.5 / 255, 1.0, 1.2, -0.1], np.float32)
    want = np.rint(np.clip(x, 0, 1) * np.float32(255)).astype(np.uint8)
    got = h3cy.to_uint8(x)
    np.testing.assert_array_equal(got, want)
    assert got.dtype == np.uint8 and got[-2] == 255 and got[-1] == 0
