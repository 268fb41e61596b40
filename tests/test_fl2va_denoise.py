"""Keyframe-conditioned denoise (``denoise(..., conditions=, text_tags=)``) against diffusers'
fl2va core denoise on a tiny transformer: the reference's own prompt states and tags,
condition latents and video / audio / condition noise go into h3cy, so no encoder of h3cy is
involved.  Both loops (Python, Cython/C), both samplers, hooks, and bad input."""
import numpy as np
import pytest
import torch

import h3cy
from h3cy import _config
from h3cy.errors import H3ValueError
from h3cy.sampling.conditions import condition_noise_from_seed, hold
from h3cy.sampling.layout import patchify
from _compare import assert_close, assert_nontrivial, max_rel
from _ref_fl2va import condition_noise, run as run_reference
from _tiny_dit import random_model

# the released latent widths (24 video, 32 audio channels: the reference pipeline's defaults
# without VAEs) on a tiny transformer
CFG = dict(num_attention_heads=2, attention_head_dim=16, hidden_size=32, num_layers=2, num_refiner_layers=1,
           ffn_dim=48, in_channels=24, audio_in_channels=32, patch_size=[1, 2, 2], text_dim=24, freq_dim=16,
           time_embed_hidden_dim=40, time_embed_dim=20, rope_freq_dim=2)
# the reference generates 5 s at least: 124 frames -> T = 37 latent frames of 4x4, A = 207
GEOM = dict(width=64, height=64, frames=124)
STEPS, SEED = 3, 11
EFFECT_TOL = 5e-3
ANCHORS = {"first": ("first",), "last": ("last",), "both": ("first", "last")}


@pytest.fixture(scope="module")
def model(tmp_path_factory):
    m = random_model(CFG, 26)
    folder = str(tmp_path_factory.mktemp("fl2va") / "transformer")
    m.save_pretrained(folder)
    return m, folder


def _inputs(seed=0, L=9):
    g = h3cy.Geometry(**GEOM)
    rng = np.random.default_rng(seed)
    pe = rng.standard_normal((L, CFG["text_dim"])).astype(np.float32)
    tags = np.ones(L, np.int64)
    tags[2:6] = 0          # a keyframe's vision block inside the prompt, tagged video
    video = rng.standard_normal((CFG["in_channels"], g.T, g.h, g.w)).astype(np.float32)
    audio = rng.standard_normal((2, CFG["audio_in_channels"], g.A)).astype(np.float32)
    latents = [rng.standard_normal((CFG["in_channels"], 1, g.h, g.w)).astype(np.float32) for _ in range(2)]
    return g, pe, tags, video, audio, latents


_REFS = {}


def _reference(model, case):
    if case not in _REFS:
        g, pe, tags, video, audio, latents = _inputs()
        anchors = ANCHORS[case]
        _REFS[case] = run_reference(model[0], pe, tags, anchors, latents[:len(anchors)], video, audio, SEED,
                                    STEPS, **GEOM)
    return _REFS[case]


def _conditions(case, latents, g):
    return [(0 if a == "first" else -1, z) for a, z in zip(ANCHORS[case], latents)]


def _run(dit, case, monkeypatch, loop, **kw):
    g, pe, tags, video, audio, latents = _inputs()
    conds = _conditions(case, latents, g)
    monkeypatch.setattr(_config, "_ENV_LOOP_PYTHON", loop == "python")
    out = h3cy.denoise(dit, pe, g, steps=STEPS, noise=(video, audio), text_tags=tags, conditions=conds,
                       condition_noise=condition_noise([z for _, z in conds], SEED), **kw)
    assert dit.loop_stats["loop"] == loop
    return out


@pytest.mark.parametrize("case", ["first", "last", "both"])
def test_matches_diffusers_fl2va(model, case, monkeypatch):
    ref = _reference(model, case)
    g, pe, tags, video, audio, latents = _inputs()
    conds = _conditions(case, latents, g)
    cnoise = condition_noise([z for _, z in conds], SEED)
    # the held rows: 0.999 z + 0.001 n, rounded as the reference rounds it
    held = np.concatenate([patchify(hold(z, n)) for (_, z), n in zip(conds, cnoise)])
    assert np.array_equal(held, ref.condition_rows)
    dit = h3cy.DiT.from_pretrained(model[1], weights="fp32")
    # the Python loop, with the transformer's inputs recorded at every step
    seen = []
    forward = dit.forward

    def recording(xv, xa, pe_, timestep, tidx, *a, **k):
        seen.append((np.array(timestep), np.array(tidx), np.array(xv)))
        return forward(xv, xa, pe_, timestep, tidx, *a, **k)
    dit.forward = recording          # a replaced forward runs the Python loop
    got_py = h3cy.denoise(dit, pe, g, steps=STEPS, noise=(video, audio), text_tags=tags, conditions=conds,
                          condition_noise=cnoise)
    assert dit.loop_stats["loop"] == "python"
    del dit.forward
    assert len(seen) == len(ref.forwards) == STEPS
    for i, ((t, ti, xv), (rt, rti, rxv)) in enumerate(zip(seen, ref.forwards)):
        # the per-step row timesteps, exactly (the condition rows at max(t_video, 0.999))
        assert t.dtype == np.float32 and np.array_equal(t, rt), f"step {i}: {t} != {rt}"
        assert np.array_equal(ti, rti), f"step {i}: timestep indices differ"
        assert np.array_equal(t, ref.plan[i][0]) and np.array_equal(ti, ref.plan[i][1])
        # the condition rows the transformer reads never change
        assert np.array_equal(xv[:held.shape[0]], held) and np.array_equal(rxv[:held.shape[0]], held)
    assert np.any(seen[0][0] == np.float32(0.999))
    assert_nontrivial(ref.video)
    # observed max-rel <= 9e-7 (float32 GEMM/attention order over 3 steps)
    assert_close(got_py[0], ref.video, max_rel_tol=1e-4, what="video")
    assert_close(got_py[1], ref.audio, max_rel_tol=1e-4, what="audio")
    # the conditions' own effect, measured against the same run without them: on this tiny
    # random model they move the latents by only ~3e-3 (max-rel), so a bug there could hide
    # inside 1e-4 of the whole; their effect matches within 5e-3 (observed <= 5.3e-4; the
    # two keyframes swapped give 2.3e-2, a keyframe at the wrong end 1e-1, all tags 1 2e-1:
    # test_wrong_conditions_miss_the_reference)
    plain = h3cy.denoise(dit, pe, g, steps=STEPS, noise=(video, audio), text_tags=tags)
    assert max_rel(got_py[0] - plain[0], ref.video - plain[0]) <= EFFECT_TOL
    assert max_rel(got_py[1] - plain[1], ref.audio - plain[1]) <= EFFECT_TOL
    # the Cython/C loop: the same bits as the Python loop
    got_cy = _run(dit, case, monkeypatch, "cython")
    assert np.array_equal(got_cy[0], got_py[0]) and np.array_equal(got_cy[1], got_py[1])


def test_wrong_conditions_miss_the_reference(model):
    """The parity test's power: a keyframe swap, a keyframe at the wrong end and untagged
    vision rows each move the conditions' effect far past EFFECT_TOL."""
    ref = _reference(model, "both")
    ref_first = _reference(model, "first")
    g, pe, tags, video, audio, latents = _inputs()
    dit = h3cy.DiT.from_pretrained(model[1], weights="fp32")
    plain = h3cy.denoise(dit, pe, g, steps=STEPS, noise=(video, audio), text_tags=tags)
    cn = condition_noise(latents, SEED)
    swapped = h3cy.denoise(dit, pe, g, steps=STEPS, noise=(video, audio), text_tags=tags,
                           conditions=[(0, latents[1]), (-1, latents[0])], condition_noise=cn)
    untagged = h3cy.denoise(dit, pe, g, steps=STEPS, noise=(video, audio), conditions=[(0, latents[0]), (-1, latents[1])],
                            condition_noise=cn)
    wrong_end = h3cy.denoise(dit, pe, g, steps=STEPS, noise=(video, audio), text_tags=tags,
                             conditions=[(-1, latents[0])], condition_noise=cn[:1])
    for got, want in ((swapped, ref), (untagged, ref), (wrong_end, ref_first)):
        assert max_rel(got[0] - plain[0], want.video - plain[0]) > 4 * EFFECT_TOL


@pytest.mark.parametrize("loop", ["python", "cython"])
def test_res_multistep_keeps_conditions_fixed(model, monkeypatch, loop):
    g, pe, tags, video, audio, latents = _inputs()
    dit = h3cy.DiT.from_pretrained(model[1], weights="fp32")
    conds = [(0, latents[0]), (-1, latents[1])]
    states = []

    def hook(st):
        states.append(st)
        assert [f for f, _ in st.conditions] == [0, g.T - 1]
        for (_, z), (_, want) in zip(st.conditions, conds):
            assert not z.flags.writeable and z.shape == want.shape
        assert st.layout.n_condition_rows == 2 * (g.h // 2) * (g.w // 2)
        assert np.array_equal(st.layout.condition_indices, np.arange(pe.shape[0], pe.shape[0] + 8))
    monkeypatch.setattr(_config, "_ENV_LOOP_PYTHON", loop == "python")
    out = h3cy.denoise(dit, pe, g, steps=4, seed=5, text_tags=tags, conditions=conds, sampler="res_multistep",
                       on_step=hook)
    assert dit.loop_stats["loop"] == loop and len(states) == 4
    held = [z.copy() for _, z in states[0].conditions]
    # drawn from the seed: the third child of SeedSequence(5)
    want = [hold(z, n) for (_, z), n in zip(conds, condition_noise_from_seed(5, [z.shape for _, z in conds]))]
    assert all(np.array_equal(a, b) for a, b in zip(held, want))
    assert all(np.array_equal(z, h) for st in states for (_, z), h in zip(st.conditions, held))
    assert np.isfinite(out[0]).all() and out[0].shape == video.shape
    # the same run with the seed's noise given explicitly, and Euler differs
    again = h3cy.denoise(dit, pe, g, steps=4, seed=5, text_tags=tags, conditions=conds, sampler="res_multistep",
                         condition_noise=condition_noise_from_seed(5, [z.shape for _, z in conds]))
    assert np.array_equal(again[0], out[0]) and np.array_equal(again[1], out[1])
    euler = h3cy.denoise(dit, pe, g, steps=4, seed=5, text_tags=tags, conditions=conds)
    assert not np.array_equal(euler[0], out[0])


@pytest.mark.parametrize("weights, sampler, streaming", [
    ("fp32", "res_multistep", False), ("int8", "euler", False), ("bf16", "euler", False), ("fp32", "euler", True)])
def test_loops_bit_identical_with_conditions(model, monkeypatch, weights, sampler, streaming):
    """The Cython loop's proj_in / proj_out over condition + video rows, in every mode's
    kernels (int8 quantises activations per row) and streaming, gives the Python loop's bits."""
    g, pe, tags, video, audio, latents = _inputs()
    dit = h3cy.DiT.from_pretrained(model[1], weights=weights, streaming=streaming)
    outs = []
    for flag in (True, False):
        monkeypatch.setattr(_config, "_ENV_LOOP_PYTHON", flag)
        outs.append(h3cy.denoise(dit, pe, g, steps=4, seed=3, text_tags=tags,
                                 conditions=[(-1, latents[0]), (0, latents[1])], sampler=sampler, reuse=2))
        assert dit.loop_stats["loop"] == ("python" if flag else "cython")
    assert np.array_equal(outs[0][0], outs[1][0]) and np.array_equal(outs[0][1], outs[1][1])
    assert np.isfinite(outs[0][0]).all()


@pytest.mark.parametrize("loop", ["python", "cython"])
def test_stop_and_cancel_with_conditions(model, monkeypatch, loop):
    monkeypatch.setattr(h3cy._progress, "PROGRESS_INTERVAL", 0.0)   # report every block
    monkeypatch.setattr(_config, "_ENV_LOOP_PYTHON", loop == "python")
    g, pe, tags, video, audio, latents = _inputs()
    dit = h3cy.DiT.from_pretrained(model[1], weights="fp32")
    conds = [(0, latents[0])]
    early = h3cy.denoise(dit, pe, g, steps=3, seed=1, conditions=conds,
                         on_step=lambda st: h3cy.STOP if st.step == 1 else None)
    assert early[0].shape == video.shape and np.isfinite(early[0]).all()
    tok = h3cy.CancelToken()
    seen = []

    def progress(done, total, phase):
        seen.append(done)
        if done == 3:
            tok.cancel()
    with pytest.raises(h3cy.Cancelled) as ei:
        h3cy.denoise(dit, pe, g, steps=3, seed=1, conditions=conds, on_progress=progress, cancel=tok)
    assert seen == [1, 2, 3] and ei.value.step == 1      # 2 blocks a step: block 3 is in step 1


class _FakeDit:
    config = dict(in_channels=4, audio_in_channels=8, patch_size=[1, 2, 2], text_dim=16)
    blocks = [None]


@pytest.mark.parametrize("kw, match", [
    (dict(conditions=[(0, np.zeros((4, 1, 4, 6), np.float32))]), r"latent must be \(4, 1, 4, 4\)"),
    (dict(conditions=[(0, np.zeros((4, 2, 4, 4), np.float32))]), r"latent must be"),
    (dict(conditions=[(0, np.zeros((8, 1, 4, 4), np.float32))]), r"latent must be"),
    (dict(conditions=[(7, np.zeros((4, 1, 4, 4), np.float32))]), r"out of range for 7 latent frames"),
    (dict(conditions=[(-8, np.zeros((4, 1, 4, 4), np.float32))]), r"out of range"),
    (dict(conditions=[(3, np.zeros((4, 1, 4, 4), np.float32))]), r"neither the first"),
    (dict(conditions=[(1.0, np.zeros((4, 1, 4, 4), np.float32))]), r"must be an int"),
    (dict(conditions=[(0, np.zeros((4, 1, 4, 4), np.float32)), (-7, np.zeros((4, 1, 4, 4), np.float32))]),
     r"two conditions anchor latent frame 0"),
    (dict(conditions=[np.zeros((4, 1, 4, 4), np.float32)]), r"\(frame, latent\) pair"),
    (dict(conditions=[(0, np.full((4, 1, 4, 4), np.nan, np.float32))]), r"NaN"),
    (dict(conditions=[(0, np.zeros((4, 1, 4, 4), np.float32))], condition_noise=[]), r"0 arrays for 1"),
    (dict(conditions=[(0, np.zeros((4, 1, 4, 4), np.float32))], condition_noise=[np.zeros((4, 1, 2, 2))]),
     r"condition_noise\[0\] must be"),
    (dict(condition_noise=[np.zeros((4, 1, 4, 4))]), r"without conditions"),
    (dict(text_tags=[1, 1]), r"text_tags must be 3 ints"),
    (dict(text_tags=[1, 2, 1]), r"1 \(text\) or 0"),
])
def test_bad_condition_input(kw, match):
    with pytest.raises(H3ValueError, match=match):
        h3cy.denoise(_FakeDit(), np.zeros((3, 16), np.float32), h3cy.Geometry(64, 64, 22), steps=2, **kw)
