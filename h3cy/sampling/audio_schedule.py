"""Audio-driven schedules: make the video's denoising follow a music track.

From a WAV file or ``(samples, sample_rate)``, compute an onset-strength envelope (spectral
flux of a short-time Fourier transform) and beat times (peaks of that envelope on the
tempo's grid), then build per-latent-frame video schedules in which the latent frames
that fall on beats follow a differently shifted sigma curve: with ``strength > 0`` they
keep more noise for longer (their content settles late, so motion gathers on the beat);
``strength < 0`` makes them settle early.  Every frame's sigmas still decrease strictly
to 0, and the audio schedule is unchanged.  numpy only.
"""
import math
import wave

import numpy as np

from ..errors import H3ValueError
from .layout import FPS, Geometry, align_frames, latent_frame_times
from .schedule import Schedule, shifted_sigmas

HOP = 512
WIN = 2048


def load_audio(audio):
    """``(mono float32 samples, sample_rate)`` from a WAV path or ``(samples, sr)``
    (samples of shape (n,) or (n, channels) / (channels, n), any numeric dtype)."""
    if isinstance(audio, (str, bytes)) or hasattr(audio, "__fspath__"):
        with wave.open(str(audio), "rb") as w:
            sr, ch, width, n = w.getframerate(), w.getnchannels(), w.getsampwidth(), w.getnframes()
            raw = w.readframes(n)
        if width == 2:
            x = np.frombuffer(raw, "<i2").astype(np.float32) / 32768.0
        elif width == 4:
            x = np.frombuffer(raw, "<i4").astype(np.float32) / 2147483648.0
        elif width == 1:
            x = (np.frombuffer(raw, np.uint8).astype(np.float32) - 128.0) / 128.0
        else:
            raise H3ValueError(f"unsupported WAV sample width {width} bytes")
        x = x.reshape(-1, ch).mean(axis=1)
        return x.astype(np.float32), sr
    try:
        samples, sr = audio
    except (TypeError, ValueError):
        raise H3ValueError("audio must be a WAV path or (samples, sample_rate)")
    x = np.asarray(samples, np.float32)
    if x.ndim == 2:
        x = x.mean(axis=0 if x.shape[0] < x.shape[1] else 1)
    if x.ndim != 1 or x.size == 0:
        raise H3ValueError(f"audio samples must be 1-D or 2-D and non-empty, got shape {np.shape(samples)}")
    if not (isinstance(sr, (int, np.integer)) and sr > 0):
        raise H3ValueError(f"sample_rate must be a positive int, got {sr!r}")
    return x, int(sr)


def onset_envelope(audio):
    """(envelope, frames_per_second): positive spectral flux of a Hann-windowed STFT (hop
    512, window 2048), log-compressed, one value per hop; frame n is centred at
    ``(n * 512 + 1024) / sample_rate`` seconds."""
    x, sr = load_audio(audio)
    if x.size < WIN:
        x = np.pad(x, (0, WIN - x.size))
    n = 1 + (x.size - WIN) // HOP
    idx = np.arange(WIN)[None, :] + HOP * np.arange(n)[:, None]
    spec = np.abs(np.fft.rfft(x[idx] * np.hanning(WIN).astype(np.float32), axis=1))
    logspec = np.log1p(100.0 * spec)
    flux = np.maximum(0.0, np.diff(logspec, axis=0)).sum(axis=1)
    env = np.concatenate([[0.0], flux]).astype(np.float32)
    if env.max() > 0:
        env /= env.max()
    return env, sr / HOP


def beat_times(audio, min_bpm=60.0, max_bpm=200.0):
    """Beat times in seconds: the tempo from the envelope's autocorrelation, then the phase
    on that grid that collects the most onset strength, then each grid beat snapped to the
    strongest envelope value within a quarter period."""
    env, fps = onset_envelope(audio)
    e = env - env.mean()
    ac = np.correlate(e, e, mode="full")[e.size - 1:]
    lo, hi = int(fps * 60.0 / max_bpm), int(math.ceil(fps * 60.0 / min_bpm))
    if hi >= ac.size or lo < 1:
        return np.zeros(0)
    period = lo + int(np.argmax(ac[lo:hi + 1]))
    phase = max(range(period), key=lambda p: env[p::period].sum())
    beats = []
    q = max(1, period // 4)
    for c in range(phase, env.size, period):
        a, b = max(0, c - q), min(env.size, c + q + 1)
        beats.append(a + int(np.argmax(env[a:b])))
    # envelope frame n compares windows starting at samples (n-1)*HOP and n*HOP; the
    # onset is seen as the click reaches the window's centre: n*HOP + WIN/2
    return (np.asarray(beats, np.float64) * HOP + WIN / 2) / (fps * HOP)


def frames_for(audio):
    """The legal (17n + 5) frame count that covers the audio's duration at 24 fps."""
    x, sr = load_audio(audio)
    f = align_frames(max(1, math.ceil(x.size / sr * FPS)))
    if f > 362:
        raise H3ValueError(f"the audio lasts {x.size / sr:.2f} s; at most 362 frames (15.08 s) are allowed")
    return f


def beat_frames(audio, geometry):
    """The latent frames whose time spans contain a beat (beats past the video's end are
    dropped).  Latent frame f shows pixel frames from ``latent_frame_times(g)[f]`` up to
    the next latent frame's start (the last one up to the video's end): every 17-frame
    chunk is 1 + 4 + 4 + 4 + 4 pixel frames."""
    starts = latent_frame_times(geometry)
    out = set()
    for b in beat_times(audio):
        if 0.0 <= b < geometry.seconds:
            out.add(int(np.searchsorted(starts, b, side="right")) - 1)
    return sorted(out)


def beat_schedule(audio, steps, geometry=None, strength=0.5, video_shift=12.0, audio_shift=3.0):
    """A :class:`Schedule` whose video sigmas are per latent frame: frames on beats use the
    shift ``video_shift * (1 + strength)`` (``strength`` in (-1, 4]), the others
    ``video_shift``; audio as usual."""
    g = geometry if geometry is not None else Geometry(frames=frames_for(audio))
    if not (-1.0 < strength <= 4.0):
        raise H3ValueError(f"strength must be in (-1, 4], got {strength}")
    base = Schedule.shifted(steps, video_shift, audio_shift)
    on = shifted_sigmas(steps + 1, video_shift * (1.0 + strength))
    if on.shape != base.video_sigmas.shape:
        raise H3ValueError("the beat curve collapsed duplicate sigmas; use fewer steps or a smaller strength")
    cols = np.repeat(base.video_sigmas[:, None], g.T, axis=1)
    for f in beat_frames(audio, g):
        cols[:, f] = on
    return Schedule(cols, base.audio_sigmas)
