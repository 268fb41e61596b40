"""The Cython step loop (pyx/_loop.pxi) against the Python loop (H3CY_LOOP_PYTHON=1):
bit-identical latents for every weights mode and option, the same hook calls, and the
same behaviour on cancel, callback exceptions and Ctrl-C."""
import threading

import numpy as np
import pytest
import torch

import h3cy
from h3cy import _config
from _tiny_dit import TINY_CONFIGS, random_model

GEOM = dict(width=64, height=64, frames=22)    # T=7, h=w=4, A=37


def _six_model():
    """A released-dtype-mix (bf16 + fp32 heads) tiny torch model with 6 blocks."""
    cfg = dict(TINY_CONFIGS["b"], num_layers=6)
    m = random_model(cfg, 11)
    keep = ("proj_in", "audio_proj_in", "time_embedder", "proj_out", "audio_proj_out")
    for name, p in m.named_parameters():
        if not any(k in name.split(".") for k in keep):
            p.data = p.data.to(torch.bfloat16)
    return m, cfg


@pytest.fixture(scope="module")
def six_blocks(tmp_path_factory):
    """The 6-block model (so `layers=` can drop blocks), in its own folder (the
    fp16/int8/int4 caches go next to it)."""
    m, cfg = _six_model()
    folder = str(tmp_path_factory.mktemp("six") / "transformer")
    m.save_pretrained(folder)
    return folder, cfg


def _inputs(cfg, seed=0, L=5):
    g = h3cy.Geometry(**GEOM)
    rng = np.random.default_rng(seed)
    pe = rng.standard_normal((L, cfg["text_dim"])).astype(np.float32)
    video = rng.standard_normal((cfg["in_channels"], g.T, g.h, g.w)).astype(np.float32)
    audio = rng.standard_normal((2, cfg["audio_in_channels"], g.A)).astype(np.float32)
    return g, pe, video, audio


def _both(monkeypatch, dit, run):
    """run() under the Python loop, then under the Cython loop; checks which one ran."""
    out = {}
    for name, flag in (("python", True), ("cython", False)):
        monkeypatch.setattr(_config, "_ENV_LOOP_PYTHON", flag)
        out[name] = run()
        assert dit.loop_stats["loop"] == name
    return out["python"], out["cython"]


def _equal(a, b):
    assert len(a) == len(b)
    for x, y in zip(a, b):
        assert x.dtype == y.dtype and x.shape == y.shape
        assert np.array_equal(x, y), f"max |diff| {np.abs(x - y).max()}"


@pytest.mark.parametrize("weights", ["fp32", "bf16", "fp16", "int8", "int4"])
def test_every_weights_mode_bit_identical(six_blocks, monkeypatch, weights):
    folder, cfg = six_blocks
    g, pe, video, audio = _inputs(cfg)
    dit = h3cy.DiT.from_pretrained(folder, weights=weights, threads=2)
    for kw in (dict(seed=3), dict(noise=(video, audio), reuse=2), dict(seed=5, layers=4),
               dict(seed=7, reuse=3, layers=5)):
        py, cy = _both(monkeypatch, dit, lambda: h3cy.denoise(dit, pe, g, steps=5, **kw))
        _equal(py, cy)
        assert np.isfinite(cy[0]).all() and not np.array_equal(cy[0], video)


def test_threads_and_seeds_bit_identical(tiny_dit_factory, monkeypatch):
    t = tiny_dit_factory("c")
    g, pe, _, _ = _inputs(t.config)
    results = []
    for threads in (1, 2):
        dit = h3cy.DiT.from_pretrained(t.diffusers_bf16, weights="bf16", threads=threads)
        for seed in (0, 1):
            py, cy = _both(monkeypatch, dit, lambda: h3cy.denoise(dit, pe, g, steps=3, seed=seed))
            _equal(py, cy)
            results.append(cy)
    _equal(results[0], results[2])           # thread count does not change the bits
    assert not np.array_equal(results[0][0], results[1][0])


def test_precision_plan_and_set_weights_bit_identical(six_blocks, monkeypatch):
    folder, cfg = six_blocks
    g, pe, video, audio = _inputs(cfg, seed=1)
    dit = h3cy.DiT.from_pretrained(folder, weights="int8")
    plan = [("int4", 0, 2), ("int8", 2, 3), ("bf16", 3, 5)]
    py, cy = _both(monkeypatch, dit, lambda: h3cy.denoise(dit, pe, g, steps=5, seed=2, precision=plan))
    _equal(py, cy)
    seen = {"python": [], "cython": []}

    def switcher(name):
        def hook(st):
            seen[name].append(st.weights)
            if st.step == 0:
                st.set_weights("fp16")
            if st.step == 2:
                st.set_weights("int8")
        return hook
    monkeypatch.setattr(_config, "_ENV_LOOP_PYTHON", True)
    py = h3cy.denoise(dit, pe, g, steps=5, seed=2, on_step=switcher("python"))
    monkeypatch.setattr(_config, "_ENV_LOOP_PYTHON", False)
    cy = h3cy.denoise(dit, pe, g, steps=5, seed=2, on_step=switcher("cython"))
    _equal(py, cy)
    assert seen["python"] == seen["cython"] == ["int8", "fp16", "fp16", "int8", "int8"]


def test_per_frame_schedule_bit_identical(tiny_dit_factory, monkeypatch):
    from h3cy.sampling.schedule import shifted_sigmas
    t = tiny_dit_factory("a")
    g, pe, video, audio = _inputs(t.config)
    dit = h3cy.DiT.from_pretrained(t.diffusers_fp32, weights="fp32")
    base = h3cy.Schedule.shifted(3)
    cols = np.stack([shifted_sigmas(4, 6.0 + 2 * f) for f in range(g.T)], axis=1)
    sched = h3cy.Schedule(cols, base.audio_sigmas)
    py, cy = _both(monkeypatch, dit, lambda: h3cy.denoise(dit, pe, g, noise=(video, audio), schedule=sched))
    _equal(py, cy)


def test_hooks_see_the_same_states(tiny_dit_factory, monkeypatch):
    """Same on_step states (latents, velocities, x0, sigmas), the same on_progress calls,
    arrays a hook keeps are never overwritten later, in-place edits count, STOP returns x0."""
    monkeypatch.setattr(h3cy._progress, "PROGRESS_INTERVAL", 0.0)
    t = tiny_dit_factory("b")
    g, pe, video, audio = _inputs(t.config)
    dit = h3cy.DiT.from_pretrained(t.diffusers_fp32, weights="fp32")

    def run(reuse):
        log = {"states": [], "kept": [], "progress": []}

        def on_step(st):
            log["states"].append((st.step, st.steps, st.sigma_video, st.sigma_audio, st.weights,
                                  st.video_latent.copy(), st.audio_latent.copy(),
                                  st.video_velocity.copy(), st.audio_velocity.copy(),
                                  st.video_x0.copy(), st.audio_x0.copy()))
            log["kept"].append((st.video_velocity, st.video_x0, st.audio_velocity.copy(), st.audio_velocity))
            if st.step == 1:
                st.video_latent *= np.float32(0.75)
            if st.step == 4:
                return h3cy.STOP
        out = h3cy.denoise(dit, pe, g, steps=6, noise=(video, audio), reuse=reuse, on_step=on_step,
                           on_progress=lambda d, tot, ph: log["progress"].append((d, tot, ph)))
        return out, log
    for reuse in (1, 2):
        (py, lp), (cy, lc) = _both(monkeypatch, dit, lambda: run(reuse))
        _equal(py, cy)
        assert lp["progress"] == lc["progress"] and len(lc["progress"]) > 0
        assert len(lp["states"]) == len(lc["states"]) == 5
        for sp, sc in zip(lp["states"], lc["states"]):
            assert sp[:5] == sc[:5]
            _equal(sp[5:], sc[5:])
        for (vv, x0, a_copy, a_now), st in zip(lc["kept"], lc["states"]):
            assert np.array_equal(vv, st[7]) and np.array_equal(x0, st[9])  # not overwritten
            assert np.array_equal(a_copy, a_now)
        assert np.array_equal(cy[0], lc["states"][-1][9])                    # STOP -> x0


def test_cancel_and_callback_errors_then_reuse(tiny_dit_factory, monkeypatch):
    monkeypatch.setattr(h3cy._progress, "PROGRESS_INTERVAL", 0.0)
    monkeypatch.setattr(_config, "_ENV_LOOP_PYTHON", False)
    t = tiny_dit_factory("b")
    g, pe, video, audio = _inputs(t.config)
    dit = h3cy.DiT.from_pretrained(t.diffusers_fp32, weights="fp32")
    want = h3cy.denoise(dit, pe, g, steps=4, noise=(video, audio))
    assert dit.loop_stats["loop"] == "cython"
    nb = len(dit.blocks)
    # a token cancelled from another thread during block 5 stops after block 6 (step 1)
    for tok_cls in (h3cy.CancelToken, None):
        tok = h3cy.CancelToken()
        if tok_cls is None:     # a duck-typed token (no C flag): polled with the GIL
            class Duck:
                cancelled = property(lambda self: tok.cancelled)
            token = Duck()
        else:
            token = tok
        done = []

        def progress(d, total, phase):
            done.append(d)
            if d == 5:
                th = threading.Thread(target=tok.cancel)
                th.start()
                th.join()
        with pytest.raises(h3cy.Cancelled) as ei:
            h3cy.denoise(dit, pe, g, steps=4, noise=(video, audio), on_progress=progress, cancel=token)
        assert ei.value.step == 1 and done == [1, 2, 3, 4, 5]
        assert "after 6 of 12" in str(ei.value)
        _equal(h3cy.denoise(dit, pe, g, steps=4, noise=(video, audio)), want)
    # a cancelled-before-start token stops after the first block
    tok = h3cy.CancelToken()
    tok.cancel()
    with pytest.raises(h3cy.Cancelled) as ei:
        h3cy.denoise(dit, pe, g, steps=4, noise=(video, audio), cancel=tok)
    assert ei.value.step == 0 and "after 1 of" in str(ei.value)
    tok.reset()
    _equal(h3cy.denoise(dit, pe, g, steps=4, noise=(video, audio), cancel=tok), want)
    # exceptions from on_progress (mid-step) and on_step come out as the same object
    class Interrupt(Exception):
        pass
    boom = Interrupt("processing interrupted")

    def bad_progress(d, total, phase):
        if d == 2:
            raise boom
    with pytest.raises(Interrupt) as ei:
        h3cy.denoise(dit, pe, g, steps=4, noise=(video, audio), on_progress=bad_progress)
    assert ei.value is boom
    with pytest.raises(Interrupt) as ei:
        h3cy.denoise(dit, pe, g, steps=4, noise=(video, audio), on_step=lambda st: (_ for _ in ()).throw(boom))
    assert ei.value is boom
    _equal(h3cy.denoise(dit, pe, g, steps=4, noise=(video, audio)), want)
    # the pool is free again: another op on the same pool runs
    h3cy.ops.rms_norm(np.ones((4, 8), np.float32), threads=dit.threads)
    assert dit.generate_lock.acquire(blocking=False)
    dit.generate_lock.release()
    assert len(dit.blocks) == nb


@pytest.fixture(scope="module")
def six_original(tmp_path_factory):
    """six_blocks in the release layout (FL2VA/transformer): every bf16 block weight maps
    in place, so a streaming bf16 DiT attaches its blocks up front."""
    from _tiny_dit import original_state_dict, write_original
    m, cfg = _six_model()
    out = str(tmp_path_factory.mktemp("six_orig") / "transformer")
    write_original(out, original_state_dict(m.state_dict(), cfg, "interleaved"), cfg, shards=2)
    return out, cfg


@pytest.mark.parametrize("weights", ["bf16", "fp16", "int8", "int4"])
def test_streaming_runs_in_the_cython_loop_bit_identical(six_original, monkeypatch, weights):
    """Streaming DiTs whose blocks attach in place (release-layout bf16; fp16/int8/int4 from
    the weight cache) run in the Cython loop, bit for bit as the Python loop's block
    streaming and as the resident model."""
    folder, cfg = six_original
    g, pe, video, audio = _inputs(cfg, seed=4)
    dit = h3cy.DiT.from_pretrained(folder, weights=weights, threads=2, streaming=True)
    resident = h3cy.DiT.from_pretrained(folder, weights=weights, threads=2)
    try:
        assert all(b is None for b in dit.blocks)
        for kw in (dict(seed=3), dict(noise=(video, audio), reuse=2), dict(seed=7, reuse=3, layers=4)):
            py, cy = _both(monkeypatch, dit, lambda: h3cy.denoise(dit, pe, g, steps=4, **kw))
            _equal(py, cy)
            _equal(cy, h3cy.denoise(resident, pe, g, steps=4, **kw))
            assert resident.loop_stats["loop"] == "cython"
            assert np.isfinite(cy[0]).all() and not np.array_equal(cy[0], video)
        assert all(b is None for b in dit.blocks)     # still streaming: nothing made resident
    finally:
        dit.close()


def test_streaming_precision_plan_and_set_weights_in_the_cython_loop(six_original, monkeypatch):
    folder, cfg = six_original
    g, pe, video, audio = _inputs(cfg, seed=5)
    dit = h3cy.DiT.from_pretrained(folder, weights="bf16", streaming=True)
    plan = [("int8", 0, 2), ("bf16", 2, 3), ("int4", 3, 4)]
    py, cy = _both(monkeypatch, dit, lambda: h3cy.denoise(dit, pe, g, steps=4, seed=2, precision=plan))
    _equal(py, cy)
    assert dit.with_weights("int8").streaming and dit.with_weights("int8")._stream_attached()

    def hook(st):
        if st.step == 0:
            st.set_weights("fp16")
    py, cy = _both(monkeypatch, dit, lambda: h3cy.denoise(dit, pe, g, steps=3, seed=2, on_step=hook))
    _equal(py, cy)
    for m in dit._siblings.values():
        m.close()


def test_fp32_and_diffusers_layout_streaming_attach_and_take_the_cython_loop(tiny_dit_factory, monkeypatch):
    """fp32 mode uses the checkpoint's tensors in place (bf16 ones widened in the kernel),
    and the diffusers layout's separate to_q/to_k/to_v and [value; gate] SwiGLU halves are
    attached as row parts: every streaming case pages mapped blocks in the Cython loop,
    bit for bit as resident and as the Python loop."""
    monkeypatch.setattr(_config, "_ENV_LOOP_PYTHON", False)
    t = tiny_dit_factory("a")
    g, pe, video, audio = _inputs(t.config)
    cases = ((t.diffusers_fp32, "fp32"), (t.diffusers_bf16, "fp32"), (t.diffusers_bf16, "bf16"),
             (t.original, "fp32"), (t.original, "bf16"))
    for folder, weights in cases:
        resident = h3cy.DiT.from_pretrained(folder, weights=weights)
        want = h3cy.denoise(resident, pe, g, steps=3, noise=(video, audio))
        assert resident.loop_stats["loop"] == "cython"
        streaming = h3cy.DiT.from_pretrained(folder, weights=weights, streaming=True)
        try:
            py, cy = _both(monkeypatch, streaming,
                           lambda: h3cy.denoise(streaming, pe, g, steps=3, noise=(video, audio)))
            assert streaming.loop_stats["loop"] == "cython", (folder, weights)
            assert streaming._stream_attached() is not None
        finally:
            streaming.close()
        _equal(cy, want)
        _equal(py, want)


def test_streaming_that_cannot_attach_takes_the_python_loop(tiny_dit_factory, monkeypatch):
    """A block linear that is not a view of a mapped file (here: zero-copy turned off, as
    for a tensor copied because of a misaligned offset) keeps the Python loop, same bits."""
    monkeypatch.setattr(_config, "_ENV_LOOP_PYTHON", False)
    t = tiny_dit_factory("a")
    g, pe, video, audio = _inputs(t.config)
    want = h3cy.denoise(h3cy.DiT.from_pretrained(t.diffusers_bf16, weights="bf16"), pe, g, steps=2,
                        noise=(video, audio))
    streaming = h3cy.DiT.from_pretrained(t.diffusers_bf16, weights="bf16", streaming=True)
    try:
        streaming.config["_no_zero_copy"] = True
        got = h3cy.denoise(streaming, pe, g, steps=2, noise=(video, audio))
        assert streaming.loop_stats["loop"] == "python"
        assert streaming._stream_attached() is None
    finally:
        streaming.close()
    _equal(got, want)


def test_ctrl_c_in_the_cython_loop(tiny_dit_factory):
    """SIGINT from another thread while the main thread is inside the nogil loop (no
    Python callbacks at all): KeyboardInterrupt within one block, the DiT runs again.
    The signal is sent only once the main thread is inside ``loop.run`` (its innermost
    Python frame is _run_cython at that call), however slowly the machine set the run up,
    so the test checks the loop's own signal check and not the setup's."""
    import os
    import signal
    import subprocess
    import sys
    t = tiny_dit_factory("b")
    code = f"""
import inspect, os, signal, sys, threading, time, numpy as np
import h3cy
from h3cy.sampling import sampler
dit = h3cy.DiT.from_pretrained({t.diffusers_fp32!r}, weights="fp32")
g = h3cy.Geometry(64, 64, 22)
pe = np.ones((4, {t.config['text_dim']}), np.float32)
h3cy.denoise(dit, pe, g, steps=1, seed=0)
src, first = inspect.getsourcelines(sampler._run_cython)
run_line = first + next(i for i, line in enumerate(src) if "loop.run(" in line)
main = threading.main_thread().ident
where = []

def in_the_loop():
    f = sys._current_frames().get(main)
    return f is not None and f.f_code is sampler._run_cython.__code__ and f.f_lineno == run_line

def watch():
    deadline = time.monotonic() + 240
    while time.monotonic() < deadline:
        if in_the_loop():
            time.sleep(0.05)            # a few blocks in, and still there
            if in_the_loop():
                where.append("loop")
                os.kill(os.getpid(), signal.SIGINT)
                return
        time.sleep(0.005)

threading.Thread(target=watch, daemon=True).start()
try:
    h3cy.denoise(dit, pe, g, steps=2000, seed=0)
    print("NOT INTERRUPTED")
except KeyboardInterrupt:
    print("interrupted in", where)
v, a = h3cy.denoise(dit, pe, g, steps=2, seed=0)
print("again", bool(np.isfinite(v).all()), dit.loop_stats["loop"])
"""
    env = dict(os.environ, PYTHONPATH=os.pathsep.join(sys.path))
    # a runner that starts pytest in the background can leave SIGINT ignored, which the
    # child would inherit (and then never see the signal): give it the default disposition
    r = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=300, env=env,
                       preexec_fn=lambda: signal.signal(signal.SIGINT, signal.SIG_DFL))
    assert r.returncode == 0, r.stderr[-2000:]
    assert "interrupted in ['loop']" in r.stdout and "again True cython" in r.stdout, r.stdout


def test_streaming_in_the_cython_loop_bounds_peak_memory(tmp_path):
    """The 8-block model of test_dit_cache's streaming RSS test (~5.8 MB of bf16 weights a
    block, release layout): attaching every block up front reads no weight page, and the
    peak RSS growth of a whole denoise in the Cython loop stays about one or two blocks,
    as in the Python loop; the resident model grows by every block.  Fresh processes;
    the peak is VmHWM after resetting it (/proc/self/clear_refs 5)."""
    import os
    import subprocess
    import sys
    from _tiny_dit import write_medium_streaming_model
    folder = str(tmp_path / "medium")   # the release layout: every bf16 weight maps zero-copy
    write_medium_streaming_model(folder)
    code = f"""
import sys, gc, numpy as np
import h3cy
from h3cy import _config
mode = sys.argv[1]
_config._ENV_LOOP_PYTHON = mode == "python"
d = h3cy.DiT.from_pretrained({folder!r}, weights="bf16", streaming=mode != "resident", threads=1)
g = h3cy.Geometry(64, 64, 22)
sched = h3cy.Schedule.shifted(2)
tv, ta = h3cy.Schedule.timesteps(sched.video_sigmas), h3cy.Schedule.timesteps(sched.audio_sigmas)
d.prepare_timesteps(np.unique(np.concatenate([tv.reshape(-1), ta]))); d.release_adaln()
pe = np.ones((4, 64), np.float32)
def status(key):
    with open("/proc/self/status") as f:
        return [int(l.split()[1]) for l in f if l.startswith(key)][0] * 1024
gc.collect()
r0 = status("VmRSS")
if mode == "cython":
    assert d._stream_attached() is not None
gc.collect()
r1 = status("VmRSS")
with open("/proc/self/clear_refs", "w") as f:
    f.write("5")
v, a = h3cy.denoise(d, pe, g, steps=2, seed=0)
assert np.isfinite(v).all()
print(d.loop_stats["loop"], r1 - r0, status("VmHWM") - r1, status("VmRSS") - r1)
"""
    env = dict(os.environ, PYTHONPATH=os.pathsep.join(sys.path))
    res = {}
    for mode in ("cython", "python", "resident"):
        out = subprocess.run([sys.executable, "-c", code, mode], capture_output=True, text=True,
                             timeout=300, env=env)
        assert out.returncode == 0, out.stderr[-2000:]
        loop, attach, peak, end = out.stdout.split()
        res[mode] = (loop, int(attach), int(peak), int(end))
    print(res)
    block_bytes = 2 * (3 * 256 * 512 + 512 * 256 + 2 * 1536 * 512 + 512 * 1536)   # bf16
    assert res["cython"][0] == "cython" and res["python"][0] == "python"
    assert res["resident"][0] == "cython"
    # observed (bytes): cython attach 0.98M, peak 18.9M, end 8.3M; python peak 20.8M, end
    # 14.9M; resident peak 61.9M, end 58.0M (block_bytes 5.8M).  Attaching reads only the
    # small norm tensors (copied to float32; fault-around maps up to 64 KB around each).
    # The peak counts the refiner block (~1 block, resident by design: it runs every
    # evaluation), the running block and the activations.
    assert res["cython"][1] <= block_bytes // 2, res
    assert res["cython"][2] <= 4 * block_bytes, res
    assert res["cython"][2] <= res["python"][2] + block_bytes // 2, res
    assert res["cython"][3] <= 2 * block_bytes, res          # pages released after each block
    assert res["resident"][2] >= res["cython"][2] + 5 * block_bytes, res
