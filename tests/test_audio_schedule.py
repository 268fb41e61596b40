"""Audio-driven schedules on synthetic click tracks."""
import wave

import numpy as np
import pytest

import h3cy
from h3cy import audio_schedule as asch
from h3cy.errors import H3ValueError


def click_track(bpm=120.0, seconds=6.0, sr=32000, offset=0.25):
    x = np.zeros(int(seconds * sr), np.float32)
    rng = np.random.default_rng(0)
    t = offset
    while t < seconds:
        i = int(t * sr)
        burst = rng.standard_normal(400).astype(np.float32) * np.exp(-np.arange(400) / 80.0)
        x[i:i + 400] += burst[: max(0, min(400, x.size - i))]
        t += 60.0 / bpm
    x += rng.standard_normal(x.size).astype(np.float32) * 0.01
    return x, sr


def test_click_track_beats_and_frames(tmp_path):
    audio = click_track(120.0, 6.0)
    beats = asch.beat_times(audio)
    want = np.arange(0.25, 6.0, 0.5)
    assert len(beats) >= len(want) - 1
    for b in want[1:-1]:
        assert np.min(np.abs(beats - b)) < 0.03, (b, beats)
    g = h3cy.Geometry(64, 64, asch.frames_for(audio))
    frames = asch.beat_frames(audio, g)
    times = asch.latent_frame_times(g)
    for b in want:
        if b > g.seconds:
            continue
        f = int(np.argmin(np.abs(times - b)))
        assert any(abs(f - got) <= 1 for got in frames), (b, f, frames)
    # the same through a 16-bit stereo WAV file
    path = tmp_path / "click.wav"
    with wave.open(str(path), "wb") as w:
        w.setnchannels(2)
        w.setsampwidth(2)
        w.setframerate(audio[1])
        pcm = (np.clip(audio[0], -1, 1) * 32767).astype("<i2")
        w.writeframes(np.repeat(pcm[:, None], 2, axis=1).tobytes())
    assert np.allclose(asch.beat_times(str(path)), beats, atol=0.02)


def first_pixel_frame(f):
    """Latent frame f's first pixel frame: each 17-frame chunk is 1 + 4 + 4 + 4 + 4 frames."""
    return 17 * (f // 5) + (0 if f % 5 == 0 else 1 + 4 * (f % 5 - 1))


@pytest.mark.parametrize("frames", list(range(22, 363, 17)))
def test_latent_frame_times_are_the_layouts_rotary_time(frames):
    """Every legal frame count: the schedule's frame clock is the video rows' rotary time
    ((position - L) / 40 s) and each latent frame's first pixel frame over 24."""
    g = h3cy.Geometry(64, 64, frames)
    times = asch.latent_frame_times(g)
    L = 7
    lay = h3cy.Layout(g, L)
    rows_per_frame = (g.h // 2) * (g.w // 2)
    first_rows = lay.video_indices[::rows_per_frame]
    assert times.shape == (g.T,) and first_rows.shape == (g.T,)
    np.testing.assert_allclose(times, (lay.position_ids[first_rows, 0] - L) / 40.0, rtol=0, atol=1e-12)
    want = np.array([first_pixel_frame(f) for f in range(g.T)]) / 24.0
    np.testing.assert_allclose(times, want, rtol=0, atol=1e-12)
    # the last latent frame ends with the video: 17n + 5 frames = ... + 1 + 4
    assert first_pixel_frame(g.T - 1) + 4 == g.frames


@pytest.mark.parametrize("first_frame_in_chunk", [2, 4])
def test_click_track_marks_the_latent_frames_containing_the_beats(first_frame_in_chunk):
    """Clicks once per 17-frame chunk (84.7 bpm), two pixel frames into latent frame
    5k + first_frame_in_chunk (away from its span's edges by more than the beat detector's
    ~16 ms hop): exactly those latent frames are marked, over 10 s (a clock of 4 pixel
    frames per latent frame drifts 3 frames per chunk and marks other frames from the
    third chunk on)."""
    sr, seconds = 32000, 10.0
    offset = (first_pixel_frame(first_frame_in_chunk) + 2) / 24.0
    bpm = 60.0 / (17 / 24.0)
    audio = click_track(bpm, seconds, sr=sr, offset=offset)
    g = h3cy.Geometry(64, 64, asch.frames_for(audio))
    clicks = offset + np.arange(0, seconds, 17 / 24.0)
    clicks = clicks[clicks < min(seconds, g.seconds) - 0.05]
    want = sorted({5 * k + first_frame_in_chunk for k in range(len(clicks))})
    got = asch.beat_frames(audio, g)
    # the detector may miss a click at the very start or end; every marked frame must be a
    # click's and the inner ones all present
    assert set(got) <= set(want), (got, want)
    assert set(want[1:-1]) <= set(got), (got, want)


def test_frames_for_duration_rule():
    for seconds in (0.5, 1.0, 5.0, 5.2, 10.0, 15.0):
        x = np.zeros(int(seconds * 32000), np.float32)
        f = asch.frames_for((x, 32000))
        assert f % 17 == 5 and f / 24 >= seconds - 1e-9 and (f - 17) / 24 < seconds
    with pytest.raises(H3ValueError):
        asch.frames_for((np.zeros(16 * 32000, np.float32), 32000))


@pytest.mark.parametrize("strength", [-0.5, 0.5, 2.0])
def test_beat_schedules_are_valid(strength):
    audio = click_track(100.0, 5.0)
    g = h3cy.Geometry(64, 64, asch.frames_for(audio))
    s = asch.beat_schedule(audio, 12, g, strength=strength)
    assert s.video_sigmas.shape == (13, g.T)
    v = s.video_sigmas
    assert np.all(v[1:] < v[:-1]) and np.all(v[-1] == 0)
    on = asch.beat_frames(audio, g)
    off = [f for f in range(g.T) if f not in on]
    assert on and off
    base = h3cy.Schedule.shifted(12)
    for f in off:
        assert np.array_equal(v[:, f], base.video_sigmas)
    for f in on:   # later beat frames keep more noise when strength > 0
        mid = v[6, f] - base.video_sigmas[6]
        assert (mid > 0) == (strength > 0)
    with pytest.raises(H3ValueError):
        asch.beat_schedule(audio, 12, g, strength=-1.0)


def test_beat_example_runs_end_to_end(tmp_path):
    """examples/beat_video.py on a tiny random transformer and a click track."""
    import os
    import subprocess
    import sys
    import torch
    from diffusers import MiniMaxH3Transformer3DModel
    from _tiny_dit import TINY_CONFIGS
    cfg = dict(TINY_CONFIGS["a"], text_dim=24)
    torch.manual_seed(0)
    folder = str(tmp_path / "tr")
    MiniMaxH3Transformer3DModel(**cfg).save_pretrained(folder)
    np.save(tmp_path / "pe.npy", np.random.default_rng(0).standard_normal((4, 24)).astype(np.float32))
    x, sr = click_track(120.0, 2.0)
    path = tmp_path / "m.wav"
    with wave.open(str(path), "wb") as w:
        w.setnchannels(1)
        w.setsampwidth(2)
        w.setframerate(sr)
        w.writeframes((np.clip(x, -1, 1) * 32767).astype("<i2").tobytes())
    root = os.path.dirname(os.path.dirname(__file__))
    r = subprocess.run([sys.executable, os.path.join(root, "examples", "beat_video.py"),
                        "--transformer", folder, "--embeds", str(tmp_path / "pe.npy"),
                        "--audio", str(path), "--out", str(tmp_path / "out.npz"),
                        "--width", "64", "--height", "64", "--steps", "3", "--weights", "fp32"],
                       capture_output=True, text=True, timeout=300)
    assert r.returncode == 0, r.stderr[-2000:]
    out = np.load(tmp_path / "out.npz")
    assert out["video_latent"].shape[0] == 4 and np.all(np.isfinite(out["video_latent"]))
    assert len(out["beat_frames"]) >= 2
