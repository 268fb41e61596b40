"""What :meth:`h3cy.Pipeline.generate` returns: frames, audio, latents, and writers."""
import os

import numpy as np

from . import media
from .errors import H3ValueError


class Result:
    """One generation.

    Attributes
    ----------
    frames : uint8 ``[F, H, W, 3]`` RGB, or None for ``output="latent"``
    audio : float32 ``[2, N]`` in [-1, 1] (left, right), or None
    fps : int (24)
    sample_rate : int (32000)
    video_latent : float32 ``[24, T, h, w]`` (normalised, as the sampler returns it)
    audio_latent : float32 ``[2, 32, A]``
    geometry : h3cy.Geometry, or None when unknown (``decode`` of bare latents)
    timings : dict phase -> seconds
    peak_rss : bytes, the process's peak resident memory when the result was made
    """

    def __init__(self, frames=None, audio=None, fps=24, sample_rate=32000, video_latent=None,
                 audio_latent=None, geometry=None, timings=None, peak_rss=None):
        self.frames, self.audio = frames, audio
        self.fps, self.sample_rate = int(fps), int(sample_rate)
        self.video_latent, self.audio_latent = video_latent, audio_latent
        self.geometry = geometry
        self.timings = dict(timings or {})
        self.peak_rss = peak_rss

    def __repr__(self):
        fr = "none" if self.frames is None else "x".join(map(str, self.frames.shape))
        au = "none" if self.audio is None else f"{self.audio.shape[1] / self.sample_rate:.2f}s"
        return f"<h3cy.Result frames={fr} audio={au} fps={self.fps}>"

    def _need_frames(self):
        if self.frames is None:
            raise H3ValueError("this result holds latents only (output='latent'); decode it first "
                               "with pipe.decode(result.video_latent, result.audio_latent)")

    def audio_for_video(self):
        """The audio cut (or zero-padded) to the video's duration, ``F / fps`` seconds."""
        if self.audio is None:
            return None
        if self.frames is None:
            return self.audio
        return media.fit_audio(self.audio, self.frames.shape[0], self.fps, self.sample_rate)

    def save(self, path, crf=18):
        """Write an MP4 (H.264 video, AAC stereo audio at ``sample_rate``; the audio track is
        cut to the video's duration).  Returns the path."""
        self._need_frames()
        return media.write_mp4(path, self.frames, self.audio_for_video(), fps=self.fps,
                               sample_rate=self.sample_rate, crf=crf)

    def save_frames(self, folder):
        """Write every frame as ``folder/frame_00000.png`` ...  Returns the list of paths."""
        self._need_frames()
        return media.write_frames(folder, self.frames)

    def save_audio(self, path):
        """Write the whole decoded audio as a 16-bit stereo WAV.  Returns the path."""
        if self.audio is None:
            raise H3ValueError("this result has no decoded audio")
        return media.write_wav(path, self.audio, self.sample_rate)

    def save_latents(self, path):
        """Write both latents to an ``.npz`` (``video_latent``, ``audio_latent``)."""
        if self.video_latent is None:
            raise H3ValueError("this result has no latents")
        tmp = os.fspath(path) + ".partial.npz"
        np.savez(tmp, video_latent=self.video_latent, audio_latent=self.audio_latent)
        os.replace(tmp, path)
        return os.fspath(path)
