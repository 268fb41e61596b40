"""Geometry and the packed t2va layout against diffusers' own layout builder."""
import logging

import numpy as np
import pytest
import torch

from h3cy.errors import H3ValueError
from h3cy.sampling.layout import Geometry, Layout, pack_audio, patchify, unpack_audio, unpatchify

GEOMS = [(512, 512, 22), (768, 1344, 124), (1344, 768, 39), (512, 768, 243), (256, 1024, 345),
         (64, 64, 22), (320, 192, 56)]


def _ref_layout(g, L):
    from diffusers.modular_pipelines.minimax_h3.before_denoise import MiniMaxH3PrepareLayoutStep
    return MiniMaxH3PrepareLayoutStep.build_packed_sequence(
        torch.ones(L, dtype=torch.long), g.T, g.h, g.w, g.A, (1, 2, 2), 2, 2, 0, ())


def test_geometry_matches_diffusers_formulas():
    from diffusers.modular_pipelines.minimax_h3.modular_pipeline import (
        align_num_frames, audio_latent_num_frames, video_latent_num_frames)
    for f in range(1, 363):
        want = align_num_frames(f, 17, 5)
        if want > 362:
            continue
        g = Geometry(64, 64, f)
        assert g.frames == want
        assert g.T == video_latent_num_frames(want, 17, 5)
        assert g.A == audio_latent_num_frames(want)
    g = Geometry()
    assert (g.width, g.height, g.frames, g.T, g.h, g.w, g.A) == (512, 512, 22, 7, 32, 32, 37)
    assert Geometry.from_seconds(5.0).frames == 124


@pytest.mark.parametrize("W,H,F", GEOMS)
@pytest.mark.parametrize("L", [1, 6, 77])
def test_layout_identical_to_diffusers(W, H, F, L):
    g = Geometry(W, H, F)
    lay = Layout(g, L)
    pos, tags, vi, ai, ti, _, _ = _ref_layout(g, L)
    assert np.array_equal(lay.position_ids, pos.numpy())   # float64, bit for bit
    assert np.array_equal(lay.token_tags, tags.numpy())
    for got, want in ((lay.video_indices, vi), (lay.audio_indices, ai), (lay.text_indices, ti)):
        assert np.array_equal(got, want.numpy())
    assert lay.S == L + 2 * g.A + g.video_rows


def test_spec_example_512_22():
    lay = Layout(Geometry(512, 512, 22), 6)
    assert lay.S - 6 == 1866
    v0 = lay.video_indices[0]
    assert tuple(lay.position_ids[v0]) == (6.0, 0.0, 0.0)
    assert tuple(lay.position_ids[v0 + 1]) == (6.0, 0.0, 2.0)
    assert tuple(lay.position_ids[lay.audio_indices[37]]) == (6.0, 0.0, 30.0)


def test_patchify_and_audio_rows_match_diffusers(rng):
    from diffusers.modular_pipelines.minimax_h3.before_denoise import patchify_video_latents
    lat = rng.standard_normal((1, 24, 7, 8, 12)).astype(np.float32)
    want = patchify_video_latents(torch.from_numpy(lat), (1, 2, 2)).numpy()
    rows = patchify(lat)
    assert np.array_equal(rows, want)
    assert np.array_equal(unpatchify(rows, 7, 8, 12), lat[0])
    aud = rng.standard_normal((2, 32, 37)).astype(np.float32)
    rows = pack_audio(aud)
    assert np.array_equal(rows, torch.from_numpy(aud).permute(0, 2, 1).reshape(-1, 32).numpy())
    assert np.array_equal(unpack_audio(rows), aud)


def test_step_timesteps_and_indices():
    lay = Layout(Geometry(), 4)
    t, idx = lay.step_timesteps(0.0, 0.0)
    assert t.tolist() == [0.0] and not idx.any()
    t, idx = lay.step_timesteps(0.25, 0.5)
    assert t.tolist() == [0.25, 0.5]
    assert np.all(idx[lay.audio_indices] == 1) and np.all(idx[lay.video_indices] == 0)
    assert np.all(idx[lay.text_indices] == 0)


def test_illegal_geometry_names_the_nearest(caplog):
    with pytest.raises(H3ValueError, match="nearest legal: 512"):
        Geometry(500, 512)
    with pytest.raises(H3ValueError, match="nearest legal: 64"):
        Geometry(32, 512)
    with pytest.raises(H3ValueError, match="exceeds"):
        Geometry(1344, 1344)
    with pytest.raises(H3ValueError, match="362"):
        Geometry(512, 512, 400)
    with caplog.at_level(logging.WARNING, logger="h3cy"):
        assert Geometry(512, 512, 30).frames == 39
    assert "rounding 30 up to 39" in caplog.text


FL2VA_ANCHORS = [("first",), ("last",), ("first", "last"), ("last", "first")]


@pytest.mark.parametrize("W,H,F", [(512, 768, 243), (256, 1024, 345), (1344, 768, 39), (64, 64, 124)])
@pytest.mark.parametrize("anchors", FL2VA_ANCHORS)
def test_fl2va_layout_identical_to_diffusers(W, H, F, anchors):
    """Keyframe condition rows after the text at their anchor times (the last frame's by
    the reference's pairwise sum: T = 102 at 345 frames, where it differs from the video
    rows' cumulative sum), and per-row text tags, bit for bit."""
    from diffusers.modular_pipelines.minimax_h3.before_denoise import MiniMaxH3PrepareLayoutStep
    g = Geometry(W, H, F)
    tags = np.array([1, 1, 0, 0, 0, 1, 1], np.int64)
    lay = Layout(g, 7, text_tags=tags, condition_frames=[0 if a == "first" else g.T - 1 for a in anchors])
    pos, tt, vi, ai, ti, nc, na = MiniMaxH3PrepareLayoutStep.build_packed_sequence(
        torch.from_numpy(tags), g.T, g.h, g.w, g.A, (1, 2, 2), 2, 2, 0, anchors)
    assert np.array_equal(lay.position_ids, pos.numpy())
    assert np.array_equal(lay.token_tags, tt.numpy())
    for got, want in ((lay.video_indices, vi), (lay.audio_indices, ai), (lay.text_indices, ti)):
        assert np.array_equal(got, want.numpy())
    assert lay.n_condition_rows == nc == len(anchors) * (g.h // 2) * (g.w // 2) and na == 0
    assert np.array_equal(lay.condition_indices, vi.numpy()[:nc])
    assert np.array_equal(lay.generated_video_indices, vi.numpy()[nc:])


def test_fl2va_row_timesteps_match_diffusers_plan():
    from diffusers import MiniMaxH3Scheduler
    from diffusers.modular_pipelines.minimax_h3.before_denoise import MiniMaxH3SetTimestepsStep
    g = Geometry(64, 64, 124)
    lay = Layout(g, 5, condition_frames=[0, g.T - 1])
    vs, as_ = MiniMaxH3Scheduler(shift=12.0), MiniMaxH3Scheduler(shift=3.0)
    # the released grids stop short of t = 0.999 (20 steps: t <= 0.71), so an explicit video
    # grid runs past it too: both branches of max(t_video, 0.999)
    vs.set_timesteps(sigmas=[1.0, 0.6, 0.1, 0.002, 0.001, 0.0009, 0.0002, 0.0])
    as_.set_timesteps(8)
    below = above = 0
    for tv, ta in zip(vs.timesteps, as_.timesteps):
        want = MiniMaxH3SetTimestepsStep.build_row_timesteps(
            torch.from_numpy(lay.video_indices), torch.from_numpy(lay.audio_indices), lay.n_condition_rows, 0,
            lay.L, float(tv), float(ta), max(float(tv), 0.999), 1.0)
        t, idx = lay.row_timesteps(tv.numpy(), ta.numpy())
        assert np.array_equal(t, want[0].numpy()) and np.array_equal(idx, want[1].numpy())
        below += bool(tv.numpy() < np.float32(0.999))
        above += bool(tv.numpy() > np.float32(0.999))
    assert (below, above) == (4, 2)     # 0, 0.4, 0.9, 0.998 held at 0.999; 0.9991, 0.9998 not


def test_per_frame_row_timesteps_with_conditions():
    g = Geometry(64, 64, 22)
    lay = Layout(g, 3, condition_frames=[g.T - 1, 0])
    tv = np.linspace(0.2, 0.9995, g.T).astype(np.float32)
    t, idx = lay.row_timesteps(tv, np.float32(0.5))
    row_t = t[idx]
    rpf = (g.h // 2) * (g.w // 2)
    assert np.all(row_t[lay.text_indices] == tv[0])
    assert np.array_equal(row_t[lay.generated_video_indices], np.repeat(tv, rpf))
    # the condition anchored at the last frame takes that frame's timestep (> 0.999), the
    # first frame's is held at 0.999
    assert np.all(row_t[lay.condition_indices[:rpf]] == tv[-1])
    assert np.all(row_t[lay.condition_indices[rpf:]] == np.float32(0.999))
    assert np.all(row_t[lay.audio_indices] == np.float32(0.5))


def test_bad_text_tags_and_frames():
    g = Geometry(64, 64, 22)
    with pytest.raises(H3ValueError, match="text_tags must be 3 ints"):
        Layout(g, 3, text_tags=[1, 1])
    with pytest.raises(H3ValueError, match=r"text_tags must be 3 ints"):
        Layout(g, 3, text_tags=[1.0, 1.0, 1.0])
    with pytest.raises(H3ValueError, match="0 \\(a vision"):
        Layout(g, 3, text_tags=[1, 2, 1])
    with pytest.raises(H3ValueError, match="latent frame 0 or 6"):
        Layout(g, 3, condition_frames=[3])
