"""The denoising loop: MiniMax-H3's two-schedule Euler sampler (spec §5), with step hooks,
block-level progress and cancellation.

Two drivers with bit-identical results (docs/sampler.md):

- the Cython loop (``_kernels.DenoiseLoop``, pyx/_loop.pxi): the steps, every denoiser
  evaluation and the Euler updates run without the GIL; Python is entered between blocks
  only for due progress reports, a set cancel flag or (main thread) Ctrl-C, and at step
  ends for ``on_step``.  Used for resident DiTs and for streaming DiTs whose blocks are
  all memory-mapped views (fp32/bf16 from the checkpoint in either layout, fp16/int8/
  int4 from the weight cache):
  those are attached up front without reading a page (``DiT._stream_attached``) and the
  loop keeps streaming's memory bound with page advice in C (``h3_pages_advise``:
  ``MADV_WILLNEED`` on the next block before a block runs, ``MADV_DONTNEED`` on it after);
- the Python loop below, around ``DiT.forward``: streaming DiTs with a block tensor
  copied at load (misaligned in its file), ``H3CY_DIT_PYTHON=1``, a DiT whose
  ``forward`` was replaced, and ``H3CY_LOOP_PYTHON=1`` (A/B switch).
"""
import threading

import numpy as np

from .. import _config
from .. import _kernels
from .. import _progress
from .._progress import Ticker
from ..errors import Busy, H3ValueError
from .conditions import check_conditions, held_conditions
from .layout import Geometry, Layout, pack_audio, patchify, unpack_audio, unpatchify
from .res_multistep import SAMPLERS, ResMultistep
from .schedule import Schedule, clean_estimate, euler_blend

STOP = type("Stop", (), {"__repr__": lambda self: "h3cy.STOP"})()


class CancelToken:
    """Set from any thread with :meth:`cancel`; long operations stop within one block and
    raise :class:`h3cy.Cancelled`."""

    def __init__(self):
        self._event = threading.Event()
        self._flag = _kernels.CancelFlag()    # polled by the Cython loop without the GIL

    def cancel(self):
        self._event.set()
        self._flag.set()

    @property
    def cancelled(self):
        return self._event.is_set()

    def reset(self):
        self._event.clear()
        self._flag.clear()


class StepState:
    """What ``on_step`` sees after each update.  ``video_latent`` / ``audio_latent`` are the
    loop's own arrays (the generated rows only): in-place edits change the rest of the run.

    ``conditions`` holds ``(latent frame, held latent)`` per keyframe condition, the held
    latent (C, 1, h, w) as the DiT reads it every step (read-only: conditions are never
    updated); empty without conditions.  ``layout`` is the run's :class:`h3cy.Layout`, whose
    ``condition_indices`` are the condition rows of the packed sequence."""

    __slots__ = ("step", "steps", "sigma_video", "sigma_audio", "video_latent", "audio_latent",
                 "video_velocity", "audio_velocity", "video_x0", "audio_x0", "weights",
                 "video_denoised_prev", "audio_denoised_prev", "conditions", "layout", "_next_weights")

    def __init__(self, **kw):
        self._next_weights = None
        self.conditions, self.layout = (), None
        # sampler="res_multistep": the denoised pair the next step takes as its previous one
        # (ComfyUI's old_denoised; the audio's as ComfyUI carries it, audio_scale * x0).
        # The sampler's own arrays: in-place edits change the next step.  None under Euler.
        self.video_denoised_prev = self.audio_denoised_prev = None
        for k, v in kw.items():
            setattr(self, k, v)

    def set_weights(self, weights):
        """Run the following steps in another weights mode (see DiT.with_weights)."""
        self._next_weights = weights

    def preview(self, frame=None):
        """The step's clean estimate ``video_x0`` as small RGB frames (one pixel per latent
        pixel): uint8 ``(T, h, w, 3)``, or ``(h, w, 3)`` for one latent frame index.  The
        linear latent->RGB map ComfyUI uses for MiniMax-H3 (:mod:`h3cy.preview`)."""
        from ..preview import latent_to_rgb
        if frame is None:
            return latent_to_rgb(self.video_x0)
        t = range(self.video_x0.shape[1])[frame]       # IndexError for a frame out of range
        return latent_to_rgb(self.video_x0[:, t:t + 1])[0]


def initial_noise(geometry, seed, channels=24, audio_channels=32):
    """Seeded noise: ``SeedSequence(seed).spawn(2)`` -> PCG64 (video, then audio) ->
    ``standard_normal(float32)``.  Video (channels, T, h, w), audio (2, audio_channels, A)."""
    if isinstance(seed, bool) or not isinstance(seed, (int, np.integer)) or seed < 0:
        raise H3ValueError(f"seed must be a non-negative int, got {seed!r}")
    sv, sa = np.random.SeedSequence(int(seed)).spawn(2)
    g = geometry
    video = np.random.Generator(np.random.PCG64(sv)).standard_normal(
        (channels, g.T, g.h, g.w), dtype=np.float32)
    audio = np.random.Generator(np.random.PCG64(sa)).standard_normal(
        (2, audio_channels, g.A), dtype=np.float32)
    return video, audio


def reuse_steps(steps, reuse):
    """Which steps evaluate the DiT under ``reuse=N`` (h3.c's rule): the first, the last
    and every N-th; the others extrapolate the velocity."""
    return [reuse == 1 or i == 0 or i == steps - 1 or i % reuse == 0 for i in range(steps)]


def extrapolation_ratio(sigma, sigma_last, sigma_prev):
    """h3.c: r = (sigma - sigma_last) / (sigma_last - sigma_prev), clamped to [-2, 2]
    (0 when the denominator is 0); v = v_last + r (v_last - v_prev)."""
    den = np.float32(sigma_last) - np.float32(sigma_prev)
    r = (np.float32(sigma) - np.float32(sigma_last)) / den if den != 0 else np.float32(0)
    return np.float32(min(2.0, max(-2.0, float(r))))


def gate_ranked_blocks(dit, timesteps, layers):
    """h3.c's ``layers=K``: score each block by the mean |gate| (gate_msa and gate_mlp, every
    modality, every timestep of the schedule) and drop the ``n - K`` lowest-scoring blocks;
    blocks 0, 1 and the last are never dropped.  Returns the active mask."""
    n = len(dit.blocks)
    if isinstance(layers, bool) or not isinstance(layers, (int, np.integer)):
        raise H3ValueError(f"layers must be an int, got {layers!r}")
    skip = n - int(layers)
    if skip < 0 or skip > max(0, n - 3):
        raise H3ValueError(f"layers must be in [{n - max(0, n - 3)}, {n}] for this {n}-block model, got {layers}")
    active = [True] * n
    if skip == 0:
        return active
    distinct = np.unique(np.asarray(timesteps, np.float32))
    dit.prepare_timesteps(distinct)          # one pass over the blocks for all of them
    tabs = [dit.adaln_tables(t) for t in distinct]
    scores = []
    for b in range(2, n - 1):
        total = sum(np.abs(tab[0][b][2]).sum(dtype=np.float64) + np.abs(tab[0][b][5]).sum(dtype=np.float64)
                    for tab in tabs)
        count = sum(tab[0][b][2].size + tab[0][b][5].size for tab in tabs)
        scores.append((total / count, b))
    for _, b in sorted(scores)[:skip]:
        active[b] = False
    return active


def _precision_plan(plan, n, default):
    """[(mode, start, stop), ...] covering steps -> list of the mode of every step."""
    modes = [default] * n
    if plan is None:
        return modes
    seen = [False] * n
    for entry in plan:
        try:
            mode, start, stop = entry
        except (TypeError, ValueError):
            raise H3ValueError(f"precision entries are (weights, start, stop), got {entry!r}")
        if not (0 <= start < stop <= n):
            raise H3ValueError(f"precision range ({start}, {stop}) is outside the {n} steps")
        for i in range(start, stop):
            if seen[i]:
                raise H3ValueError(f"precision ranges overlap at step {i}")
            seen[i] = True
            modes[i] = mode
    return modes


def denoise(dit, prompt_embeds, geometry=None, steps=20, seed=42, schedule=None, noise=None,
            on_step=None, on_progress=None, cancel=None, reuse=1, layers=None, precision=None,
            blocking=True, sampler="euler", shift_video=None, shift_audio=None, text_tags=None,
            conditions=None, condition_noise=None):
    """Run the sampler; returns ``(video_latent (C, T, h, w), audio_latent (2, 32, A))`` float32.

    Parameters
    ----------
    dit : h3cy.DiT
    prompt_embeds : (L, text_dim) or (1, L, text_dim) float32 — encoded prompt
    geometry : h3cy.Geometry (default 512x512, 22 frames)
    steps : int — denoiser evaluations (diffusers' num_inference_steps = steps + 1)
    seed : int — see :func:`initial_noise`; ignored when ``noise=(video, audio)`` is given
    schedule : h3cy.Schedule, optional — default ``Schedule.shifted(steps)``
    on_step : callable(StepState), optional — after each update; return ``h3cy.STOP`` to
        end early (the clean estimates are returned)
    on_progress : callable(done, total, phase), optional — between blocks, phase "denoise":
        at most ~20 calls a second, and always at the end of each step
    cancel : CancelToken, optional — checked after each block; raises Cancelled(step=i)
    reuse : int — approximation (h3.c): evaluate the DiT at the first, the last and every
        ``reuse``-th step only; other steps extrapolate the velocity linearly in sigma
        (see :func:`reuse_steps`, :func:`extrapolation_ratio`).  1 = exact.
    layers : int, optional — approximation (h3.c): run only the ``layers`` blocks whose
        AdaLN gates are largest over the schedule (:func:`gate_ranked_blocks`).
    precision : list of (weights, start, stop), optional — weights mode per step range,
        e.g. ``[("int8", 0, 14), ("bf16", 14, 20)]`` (steps outside every range use
        ``dit``'s own mode); ``state.set_weights(mode)`` in ``on_step`` switches too.  Other
        modes come from :meth:`DiT.with_weights` (loaded once, kept).
    blocking : bool — one generation per DiT at a time: wait for a running one (True) or
        raise :class:`Busy` (False)

    sampler : "euler" (diffusers' Euler, per modality on its own grid: today's bits) or
        "res_multistep" (ComfyUI's RES second-order multistep on the video grid, the audio
        carried as ComfyUI's ModelSamplingAV carries it: :mod:`h3cy.sampling.res_multistep`)
    shift_video, shift_audio : float, optional — the schedule's shifts (default 12 and 3;
        the FastH3 models use 10/3, the turbo LoRAs 6/3); an error together with ``schedule``

    text_tags : (L,) ints, optional — the modality tag of every prompt row, as
        ``encode_prompt(..., return_tags=True)`` returns them (0 for a keyframe's vision
        rows, 1 for text); all 1 when omitted
    conditions : list of (frame, latent), optional — keyframe conditions (diffusers'
        ``fl2va``): ``frame`` 0 = first, -1 = last latent frame; ``latent`` the clean
        (in_channels, 1, h, w) video latent of the keyframe (``h3cy.encode_image``).  In the
        order given (the packed order; the reference gives the first before the last).  Each
        is held at ``0.999 z + 0.001 n`` with timestep ``max(t_video, 0.999)`` and never
        updated; the samplers update the generated rows only (:mod:`h3cy.sampling.conditions`)
    condition_noise : list of arrays, optional — the ``n`` of each condition (its latent's
        shape); drawn from ``seed`` when omitted (even when ``noise`` is given)

    A per-latent-frame schedule (``video_sigmas`` of shape (steps+1, T)) steps each latent
    frame with its own sigma column; text rows take latent frame 0's timestep, a condition
    ``max`` of its anchored frame's and 0.999.
    """
    g = geometry if geometry is not None else Geometry()
    cfg = dit.config
    C, Ca = cfg["in_channels"], cfg["audio_in_channels"]
    if int(np.prod(cfg["patch_size"])) != 4 or tuple(cfg["patch_size"])[0] != 1:
        raise H3ValueError("denoise expects the released (1, 2, 2) patch")
    pe = np.asarray(prompt_embeds, np.float32)
    if pe.ndim == 3 and pe.shape[0] == 1:
        pe = pe[0]
    if pe.ndim != 2 or pe.shape[1] != cfg["text_dim"] or pe.shape[0] < 1:
        raise H3ValueError(f"prompt_embeds must be (L, {cfg['text_dim']}), got {np.shape(prompt_embeds)}")
    if sampler not in SAMPLERS:
        raise H3ValueError(f"sampler must be one of {SAMPLERS}, got {sampler!r}")
    if schedule is not None and (shift_video is not None or shift_audio is not None):
        raise H3ValueError("give shift_video/shift_audio or schedule=, not both (an explicit "
                           "schedule has its shifts built in)")
    if schedule is None:
        schedule = Schedule.shifted(steps, video_shift=12.0 if shift_video is None else shift_video,
                                    audio_shift=3.0 if shift_audio is None else shift_audio)
    sched = schedule
    n = sched.steps
    per_frame = sched.video_sigmas.ndim == 2
    if per_frame and sched.video_sigmas.shape[1] != g.T:
        raise H3ValueError(f"a per-latent-frame schedule needs {g.T} columns (latent frames), got "
                           f"{sched.video_sigmas.shape[1]}")
    if noise is not None:
        video, audio = (np.array(a, np.float32, copy=True) for a in noise)
        if video.shape != (C, g.T, g.h, g.w) or audio.shape != (2, Ca, g.A):
            raise H3ValueError(f"noise must be ({(C, g.T, g.h, g.w)}, {(2, Ca, g.A)}), got "
                               f"({video.shape}, {audio.shape})")
    else:
        video, audio = initial_noise(g, seed, C, Ca)
    frames, held = (), []
    if conditions is not None:
        frames, latents = check_conditions(conditions, g, C)
        held = held_conditions(latents, condition_noise, seed) if latents else []
        for z in held:
            z.flags.writeable = False
    elif condition_noise is not None:
        raise H3ValueError("condition_noise was given without conditions")
    # the held condition rows, packed after the text (what every evaluation reads first
    # among the video rows); (0, 4C) without conditions
    cond_rows = (np.concatenate([patchify(z) for z in held]) if held
                 else np.empty((0, 4 * C), np.float32))
    cond_state = tuple(zip(frames, held))
    if sampler == "res_multistep":
        # runs at step ends in either loop: the loop's Euler result is replaced in place by
        # the res_multistep step (from the latents before it and the clean estimates)
        res = ResMultistep(sched.video_sigmas, sched.audio_sigmas, video, audio)
        on_step = _res_hook(res, on_step)
    lay = Layout(g, pe.shape[0], text_tags=text_tags, condition_frames=frames)
    sv, sa = sched.video_sigmas, sched.audio_sigmas
    tvs, tas = Schedule.timesteps(sv), Schedule.timesteps(sa)
    # every step's (distinct row timesteps, row -> index), the same for both loops
    row_plan = [lay.row_timesteps(tvs[i], tas[i]) for i in range(n)]
    if isinstance(reuse, bool) or not isinstance(reuse, (int, np.integer)) or not 1 <= reuse <= 32:
        raise H3ValueError(f"reuse must be an int in [1, 32], got {reuse!r}")
    evaluate = reuse_steps(n, int(reuse))
    if per_frame and reuse != 1:
        raise H3ValueError("reuse > 1 is not available with a per-latent-frame schedule")
    plan = _precision_plan(precision, n, dit.weights)
    active = None
    if layers is not None:
        active = gate_ranked_blocks(dit, np.concatenate([tvs.reshape(-1), tas]), layers)
    n_active = len(dit.blocks) if active is None else sum(active)
    total = sum(evaluate) * n_active
    state = {"step": 0}
    ticker = Ticker(total, "denoise", on_progress, cancel, what="denoise", step=lambda: state["step"])

    def after_block(b, nb):
        # at most ~20 reports a second, but always at the end of a step
        ticker.tick(boundary=b == nb)

    lock = dit.generate_lock
    if not lock.acquire(blocking=blocking):
        raise Busy("this DiT is already generating in another thread (blocking=False)")
    # per-frame schedules: video row r of latent frame f takes t = 1 - sigma[i, f]; text rows
    # take latent frame 0's timestep (spec: "text rows take the timestep of latent frame 0")
    Nc = lay.n_condition_rows
    try:
        distinct = np.unique(np.concatenate([p[0] for p in row_plan]))
        if not getattr(dit, "_adaln_released", False):
            dit.prepare_timesteps(distinct)
        if _cython_loop_usable(dit) and (not dit.streaming or all(
                _cython_loop_usable(dit.with_weights(m) if m != dit.weights else dit) for m in set(plan))):
            return _run_cython(dit, pe, g, lay, row_plan, cond_rows, cond_state, sv, sa, tvs, tas,
                               per_frame, video, audio, evaluate, plan, active, on_step, on_progress,
                               cancel)
        dit.loop_stats = {"loop": "python"}
        override = None
        last = prev = None          # (step, video velocity, audio velocity) of evaluations
        for i in range(n):
            state["step"] = i
            tv, ta = tvs[i], tas[i]
            timestep, tidx = row_plan[i]
            if per_frame:
                tv = tv[None, :, None, None]           # broadcast over (C, T, h, w)
                sv_i, sv_n = sv[i][None, :, None, None], sv[i + 1][None, :, None, None]
            else:
                sv_i, sv_n = sv[i], sv[i + 1]
            mode = override if override is not None else plan[i]
            model = dit.with_weights(mode) if mode != dit.weights else dit
            if evaluate[i]:
                # the video rows are the held conditions, then the generated video
                xv = patchify(video) if Nc == 0 else np.concatenate([cond_rows, patchify(video)])
                vel_rows, vel_arows = model.forward(
                    xv, pack_audio(audio), pe, timestep, tidx, lay.token_tags,
                    lay.position_ids, lay.video_indices, lay.audio_indices, lay.text_indices,
                    after_block=after_block, active_blocks=active)
                vel_v = unpatchify(vel_rows[Nc:], g.T, g.h, g.w)
                vel_a = unpack_audio(vel_arows)
                prev, last = last, (i, vel_v, vel_a)
            elif prev is None:
                vel_v, vel_a = last[1].copy(), last[2].copy()
            else:
                j, k = last[0], prev[0]
                rv = extrapolation_ratio(sv[i], sv[j], sv[k])
                ra = extrapolation_ratio(sa[i], sa[j], sa[k])
                vel_v = (last[1] + rv * (last[1] - prev[1])).astype(np.float32)
                vel_a = (last[2] + ra * (last[2] - prev[2])).astype(np.float32)
            # x0 (for hooks and STOP) and the Euler update, both as diffusers computes them
            # the clean estimates (for hooks and STOP) are the Euler step's own x0
            x0_v = clean_estimate(video, vel_v, tv)
            x0_a = clean_estimate(audio, vel_a, ta)
            euler_blend(video, x0_v, sv_i, sv_n, out=video)
            euler_blend(audio, x0_a, sa[i], sa[i + 1], out=audio)
            if on_step is not None:
                st = StepState(step=i, steps=n, sigma_video=sv[i + 1].copy() if per_frame else float(sv[i + 1]),
                               sigma_audio=float(sa[i + 1]), video_latent=video, audio_latent=audio,
                               video_velocity=vel_v, audio_velocity=vel_a, video_x0=x0_v, audio_x0=x0_a,
                               weights=mode, conditions=cond_state, layout=lay)
                if on_step(st) is STOP:
                    return x0_v, x0_a
                if st._next_weights is not None:
                    override = st._next_weights
    finally:
        lock.release()
    return video, audio


def _res_hook(res, user_hook):
    """The step hook that turns the loops' Euler steps into res_multistep steps, then calls
    the user's hook (which sees the res_multistep latents)."""
    def hook(state):
        res.update(state.step, state.video_latent, state.audio_latent, state.video_x0, state.audio_x0)
        state.video_denoised_prev, state.audio_denoised_prev = res.old_d_v, res.old_d_a
        out = user_hook(state) if user_hook is not None else None
        res.keep(state.video_latent, state.audio_latent)     # after the hook: its edits count
        return out
    return hook


def _cython_loop_usable(dit):
    """The Cython loop runs DiTs with the C block driver: resident ones, and streaming ones
    whose blocks all attach in place (DiT.loop_ready).  The rest (streaming over
    a copied tensor, H3CY_DIT_PYTHON=1, a replaced forward, H3CY_LOOP_PYTHON=1) take the
    Python loop."""
    from ..models.dit import DiT
    return (not _config.loop_python() and isinstance(dit, DiT) and dit.loop_ready
            and "forward" not in vars(dit))


def _run_cython(dit, pe, g, lay, row_plan, cond_rows, cond_state, sv, sa, tvs, tas, per_frame,
                video, audio, evaluate, plan, active, on_step, on_progress, cancel):
    """Prepare the per-step tables in numpy (exactly as the Python loop builds its forward
    arguments) and run _kernels.DenoiseLoop.  Returns (video, audio) or the clean
    estimates when on_step returned STOP."""
    n, S, T = len(evaluate), lay.S, g.T
    L, Nc, Na = lay.L, lay.n_condition_rows, 2 * g.A
    # the C loop's packed order: text, conditions, audio, generated video, each contiguous
    for name, idx, start in (("text", lay.text_indices, 0), ("condition", lay.condition_indices, L),
                             ("audio", lay.audio_indices, L + Nc),
                             ("video", lay.generated_video_indices, L + Nc + Na)):
        if not np.array_equal(idx, np.arange(start, start + idx.shape[0])):
            raise H3ValueError(f"the packed layout's {name} rows are not contiguous")
    rows = np.empty((n, S), np.int32)
    tidx = np.empty((n, S), np.int32)
    step_vals = []
    for i in range(n):
        timestep, ti = row_plan[i]
        tidx[i] = ti
        rows[i] = ti * 3 + lay.token_tags
        step_vals.append(np.asarray(timestep, np.float32))
    keys = np.unique(np.concatenate(step_vals)).astype(np.float32)
    step_keys = np.concatenate([np.searchsorted(keys, v) for v in step_vals]).astype(np.int32)
    key_off = np.concatenate([[0], np.cumsum([v.shape[0] for v in step_vals])]).astype(np.int32)
    ratio_v = np.full(n, np.nan, np.float32)
    ratio_a = np.full(n, np.nan, np.float32)
    last = prev = None
    for i in range(n):
        if evaluate[i]:
            prev, last = last, i
        elif prev is not None:
            ratio_v[i] = extrapolation_ratio(sv[i], sv[last], sv[prev])
            ratio_a[i] = extrapolation_ratio(sa[i], sa[last], sa[prev])
    if per_frame:
        tv_f, sv_f = np.ascontiguousarray(tvs, np.float32), np.ascontiguousarray(sv, np.float32)
    else:
        tv_f = np.ascontiguousarray(np.repeat(tvs[:, None], T, axis=1), np.float32)
        sv_f = np.ascontiguousarray(np.repeat(sv[:, None], T, axis=1), np.float32)
    nb = len(dit.blocks)
    act = np.ones(nb, np.uint8) if active is None else np.asarray(active, np.uint8)
    loop = _kernels.DenoiseLoop(
        video, audio, pe, lay.position_ids, L, rows, tidx, key_off, step_keys, keys,
        np.asarray(evaluate, np.uint8), ratio_v, ratio_a, tv_f, sv_f,
        np.ascontiguousarray(tas, np.float32), np.ascontiguousarray(sa, np.float32), act, dit.hidden,
        cond=np.ascontiguousarray(cond_rows, np.float32))

    st = {"override": None, "mode": None}

    def select_model(i):
        mode = st["override"] if st["override"] is not None else plan[i]
        st["mode"] = mode
        model = dit.with_weights(mode) if mode != dit.weights else dit
        if not _cython_loop_usable(model):
            raise H3ValueError(f"the streaming {mode} DiT cannot run in the Cython loop (its blocks "
                               "are not mapped views); switch to it with H3CY_LOOP_PYTHON=1 or "
                               "a resident DiT")
        return model

    def step_hook(i, vel_v, vel_a, x0_v, x0_a):
        state = StepState(step=i, steps=n, sigma_video=sv[i + 1].copy() if per_frame else float(sv[i + 1]),
                          sigma_audio=float(sa[i + 1]), video_latent=video, audio_latent=audio,
                          video_velocity=vel_v, audio_velocity=vel_a, video_x0=x0_v, audio_x0=x0_a,
                          weights=st["mode"], conditions=cond_state, layout=lay)
        if on_step(state) is STOP:
            return True
        if state._next_weights is not None:
            st["override"] = state._next_weights
        return False

    select = np.array([i == 0 or plan[i] != plan[i - 1] for i in range(n)], np.uint8)
    stopped, x0 = loop.run(select_model, select, step_hook if on_step is not None else None,
                           on_progress, cancel, float(_progress.PROGRESS_INTERVAL),
                           threading.current_thread() is threading.main_thread())
    dit.loop_stats = {"loop": "cython", "eval_seconds": loop.eval_seconds,
                       "evaluations": loop.evaluations}
    if stopped:
        return x0
    return video, audio
