"""Previews while sampling (h3cy/preview.py, StepState.preview): the linear latent->RGB map
against a numpy float64 evaluation of the published MiniMax-H3 factors, in both loops, and
the PNG writer."""
import numpy as np
import pytest

import h3cy
from h3cy import _config
from h3cy import media
from h3cy import preview as pv
from h3cy.errors import H3ValueError

# comfy/latent_formats.py, class MiniMaxH3Video, zoidypuh/ComfyUI@4441d221dd95b111d0b9085e397082c86960fd20
# (typed here a second time so a slip in either copy fails the test)
PUBLISHED = """
-0.018555  0.024344 -0.017536
 0.150164  0.137244  0.129221
 0.027367 -0.050369 -0.208606
-0.000793 -0.164622 -0.323161
-0.048556  0.013970 -0.074286
 0.011740  0.014172 -0.006906
 0.061517  0.061212  0.110025
 0.035321  0.086879  0.110059
-0.017426  0.002997  0.035356
 0.531539  0.548819  0.624404
-0.024968 -0.040234 -0.034302
-0.032549 -0.029096 -0.017221
 0.022609  0.020286  0.050661
-0.084001 -0.038131 -0.020805
-0.018830  0.010412  0.061120
 0.020777  0.011196 -0.030994
-0.008390 -0.012201 -0.025687
-0.013281 -0.002924  0.006331
 0.000260  0.001833 -0.011038
 0.105471  0.100482  0.132106
 0.016529  0.015213  0.009999
-0.014015 -0.017438 -0.019134
-0.033787 -0.009984 -0.019725
 0.004224  0.017284  0.027196
"""
PUBLISHED_BIAS = "0.057426 -0.022078 -0.071449"


def _published():
    f = np.array([[float(v) for v in line.split()] for line in PUBLISHED.strip().splitlines()])
    return f, np.array([float(v) for v in PUBLISHED_BIAS.split()])


def _numpy_preview(z):
    """float64 evaluation: y[t,h,w,k] = sum_c z[c,t,h,w] F[c,k] + b[k]; ComfyUI's
    preview_to_image: floor(clamp((y + 1) / 2, 0, 1) * 255)."""
    f, b = _published()
    y = np.einsum("cthw,ck->thwk", z.astype(np.float64), f) + b
    return y, np.floor(np.clip((y + 1) / 2, 0, 1) * 255)


def test_factors_are_the_published_table():
    f, b = _published()
    assert pv.LATENT_RGB_FACTORS.shape == (24, 3) and pv.LATENT_RGB_FACTORS.dtype == np.float32
    assert np.array_equal(pv.LATENT_RGB_FACTORS, f.astype(np.float32))
    assert np.array_equal(pv.LATENT_RGB_BIAS, b.astype(np.float32))


@pytest.mark.parametrize("shape,spread", [((24, 7, 32, 32), 1.0), ((24, 3, 5, 6), 4.0), ((24, 1, 2, 9), 0.3)])
def test_linear_preview_equals_numpy_evaluation(shape, spread):
    z = (np.random.default_rng(1).standard_normal(shape) * spread).astype(np.float32)
    y_ref, u8_ref = _numpy_preview(z)
    y = pv.latent_to_rgb_float(z)
    assert y.shape == shape[1:] + (3,) and y.dtype == np.float32
    assert np.abs(y - y_ref).max() <= 2e-6 * max(1.0, np.abs(y_ref).max())
    u8 = pv.latent_to_rgb(z)
    assert u8.dtype == np.uint8 and u8.shape == y.shape
    diff = np.abs(u8.astype(np.int32) - u8_ref.astype(np.int32))
    # float32 vs float64 can only disagree where the scaled value sits on an integer boundary
    near = np.abs(np.clip((y_ref + 1) / 2, 0, 1) * 255 - np.round(np.clip((y_ref + 1) / 2, 0, 1) * 255)) < 1e-3
    assert diff.max() <= 1 and not (diff[~near] != 0).any()
    assert (diff == 0).mean() > 0.999
    # clamping: far outside -1..1 the preview saturates
    for v in (100.0, -100.0):
        big = np.full((24, 1, 1, 1), v, np.float32)
        assert np.array_equal(pv.latent_to_rgb(big), _numpy_preview(big)[1].astype(np.uint8))
        assert set(pv.latent_to_rgb(big).ravel()) <= {0, 255}


def test_preview_accepts_a_single_frame_and_rejects_bad_latents():
    z = np.random.default_rng(2).standard_normal((24, 4, 5)).astype(np.float32)
    assert np.array_equal(pv.latent_to_rgb(z), pv.latent_to_rgb(z[:, None]))
    for bad in (np.zeros((16, 2, 4, 4), np.float32), np.zeros((24, 2, 2, 4, 4), np.float32),
                np.zeros((24, 2, 4, 4), np.int32)):
        with pytest.raises(H3ValueError):
            pv.latent_to_rgb(bad)


def test_contact_sheet_layout():
    frames = np.arange(5 * 2 * 3 * 3, dtype=np.uint8).reshape(5, 2, 3, 3)
    sheet = pv.contact_sheet(frames, scale=2, gap=1)        # 3 columns, 2 rows of 4x6 tiles
    assert sheet.shape == (2 * 4 + 1, 3 * 6 + 2, 3)
    for i in range(5):
        r, c = divmod(i, 3)
        tile = sheet[r * 5:r * 5 + 4, c * 7:c * 7 + 6]
        assert np.array_equal(tile, frames[i].repeat(2, 0).repeat(2, 1))
    assert not sheet[4].any() and not sheet[:, 6].any()          # gaps are black
    assert not sheet[5:, 14:].any()                               # the missing sixth tile
    mid = pv.preview_image(np.ones((24, 7, 2, 2), np.float32), "middle", scale=3)
    assert mid.shape == (6, 6, 3)
    with pytest.raises(H3ValueError):
        pv.preview_image(np.ones((24, 7, 2, 2), np.float32), "nope")


def _run(dit, g, pe, noise, on_step):
    return h3cy.denoise(dit, pe, g, steps=3, noise=noise, on_step=on_step)


def test_step_state_preview_in_both_loops(tiny_dit_factory, monkeypatch):
    t = tiny_dit_factory("p")                  # 24 video latent channels
    dit = h3cy.DiT.from_pretrained(t.diffusers_fp32, weights="fp32")
    g = h3cy.Geometry(width=64, height=64, frames=22)
    rng = np.random.default_rng(0)
    pe = rng.standard_normal((5, t.config["text_dim"])).astype(np.float32)
    noise = (rng.standard_normal((24, g.T, g.h, g.w)).astype(np.float32),
             rng.standard_normal((2, 8, g.A)).astype(np.float32))
    seen = {}
    for name, flag in (("python", True), ("cython", False)):
        monkeypatch.setattr(_config, "_ENV_LOOP_PYTHON", flag)
        got = []

        def hook(st):
            p = st.preview()
            assert p.shape == (g.T, g.h, g.w, 3) and p.dtype == np.uint8
            assert np.array_equal(p, _numpy_preview(st.video_x0)[1].astype(np.uint8)) or \
                np.abs(p.astype(int) - _numpy_preview(st.video_x0)[1]).max() <= 1
            assert np.array_equal(p, pv.latent_to_rgb(st.video_x0))
            assert np.array_equal(st.preview(-1), p[-1]) and np.array_equal(st.preview(g.T // 2), p[g.T // 2])
            got.append(p)
        _run(dit, g, pe, noise, hook)
        assert dit.loop_stats["loop"] == name and len(got) == 3
        seen[name] = got
        with pytest.raises(IndexError):
            _run(dit, g, pe, noise, lambda st: st.preview(g.T))
    for a, b in zip(seen["python"], seen["cython"]):
        assert np.array_equal(a, b)


def test_preview_writer_rewrites_one_png_per_step(tiny_dit_factory, tmp_path):
    from PIL import Image
    t = tiny_dit_factory("p")
    dit = h3cy.DiT.from_pretrained(t.diffusers_fp32, weights="fp32")
    g = h3cy.Geometry(width=64, height=64, frames=22)
    rng = np.random.default_rng(3)
    pe = rng.standard_normal((5, t.config["text_dim"])).astype(np.float32)
    path = tmp_path / "preview.png"
    last = {}

    def after(st):
        last["x0"] = st.video_x0.copy()
        with Image.open(path) as im:                # the file is complete after every step
            last["png"] = np.asarray(im.convert("RGB"))
    w = media.PreviewWriter(str(path), mode="sheet", scale=4, then=after)
    h3cy.denoise(dit, pe, g, steps=2, seed=1, on_step=w)
    assert w.written == 2
    assert np.array_equal(last["png"], pv.contact_sheet(pv.latent_to_rgb(last["x0"]), scale=4))
    assert sorted(p.name for p in tmp_path.iterdir()) == ["preview.png"]    # no partial files left
