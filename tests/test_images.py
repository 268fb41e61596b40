"""h3cy.images.load_image, the one loader behind keyframes (h3cy.prepare_keyframes,
encode_image) and the prompt encoder's pictures (h3cy.models.image_processor.load_vision_image,
which adds the vision tower's size limits): its conversions against transformers' and
diffusers' own ``load_image`` / ``convert_to_rgb``, and the same errors on both paths."""
import numpy as np
import pytest

import h3cy
from h3cy import images
from h3cy.errors import H3ValueError
from h3cy.models.image_processor import load_vision_image

LOADERS = {"keyframes": lambda x: h3cy.prepare_keyframes(x, width=64, height=64)[0][0],
           "vision": load_vision_image}


def _pixels(h=40, w=56, c=4, seed=0):
    return np.random.default_rng(seed).integers(0, 256, (h, w, c), dtype=np.uint8)


@pytest.mark.parametrize("mode", ["RGBA", "L", "LA", "P", "I;16", "CMYK"])
def test_pil_modes_convert_as_transformers(mode):
    """A PIL image of any mode becomes RGB as transformers' processor makes it
    (``convert_to_rgb``: ``Image.convert("RGB")``)."""
    from PIL import Image
    from transformers.image_transforms import convert_to_rgb
    src = Image.fromarray(_pixels())
    img = src.convert("L").convert(mode) if mode == "I;16" else src.convert(mode)
    got = images.load_image(img)
    want = convert_to_rgb(img)
    assert got.mode == "RGB" and want.mode == "RGB"
    assert np.array_equal(np.array(got), np.array(want))


@pytest.mark.parametrize("shape", [(40, 56), (40, 56, 1), (40, 56, 4)])
def test_grey_and_rgba_arrays_are_the_pil_image_they_describe(shape):
    """transformers refuses non-RGB arrays; h3cy takes them as the PIL image of those pixels
    (grey replicated, alpha dropped), so the reference run on ``Image.fromarray(a)`` is
    what h3cy computes."""
    from PIL import Image
    a = _pixels(c=4)[..., :shape[2]] if len(shape) == 3 else _pixels(c=1)[..., 0]
    pil = Image.fromarray(a[..., 0] if a.ndim == 3 and a.shape[2] == 1 else a)
    got = np.array(images.load_image(a))
    assert got.shape == (40, 56, 3)
    assert np.array_equal(got, np.array(pil.convert("RGB")))
    if len(shape) == 3 and shape[2] == 4:
        assert np.array_equal(got, a[..., :3])
    else:
        assert np.array_equal(got, np.repeat(a.reshape(40, 56, 1), 3, axis=2))


def test_path_is_read_as_diffusers_and_transformers_load_image(tmp_path):
    """A file is opened, turned upright by its EXIF orientation and converted to RGB, as
    both references' ``load_image`` read it (a phone's portrait JPEG is stored sideways);
    a PIL image handed over is taken as it stands (the reference pipeline does not rotate it)."""
    from PIL import Image
    from diffusers.utils import load_image as diffusers_load
    from transformers.image_utils import load_image as transformers_load
    src = Image.fromarray(_pixels(c=4), "RGBA")
    exif = Image.Exif()
    exif[0x0112] = 6                      # orientation: rotate 90 degrees clockwise to view
    path = str(tmp_path / "sideways.png")
    src.save(path, exif=exif)
    got = images.load_image(path)
    assert got.size == (40, 56)           # upright: width and height swapped
    for want in (diffusers_load(path), transformers_load(path)):
        assert np.array_equal(np.array(got), np.array(want))
    with Image.open(path) as im:
        im.load()
        assert np.array_equal(np.array(images.load_image(im)), np.array(im.convert("RGB")))
    # and both h3cy paths read it so
    assert np.array_equal(np.array(load_vision_image(path)), np.array(got))
    assert h3cy.prepare_keyframes(path, width=64, height=64)[0][0].shape == (64, 64, 3)


@pytest.mark.parametrize("loader", list(LOADERS))
def test_the_same_errors_on_both_paths(loader, tmp_path):
    load = LOADERS[loader]
    with pytest.raises(FileNotFoundError, match="no such file"):
        load(str(tmp_path / "missing.png"))
    with pytest.raises(FileNotFoundError):
        load(tmp_path / "missing.png")                      # os.PathLike too
    bad = tmp_path / "corrupt.png"
    bad.write_bytes(b"\x89PNG\r\n\x1a\n" + b"not really a png" * 10)
    with pytest.raises(H3ValueError, match="cannot read"):
        load(str(bad))
    with pytest.raises(H3ValueError, match="uint8"):
        load(np.zeros((64, 64, 3), np.float32))
    with pytest.raises(H3ValueError, match="shape"):
        load(np.zeros((64, 64, 2), np.uint8))
    with pytest.raises(H3ValueError, match="expected"):
        load(3.5)
    # grey and RGBA arrays are taken on both
    assert np.asarray(load(_pixels(64, 64, 4))).shape[-1] == 3
    assert np.asarray(load(_pixels(64, 64, 1)[..., 0])).shape[-1] == 3


@pytest.mark.parametrize("loader", list(LOADERS))
def test_large_files_are_refused_before_decoding(loader, tmp_path, monkeypatch):
    from PIL import Image
    path = str(tmp_path / "big.png")
    Image.fromarray(_pixels(64, 64, 3)).save(path)
    monkeypatch.setattr(images, "MAX_IMAGE_PIXELS", 64 * 63)
    decoded = []
    monkeypatch.setattr(Image.Image, "load", lambda self: decoded.append(self) or None)
    with pytest.raises(H3ValueError, match="larger than h3cy reads"):
        LOADERS[loader](path)
    assert not decoded


def test_the_vision_limits_apply_to_the_prompt_encoder_only():
    """A side under 16 pixels or an aspect ratio above 200 is refused for the vision tower;
    a keyframe that small is put on the canvas (the text encoder then sees the canvas-sized
    keyframe, not the source)."""
    small = _pixels(8, 12, 3)
    with pytest.raises(H3ValueError, match="too small"):
        load_vision_image(small)
    assert h3cy.prepare_keyframes(small, width=64, height=64)[0][0].shape == (64, 64, 3)
    with pytest.raises(H3ValueError, match="aspect ratio"):
        load_vision_image(np.zeros((16, 4000, 3), np.uint8))
