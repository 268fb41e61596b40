"""MP4 / WAV / PNG writers: the files open with independent readers and hold what was written."""
import os
import struct
import wave
import zlib

import av
import numpy as np
import pytest

from h3cy import media
from h3cy.errors import H3ValueError
from h3cy.result import Result


def _clip(F=22, H=64, W=96, sr=32000, fps=24, seed=0):
    rng = np.random.default_rng(seed)
    # smooth content so H.264 at crf 18 keeps it close (checked below)
    yy, xx = np.mgrid[0:H, 0:W]
    frames = np.stack([np.stack([(xx * 255 // W + 10 * f) % 256, yy * 255 // H,
                                 np.full_like(xx, 128)], -1) for f in range(F)]).astype(np.uint8)
    t = np.arange(int(round(F * sr / fps) + 500)) / sr
    audio = (0.5 * np.stack([np.sin(2 * np.pi * 440 * t), np.sin(2 * np.pi * 660 * t)])).astype(np.float32)
    audio += rng.standard_normal(audio.shape).astype(np.float32) * 1e-3
    return frames, audio


def test_mp4_streams_frames_fps_size_and_audio(tmp_path):
    frames, audio = _clip()
    res = Result(frames=frames, audio=audio, fps=24, sample_rate=32000)
    path = res.save(tmp_path / "out.mp4")
    with av.open(os.fspath(path)) as c:
        v, a = c.streams.video[0], c.streams.audio[0]
        assert (v.width, v.height) == (96, 64)
        assert v.average_rate == 24
        assert a.rate == 32000 and a.channels == 2
        got = np.stack([f.to_ndarray(format="rgb24") for f in c.decode(video=0)])
    assert got.shape == frames.shape
    # lossy codec: smooth gradients survive within a few levels on average
    assert np.abs(got.astype(int) - frames.astype(int)).mean() < 4
    with av.open(os.fspath(path)) as c:
        a = c.streams.audio[0]
        dur = float(a.duration * a.time_base)
        pcm = np.concatenate([f.to_ndarray() for f in c.decode(audio=0)], axis=1)
    want = 22 / 24
    assert abs(dur - want) < 1024 / 32000 + 1e-3, dur      # AAC frames are 1024 samples
    # the left channel is the 440 Hz tone, the right one 660 Hz: check the dominant frequency
    for ch, hz in ((0, 440), (1, 660)):
        spec = np.abs(np.fft.rfft(pcm[ch, 2048:2048 + 16000]))
        assert abs(np.argmax(spec) * 32000 / 16000 - hz) <= 4


def test_mp4_writer_streams_clips_and_discards_on_error(tmp_path):
    frames, audio = _clip(F=39)
    target = tmp_path / "clips.mp4"
    with media.Mp4Writer(target, 96, 64, fps=24, audio=audio[:, :52000]) as w:
        w.add_frames(frames[:17])
        w.add_frames(frames[17:])
    with av.open(os.fspath(target)) as c:
        assert sum(1 for _ in c.decode(video=0)) == 39
    bad = tmp_path / "bad.mp4"
    with pytest.raises(RuntimeError):
        with media.Mp4Writer(bad, 96, 64) as w:
            w.add_frames(frames[:5])
            raise RuntimeError("interrupted")
    assert not bad.exists()
    assert [p.name for p in tmp_path.iterdir() if "partial" in p.name] == []


def test_wav_round_trip(tmp_path):
    _, audio = _clip()
    p = media.write_wav(tmp_path / "a.wav", audio, 32000)
    with wave.open(os.fspath(p)) as w:
        assert (w.getnchannels(), w.getframerate(), w.getsampwidth()) == (2, 32000, 2)
        raw = np.frombuffer(w.readframes(w.getnframes()), "<i2").reshape(-1, 2).T
    assert raw.shape == audio.shape
    assert np.max(np.abs(raw / 32767.0 - audio)) <= 0.5 / 32767 + 1e-7


def _read_png(path):
    data = open(path, "rb").read()
    assert data[:8] == b"\x89PNG\r\n\x1a\n"
    pos, idat, w = 8, b"", None
    while pos < len(data):
        n, tag = struct.unpack(">I4s", data[pos:pos + 8])
        body = data[pos + 8:pos + 8 + n]
        (crc,) = struct.unpack(">I", data[pos + 8 + n:pos + 12 + n])
        assert crc == zlib.crc32(tag + body) & 0xFFFFFFFF
        if tag == b"IHDR":
            w, h = struct.unpack(">II", body[:8])
        elif tag == b"IDAT":
            idat += body
        pos += 12 + n
    raw = np.frombuffer(zlib.decompress(idat), np.uint8).reshape(h, 1 + 3 * w)
    assert np.all(raw[:, 0] == 0)
    return raw[:, 1:].reshape(h, w, 3)


def test_png_frames_round_trip(tmp_path):
    frames, _ = _clip(F=3)
    paths = Result(frames=frames, audio=None).save_frames(tmp_path / "fr")
    assert [os.path.basename(p) for p in paths] == ["frame_00000.png", "frame_00001.png", "frame_00002.png"]
    for p, f in zip(paths, frames):
        np.testing.assert_array_equal(_read_png(p), f)
    # PyAV's own PNG decoder agrees
    with av.open(paths[1]) as c:
        np.testing.assert_array_equal(next(c.decode(video=0)).to_ndarray(format="rgb24"), frames[1])


def test_to_uint8_rounds_half_to_even_and_clamps():
    x = np.array([-0.1, 0.0, 0.5 / 255, 1.5 / 255, 2.5 / 255, 1.0, 1.2], np.float32)
    np.testing.assert_array_equal(media.to_uint8(x), [0, 0, 0, 2, 2, 255, 255])


def test_bad_inputs_are_clear_errors(tmp_path):
    frames, audio = _clip(F=2)
    with pytest.raises(H3ValueError, match="uint8"):
        media.write_mp4(tmp_path / "x.mp4", frames.astype(np.float32))
    with pytest.raises(H3ValueError, match="even"):
        media.Mp4Writer(tmp_path / "x.mp4", 95, 64)
    with pytest.raises(H3ValueError, match="does not exist"):
        media.write_wav(tmp_path / "no" / "x.wav", audio)
    with pytest.raises(H3ValueError, match="latents only"):
        Result(video_latent=np.zeros((24, 2, 4, 4), np.float32)).save(tmp_path / "y.mp4")


def test_the_same_frames_encode_to_the_same_bytes(tmp_path):
    """x264's AVX-512 code gave different bytes on each encode of the demo's frames on a Zen 4
    EPYC (media._x264_options caps it at AVX2 there); a Ray worker's clip must equal the
    driver's (tests/test_batch_ray.py) and a user's file must be reproducible."""
    import h3cy
    from h3cy.demo import resolve_model
    from h3cy.ops import cpu_features
    assert ("x264-params" in media._x264_options(18, "medium")) == ("avx512f" in cpu_features())
    pipe = h3cy.load(resolve_model("demo"), weights="fp32")
    frames = np.asarray(pipe.generate("A red fox in the snow", width=64, height=64, frames=22, steps=2,
                                      seed=201).frames)
    blobs = set()
    for i in range(4):      # without the cap: 4 different files on Zen 4 (observed 8237-8287 bytes)
        path = media.write_mp4(tmp_path / f"{i}.mp4", frames, None, fps=24)
        blobs.add(open(path, "rb").read())
    assert len(blobs) == 1
