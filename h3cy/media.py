"""Writing results to disk: MP4 (H.264 + AAC through PyAV, which ships its own FFmpeg),
WAV (16-bit PCM, stdlib ``wave``) and PNG frames (zlib, no imaging library).

Every writer works on a temporary file next to the target and renames it into place only
when the file is complete, so an interrupted run (Ctrl-C, a cancelled generation) never
leaves a half-written file under the final name.

>>> import numpy as np, h3cy.media as m
>>> frames = np.zeros((22, 64, 64, 3), np.uint8)
>>> audio = np.zeros((2, 32000 * 22 // 24), np.float32)
>>> m.write_mp4("out.mp4", frames, audio, fps=24, sample_rate=32000)   # doctest: +SKIP
"""
import os
import struct
import wave
import zlib

import numpy as np

from .errors import H3ValueError
from .preview import preview_image
from .models.video_vae import to_uint8  # noqa: F401  (re-exported: frames -> uint8 for the writers)

__all__ = ["Mp4Writer", "write_mp4", "write_wav", "write_png", "write_frames", "to_uint8", "fit_audio",
           "PreviewWriter"]


def fit_audio(audio, n_frames, fps, sample_rate):
    """The audio cut (or zero-padded) to the duration of ``n_frames`` at ``fps``."""
    n = int(round(n_frames * sample_rate / fps))
    a = np.asarray(audio)[:, :n]
    if a.shape[1] < n:
        a = np.pad(a, ((0, 0), (0, n - a.shape[1])))
    return a


def _x264_options(crf, preset):
    """libx264's options.  On a CPU with AVX-512, x264's code for it (as PyAV 18.1's wheel
    builds it) encodes the same frames to different bytes from one run to the next (observed
    on a Zen 4 EPYC: 20-50% of the decoded pixels differ between two encodes in one
    process; capped at AVX2, or with no assembly, every encode is the same), so a file
    would not be reproducible and a Ray worker's clip would not equal the driver's.  The
    cap keeps x264's AVX2 code (the CPU has it: every AVX-512 CPU does); elsewhere x264
    picks its code itself (naming an instruction set a CPU lacks would make it crash)."""
    opts = {"crf": str(crf), "preset": preset}
    from .ops import cpu_features
    if "avx512f" in cpu_features():
        opts["x264-params"] = "asm=AVX2"
    return opts


def _check_frames(frames):
    if not isinstance(frames, np.ndarray) or frames.dtype != np.uint8 or frames.ndim != 4 \
            or frames.shape[-1] != 3:
        raise H3ValueError("frames must be a uint8 array [F, H, W, 3], got "
                           f"{getattr(frames, 'dtype', type(frames).__name__)} "
                           f"{getattr(frames, 'shape', '')}")
    return frames


def _check_audio(audio):
    a = np.asarray(audio)
    if a.ndim != 2 or a.shape[0] not in (1, 2) or not np.issubdtype(a.dtype, np.floating):
        raise H3ValueError(f"audio must be float [channels (1 or 2), samples], got {a.dtype} {a.shape}")
    return np.ascontiguousarray(a, dtype=np.float32)


class _AtomicPath:
    """A temporary name beside ``path``; ``commit`` renames it into place, ``discard``
    removes it."""

    def __init__(self, path):
        path = os.fspath(path)
        d = os.path.dirname(os.path.abspath(path))
        if not os.path.isdir(d):
            raise H3ValueError(f"output folder does not exist: {d}")
        self.path = path
        base, ext = os.path.splitext(os.path.basename(path))
        self.tmp = os.path.join(d, f".{base}.{os.getpid()}.partial{ext}")

    def commit(self):
        os.replace(self.tmp, self.path)

    def discard(self):
        try:
            os.remove(self.tmp)
        except FileNotFoundError:
            pass


class Mp4Writer:
    """Stream frames into an MP4 (H.264, yuv420p) with an optional AAC audio track.

    The audio is given up front and interleaved as frames arrive, so a long video can be
    written clip by clip.  Use as a context manager: leaving the block with an exception
    discards the file; leaving it normally finishes and renames it into place.
    Width and height must be even (H.264 4:2:0); h3cy's canvases are multiples of 32.
    """

    def __init__(self, path, width, height, fps=24, audio=None, sample_rate=32000, crf=18,
                 preset="medium"):
        import av  # imported here so that importing h3cy never needs FFmpeg
        if width % 2 or height % 2 or width <= 0 or height <= 0:
            raise H3ValueError(f"MP4 needs a positive even width and height, got {width}x{height}")
        self._target = _AtomicPath(path)
        self.width, self.height, self.fps = int(width), int(height), int(fps)
        self.frames_written = 0
        self._audio = None if audio is None else _check_audio(audio)
        self._sample_rate = int(sample_rate)
        self._audio_pos = 0
        self._av = av
        self._box = av.open(self._target.tmp, mode="w", format="mp4")
        try:
            v = self._box.add_stream("libx264", rate=self.fps)
            v.width, v.height, v.pix_fmt = self.width, self.height, "yuv420p"
            v.options = _x264_options(crf, preset)
            self._v = v
            self._a = None
            if self._audio is not None:
                a = self._box.add_stream("aac", rate=self._sample_rate)
                a.layout = "stereo" if self._audio.shape[0] == 2 else "mono"
                self._a = a
        except BaseException:
            self._box.close()
            self._target.discard()
            raise

    def __enter__(self):
        return self

    def __exit__(self, exc_type, exc, tb):
        if exc_type is None:
            self.close()
        else:
            self.abort()
        return False

    def add_frames(self, frames):
        """Append uint8 frames ``[n, H, W, 3]`` (and the audio that covers them)."""
        frames = _check_frames(frames)
        if frames.shape[1:3] != (self.height, self.width):
            raise H3ValueError(f"frames are {frames.shape[2]}x{frames.shape[1]}, the MP4 is "
                               f"{self.width}x{self.height}")
        for f in frames:
            vf = self._av.VideoFrame.from_ndarray(np.ascontiguousarray(f), format="rgb24")
            vf.pts = self.frames_written
            for p in self._v.encode(vf):
                self._box.mux(p)
            self.frames_written += 1
        self._write_audio_until(self.frames_written * self._sample_rate // self.fps)

    def _write_audio_until(self, sample, final=False):
        if self._a is None:
            return
        end = self._audio.shape[1] if final else min(sample, self._audio.shape[1])
        step = 1024
        while self._audio_pos < end and (final or self._audio_pos + step <= end):
            chunk = self._audio[:, self._audio_pos:min(self._audio_pos + step, end)]
            af = self._av.AudioFrame.from_ndarray(np.ascontiguousarray(chunk), format="fltp",
                                                  layout=self._a.layout.name)
            af.sample_rate = self._sample_rate
            af.pts = self._audio_pos
            for p in self._a.encode(af):
                self._box.mux(p)
            self._audio_pos += chunk.shape[1]

    def close(self):
        """Flush the encoders, close the container and move the file into place."""
        try:
            for p in self._v.encode(None):
                self._box.mux(p)
            if self._a is not None:
                self._write_audio_until(0, final=True)
                for p in self._a.encode(None):
                    self._box.mux(p)
            self._box.close()
        except BaseException:
            self.abort()
            raise
        self._target.commit()

    def abort(self):
        try:
            self._box.close()
        except Exception:  # the container may already be broken; the file goes anyway
            pass
        self._target.discard()


def write_mp4(path, frames, audio=None, fps=24, sample_rate=32000, crf=18):
    """Write uint8 frames ``[F, H, W, 3]`` and float audio ``[2, N]`` in [-1, 1] to an MP4."""
    frames = _check_frames(frames)
    with Mp4Writer(path, frames.shape[2], frames.shape[1], fps=fps, audio=audio,
                   sample_rate=sample_rate, crf=crf) as w:
        w.add_frames(frames)
    return os.fspath(path)


def write_wav(path, audio, sample_rate=32000):
    """Float audio ``[channels, N]`` in [-1, 1] -> 16-bit PCM WAV (values are clipped)."""
    a = _check_audio(audio)
    pcm = np.rint(np.clip(a, -1.0, 1.0) * 32767.0).astype("<i2").T.copy()  # interleave channels
    target = _AtomicPath(path)
    try:
        with wave.open(target.tmp, "wb") as w:
            w.setnchannels(a.shape[0])
            w.setsampwidth(2)
            w.setframerate(int(sample_rate))
            w.writeframes(pcm.tobytes())
    except BaseException:
        target.discard()
        raise
    target.commit()
    return os.fspath(path)


def _png_chunk(tag, data):
    body = tag + data
    return struct.pack(">I", len(data)) + body + struct.pack(">I", zlib.crc32(body) & 0xFFFFFFFF)


def write_png(path, image):
    """One uint8 RGB image ``[H, W, 3]`` -> PNG (8-bit truecolour, no filtering)."""
    img = np.asarray(image)
    if img.dtype != np.uint8 or img.ndim != 3 or img.shape[2] != 3:
        raise H3ValueError(f"image must be uint8 [H, W, 3], got {img.dtype} {img.shape}")
    h, w, _ = img.shape
    raw = np.concatenate([np.zeros((h, 1), np.uint8), img.reshape(h, w * 3)], axis=1)
    data = (b"\x89PNG\r\n\x1a\n"
            + _png_chunk(b"IHDR", struct.pack(">IIBBBBB", w, h, 8, 2, 0, 0, 0))
            + _png_chunk(b"IDAT", zlib.compress(raw.tobytes(), 6))
            + _png_chunk(b"IEND", b""))
    target = _AtomicPath(path)
    try:
        with open(target.tmp, "wb") as f:
            f.write(data)
    except BaseException:
        target.discard()
        raise
    target.commit()
    return os.fspath(path)


def write_frames(folder, frames, first_index=0, pattern="frame_{:05d}.png"):
    """Write uint8 frames ``[F, H, W, 3]`` as numbered PNGs into ``folder`` (created)."""
    frames = _check_frames(frames)
    os.makedirs(folder, exist_ok=True)
    return [write_png(os.path.join(folder, pattern.format(first_index + i)), f)
            for i, f in enumerate(frames)]


class PreviewWriter:
    """An ``on_step`` hook that rewrites one PNG after every step with the step's clean
    estimate (the file is replaced atomically, so a viewer never reads half a file).

    ``mode`` as in :func:`h3cy.preview.preview_image`; ``scale`` enlarges each latent pixel (nearest).
    ``then`` is another ``on_step`` hook called afterwards (its return value is passed on).
    ``tae``: a taeh3 decoder (:class:`h3cy.taeh3.TAEH3Decoder`) instead of the linear map.
    """

    def __init__(self, path, mode="sheet", scale=4, then=None, tae=None):
        if mode not in ("sheet", "middle", "first"):
            raise H3ValueError(f"preview mode must be 'sheet', 'middle' or 'first', got {mode!r}")
        self.path, self.mode, self.scale, self.then, self.tae = path, mode, int(scale), then, tae
        self.written = 0

    def __call__(self, state):
        write_png(self.path, preview_image(state.video_x0, self.mode, self.scale, tae=self.tae))
        self.written += 1
        return self.then(state) if self.then is not None else None
