"""Previews while sampling: the clean estimate of a step as small RGB frames (the on_step
hook that writes them to a PNG is :class:`h3cy.media.PreviewWriter`).

The linear latent->RGB preview is ComfyUI's ``Latent2RGBPreviewer`` with the published
MiniMax-H3 video factors: every latent pixel's 24 channels times a 24x3 matrix plus a bias,
then ComfyUI's ``preview_to_image`` mapping ``uint8(clamp((y + 1) / 2, 0, 1) * 255)``
(truncation, as torch's ``.to(torch.uint8)``).  One RGB pixel per latent pixel: a 512x512
video previews as 32x32 images, one per latent frame.

Source of the constants: ``comfy/latent_formats.py``, class ``MiniMaxH3Video``, in
zoidypuh/ComfyUI at commit 4441d221dd95b111d0b9085e397082c86960fd20 (a ComfyUI fork that
carries the upstream MiniMax-H3 support; Comfy-Org/ComfyUI a125cd84, Oct 2025, predates H3).

Latent space: ComfyUI's ``MiniMaxH3Video`` format has ``scale_factor = 1`` and no
``process_in``/``process_out`` statistics, and ComfyUI's H3 video VAE
(``comfy/ldm/minimax/vae.py``, same fork, commit e5ba269e) returns
``(mean - latents_mean) / latents_std`` from ``encode`` and applies
``z * latents_std + latents_mean`` itself in ``decode``.  So the x0 ComfyUI previews is the
*normalised* latent the DiT sees -- the space h3cy's sampler holds (h3cy's
``VideoDecoder.decode`` de-normalises the same way).  The factors therefore apply to
``StepState.video_x0`` as it is, with no conversion.
"""
import numpy as np

from .errors import H3ValueError

__all__ = ["LATENT_RGB_FACTORS", "LATENT_RGB_BIAS", "latent_to_rgb_float", "latent_to_rgb",
           "contact_sheet", "preview_image", "tae_frames"]

# [channel, (R, G, B)] -- zoidypuh/ComfyUI@4441d221, comfy/latent_formats.py, MiniMaxH3Video
LATENT_RGB_FACTORS = np.array([
    [-0.018555, 0.024344, -0.017536],
    [0.150164, 0.137244, 0.129221],
    [0.027367, -0.050369, -0.208606],
    [-0.000793, -0.164622, -0.323161],
    [-0.048556, 0.013970, -0.074286],
    [0.011740, 0.014172, -0.006906],
    [0.061517, 0.061212, 0.110025],
    [0.035321, 0.086879, 0.110059],
    [-0.017426, 0.002997, 0.035356],
    [0.531539, 0.548819, 0.624404],
    [-0.024968, -0.040234, -0.034302],
    [-0.032549, -0.029096, -0.017221],
    [0.022609, 0.020286, 0.050661],
    [-0.084001, -0.038131, -0.020805],
    [-0.018830, 0.010412, 0.061120],
    [0.020777, 0.011196, -0.030994],
    [-0.008390, -0.012201, -0.025687],
    [-0.013281, -0.002924, 0.006331],
    [0.000260, 0.001833, -0.011038],
    [0.105471, 0.100482, 0.132106],
    [0.016529, 0.015213, 0.009999],
    [-0.014015, -0.017438, -0.019134],
    [-0.033787, -0.009984, -0.019725],
    [0.004224, 0.017284, 0.027196],
], dtype=np.float32)
LATENT_RGB_BIAS = np.array([0.057426, -0.022078, -0.071449], dtype=np.float32)
LATENT_CHANNELS = 24


def _check_latent(latent):
    z = np.asarray(latent)
    if z.ndim == 3:
        z = z[:, None]
    if z.ndim != 4 or z.shape[0] != LATENT_CHANNELS or not np.issubdtype(z.dtype, np.floating):
        raise H3ValueError(f"a preview needs a float video latent ({LATENT_CHANNELS}, T, h, w) or "
                           f"({LATENT_CHANNELS}, h, w), got {getattr(z, 'dtype', '?')} {np.shape(latent)}")
    return z


def latent_to_rgb_float(latent):
    """Video latent ``(24, T, h, w)`` (or ``(24, h, w)``) -> float32 ``(T, h, w, 3)``:
    ``y = sum_c latent[c] * LATENT_RGB_FACTORS[c] + LATENT_RGB_BIAS`` (roughly -1..1)."""
    z = _check_latent(latent)
    C, T, h, w = z.shape
    flat = np.ascontiguousarray(z, dtype=np.float32).reshape(C, -1)
    y = flat.T @ LATENT_RGB_FACTORS          # (T*h*w, 3), float32 accumulation
    y += LATENT_RGB_BIAS
    return y.reshape(T, h, w, 3)


def latent_to_rgb(latent):
    """Video latent ``(24, T, h, w)`` -> uint8 ``(T, h, w, 3)``, ComfyUI's preview mapping:
    ``uint8(clamp((y + 1) / 2, 0, 1) * 255)`` (truncating)."""
    y = latent_to_rgb_float(latent)
    y += np.float32(1.0)
    y /= np.float32(2.0)
    np.clip(y, 0.0, 1.0, out=y)
    y *= np.float32(255.0)
    return y.astype(np.uint8)


def contact_sheet(frames, cols=None, scale=1, gap=1):
    """uint8 frames ``(F, h, w, 3)`` -> one uint8 image: a grid of ``cols`` columns (default
    ``ceil(sqrt(F))``), each frame enlarged ``scale`` times (nearest), ``gap`` black pixels
    between tiles."""
    f = np.asarray(frames)
    if f.dtype != np.uint8 or f.ndim != 4 or f.shape[-1] != 3 or f.shape[0] < 1:
        raise H3ValueError(f"frames must be uint8 (F, h, w, 3), got {f.dtype} {f.shape}")
    if int(scale) < 1 or int(gap) < 0:
        raise H3ValueError(f"scale must be >= 1 and gap >= 0, got {scale}, {gap}")
    scale, gap = int(scale), int(gap)
    if scale > 1:
        f = f.repeat(scale, axis=1).repeat(scale, axis=2)
    n, h, w, _ = f.shape
    cols = int(np.ceil(np.sqrt(n))) if cols is None else max(1, min(int(cols), n))
    rows = -(-n // cols)
    sheet = np.zeros((rows * h + (rows - 1) * gap, cols * w + (cols - 1) * gap, 3), np.uint8)
    for i in range(n):
        r, c = divmod(i, cols)
        sheet[r * (h + gap):r * (h + gap) + h, c * (w + gap):c * (w + gap) + w] = f[i]
    return sheet


def tae_frames(decoder, latent, mode="sheet"):
    """uint8 frames from the taeh3 decoder (:class:`h3cy.taeh3.TAEH3Decoder`): every decoded
    frame (``"sheet"``), or the last one of the latents up to the middle / first latent frame
    (its memory blocks read the previous frames, so frames after it are not decoded)."""
    from .models.video_vae import to_uint8
    z = _check_latent(latent)
    if mode == "sheet":
        return to_uint8(decoder.decode(z))
    t = z.shape[1] // 2 if mode == "middle" else 0
    return to_uint8(decoder.decode(z[:, :t + 1])[-1:])


def preview_image(latent, mode="sheet", scale=1, tae=None):
    """One uint8 ``(H, W, 3)`` image of a video latent: ``mode="sheet"`` all latent frames
    as a contact sheet, ``"middle"`` the middle latent frame, ``"first"`` the first one (what
    ComfyUI's own Latent2RGB previewer shows for a video).  ``tae``: a taeh3 decoder to
    decode with instead of the linear map (:func:`tae_frames`)."""
    z = _check_latent(latent)
    if mode not in ("sheet", "middle", "first"):
        raise H3ValueError(f"preview mode must be 'sheet', 'middle' or 'first', got {mode!r}")
    if tae is not None:
        return contact_sheet(tae_frames(tae, z, mode), scale=scale)
    if mode == "sheet":
        return contact_sheet(latent_to_rgb(z), scale=scale)
    t = z.shape[1] // 2 if mode == "middle" else 0
    return contact_sheet(latent_to_rgb(z[:, t:t + 1]), scale=scale)
