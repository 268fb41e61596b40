"""h3cy.models.image_processor — the Qwen3-VL image processor's preparation of a keyframe for
the vision tower, as transformers 5.17 runs it without torchvision (its Pillow backend,
``Qwen2VLImageProcessorPil``): convert to RGB; resize with Pillow's bicubic filter to the
nearest size whose sides are multiples of ``patch_size * merge_size`` and whose area lies
within ``[min_pixels, max_pixels]`` (``smart_resize``); rescale by 1/255 (in float64, then
float32); normalise with the config's mean and std; cut into ``patch_size`` squares in
merge-block order, each repeated ``temporal_patch_size`` times (a still image is one
temporal patch).  The settings come from the shipped config
(``h3cy/data/processor/preprocessor_config.json``, see SOURCE.md there).

Resampling is Pillow's own (a run-time dependency): transformers with torchvision installed
resizes with torchvision instead, which differs by ~5e-4 relative in the prompt states.
"""
import json
import math
import os

import numpy as np

from ..errors import H3ValueError
from .. import images

DEFAULT_CONFIG = os.path.join(os.path.dirname(os.path.dirname(os.path.abspath(__file__))),
                              "data", "processor", "preprocessor_config.json")
# The smallest side h3cy takes.  The reference would upscale even a 1-pixel image to
# min_pixels; a keyframe under one patch on a side is a mistake, not a picture.
MIN_SIDE = 16
MAX_ASPECT = 200          # smart_resize's own bound (it raises beyond it)


def smart_resize(height, width, factor, min_pixels, max_pixels):
    """The resized (height, width): multiples of ``factor``, area within [min, max], the
    aspect ratio kept as closely as that allows (transformers' smart_resize)."""
    if max(height, width) / min(height, width) > MAX_ASPECT:
        raise H3ValueError(f"image aspect ratio {max(height, width) / min(height, width):.1f} is above "
                           f"{MAX_ASPECT} (the Qwen3-VL processor's limit)")
    h_bar = round(height / factor) * factor
    w_bar = round(width / factor) * factor
    if h_bar * w_bar > max_pixels:
        beta = math.sqrt((height * width) / max_pixels)
        h_bar = max(factor, math.floor(height / beta / factor) * factor)
        w_bar = max(factor, math.floor(width / beta / factor) * factor)
    elif h_bar * w_bar < min_pixels:
        beta = math.sqrt(min_pixels / (height * width))
        h_bar = math.ceil(height * beta / factor) * factor
        w_bar = math.ceil(width * beta / factor) * factor
    return h_bar, w_bar


def load_vision_image(image, what="image"):
    """An image for the prompt encoder as an RGB ``PIL.Image``: :func:`h3cy.images.load_image`
    (a path, a PIL image or a uint8 array; grey and RGBA converted to RGB; a missing file is
    FileNotFoundError, other bad input H3ValueError), then the vision tower's own limits: a
    side under MIN_SIDE or an aspect ratio above MAX_ASPECT is an H3ValueError."""
    img = images.load_image(image, what)
    w, h = img.size
    if min(w, h) < MIN_SIDE:
        raise H3ValueError(f"{what}: {w}x{h} is too small (each side must be at least {MIN_SIDE} pixels)")
    if max(h, w) / min(h, w) > MAX_ASPECT:
        raise H3ValueError(f"{what}: aspect ratio {max(h, w) / min(h, w):.1f} is above {MAX_ASPECT} "
                           "(the Qwen3-VL processor's limit)")
    return img


def image_bytes(img):
    """The bytes that identify a prepared image in the prompt cache key: its size and RGB pixels."""
    return f"{img.size[0]}x{img.size[1]}:".encode() + img.tobytes()


class ImageProcessor:
    """The Qwen3-VL image processor's settings and its preparation (:meth:`__call__`)."""

    def __init__(self, config):
        def need(name, kind=int):
            v = config.get(name)
            if isinstance(v, bool) or not isinstance(v, kind) or v <= 0:
                raise H3ValueError(f"processor config: {name} must be a positive {kind.__name__}, got {v!r}")
            return v
        size = config.get("size") or {}
        self.min_pixels = config.get("min_pixels", size.get("shortest_edge"))
        self.max_pixels = config.get("max_pixels", size.get("longest_edge"))
        for name, v in (("min_pixels", self.min_pixels), ("max_pixels", self.max_pixels)):
            if isinstance(v, bool) or not isinstance(v, int) or v <= 0:
                raise H3ValueError(f"processor config: {name} (size) must be a positive int, got {v!r}")
        self.patch_size = need("patch_size")
        self.temporal_patch_size = need("temporal_patch_size")
        self.merge_size = need("merge_size")
        self.image_mean = [float(x) for x in config.get("image_mean", (0.5, 0.5, 0.5))]
        self.image_std = [float(x) for x in config.get("image_std", (0.5, 0.5, 0.5))]
        self.rescale_factor = float(config.get("rescale_factor", 1 / 255))
        self.resample = int(config.get("resample", 3))          # PIL bicubic
        if len(self.image_mean) != 3 or len(self.image_std) != 3 or min(self.image_std) <= 0:
            raise H3ValueError("processor config: image_mean and image_std need 3 values (std > 0)")

    @classmethod
    def from_file(cls, path):
        with open(path) as f:
            return cls(json.load(f))

    @classmethod
    def default(cls):
        """The shipped Qwen3-VL processor settings."""
        return cls.from_file(DEFAULT_CONFIG)

    @property
    def factor(self):
        return self.patch_size * self.merge_size

    def grid(self, img):
        """(t, h, w) patch grid of a prepared PIL image."""
        w, h = img.size
        rh, rw = smart_resize(h, w, self.factor, self.min_pixels, self.max_pixels)
        return 1, rh // self.patch_size, rw // self.patch_size

    def __call__(self, img):
        """``(pixel_values [gh*gw, 3*tp*p*p] float32, (1, gh, gw))`` of one RGB PIL image."""
        w, h = img.size
        rh, rw = smart_resize(h, w, self.factor, self.min_pixels, self.max_pixels)
        resized = np.asarray(img.resize((rw, rh), resample=self.resample))          # (rh, rw, 3) uint8
        x = (resized.astype(np.float64) * self.rescale_factor).astype(np.float32)
        x = (x - np.asarray(self.image_mean, np.float32)) / np.asarray(self.image_std, np.float32)
        x = np.ascontiguousarray(x.transpose(2, 0, 1))                              # (3, rh, rw)
        p, m, tp = self.patch_size, self.merge_size, self.temporal_patch_size
        gh, gw = rh // p, rw // p
        x = x.reshape(3, gh // m, m, p, gw // m, m, p).transpose(1, 4, 2, 5, 0, 3, 6)
        x = np.broadcast_to(x[:, :, :, :, :, None], (*x.shape[:5], tp, p, p))
        return np.ascontiguousarray(x.reshape(gh * gw, 3 * tp * p * p), np.float32), (1, gh, gw)
