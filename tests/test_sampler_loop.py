"""h3cy.denoise against a reference loop built from diffusers' own pieces (layout builder,
two MiniMaxH3Schedulers, MiniMaxH3Transformer3DModel), and the loop's hooks."""
import threading

import numpy as np
import pytest
import torch

import h3cy
from h3cy.sampling.layout import pack_audio, patchify
from _compare import assert_close, assert_nontrivial
from _ref_denoise import reference_loop as _reference_loop

GEOM = dict(width=64, height=64, frames=22)    # T=7, h=w=4, A=37


def _inputs(t, seed=0, L=5):
    g = h3cy.Geometry(**GEOM)
    rng = np.random.default_rng(seed)
    pe = rng.standard_normal((L, t.config["text_dim"])).astype(np.float32)
    video = rng.standard_normal((t.config["in_channels"], g.T, g.h, g.w)).astype(np.float32)
    audio = rng.standard_normal((2, t.config["audio_in_channels"], g.A)).astype(np.float32)
    return g, pe, video, audio


def test_denoise_matches_diffusers_loop_fp32(tiny_dit_factory):
    t = tiny_dit_factory("b")
    g, pe, video, audio = _inputs(t)
    want_v, want_a = _reference_loop(t.diffusers_fp32, g, pe, video, audio, steps=4)
    dit = h3cy.DiT.from_pretrained(t.diffusers_fp32, weights="fp32")
    got_v, got_a = h3cy.denoise(dit, pe, g, steps=4, noise=(video, audio))
    assert_nontrivial(want_v)
    # observed max-rel ~1e-6 (float32 GEMM order through 4 steps); a wrong timestep or
    # Euler sign gives > 1e-1
    assert_close(patchify(got_v), want_v, max_rel_tol=1e-4, what="video")
    assert_close(pack_audio(got_a), want_a, max_rel_tol=1e-4, what="audio")


def test_seeded_noise_golden_values():
    v, a = h3cy.initial_noise(h3cy.Geometry(), 42)
    assert v.shape == (24, 7, 32, 32) and a.shape == (2, 32, 37) and v.dtype == np.float32
    sv, sa = np.random.SeedSequence(42).spawn(2)
    assert np.array_equal(v.reshape(-1)[:4], np.random.Generator(np.random.PCG64(sv)).standard_normal(
        4, dtype=np.float32))
    assert np.array_equal(a.reshape(-1)[:4], np.random.Generator(np.random.PCG64(sa)).standard_normal(
        4, dtype=np.float32))
    # pinned bits (numpy's PCG64 + ziggurat, numpy 2.x): a change of the seeding recipe fails
    np.testing.assert_array_equal(v.reshape(-1)[:3].view(np.uint32),
                                  np.array([0x3F1F81FF, 0x3FEC9D69, 0x3F9C8CB8], np.uint32))


def test_same_seed_same_bits_across_threads(tiny_dit_factory):
    t = tiny_dit_factory("a")
    g, pe, _, _ = _inputs(t)
    outs = [h3cy.denoise(h3cy.DiT.from_pretrained(t.diffusers_fp32, weights="int8", threads=th),
                         pe, g, steps=3, seed=7) for th in (1, 2, 1)]
    for o in outs[1:]:
        assert np.array_equal(o[0], outs[0][0]) and np.array_equal(o[1], outs[0][1])


def test_progress_is_throttled_but_reaches_every_step_end(tiny_dit_factory):
    t = tiny_dit_factory("b")
    g, pe, video, audio = _inputs(t)
    dit = h3cy.DiT.from_pretrained(t.diffusers_fp32, weights="fp32")
    seen = []
    h3cy.denoise(dit, pe, g, steps=4, noise=(video, audio),
                 on_progress=lambda d, tot, ph: seen.append(d))
    nb = len(dit.blocks)
    assert seen == sorted(seen) and seen[-1] == 4 * nb
    assert all(s * nb in seen for s in range(1, 5))      # the end of every step
    assert len(seen) < 4 * nb                            # tiny blocks: most are throttled


def test_hooks_progress_stop_and_edits(tiny_dit_factory, monkeypatch):
    monkeypatch.setattr(h3cy._progress, "PROGRESS_INTERVAL", 0.0)   # report every block
    t = tiny_dit_factory("a")
    g, pe, video, audio = _inputs(t)
    dit = h3cy.DiT.from_pretrained(t.diffusers_fp32, weights="fp32")
    seen = []
    base = h3cy.denoise(dit, pe, g, steps=3, noise=(video, audio),
                        on_progress=lambda d, tot, ph: seen.append((d, tot, ph)))
    nb = len(dit.blocks)
    assert [s[0] for s in seen] == list(range(1, 3 * nb + 1)) and all(s[1] == 3 * nb for s in seen)
    assert all(s[2] == "denoise" for s in seen)
    # STOP after the first step returns that step's clean estimate
    states = []

    def stop(st):
        states.append((st.step, st.video_x0.copy()))
        return h3cy.STOP
    early = h3cy.denoise(dit, pe, g, steps=3, noise=(video, audio), on_step=stop)
    assert len(states) == 1 and np.array_equal(early[0], states[0][1])
    # an in-place edit of the latent changes the result
    def edit(st):
        if st.step == 0:
            st.video_latent *= 0.5
    edited = h3cy.denoise(dit, pe, g, steps=3, noise=(video, audio), on_step=edit)
    assert not np.allclose(edited[0], base[0])
    # an exception from a hook propagates unchanged and the DiT stays usable
    boom = RuntimeError("from the hook")
    with pytest.raises(RuntimeError) as ei:
        h3cy.denoise(dit, pe, g, steps=3, noise=(video, audio), on_step=lambda st: (_ for _ in ()).throw(boom))
    assert ei.value is boom
    again = h3cy.denoise(dit, pe, g, steps=3, noise=(video, audio))
    assert np.array_equal(again[0], base[0])


def test_cancel_from_another_thread_then_reuse(tiny_dit_factory, monkeypatch):
    monkeypatch.setattr(h3cy._progress, "PROGRESS_INTERVAL", 0.0)
    t = tiny_dit_factory("b")
    g, pe, video, audio = _inputs(t)
    dit = h3cy.DiT.from_pretrained(t.diffusers_fp32, weights="fp32")
    want = h3cy.denoise(dit, pe, g, steps=4, noise=(video, audio))
    tok = h3cy.CancelToken()
    started = threading.Event()

    def progress(done, total, phase):
        started.set()
        if done == 5:   # block 5 of 12: step 1
            threading.Thread(target=tok.cancel).start()
            threading.Event().wait(0.2)
    with pytest.raises(h3cy.Cancelled) as ei:
        h3cy.denoise(dit, pe, g, steps=4, noise=(video, audio), on_progress=progress, cancel=tok)
    assert ei.value.step == 1
    got = h3cy.denoise(dit, pe, g, steps=4, noise=(video, audio))
    assert np.array_equal(got[0], want[0]) and np.array_equal(got[1], want[1])


def test_bad_arguments():
    class FakeDit:
        config = dict(in_channels=4, audio_in_channels=8, patch_size=[1, 2, 2], text_dim=16)
        blocks = [None]
    with pytest.raises(ValueError):
        h3cy.denoise(FakeDit(), np.zeros((3, 5), np.float32), h3cy.Geometry(64, 64, 22), steps=2)
    with pytest.raises(ValueError):
        h3cy.denoise(FakeDit(), np.zeros((3, 16), np.float32), h3cy.Geometry(64, 64, 22), steps=2,
                     noise=(np.zeros((4, 7, 4, 4), np.float32), np.zeros((2, 8, 5), np.float32)))
    with pytest.raises(ValueError):
        h3cy.denoise(FakeDit(), np.zeros((3, 16), np.float32), h3cy.Geometry(64, 64, 22), seed=-1)


def _per_frame_reference(dit, pe, g, video, audio, sv, sa):
    """numpy loop: packed rows, per-row timesteps (text = frame 0), Euler per latent frame."""
    from h3cy.sampling.layout import Layout, unpack_audio, unpatchify
    from h3cy.sampling.schedule import euler_step
    lay = Layout(g, pe.shape[0])
    video, audio = video.copy(), audio.copy()
    rpf = (g.h // 2) * (g.w // 2)
    for i in range(sv.shape[0] - 1):
        tv = (np.float32(1) - sv[i]).astype(np.float32)
        ta = np.float32(1) - sa[i]
        row_t = np.empty(lay.S, np.float32)
        row_t[lay.text_indices] = tv[0]
        row_t[lay.video_indices] = np.repeat(tv, rpf)
        row_t[lay.audio_indices] = ta
        ts, idx = np.unique(row_t, return_inverse=True)
        vr, ar = dit.forward(patchify(video), pack_audio(audio), pe, ts, idx, lay.token_tags,
                             lay.position_ids, lay.video_indices, lay.audio_indices, lay.text_indices)
        vel_v, vel_a = unpatchify(vr, g.T, g.h, g.w), unpack_audio(ar)
        for f in range(g.T):   # column by column
            video[:, f] = euler_step(video[:, f], vel_v[:, f], tv[f], sv[i, f], sv[i + 1, f])
        audio = euler_step(audio, vel_a, ta, sa[i], sa[i + 1])
    return video, audio


def test_per_frame_schedule(tiny_dit_factory):
    t = tiny_dit_factory("a")
    g, pe, video, audio = _inputs(t)
    dit = h3cy.DiT.from_pretrained(t.diffusers_fp32, weights="fp32")
    base = h3cy.Schedule.shifted(3)
    # every column equal to the 1-D schedule: bit-identical to the 1-D run
    same = h3cy.Schedule(np.repeat(base.video_sigmas[:, None], g.T, axis=1), base.audio_sigmas)
    a = h3cy.denoise(dit, pe, g, noise=(video, audio), schedule=base)
    b = h3cy.denoise(dit, pe, g, noise=(video, audio), schedule=same)
    assert np.array_equal(a[0], b[0]) and np.array_equal(a[1], b[1])
    # frames on different curves: equals the Euler rule applied frame by frame
    from h3cy.sampling.schedule import shifted_sigmas
    cols = np.stack([shifted_sigmas(4, 6.0 + 2 * f) for f in range(g.T)], axis=1)
    sched = h3cy.Schedule(cols, base.audio_sigmas)
    got = h3cy.denoise(dit, pe, g, noise=(video, audio), schedule=sched)
    want = _per_frame_reference(dit, pe, g, video, audio, cols, base.audio_sigmas)
    assert np.array_equal(got[0], want[0]) and np.array_equal(got[1], want[1])
    assert not np.array_equal(got[0], a[0])


def test_concurrent_calls_serialise_or_raise_busy(tiny_dit_factory):
    t = tiny_dit_factory("a")
    g, pe, video, audio = _inputs(t)
    dit = h3cy.DiT.from_pretrained(t.diffusers_fp32, weights="fp32")
    inside, release = threading.Event(), threading.Event()

    def slow(done, total, phase):
        inside.set()
        release.wait(10)
    results = {}
    th = threading.Thread(target=lambda: results.setdefault(
        "first", h3cy.denoise(dit, pe, g, steps=2, noise=(video, audio), on_progress=slow)))
    th.start()
    assert inside.wait(10)
    with pytest.raises(h3cy.Busy):
        h3cy.denoise(dit, pe, g, steps=2, noise=(video, audio), blocking=False)
    release.set()
    th.join(30)
    second = h3cy.denoise(dit, pe, g, steps=2, noise=(video, audio))   # waits, then runs
    assert np.array_equal(second[0], results["first"][0])


def _numpy_loop(dit, pe, g, video, audio, steps, evaluate, active=None):
    """The documented formulas, written out: Euler with velocities from the DiT at the
    evaluated steps and linear-in-sigma extrapolation elsewhere."""
    from h3cy.sampling.layout import Layout, unpack_audio, unpatchify
    from h3cy.sampling.schedule import Schedule, euler_step
    sch = Schedule.shifted(steps)
    sv, sa = sch.video_sigmas, sch.audio_sigmas
    lay = Layout(g, pe.shape[0])
    video, audio = video.copy(), audio.copy()
    evals = []
    for i in range(steps):
        tv, ta = np.float32(1) - sv[i], np.float32(1) - sa[i]
        if evaluate[i]:
            ts, idx = lay.step_timesteps(tv, ta)
            vr, ar = dit.forward(patchify(video), pack_audio(audio), pe, ts, idx, lay.token_tags,
                                 lay.position_ids, lay.video_indices, lay.audio_indices,
                                 lay.text_indices, active_blocks=active)
            evals.append((i, unpatchify(vr, g.T, g.h, g.w), unpack_audio(ar)))
            vv, va = evals[-1][1], evals[-1][2]
        elif len(evals) == 1:
            vv, va = evals[-1][1], evals[-1][2]
        else:
            (k, pv, pa), (j, lv, la) = evals[-2], evals[-1]
            def ratio(s):
                r = (s[i] - s[j]) / (s[j] - s[k])
                return np.float32(min(2.0, max(-2.0, float(r))))
            vv = (lv + ratio(sv) * (lv - pv)).astype(np.float32)
            va = (la + ratio(sa) * (la - pa)).astype(np.float32)
        video = euler_step(video, vv, tv, sv[i], sv[i + 1])
        audio = euler_step(audio, va, ta, sa[i], sa[i + 1])
    return video, audio


def test_reuse_follows_the_documented_rule(tiny_dit_factory, monkeypatch):
    monkeypatch.setattr(h3cy._progress, "PROGRESS_INTERVAL", 0.0)
    t = tiny_dit_factory("a")
    g, pe, video, audio = _inputs(t)
    dit = h3cy.DiT.from_pretrained(t.diffusers_fp32, weights="fp32")
    assert h3cy.sampling.sampler.reuse_steps(7, 3) == [True, False, False, True, False, False, True]
    assert h3cy.sampling.sampler.reuse_steps(5, 1) == [True] * 5
    for reuse in (2, 3):
        seen = []
        got = h3cy.denoise(dit, pe, g, steps=7, noise=(video, audio), reuse=reuse,
                           on_progress=lambda d, tot, ph: seen.append(tot))
        ev = h3cy.sampling.sampler.reuse_steps(7, reuse)
        assert seen[-1] == sum(ev) * len(dit.blocks)
        want = _numpy_loop(dit, pe, g, video, audio, 7, ev)
        assert np.array_equal(got[0], want[0]) and np.array_equal(got[1], want[1])
    exact = h3cy.denoise(dit, pe, g, steps=7, noise=(video, audio))
    assert not np.array_equal(got[0], exact[0])
    with pytest.raises(ValueError):
        h3cy.denoise(dit, pe, g, steps=7, noise=(video, audio), reuse=0)


def test_layers_keep_the_largest_gates(tmp_path):
    """A 7-block tiny model: the skipped blocks are the lowest mean |gate| (msa and mlp, all
    modalities, all schedule timesteps) among blocks 2..5, computed here with torch."""
    from _tiny_dit import TINY_CONFIGS, random_model
    cfg = dict(TINY_CONFIGS["a"], num_layers=7)
    m = random_model(cfg, 3)
    folder = str(tmp_path / "seven")
    m.save_pretrained(folder)
    dit = h3cy.DiT.from_pretrained(folder, weights="fp32")
    steps = 4
    sch = h3cy.Schedule.shifted(steps)
    ts = np.unique(np.concatenate([h3cy.Schedule.timesteps(sch.video_sigmas),
                                   h3cy.Schedule.timesteps(sch.audio_sigmas)]))
    with torch.no_grad():
        temb = m.time_embedder(m.time_proj(torch.from_numpy(ts)))
        scores = []
        for b in range(2, 6):
            mod = m.transformer_blocks[b].adaln_proj(temb)          # six (U*3, hidden) chunks
            gates = torch.cat([mod[2].abs().reshape(-1), mod[5].abs().reshape(-1)])
            scores.append((gates.double().mean().item(), b))
    dropped = sorted(b for _, b in sorted(scores)[:2])
    active = h3cy.sampling.sampler.gate_ranked_blocks(dit, ts, 5)
    assert [b for b in range(7) if not active[b]] == dropped
    g = h3cy.Geometry(**GEOM)
    rng = np.random.default_rng(1)
    pe = rng.standard_normal((4, cfg["text_dim"])).astype(np.float32)
    video = rng.standard_normal((cfg["in_channels"], g.T, g.h, g.w)).astype(np.float32)
    audio = rng.standard_normal((2, cfg["audio_in_channels"], g.A)).astype(np.float32)
    got = h3cy.denoise(dit, pe, g, steps=steps, noise=(video, audio), layers=5)
    want = _numpy_loop(dit, pe, g, video, audio, steps, [True] * steps, active)
    assert np.array_equal(got[0], want[0]) and np.array_equal(got[1], want[1])
    with pytest.raises(ValueError):
        h3cy.denoise(dit, pe, g, steps=steps, noise=(video, audio), layers=2)   # would drop block 0/1/6


def test_precision_plan_equals_running_the_ranges_in_their_modes(tiny_dit_factory, tmp_path):
    import shutil
    t = tiny_dit_factory("a")
    folder = str(tmp_path / "tr")
    shutil.copytree(t.diffusers_bf16, folder)
    g, pe, video, audio = _inputs(t)
    dit = h3cy.DiT.from_pretrained(folder, weights="int8")
    got = h3cy.denoise(dit, pe, g, steps=4, noise=(video, audio),
                       precision=[("int8", 0, 2), ("bf16", 2, 4)])
    # the same two step ranges, run as two separate loops handing the latents over
    states = {}

    def keep(st):
        if st.step == 1:
            states["v"], states["a"] = st.video_latent.copy(), st.audio_latent.copy()
            return h3cy.STOP
    h3cy.denoise(dit, pe, g, steps=4, noise=(video, audio), on_step=keep)
    bf = h3cy.DiT.from_pretrained(folder, weights="bf16")
    from h3cy.sampling.schedule import Schedule
    sch = Schedule.shifted(4)
    tail = Schedule(sch.video_sigmas[2:], sch.audio_sigmas[2:])
    want = h3cy.denoise(bf, pe, g, schedule=tail, noise=(states["v"], states["a"]))
    assert np.array_equal(got[0], want[0]) and np.array_equal(got[1], want[1])
    # a hook switching mode after step 1 does the same
    def switch(st):
        if st.step == 1:
            st.set_weights("bf16")
    got2 = h3cy.denoise(dit, pe, g, steps=4, noise=(video, audio), on_step=switch)
    assert np.array_equal(got2[0], got[0])
    assert dit.with_weights("bf16") is dit.with_weights("bf16")      # loaded once
    with pytest.raises(ValueError):
        h3cy.denoise(dit, pe, g, steps=4, noise=(video, audio), precision=[("int8", 0, 3), ("bf16", 2, 4)])


def test_refine_example_keeps_bf16_when_int8_drifts(tiny_dit_factory, tmp_path):
    import importlib.util
    import os
    import shutil
    t = tiny_dit_factory("a")
    folder = str(tmp_path / "tr")
    shutil.copytree(t.diffusers_bf16, folder)
    spec = importlib.util.spec_from_file_location(
        "refine", os.path.join(os.path.dirname(os.path.dirname(__file__)), "examples", "refine_last_steps.py"))
    ex = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(ex)
    g, pe, _, _ = _inputs(t)
    dit = h3cy.DiT.from_pretrained(folder, weights="int8")
    v, a, rep = ex.render(dit, pe, g, steps=4, refine=2, threshold=0.0, seed=1)
    assert rep["kept"] == "bf16" and rep["max_frame_difference"] > 0
    want = h3cy.denoise(dit, pe, g, steps=4, seed=1, precision=[("int8", 0, 2), ("bf16", 2, 4)])
    assert np.array_equal(v, want[0])
    v2, _, rep2 = ex.render(dit, pe, g, steps=4, refine=2, threshold=1e9, seed=1)
    assert rep2["kept"] == "int8"
    assert np.array_equal(v2, h3cy.denoise(dit, pe, g, steps=4, seed=1)[0])


def test_ctrl_c_stops_between_blocks_and_reraises(tiny_dit_factory, tmp_path):
    """SIGINT in the main thread during denoise: KeyboardInterrupt comes out (raised between
    blocks), and the DiT can run again in the same process.  The signal is sent from the
    first progress report inside the run (progress is throttled by time, so a given count
    may never be reported on a slow machine)."""
    import os
    import signal
    import subprocess
    import sys
    t = tiny_dit_factory("b")
    code = f"""
import os, signal, sys, threading, numpy as np
sys.path.insert(0, {os.path.dirname(__file__)!r})
import h3cy
dit = h3cy.DiT.from_pretrained({t.diffusers_fp32!r}, weights="fp32")
g = h3cy.Geometry(64, 64, 22)
pe = np.ones((4, {t.config['text_dim']}), np.float32)
fired = []
def progress(done, total, phase):
    if 0 < done < total and not fired:
        fired.append(1)
        os.kill(os.getpid(), signal.SIGINT)
try:
    h3cy.denoise(dit, pe, g, steps=6, seed=0, on_progress=progress)
    print("NOT INTERRUPTED")
except KeyboardInterrupt:
    print("interrupted")
v, a = h3cy.denoise(dit, pe, g, steps=2, seed=0)
print("again", bool(np.isfinite(v).all()))
"""
    # a runner that starts pytest in the background can leave SIGINT ignored, which the
    # child would inherit (and then never see the signal): give it the default disposition
    r = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=300,
                       preexec_fn=lambda: signal.signal(signal.SIGINT, signal.SIG_DFL))
    assert r.returncode == 0, r.stderr[-2000:]
    assert "interrupted" in r.stdout and "again True" in r.stdout
