"""numpy (h3cy) <-> torch (ComfyUI) hand-over.  Every tensor handed to ComfyUI is
``torch.from_numpy`` of an array made here, never a view of a buffer h3cy owns or reuses,
so two runs' outputs never share memory.

- IMAGE: float32 ``[F, H, W, 3]`` in 0..1, RGB (ComfyUI's batch of frames).
- AUDIO: ``{"waveform": float32 [1, 2, N], "sample_rate": 32000}``.
- LATENT: ``{"samples": float32 [1, 24, T, h, w], "audio_samples": float32 [1, 2, 32, A],
  "h3_geometry": {"width", "height", "frames", "fps"}}`` — h3cy's own latents (normalised,
  as its sampler returns them); not interchangeable with ComfyUI's MiniMax-H3 latents.
"""
import numpy as np
import torch


def image_from_frames(frames):
    """uint8 [F, H, W, 3] -> IMAGE float32 [F, H, W, 3] in 0..1 (a new array)."""
    f = np.asarray(frames)
    if f.ndim != 4 or f.shape[-1] != 3 or f.dtype != np.uint8:
        raise ValueError(f"expected uint8 frames [F, H, W, 3], got {f.dtype} {f.shape}")
    out = np.empty(f.shape, np.float32)
    np.multiply(f, np.float32(1.0 / 255.0), out=out, casting="unsafe")
    return torch.from_numpy(out)


def audio_from_result(audio, sample_rate):
    """float32 [2, N] -> AUDIO {"waveform": [1, 2, N], "sample_rate": int} (a new array)."""
    a = np.asarray(audio, dtype=np.float32)
    if a.ndim != 2 or a.shape[0] != 2:
        raise ValueError(f"expected stereo audio [2, N], got {a.shape}")
    wave = np.clip(a, -1.0, 1.0)[None]          # np.clip allocates: owned, contiguous
    return {"waveform": torch.from_numpy(np.ascontiguousarray(wave, np.float32)), "sample_rate": int(sample_rate)}


def latent_from_result(video_latent, audio_latent, geometry):
    v = np.array(video_latent, dtype=np.float32, copy=True)[None]
    a = np.array(audio_latent, dtype=np.float32, copy=True)[None]
    geo = {"width": int(geometry.width), "height": int(geometry.height), "frames": int(geometry.frames),
           "fps": int(geometry.fps)}
    return {"samples": torch.from_numpy(v), "audio_samples": torch.from_numpy(a), "h3_geometry": geo}


def latents_from_latent(latent):
    """LATENT -> (video [24, T, h, w], audio [2, 32, A], geometry dict), fresh numpy copies."""
    if not isinstance(latent, dict) or "samples" not in latent or "audio_samples" not in latent:
        raise ValueError("H3 Decode needs the LATENT of an H3 Sampler (with 'samples' and 'audio_samples'); "
                         "latents of other models cannot be decoded by h3cy")
    v = _to_numpy(latent["samples"])
    a = _to_numpy(latent["audio_samples"])
    if v.ndim != 5 or v.shape[0] != 1 or a.ndim != 4 or a.shape[0] != 1:
        raise ValueError(f"H3 latents must be samples [1, 24, T, h, w] and audio_samples [1, 2, 32, A], "
                         f"got {tuple(v.shape)} and {tuple(a.shape)}")
    return v[0], a[0], dict(latent.get("h3_geometry") or {})


def keyframe_from_image(image, name):
    """IMAGE float [B, H, W, 3] in 0..1 -> its first frame as uint8 (H, W, 3) RGB (a new
    array), the form h3cy takes keyframes in; None stays None."""
    if image is None:
        return None
    a = _to_numpy(image)
    if a.ndim == 3:
        a = a[None]
    if a.ndim != 4 or a.shape[-1] not in (3, 4) or a.shape[0] < 1:
        raise ValueError(f"{name} must be an IMAGE [B, H, W, 3], got {tuple(a.shape)}")
    return np.ascontiguousarray(np.rint(np.clip(a[0, :, :, :3], 0.0, 1.0) * 255.0).astype(np.uint8))


def _to_numpy(t):
    if isinstance(t, torch.Tensor):
        t = t.detach().to("cpu", torch.float32).numpy()
    return np.array(t, dtype=np.float32, copy=True)
