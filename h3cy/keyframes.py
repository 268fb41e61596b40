"""Keyframes for image-conditioned generation (fl2va): reading them (:func:`h3cy.images.load_image`),
putting them on the canvas exactly as the reference's resize step does, and encoding them into the
conditioning latents the transformer sees.

>>> frames, anchors, (w, h) = h3cy.keyframes.prepare_keyframes(first="a.png", last="b.png")  # doctest: +SKIP
>>> latent = h3cy.encode_image(encoder, "a.png", h3cy.Geometry(w, h))                      # doctest: +SKIP

The reference (diffusers' modular pipeline, ``MiniMaxH3ResizeStep``): the canvas comes from
the first keyframe's aspect ratio (short edge 768, area <= 768*1344, both sides rounded to
32) unless width and height are given; keyframe 0 is *stretched* onto it with PIL's
``resize((w, h), LANCZOS)``; the other (the last frame, when both are given) is
*cover-cropped*: scaled by ``max(w / W, h / H)`` with the sides rounded, LANCZOS, then the
centre cut out at ``((W' - w) // 2, (H' - h) // 2)``.  A keyframe already at the canvas size
is used as it is.  Resampling is Pillow's (the library the reference uses), so the pixels
are the reference's bit for bit.

Then ``encode_image`` (``encode_vae_condition``): the pixels ImageNet-normalised, the video
VAE encoder run on the single frame (its spatial path), the posterior *sampled*
``mean + std * noise`` under a generator of its own (torch's seeded 42 in the reference),
rounded to float16, normalised with the VAE's ``(z - latents_mean) / latents_std``.
"""
import numpy as np

from .errors import H3ValueError
from .images import load_image, pil
from .sampling.layout import MAX_PIXELS, Geometry

__all__ = ["canvas_size", "fit_keyframe", "prepare_keyframes", "encode_image",
           "posterior_noise", "KEYFRAME_ENCODE_SEED"]

CANVAS_MULTIPLE = 32          # the VAE's x16 times the transformer's 2x2 patches
CANVAS_SHORT_EDGE = 768
MIN_ASPECT, MAX_ASPECT = 1 / 4, 4
KEYFRAME_ENCODE_SEED = 42     # the reference samples every keyframe's posterior under seed 42


def canvas_size(aspect_width, aspect_height, short_edge=CANVAS_SHORT_EDGE, max_pixels=MAX_PIXELS,
                multiple=CANVAS_MULTIPLE):
    """``(width, height)`` of the canvas for an aspect ratio (or a keyframe's size), as the
    reference's ``resolve_canvas_size``: the short edge ``short_edge``, the area capped at
    ``max_pixels``, both sides rounded to ``multiple``.  Ratios outside 1:4 .. 4:1 are an
    H3ValueError (the released model was trained on those)."""
    if not (aspect_width > 0 and aspect_height > 0):
        raise H3ValueError(f"the aspect ratio must be positive, got {aspect_width}:{aspect_height}")
    ratio = aspect_width / aspect_height
    if not MIN_ASPECT <= ratio <= MAX_ASPECT:
        raise H3ValueError(f"MiniMax-H3 supports aspect ratios from 1:4 to 4:1, got {aspect_width}:{aspect_height} "
                           f"({ratio:g})")
    if ratio >= 1.0:
        width, height = short_edge * ratio, float(short_edge)
    else:
        width, height = float(short_edge), short_edge / ratio
    area = width * height
    if area > max_pixels:
        scale = (max_pixels / area) ** 0.5
        width, height = width * scale, height * scale
    return (max(multiple, round(width / multiple) * multiple), max(multiple, round(height / multiple) * multiple))


def fit_keyframe(image, width, height, mode="stretch"):
    """One keyframe on a ``width x height`` canvas as uint8 ``(height, width, 3)``:
    ``mode="stretch"`` (keyframe 0: PIL LANCZOS resize to the canvas) or ``"cover"`` (the
    follower: scaled to cover the canvas, LANCZOS, centre-cropped).  An image already at
    the canvas size is taken as it is."""
    if mode not in ("stretch", "cover"):
        raise H3ValueError(f"mode must be 'stretch' or 'cover', got {mode!r}")
    Image = pil()
    img = load_image(image)
    if img.size == (width, height):
        return np.array(img)
    if mode == "stretch":
        return np.array(img.resize((width, height), Image.Resampling.LANCZOS))
    sw, sh = img.size
    scale = max(width / sw, height / sh)
    size = (max(width, round(sw * scale)), max(height, round(sh * scale)))
    left, top = max(0, (size[0] - width) // 2), max(0, (size[1] - height) // 2)
    return np.array(img.resize(size, Image.Resampling.LANCZOS).crop((left, top, left + width, top + height)))


def prepare_keyframes(first=None, last=None, width=None, height=None):
    """The fl2va keyframes on the request's canvas, as the reference's resize step.

    Parameters
    ----------
    first, last : path, PIL image or uint8 (H, W, 3) array, optional (at least one)
    width, height : int, optional — the canvas (both or neither); default: from the first
        given keyframe's aspect ratio (:func:`canvas_size`)

    Returns
    -------
    frames : list of uint8 (height, width, 3) arrays, in packed order (first, then last)
    anchors : tuple of "first" / "last", positional with ``frames``
    (width, height) : the canvas

    Raises H3ValueError (FileNotFoundError for a missing path) before any resampling: no
    keyframe, an unreadable or corrupt image, width without height, a canvas that is not
    a legal :class:`h3cy.Geometry` size when given (multiples of 32, >= 64, area <=
    768*1344; the derived canvas is the reference's, which may exceed that area), or a
    first keyframe whose aspect ratio is outside 1:4 .. 4:1 (when it sets the canvas).
    Keyframes of different sizes are legal, as in the reference: the last one is
    cover-cropped onto the first one's canvas.
    """
    given = [(a, im) for a, im in (("first", first), ("last", last)) if im is not None]
    if not given:
        raise H3ValueError("prepare_keyframes needs a first and/or a last keyframe")
    imgs = [load_image(im, f"{a}_frame") for a, im in given]
    if (width is None) != (height is None):
        raise H3ValueError("width and height have to be given together, or neither of them")
    if width is None:
        # as the reference: rounding both sides to 32 may take the area slightly past
        # 768*1344 (e.g. 1:2 -> 768x1376), which the reference generates at
        width, height = canvas_size(*imgs[0].size)
    else:
        Geometry(width, height, 22)      # a requested canvas: h3cy's limits, with their messages
    frames = [fit_keyframe(img, width, height, "stretch" if i == 0 else "cover") for i, img in enumerate(imgs)]
    return frames, tuple(a for a, _ in given), (int(width), int(height))


def posterior_noise(shape, seed=KEYFRAME_ENCODE_SEED):
    """h3cy's own draw of the posterior noise: ``SeedSequence(seed)`` -> PCG64 ->
    ``standard_normal(float32)`` of ``shape``.  (The reference draws torch's
    ``randn`` under ``manual_seed(42)``; pass that tensor as ``posterior_noise`` to match it.)"""
    if isinstance(seed, bool) or not isinstance(seed, (int, np.integer)) or seed < 0:
        raise H3ValueError(f"seed must be a non-negative int, got {seed!r}")
    return np.random.Generator(np.random.PCG64(np.random.SeedSequence(int(seed)))).standard_normal(
        shape, dtype=np.float32)


def encode_image(video_vae, image, geometry, posterior_noise=None, fit="stretch", seed=KEYFRAME_ENCODE_SEED,
                 return_posterior=False, on_progress=None, cancel=None):
    """The conditioning latent of one keyframe, exactly as the reference hands it to the DiT.

    Parameters
    ----------
    video_vae : h3cy.VideoEncoder, or a path to load one from (a video VAE folder or file)
    image : path, PIL image or uint8 (H, W, 3) array — put on ``geometry``'s canvas as
        :func:`fit_keyframe` (``fit``: "stretch", keyframe 0 of the reference; "cover", the
        last frame when a first one is given too)
    geometry : h3cy.Geometry — its ``width`` x ``height`` is the canvas
    posterior_noise : array of shape (24, 1, height/16, width/16), optional — the standard
        normal draw of the posterior sample (the reference's ``randn`` under seed 42, to
        match it bit for bit); default :func:`posterior_noise` (``seed``)
    return_posterior : bool — also return the posterior's mean and std
    on_progress : callable(done, total, "encode_video"), optional; cancel : h3cy.CancelToken

    Returns
    -------
    latent : ndarray of shape (latent_channels, 1, height/16, width/16), float32 —
        ``(fp16(mean + std * noise) - latents_mean) / latents_std``; with
        ``return_posterior``, ``(latent, mean, std)`` (mean, std: the same shape, float32)
    """
    from .models.video_encoder import VideoEncoder, normalize_pixels
    if not isinstance(geometry, Geometry):
        raise H3ValueError(f"geometry must be an h3cy.Geometry, got {type(geometry).__name__}")
    enc = video_vae if isinstance(video_vae, VideoEncoder) else None
    C = enc.conf.latent_channels if enc is not None else 24
    shape = (C, 1, geometry.height // 16, geometry.width // 16)
    if posterior_noise is not None:
        noise = np.asarray(posterior_noise)
        if noise.shape == (1,) + shape:
            noise = noise[0]
        if noise.shape != shape or not np.issubdtype(noise.dtype, np.floating):
            raise H3ValueError(f"posterior_noise must be float of shape {shape}, got {noise.dtype} {noise.shape}")
        noise = noise.astype(np.float32)
    frame = fit_keyframe(image, geometry.width, geometry.height, fit)      # checks before loading weights
    if enc is None:
        enc = VideoEncoder.from_pretrained(video_vae)
        if enc.conf.latent_channels != C and posterior_noise is not None:
            raise H3ValueError(f"posterior_noise has {C} channels, the encoder {enc.conf.latent_channels}")
        shape = (enc.conf.latent_channels,) + shape[1:]
    if posterior_noise is None:
        noise = globals()["posterior_noise"](shape, seed)
    mean, std = enc.posterior(normalize_pixels(frame), on_progress=on_progress, cancel=cancel)
    if mean.shape != shape:
        raise H3ValueError(f"the encoder gave a {mean.shape} latent for the {geometry.width}x{geometry.height} "
                           f"canvas, expected {shape}")
    z = (mean + std * noise).astype(np.float16).astype(np.float32)
    lat = (z - enc.latents_mean[:, None, None, None]) / enc.latents_std[:, None, None, None]
    lat = np.ascontiguousarray(lat, dtype=np.float32)
    return (lat, mean, std) if return_posterior else lat
