"""Reading an image argument: the one loader behind keyframes (:mod:`h3cy.keyframes`) and the
prompt encoder's pictures (:mod:`h3cy.models.image_processor`, which adds the vision tower's
own size limits on top).

An image is a path (any format Pillow reads), a ``PIL.Image`` or a numpy uint8 array, and
comes back as an RGB ``PIL.Image``, decoded and checked, so a bad image fails before any
heavy work.  What the references do, and h3cy with them:

- a path: opened, turned upright by its EXIF orientation and converted to RGB — what
  diffusers' and transformers' ``load_image`` do with a file, the way a reference user
  reads one;
- a PIL image: converted to RGB (``Image.convert("RGB")``: grey replicated, alpha dropped,
  a palette expanded) as transformers' Qwen3-VL processor does (``convert_to_rgb``); it is
  taken as it stands otherwise (the reference pipeline does not rotate a PIL image it is
  handed);
- a numpy array: ``(H, W, 3)`` RGB, and also ``(H, W)`` / ``(H, W, 1)`` grey and
  ``(H, W, 4)`` RGBA, converted as the same pixels in a PIL image would be (transformers
  refuses non-RGB arrays; h3cy treats them as the PIL image they describe).

Errors: a missing file is Python's ``FileNotFoundError`` (as h3cy's CLI and batch report a
missing input file); everything else — a corrupt file, a wrong type, dtype or shape, an empty
image, a file larger than ``MAX_IMAGE_PIXELS`` (refused before decoding: decompression
bombs) — is :class:`h3cy.H3ValueError` naming the argument.
"""
import os

import numpy as np

from .errors import H3ValueError

__all__ = ["load_image", "MAX_IMAGE_PIXELS"]

MAX_IMAGE_PIXELS = 64 * 1024 * 1024      # 8192 x 8192: refuse larger files before decoding them


def pil():
    """The ``PIL.Image`` module (Pillow is a run-time dependency of h3cy)."""
    try:
        from PIL import Image
    except ImportError as e:            # pragma: no cover - Pillow is an install requirement
        raise ImportError("h3cy needs Pillow to read images (pip install Pillow)") from e
    return Image


def _open(path, name):
    Image = pil()
    from PIL import ImageOps
    try:
        with Image.open(path) as im:
            w, h = im.size
            if w * h > MAX_IMAGE_PIXELS:
                raise H3ValueError(f"{name}: {path} is {w}x{h}, larger than h3cy reads "
                                   f"({MAX_IMAGE_PIXELS} pixels)")
            im.load()
            return ImageOps.exif_transpose(im).convert("RGB")
    except H3ValueError:
        raise
    except (OSError, ValueError, SyntaxError, Image.DecompressionBombError) as e:
        raise H3ValueError(f"{name}: cannot read {path} as an image ({e})") from None


def load_image(image, name="image"):
    """``image`` (a path, a PIL image or a uint8 numpy array; see the module) as a decoded
    RGB ``PIL.Image``.  ``name`` names the argument in error messages."""
    Image = pil()
    if isinstance(image, (str, os.PathLike)):
        path = os.fspath(image)
        if not os.path.isfile(path):
            raise FileNotFoundError(f"{name}: no such file: {path}")
        img = _open(path, name)
    elif isinstance(image, Image.Image):
        try:
            image.load()
            img = image if image.mode == "RGB" else image.convert("RGB")
        except (OSError, ValueError) as e:
            raise H3ValueError(f"{name}: cannot read the PIL image ({e})") from None
    elif isinstance(image, np.ndarray):
        a = image
        if a.dtype != np.uint8:
            raise H3ValueError(f"{name}: a numpy image must be uint8 (height, width, 3), got {a.dtype} "
                               "(float frames in [0, 1]: h3cy.to_uint8 first)")
        if a.ndim == 3 and a.shape[-1] == 1:
            a = a[..., 0]
        if not (a.ndim == 2 or (a.ndim == 3 and a.shape[-1] in (3, 4))):
            raise H3ValueError(f"{name}: a numpy image must be (height, width, 3) RGB uint8 (or (height, width) "
                               f"grey, (height, width, 4) RGBA), got shape {image.shape}")
        img = Image.fromarray(np.ascontiguousarray(a)).convert("RGB")
    else:
        raise H3ValueError(f"{name}: expected a path, a PIL image or a uint8 (height, width, 3) numpy array, "
                           f"got {type(image).__name__}")
    if img.size[0] < 1 or img.size[1] < 1:
        raise H3ValueError(f"{name} is empty ({img.size[0]}x{img.size[1]})")
    return img
