"""Request geometry and the packed layout (spec §1, §2), identical to diffusers'
MiniMax-H3 layout builder (t2va and fl2va).

Row order: text (L rows, tag 1; 0 for a keyframe's vision rows) -> keyframe condition rows
(fl2va only, one latent frame each, tag 0) -> audio (2A rows, channel-major, tag 2) -> video
(T·(h/2)·(w/2) patches, frame-major, tag 0).  Position ids are built in float64 exactly
as diffusers builds them (the transformer casts them to float32).
"""
import logging
import math

import numpy as np

from ..errors import H3ValueError
from .conditions import condition_timestep

log = logging.getLogger("h3cy")

FPS = 24
# Rotary time runs at 40 units a second: one per audio latent (40 a second), 40/24 = 5/3
# per pixel frame of video.
ROTARY_TIME_PER_SECOND = 40
MAX_PIXELS = 768 * 1344
_FRAME_RESCALE = 5.0 / 3.0
_FRAMES_PER_LATENT = (1, 4, 4, 4, 4)
_SPATIAL_SCALE = 32
TAG_VIDEO, TAG_TEXT, TAG_AUDIO = 0, 1, 2


def align_frames(frames):
    """Round a pixel frame count up to the next 17n + 5."""
    f = int(frames)
    while f % 17 != 5:
        f += 1
    return f


class Geometry:
    """The size of one generation.

    Parameters
    ----------
    width, height : int, default 512 — multiples of 32, >= 64, width*height <= 768*1344
    frames : int, default 22 — rounded up to the next 17n + 5 (22 ... 362), with a warning

    Attributes: ``T`` (latent frames), ``h``, ``w`` (latent size), ``A`` (audio latents per
    channel), ``seconds``, ``fps`` (24).
    """

    def __init__(self, width=512, height=512, frames=22):
        for name, v in (("width", width), ("height", height), ("frames", frames)):
            if isinstance(v, bool) or not isinstance(v, (int, np.integer)):
                raise H3ValueError(f"{name} must be an int, got {v!r}")
        width, height, frames = int(width), int(height), int(frames)
        for name, v in (("width", width), ("height", height)):
            if v < 64 or v % 32:
                near = max(64, 32 * round(v / 32))
                raise H3ValueError(f"{name} must be a multiple of 32 and >= 64, got {v} (nearest legal: {near})")
        if width * height > MAX_PIXELS:
            s = math.sqrt(MAX_PIXELS / (width * height))
            w2, h2 = max(64, int(width * s) // 32 * 32), max(64, int(height * s) // 32 * 32)
            raise H3ValueError(f"width*height = {width * height} exceeds 768*1344 = {MAX_PIXELS} "
                               f"(same aspect, legal: {w2}x{h2})")
        if frames < 1:
            raise H3ValueError(f"frames must be >= 1, got {frames} (nearest legal: 22)")
        aligned = align_frames(frames)
        if aligned > 362:
            raise H3ValueError(f"frames = {frames} rounds up to {aligned}; at most 362 (15.08 s) are allowed "
                               "(nearest legal: 362)")
        if aligned != frames:
            log.warning("h3cy: frames must be 17n + 5; rounding %d up to %d", frames, aligned)
        self.width, self.height, self.frames = width, height, aligned
        self.fps = FPS
        self.T = (aligned - 5) // 17 * 5 + 2
        self.h, self.w = height // 16, width // 16
        self.A = int(round(aligned / FPS * ROTARY_TIME_PER_SECOND))

    @classmethod
    def from_seconds(cls, seconds, width=512, height=512):
        """The shortest legal length of at least ``seconds`` (at 24 fps)."""
        if not (isinstance(seconds, (int, float)) and math.isfinite(seconds) and seconds > 0):
            raise H3ValueError(f"seconds must be a positive number, got {seconds!r}")
        return cls(width, height, align_frames(max(1, math.ceil(seconds * FPS))))

    @property
    def seconds(self):
        return self.frames / FPS

    @property
    def video_rows(self):
        return self.T * (self.h // 2) * (self.w // 2)

    def __repr__(self):
        return (f"Geometry(width={self.width}, height={self.height}, frames={self.frames}; "
                f"T={self.T}, h={self.h}, w={self.w}, A={self.A}, {self.seconds:.3f} s)")


def _spatial_grid(n, sqrt_area):
    ratio = n / sqrt_area
    left = (1.0 - ratio) / 2.0
    return np.linspace(left, left + ratio, n // 2, endpoint=False) * _SPATIAL_SCALE


def _temporal_grid(T, origin):
    """Rotary time of each latent frame's video rows: the video VAE turns each 17-pixel-frame
    chunk into 5 latent frames of 1, 4, 4, 4, 4 pixel frames, and latent frame f's time is
    ``origin`` plus 5/3 (rotary units per pixel frame) times the pixel frames before it."""
    spans = np.array([_FRAME_RESCALE * _FRAMES_PER_LATENT[k % 5] for k in range(T)], np.float64)
    tau = np.concatenate([np.zeros(1), np.cumsum(spans[:-1])]) if T > 1 else np.zeros(1)
    return origin + tau


def latent_frame_times(geometry):
    """Seconds at which each latent frame's first pixel frame is shown, shape (T,) float64.

    The same numbers as the layout's rotary time of the video rows, ``(position - L) / 40``
    (:class:`Layout`): latent frame f starts at pixel frame ``17*(f//5)`` when ``f % 5 == 0``,
    else at ``17*(f//5) + 1 + 4*(f%5 - 1)``, i.e. at that over 24 seconds."""
    return _temporal_grid(geometry.T, 0.0) / ROTARY_TIME_PER_SECOND


class Layout:
    """The packed sequence of a geometry and a text length L, identical to diffusers'
    ``MiniMaxH3PrepareLayoutStep.build_packed_sequence`` (t2va, and fl2va with keyframes).

    Row order: text (L rows) -> condition rows (one latent frame, (h/2)*(w/2) rows, per
    condition, in the order given; none in t2va) -> audio (2A rows) -> generated video.

    Parameters
    ----------
    geometry : Geometry
    text_len : int — L
    text_tags : (L,) ints, optional — the modality tag of every text row: 1 (text), or 0 for
        the rows of a keyframe's vision block (what ``encode_prompt(..., return_tags=True)``
        returns); all 1 when omitted
    condition_frames : sequence of latent frame indices, 0 (first) or T-1 (last) — one per
        condition, in packed order (see :mod:`h3cy.sampling.conditions`); a condition's rows
        sit on the rotary clock at that frame's time

    Attributes (numpy, diffusers' names): ``position_ids`` (S, 3) float64, ``token_tags`` (S,)
    int64, ``text_indices`` (L,), ``audio_indices`` (2A,), ``video_indices`` (Nc + Nv,) int64
    (condition rows first, as diffusers orders them), ``S``; and ``condition_frames``,
    ``condition_indices`` (Nc,), ``generated_video_indices`` (Nv,), ``n_condition_rows``.
    """

    def __init__(self, geometry, text_len, text_tags=None, condition_frames=()):
        if isinstance(text_len, bool) or not isinstance(text_len, (int, np.integer)) or text_len < 1:
            raise H3ValueError(f"text_len must be a positive int, got {text_len!r}")
        g = geometry
        L = int(text_len)
        if text_tags is None:
            ttags = np.full(L, TAG_TEXT, np.int64)
        else:
            ttags = np.asarray(text_tags)
            if ttags.ndim == 2 and ttags.shape[0] == 1:
                ttags = ttags[0]
            if ttags.shape != (L,) or not np.issubdtype(ttags.dtype, np.integer):
                raise H3ValueError(f"text_tags must be {L} ints (one per text row), got {ttags.dtype} "
                                   f"{np.shape(text_tags)}")
            if ttags.size and not np.all((ttags == TAG_TEXT) | (ttags == TAG_VIDEO)):
                raise H3ValueError(f"text_tags must be {TAG_TEXT} (text) or {TAG_VIDEO} (a vision block's "
                                   f"rows), got values {sorted(set(ttags.tolist()))}")
            ttags = ttags.astype(np.int64)
        frames = tuple(int(f) for f in condition_frames)
        for f in frames:
            if f not in (0, g.T - 1):
                raise H3ValueError(f"a condition anchors latent frame 0 or {g.T - 1}, got {f}")
        ph, pw = g.h // 2, g.w // 2
        rows_per_frame = ph * pw
        n_cond = len(frames) * rows_per_frame
        n_audio = 2 * g.A
        n_video = g.T * rows_per_frame
        S = L + n_cond + n_audio + n_video
        c0, a0 = L, L + n_cond
        v0 = a0 + n_audio
        pos = np.zeros((S, 3), np.float64)
        pos[:L, 0] = np.arange(L, dtype=np.float64)
        sa = np.sqrt(g.h * g.w)
        hgrid, wgrid = _spatial_grid(g.h, sa), _spatial_grid(g.w, sa)
        hh, ww = np.meshgrid(hgrid, wgrid, indexing="ij")
        for k, f in enumerate(frames):
            rows = slice(c0 + k * rows_per_frame, c0 + (k + 1) * rows_per_frame)
            pos[rows, 0] = _anchor_time(f, g.T, L)
            pos[rows, 1] = hh.reshape(-1)
            pos[rows, 2] = ww.reshape(-1)
        t_audio = float(L) + np.arange(g.A, dtype=np.float64)
        pos[a0:v0, 0] = np.tile(t_audio, 2)
        pos[a0:a0 + g.A, 2] = wgrid[0]
        pos[a0 + g.A:v0, 2] = wgrid[-1]
        vid = np.empty((g.T, rows_per_frame, 3), np.float64)
        vid[:, :, 0] = _temporal_grid(g.T, float(L))[:, None]
        vid[:, :, 1] = hh.reshape(-1)[None]
        vid[:, :, 2] = ww.reshape(-1)[None]
        pos[v0:] = vid.reshape(-1, 3)
        tags = np.empty(S, np.int64)
        tags[:L], tags[c0:a0], tags[a0:v0], tags[v0:] = ttags, TAG_VIDEO, TAG_AUDIO, TAG_VIDEO
        self.geometry, self.L, self.S = g, L, S
        self.position_ids = pos
        self.token_tags = tags
        self.text_tags = ttags
        self.condition_frames = frames
        self.n_condition_rows = n_cond
        self.text_indices = np.arange(L, dtype=np.int64)
        self.condition_indices = np.arange(c0, a0, dtype=np.int64)
        self.audio_indices = np.arange(a0, v0, dtype=np.int64)
        self.generated_video_indices = np.arange(v0, S, dtype=np.int64)
        self.video_indices = np.concatenate([self.condition_indices, self.generated_video_indices])
        # the latent frame of every generated video row, and of every condition row
        self._vrow_frame = np.repeat(np.arange(g.T), rows_per_frame)
        self._crow_frame = np.repeat(np.asarray(frames, np.int64), rows_per_frame)

    def row_timesteps(self, t_video, t_audio):
        """(timestep, timestep_indices) of one step (spec §2.5): the distinct row timesteps
        ascending and every row's index into them.  Text and generated video rows carry the
        video timestep, audio rows the audio one, condition rows ``max(t_video, 0.999)``.
        ``t_video`` may be per latent frame, shape (T,): video rows then take their frame's,
        text rows latent frame 0's and a condition row its anchored frame's."""
        tv = np.asarray(t_video, np.float32)
        row_t = np.empty(self.S, np.float32)
        if tv.ndim == 0:
            row_t[:] = tv
            row_t[self.condition_indices] = condition_timestep(tv)
        else:
            if tv.shape != (self.geometry.T,):
                raise H3ValueError(f"per-frame video timesteps must be ({self.geometry.T},), got {tv.shape}")
            row_t[self.text_indices] = tv[0]
            row_t[self.generated_video_indices] = tv[self._vrow_frame]
            row_t[self.condition_indices] = condition_timestep(tv[self._crow_frame])
        row_t[self.audio_indices] = np.float32(t_audio)
        values, inverse = np.unique(row_t, return_inverse=True)
        return values.astype(np.float32), inverse.astype(np.int64)

    step_timesteps = row_timesteps


def _anchor_time(frame, T, L):
    """Rotary time of a condition's rows: the text length for the first frame; for the last,
    the text length plus the pairwise (numpy) sum of every latent frame's span minus one
    pixel frame's 5/3 -- how the reference computes it, which from 16 latent frames on
    differs in the last ulp from the video rows' sequential cumulative sum."""
    if frame == 0:
        return float(L)
    spans = np.ones(T, dtype=np.float64) * _FRAME_RESCALE
    for k in range(len(_FRAMES_PER_LATENT)):
        spans[k::len(_FRAMES_PER_LATENT)] *= _FRAMES_PER_LATENT[k]
    return float(L) + float(spans.sum()) - _FRAME_RESCALE


def patchify(latent):
    """Video latent (24, T, h, w) or (1, 24, T, h, w) -> rows (T*(h/2)*(w/2), 96), frame-major
    then patch row then patch column; column c*4 + ph*2 + pw."""
    x = np.asarray(latent, np.float32)
    if x.ndim == 5:
        if x.shape[0] != 1:
            raise H3ValueError(f"batch size must be 1, got {x.shape[0]}")
        x = x[0]
    if x.ndim != 4 or x.shape[2] % 2 or x.shape[3] % 2:
        raise H3ValueError(f"video latent must be (C, T, h, w) with even h, w; got {x.shape}")
    C, T, h, w = x.shape
    x = x.reshape(C, T, h // 2, 2, w // 2, 2).transpose(1, 2, 4, 0, 3, 5)
    return np.ascontiguousarray(x.reshape(T * (h // 2) * (w // 2), C * 4))


def unpatchify(rows, T, h, w):
    """Inverse of :func:`patchify`: rows (T*(h/2)*(w/2), C*4) -> (C, T, h, w)."""
    r = np.asarray(rows, np.float32)
    C = r.shape[1] // 4
    if r.shape != (T * (h // 2) * (w // 2), C * 4):
        raise H3ValueError(f"rows {r.shape} do not fit T={T}, h={h}, w={w}")
    x = r.reshape(T, h // 2, w // 2, C, 2, 2).transpose(3, 0, 1, 4, 2, 5)
    return np.ascontiguousarray(x.reshape(C, T, h, w))


def pack_audio(audio):
    """Audio latent (2, 32, A) -> rows (2A, 32), channel-major: row[ch*A + j][c] = audio[ch, c, j]."""
    a = np.asarray(audio, np.float32)
    if a.ndim != 3:
        raise H3ValueError(f"audio latent must be (channels, 32, A), got {a.shape}")
    return np.ascontiguousarray(a.transpose(0, 2, 1).reshape(-1, a.shape[1]))


def unpack_audio(rows, channels=2):
    r = np.asarray(rows, np.float32)
    A = r.shape[0] // channels
    return np.ascontiguousarray(r.reshape(channels, A, r.shape[1]).transpose(0, 2, 1))
