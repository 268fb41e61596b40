# _loop.pxi — the denoising loop driver (included by _kernels.pyx).
#
# h3cy/sampling/sampler.py prepares everything in Python (schedule, packed layout, per-step row
# tables, extrapolation ratios, the AdaLN tables) and hands DenoiseLoop plain arrays.
# DenoiseLoop.run() then runs the steps without the GIL: input packing and projections,
# every transformer block, the final norm and heads, the velocity extrapolation and the
# Euler updates are C calls on pointers prepared before the loop.  Python is entered only
# between blocks when a progress report is due, the cancel flag is set, or (main thread)
# to let Ctrl-C through, and at step ends for the step hook / a weights-mode switch.  Every
# such call is a `with gil` block inside an `except -1 nogil` function: an exception raised
# there propagates unchanged, and run()'s finally releases the pool lock.

from cpython.exc cimport PyErr_CheckSignals
from libc.stdlib cimport malloc, calloc


cdef class CancelFlag:
    """An int that CancelToken.cancel() sets and the loop polls without the GIL."""
    cdef int v

    def set(self):
        h3_flag_set(&self.v, 1)

    def clear(self):
        h3_flag_set(&self.v, 0)

    @property
    def is_set(self):
        return bool(h3_flag_get(&self.v))


cdef inline const float *_f32p(object a, str name, int64_t n) except NULL:
    """Pointer to a C-contiguous float32 array of exactly n values."""
    cdef cnp.ndarray arr = a
    if arr.dtype != np.float32 or not arr.flags.c_contiguous or arr.size != n:
        raise H3ValueError(f"{name} must be a C-contiguous float32 array of {n} values, "
                           f"got {arr.dtype} {np.shape(a)}")
    return <const float *>cnp.PyArray_DATA(arr)


cdef inline const int32_t *_i32p(object a, str name, int64_t n) except NULL:
    cdef cnp.ndarray arr = a
    if arr.dtype != np.int32 or not arr.flags.c_contiguous or arr.size != n:
        raise H3ValueError(f"{name} must be a C-contiguous int32 array of {n} values")
    return <const int32_t *>cnp.PyArray_DATA(arr)


cdef inline float *_wf32p(object a, str name, int64_t n) except NULL:
    cdef cnp.ndarray arr = a
    if arr.dtype != np.float32 or not arr.flags.c_contiguous or arr.size != n or not arr.flags.writeable:
        raise H3ValueError(f"{name} must be a writable C-contiguous float32 array of {n} values")
    return <float *>cnp.PyArray_DATA(arr)


cdef class DenoiseLoop:
    """One run of the sampler's step loop (see h3cy.sampling.sampler.denoise, which builds it).

    Parameters (all numpy, checked here)
    ----------
    video : (C, T, h, w) float32, audio : (2, Ca, A) float32 — the loop's latents, updated
        in place (the hook sees these very arrays)
    rows, tidx : (steps, S) int32 — per packed row: AdaLN table row (tidx*3 + tag) and
        timestep index into the step's distinct values
    key_off : (steps+1,) int32, step_keys : (key_off[-1],) int32 — the distinct timestep
        values of step i are keys[step_keys[key_off[i]:key_off[i+1]]] (ascending)
    keys : (n_keys,) float32 — every distinct timestep of the schedule
    evaluate : (steps,) uint8; ratio_v, ratio_a : (steps,) float32 — reuse=N (1 where the
        DiT runs; else the extrapolation ratios, NaN: copy the last velocity)
    tv : (steps, T), sv : (steps+1, T), ta : (steps,), sa : (steps+1,) float32 — Euler
        timesteps and sigmas (per latent frame for video)
    active : (blocks,) uint8 — the `layers=` mask
    L : text rows
    cond : (Nc, 4*C) float32, optional — held keyframe condition rows (patchified), packed
        after the text rows: the packed order is text, conditions, audio, generated video.
        They enter every evaluation and are never updated; the projections run over the
        condition and generated video rows together, as DiT.forward runs them.
    """
    # geometry
    cdef int64_t S, L, Nc, Na, Nv, C, T, hh, ww, Ca, A, hidden, pv, umax
    cdef int n_steps, nb, n_active, n_keys
    # per-run tables
    cdef const int32_t *rows
    cdef const int32_t *tidx
    cdef const int32_t *key_off
    cdef const int32_t *step_keys
    cdef const uint8_t *evaluate
    cdef const float *ratio_v
    cdef const float *ratio_a
    cdef const float *tv
    cdef const float *sv
    cdef const float *ta
    cdef const float *sa
    cdef const uint8_t *active
    # the bound model (C views of its weights and prepared tables)
    cdef h3_dit_block *blocks
    cdef const float **tabs           # [n_keys][nb][6] -> [3, hidden]
    cdef const float **fin            # [n_keys][2] -> [hidden] (1+scale, shift)
    cdef const h3_linear *proj_in
    cdef const h3_linear *aproj_in
    cdef const h3_linear *proj_out
    cdef const h3_linear *aproj_out
    cdef const float *norm_out
    cdef const float *cos
    cdef const float *sin
    cdef const float *x_txt
    cdef h3_isa isa
    cdef int round_bf16, attn_bf16, heads, rot_dim, head_dim, ffn
    cdef float eps, qk_eps, feps
    cdef h3_pool *pool
    cdef PyThread_type_lock plock
    # streaming DiTs: block b's mapped weight ranges are [roff[b], roff[b+1]) of rptr/rlen
    # (prefetched before the previous active block runs, released after the block)
    cdef bint paging
    cdef const int64_t *roff
    cdef const uint64_t *rptr
    cdef const uint64_t *rlen
    cdef bint locked
    # scratch
    cdef float *hbuf
    cdef float *xv
    cdef float *xa
    cdef float *hn
    cdef float *vrows
    cdef float *arows
    cdef float *tabbuf
    cdef float *finbuf
    cdef char *ws
    cdef size_t ws_bytes
    # latents and the velocity / clean-estimate buffers
    cdef float *video
    cdef float *audio
    cdef float *vel[3][2]
    cdef float *x0[2]
    cdef int last, prev, cur
    # hooks, progress, cancel
    cdef int64_t done, total
    cdef double interval, last_report
    cdef bint has_progress, has_hook, check_signals, py_cancel, stopped
    cdef int *cancel_flag
    cdef int step
    cdef readonly double eval_seconds
    cdef readonly int evaluations
    cdef object model, on_progress, cancel, step_hook, select_model, pe, position_ids
    cdef object _run_refs, _model_refs, _scratch, _ws_arr, _vel_obj, _x0_obj
    cdef object video_obj, audio_obj, keys_arr, _keys, ev_arr

    def __cinit__(self):
        self.blocks = NULL
        self.tabs = NULL
        self.fin = NULL
        self.locked = False

    def __dealloc__(self):
        free(self.blocks)
        free(<void *>self.tabs)
        free(<void *>self.fin)

    def __init__(self, video, audio, pe, position_ids, int L, rows, tidx, key_off, step_keys,
                 keys, evaluate, ratio_v, ratio_a, tv, sv, ta, sa, active, int hidden, cond=None):
        cdef cnp.ndarray v = video
        cdef cnp.ndarray a = audio
        if v.ndim != 4 or v.shape[2] % 2 or v.shape[3] % 2 or a.ndim != 3 or a.shape[0] != 2:
            raise H3ValueError(f"latents must be (C, T, h, w) with even h, w and (2, Ca, A), got "
                               f"{np.shape(video)}, {np.shape(audio)}")
        self.C, self.T, self.hh, self.ww = v.shape[0], v.shape[1], v.shape[2], v.shape[3]
        self.Ca, self.A = a.shape[1], a.shape[2]
        self.video = _wf32p(video, "video", v.size)
        self.audio = _wf32p(audio, "audio", a.size)
        self.video_obj, self.audio_obj = video, audio
        self.pv = 4 * self.C
        self.Nv = self.T * (self.hh // 2) * (self.ww // 2)
        self.Na = 2 * self.A
        self.L = L
        if cond is None:
            cond = np.empty((0, self.pv), np.float32)
        if (np.ndim(cond) != 2 or np.shape(cond)[1] != self.pv or np.asarray(cond).dtype != np.float32
                or not np.asarray(cond).flags.c_contiguous):
            raise H3ValueError(f"cond must be a C-contiguous float32 (rows, {self.pv}) array, got "
                               f"{np.asarray(cond).dtype} {np.shape(cond)}")
        self.Nc = np.shape(cond)[0]
        self.S = L + self.Nc + self.Na + self.Nv
        self.hidden = hidden
        if L < 1 or hidden < 1:
            raise H3ValueError("bad text length or hidden size")
        self.n_steps = np.shape(evaluate)[0]
        n = self.n_steps
        self.nb = np.shape(active)[0]
        self.n_keys = np.shape(keys)[0]
        S = self.S
        self.rows = _i32p(rows, "rows", n * S)
        self.tidx = _i32p(tidx, "tidx", n * S)
        self.key_off = _i32p(key_off, "key_off", n + 1)
        ko = np.asarray(key_off)
        if ko[0] != 0 or np.any(np.diff(ko) < 1):
            raise H3ValueError("key_off must start at 0 and grow")
        self.step_keys = _i32p(step_keys, "step_keys", int(ko[n]))
        sk = np.asarray(step_keys)
        if sk.size and (sk.min() < 0 or sk.max() >= self.n_keys):
            raise H3ValueError("step_keys out of range")
        self.umax = int(np.diff(ko).max())
        ti = np.asarray(tidx).reshape(n, S)
        rw = np.asarray(rows).reshape(n, S)
        for i in range(n):
            u = ko[i + 1] - ko[i]
            if ti[i].min() < 0 or ti[i].max() >= u or rw[i].min() < 0 or rw[i].max() >= 3 * u:
                raise H3ValueError(f"step {i}: row tables out of range")
        ev = np.asarray(evaluate)
        if ev.dtype != np.uint8 or not ev.flags.c_contiguous or (n and not ev[0]):
            raise H3ValueError("evaluate must be uint8 and evaluate step 0")
        self.evaluate = <const uint8_t *>cnp.PyArray_DATA(<cnp.ndarray>ev)
        self.ev_arr = ev
        self.ratio_v = _f32p(ratio_v, "ratio_v", n)
        self.ratio_a = _f32p(ratio_a, "ratio_a", n)
        self.tv = _f32p(tv, "tv", n * self.T)
        self.sv = _f32p(sv, "sv", (n + 1) * self.T)
        self.ta = _f32p(ta, "ta", n)
        self.sa = _f32p(sa, "sa", n + 1)
        act = np.asarray(active)
        if act.dtype != np.uint8 or not act.flags.c_contiguous or self.nb < 1:
            raise H3ValueError("active must be a uint8 mask of the blocks")
        self.active = <const uint8_t *>cnp.PyArray_DATA(<cnp.ndarray>act)
        self.n_active = int(act.astype(bool).sum())
        self._run_refs = (rows, tidx, key_off, step_keys, keys, ev, ratio_v, ratio_a, tv, sv, ta,
                          sa, act)
        self.pe, self.position_ids = pe, position_ids
        Hd = hidden
        Nc = self.Nc
        # xv: the condition rows (copied once) then the generated video's patches; hn: the
        # final norm's rows after the text (and, with conditions, proj_in's output); vrows:
        # proj_out's rows, conditions first
        xv = np.empty((Nc + self.Nv, self.pv), np.float32)
        xv[:Nc] = cond
        self._scratch = [np.empty((S, Hd), np.float32), xv,
                         np.empty((self.Na, self.Ca), np.float32),
                         np.empty((Nc + self.Na + self.Nv, Hd), np.float32),
                         np.empty((Nc + self.Nv, self.pv), np.float32), np.empty((self.Na, self.Ca), np.float32),
                         np.empty((6, self.umax * 3, Hd), np.float32), np.empty((2, self.umax, Hd), np.float32)]
        sc = self._scratch
        self.hbuf = <float *>cnp.PyArray_DATA(<cnp.ndarray>sc[0])
        self.xv = <float *>cnp.PyArray_DATA(<cnp.ndarray>sc[1])
        self.xa = <float *>cnp.PyArray_DATA(<cnp.ndarray>sc[2])
        self.hn = <float *>cnp.PyArray_DATA(<cnp.ndarray>sc[3])
        self.vrows = <float *>cnp.PyArray_DATA(<cnp.ndarray>sc[4])
        self.arows = <float *>cnp.PyArray_DATA(<cnp.ndarray>sc[5])
        self.tabbuf = <float *>cnp.PyArray_DATA(<cnp.ndarray>sc[6])
        self.finbuf = <float *>cnp.PyArray_DATA(<cnp.ndarray>sc[7])
        self.blocks = <h3_dit_block *>calloc(self.nb, sizeof(h3_dit_block))
        self.tabs = <const float **>calloc(self.n_keys * self.nb * 6, sizeof(float *))
        self.fin = <const float **>calloc(self.n_keys * 2, sizeof(float *))
        if self.blocks == NULL or self.tabs == NULL or self.fin == NULL:
            raise MemoryError("DenoiseLoop: cannot allocate the pointer tables")
        self._keys = None
        self._vel_obj = [None, None, None]
        self._x0_obj = None
        for s in range(3):
            self._new_vel(s)
        self._new_x0()
        self.last = self.prev = self.cur = -1
        self.model = None
        self._ws_arr = None
        self.ws = NULL
        self.ws_bytes = 0
        self.keys_arr = keys

    cdef int _new_vel(self, int s) except -1:
        pair = (np.empty((self.C, self.T, self.hh, self.ww), np.float32),
                np.empty((2, self.Ca, self.A), np.float32))
        self._vel_obj[s] = pair
        self.vel[s][0] = <float *>cnp.PyArray_DATA(<cnp.ndarray>pair[0])
        self.vel[s][1] = <float *>cnp.PyArray_DATA(<cnp.ndarray>pair[1])
        return 0

    cdef int _new_x0(self) except -1:
        pair = (np.empty((self.C, self.T, self.hh, self.ww), np.float32),
                np.empty((2, self.Ca, self.A), np.float32))
        self._x0_obj = pair
        self.x0[0] = <float *>cnp.PyArray_DATA(<cnp.ndarray>pair[0])
        self.x0[1] = <float *>cnp.PyArray_DATA(<cnp.ndarray>pair[1])
        return 0

    # ---- binding a model (GIL held, pool lock not held) ----------------------------------
    cdef int _bind(self, model) except -1:
        """Point the C state at this DiT's weights, tables, text rows and RoPE tables, all
        taken from its public loop_binding() (h3cy/models/dit.py): nothing else of it."""
        if model is self.model:
            return 0
        Hd = self.hidden
        if model.hidden != Hd or len(model.blocks) != self.nb:
            raise H3ValueError("the DiT does not match this loop (hidden size / blocks)")
        bind = model.loop_binding(self.keys_arr, self.pe, self.position_ids)
        refs = [model, bind]
        cdef int u, b, k
        if len(bind.adaln) != self.n_keys:
            raise H3ValueError("the DiT's AdaLN tables do not match this loop's timesteps")
        for u in range(self.n_keys):
            tab = bind.adaln[u]
            for b in range(self.nb):
                for k in range(6):
                    self.tabs[(u * self.nb + b) * 6 + k] = _f32p(tab[0][b][k], "AdaLN table", 3 * Hd)
            self.fin[u * 2] = _f32p(tab[1], "final scale", Hd)
            self.fin[u * 2 + 1] = _f32p(tab[2], "final shift", Hd)
        cdef DitBlockCore core
        blocks = bind.blocks
        self.paging = False
        if bind.pages is not None:
            ro, rp, rl = bind.pages[0], bind.pages[1], bind.pages[2]
            if ro.dtype != np.int64 or ro.shape[0] != self.nb + 1 or rp.dtype != np.uint64 \
                    or rl.dtype != np.uint64 or ro[0] != 0 or np.any(np.diff(ro) < 0) \
                    or rp.shape[0] != ro[self.nb] or rl.shape[0] != rp.shape[0] \
                    or not (ro.flags.c_contiguous and rp.flags.c_contiguous and rl.flags.c_contiguous):
                raise H3ValueError("bad page range tables")
            self.roff = <const int64_t *>cnp.PyArray_DATA(<cnp.ndarray>ro)
            self.rptr = <const uint64_t *>cnp.PyArray_DATA(<cnp.ndarray>rp)
            self.rlen = <const uint64_t *>cnp.PyArray_DATA(<cnp.ndarray>rl)
            self.paging = True
        if len(blocks) != self.nb:
            raise H3ValueError("the DiT does not match this loop (blocks)")
        for b in range(self.nb):
            core = blocks[b]
            if core.hidden != Hd or core.head_dim != bind.head_dim or core.ffn != bind.ffn_dim:
                raise H3ValueError(f"block {b} does not have the model's shapes")
            self.blocks[b] = core.w
        cdef LinearCore pin = bind.proj_in
        cdef LinearCore ain = bind.audio_proj_in
        cdef LinearCore pout = bind.proj_out
        cdef LinearCore aout = bind.audio_proj_out
        if (pin.N != Hd or pin.K != self.pv or ain.N != Hd or ain.K != self.Ca or pout.K != Hd
                or pout.N != self.pv or aout.K != Hd or aout.N != self.Ca):
            raise H3ValueError("the DiT's input/output projections do not fit the latents")
        self.proj_in, self.aproj_in, self.proj_out, self.aproj_out = pin.c, ain.c, pout.c, aout.c
        self.norm_out = _f32p(bind.norm_out, "norm_out", Hd)
        self.x_txt = _f32p(bind.text_rows, "text rows", self.L * Hd)
        self.cos = _f32p(bind.cos, "cos", self.S * (bind.rot_dim // 2))
        self.sin = _f32p(bind.sin, "sin", self.S * (bind.rot_dim // 2))
        self.isa = isa_id(bind.isa)
        self.round_bf16 = int(bind.round_bf16)
        self.attn_bf16 = int(bind.attn_bf16)
        self.heads, self.rot_dim = bind.heads, bind.rot_dim
        self.head_dim, self.ffn = bind.head_dim, bind.ffn_dim
        self.eps, self.qk_eps, self.feps = bind.norm_eps, bind.qk_norm_eps, bind.final_norm_eps
        cdef ThreadPool pool = bind.pool
        self.pool = pool.c
        self.plock = pool.lock.c
        # one workspace for the blocks and the four projections
        cdef size_t need = 0, t
        cdef h3_dit_block_args a
        cdef h3_epilogue e0
        memset(&e0, 0, sizeof(e0))
        nth = pool.threads
        for b in range(self.nb):
            core = blocks[b]
            t = core.workspace_bytes(self.S, self.heads, self.rot_dim)
            need = max(need, t)
        need = max(need, h3_linear_workspace_bytes(self.proj_in, self.Nc + self.Nv, nth, &e0))
        need = max(need, h3_linear_workspace_bytes(self.aproj_in, self.Na, nth, &e0))
        need = max(need, h3_linear_workspace_bytes(self.proj_out, self.Nc + self.Nv, nth, &e0))
        need = max(need, h3_linear_workspace_bytes(self.aproj_out, self.Na, nth, &e0))
        if self._ws_arr is None or self.ws_bytes < need:
            self._ws_arr = None
            self._ws_arr = np.empty(need + 64, np.uint8)
            self.ws = <char *>cnp.PyArray_DATA(<cnp.ndarray>self._ws_arr)
            self.ws += (64 - ((<uintptr_t>self.ws) & 63)) & 63
            self.ws_bytes = need
        self._model_refs = refs
        self.model = model
        return 0

    # ---- pool lock (held while C work runs; never across a Python call) -----------------
    cdef inline void _lock(self) noexcept nogil:
        if not self.locked:
            PyThread_acquire_lock(self.plock, WAIT_LOCK)
            self.locked = True

    cdef inline void _unlock(self) noexcept nogil:
        if self.locked:
            PyThread_release_lock(self.plock)
            self.locked = False

    cdef int _fail(self, h3_status rc, h3_err *err) except -1 nogil:
        with gil:
            _raise(rc, err)
        return -1

    # ---- page advice (streaming DiTs) ------------------------------------------------------
    cdef void _advise(self, int b, int advice) noexcept nogil:
        cdef int64_t r
        if not self.paging or b < 0 or b >= self.nb:
            return
        for r in range(self.roff[b], self.roff[b + 1]):
            h3_pages_advise(<const void *><uintptr_t>self.rptr[r], <size_t>self.rlen[r], advice)

    cdef int _next_active(self, int b) noexcept nogil:
        b += 1
        while b < self.nb and not self.active[b]:
            b += 1
        return b

    # ---- between blocks ------------------------------------------------------------------
    cdef int _py_between(self, bint cancelled, bint report) except -1:
        if self.check_signals:
            PyErr_CheckSignals()
        if cancelled or (self.py_cancel and self.cancel.cancelled):
            raise Cancelled(f"denoise cancelled after {self.done} of {self.total}", step=self.step)
        if report:
            self.on_progress(self.done, self.total, "denoise")
        return 0

    cdef int _between(self, bint boundary) except -1 nogil:
        """After each block: cancel, Ctrl-C, throttled progress (as h3cy._progress.Ticker)."""
        cdef bint cancelled = self.cancel_flag != NULL and h3_flag_get(self.cancel_flag) != 0
        cdef bint report = False
        cdef double now
        if self.has_progress:
            now = h3_monotonic()
            if boundary or self.done >= self.total or now - self.last_report >= self.interval:
                report = True
                self.last_report = now
        if cancelled or report or self.check_signals or self.py_cancel:
            self._unlock()
            with gil:
                self._py_between(cancelled, report)
        return 0

    # ---- one denoiser evaluation -----------------------------------------------------------
    cdef int _evaluate(self, int i, float *vout, float *aout) except -1 nogil:
        cdef h3_err err
        cdef h3_status rc
        cdef h3_epilogue e0
        cdef h3_dit_block_args a
        cdef int64_t Hd = self.hidden, L = self.L, Nc = self.Nc, Na = self.Na, Nv = self.Nv, S = self.S
        cdef float *h = self.hbuf
        cdef int u, k, b, U, ab = 0
        cdef const int32_t *keys = self.step_keys + self.key_off[i]
        cdef double t0 = h3_monotonic()
        U = self.key_off[i + 1] - self.key_off[i]
        memset(&e0, 0, sizeof(e0))
        self._advise(self._next_active(-1), H3_PAGES_WILLNEED)
        self._lock()
        # inputs: h = [text rows | R(proj_in(condition rows)) | R(audio_proj_in(audio rows))
        #              | R(proj_in(video patches))]; proj_in runs over the condition and the
        #              video rows in one call (DiT.forward's rows), then they are placed
        h3_patchify(self.video, self.C, self.T, self.hh, self.ww, self.xv + Nc * self.pv)
        h3_pack_audio(self.audio, 2, self.Ca, self.A, self.xa)
        if Nc == 0:
            rc = h3_linear_forward(self.proj_in, self.pool, self.xv, Nv, h + (L + Na) * Hd, &e0,
                                   self.ws, self.ws_bytes, &err)
        else:
            rc = h3_linear_forward(self.proj_in, self.pool, self.xv, Nc + Nv, self.hn, &e0,
                                   self.ws, self.ws_bytes, &err)
            memcpy(h + L * Hd, self.hn, Nc * Hd * sizeof(float))
            memcpy(h + (L + Nc + Na) * Hd, self.hn + Nc * Hd, Nv * Hd * sizeof(float))
        if rc == H3_OK:
            rc = h3_linear_forward(self.aproj_in, self.pool, self.xa, Na, h + (L + Nc) * Hd, &e0,
                                   self.ws, self.ws_bytes, &err)
        if rc == H3_OK and self.round_bf16:
            rc = h3_round_bf16(h + L * Hd, (Nc + Na + Nv) * Hd, self.pool, &err)
        if rc != H3_OK:
            return self._fail(rc, &err)
        memcpy(h, self.x_txt, L * Hd * sizeof(float))
        # the transformer blocks; AdaLN rows = tidx*3 + tag into the step's U tables
        memset(&a, 0, sizeof(a))
        a.shape.S = S; a.shape.hidden = <int>Hd; a.shape.heads = self.heads
        a.shape.rot_dim = self.rot_dim; a.shape.head_dim = self.head_dim; a.shape.ffn = self.ffn
        a.eps = self.eps; a.qk_eps = self.qk_eps; a.round_bf16 = self.round_bf16
        a.attn_bf16 = self.attn_bf16
        a.rows = self.rows + <int64_t>i * S
        a.table_rows = 3 * U
        a.cos = self.cos; a.sin = self.sin
        for b in range(self.nb):
            if not self.active[b]:
                continue
            if U == 1:
                a.shift_msa = self.tabs[(keys[0] * self.nb + b) * 6 + 0]
                a.scale1p_msa = self.tabs[(keys[0] * self.nb + b) * 6 + 1]
                a.gate_msa = self.tabs[(keys[0] * self.nb + b) * 6 + 2]
                a.shift_mlp = self.tabs[(keys[0] * self.nb + b) * 6 + 3]
                a.scale1p_mlp = self.tabs[(keys[0] * self.nb + b) * 6 + 4]
                a.gate_mlp = self.tabs[(keys[0] * self.nb + b) * 6 + 5]
            else:
                for k in range(6):
                    for u in range(U):
                        memcpy(self.tabbuf + (k * self.umax * 3 + u * 3) * Hd,
                               self.tabs[(keys[u] * self.nb + b) * 6 + k], 3 * Hd * sizeof(float))
                a.shift_msa = self.tabbuf
                a.scale1p_msa = self.tabbuf + 1 * self.umax * 3 * Hd
                a.gate_msa = self.tabbuf + 2 * self.umax * 3 * Hd
                a.shift_mlp = self.tabbuf + 3 * self.umax * 3 * Hd
                a.scale1p_mlp = self.tabbuf + 4 * self.umax * 3 * Hd
                a.gate_mlp = self.tabbuf + 5 * self.umax * 3 * Hd
            self._advise(self._next_active(b), H3_PAGES_WILLNEED)
            self._lock()
            rc = h3_dit_block_forward(&self.blocks[b], &a, h, self.pool, self.ws, self.ws_bytes,
                                      self.isa, &err)
            self._advise(b, H3_PAGES_DONTNEED)
            if rc != H3_OK:
                return self._fail(rc, &err)
            self.done += 1
            ab += 1
            self.eval_seconds += h3_monotonic() - t0
            self._between(ab == self.n_active)
            t0 = h3_monotonic()
        # final norm over the condition, audio and video rows, modulated by timestep, then
        # the heads (proj_out over the condition and video rows together, gathered into h,
        # which this evaluation no longer needs)
        self._lock()
        rc = h3_rmsnorm(h + L * Hd, self.norm_out, self.hn, Nc + Na + Nv, Hd, self.feps, self.pool,
                        self.isa, NULL, &err)
        if rc == H3_OK and self.round_bf16:
            rc = h3_round_bf16(self.hn, (Nc + Na + Nv) * Hd, self.pool, &err)
        if rc != H3_OK:
            return self._fail(rc, &err)
        for u in range(U):
            memcpy(self.finbuf + u * Hd, self.fin[keys[u] * 2], Hd * sizeof(float))
            memcpy(self.finbuf + (self.umax + u) * Hd, self.fin[keys[u] * 2 + 1], Hd * sizeof(float))
        h3_modulate_rows(self.hn, self.finbuf, self.finbuf + self.umax * Hd,
                         self.tidx + <int64_t>i * S + L, Nc + Na + Nv, Hd, self.round_bf16)
        if Nc == 0:
            rc = h3_linear_forward(self.proj_out, self.pool, self.hn + Na * Hd, Nv, self.vrows, &e0,
                                   self.ws, self.ws_bytes, &err)
        else:
            memcpy(h, self.hn, Nc * Hd * sizeof(float))
            memcpy(h + Nc * Hd, self.hn + (Nc + Na) * Hd, Nv * Hd * sizeof(float))
            rc = h3_linear_forward(self.proj_out, self.pool, h, Nc + Nv, self.vrows, &e0,
                                   self.ws, self.ws_bytes, &err)
        if rc == H3_OK:
            rc = h3_linear_forward(self.aproj_out, self.pool, self.hn + Nc * Hd, Na, self.arows, &e0,
                                   self.ws, self.ws_bytes, &err)
        if rc != H3_OK:
            return self._fail(rc, &err)
        self._unlock()
        h3_unpatchify(self.vrows + Nc * self.pv, self.C, self.T, self.hh, self.ww, vout)
        h3_unpack_audio(self.arows, 2, self.Ca, self.A, aout)
        self.eval_seconds += h3_monotonic() - t0
        self.evaluations += 1
        return 0

    # ---- step ends (GIL) -------------------------------------------------------------------
    cdef int _py_step_end(self, int i) except -1:
        """The step hook; afterwards every buffer it may hold is replaced, as the Python
        loop hands out fresh arrays each step; then the next step's model is selected."""
        vel = self._vel_obj[self.cur]
        if self.step_hook(i, vel[0], vel[1], self._x0_obj[0], self._x0_obj[1]):
            self.stopped = True
            return 0
        for s in range(3):
            if s != self.last and s != self.prev:
                self._new_vel(s)
        self._new_x0()
        return 0

    cdef int _py_select(self, int i) except -1:
        self._bind(self.select_model(i))
        return 0

    cdef int _loop(self, const uint8_t *select) except -1 nogil:
        cdef int i, s, slot
        cdef int64_t nv = self.C * self.T * self.hh * self.ww, na = 2 * self.Ca * self.A
        for i in range(self.n_steps):
            self.step = i
            if select[i]:
                with gil:
                    self._py_select(i)
            slot = 0
            while slot == self.last or slot == self.prev:
                slot += 1
            if self.evaluate[i]:
                self._evaluate(i, self.vel[slot][0], self.vel[slot][1])
                self.prev = self.last
                self.last = slot
            elif self.prev < 0:
                memcpy(self.vel[slot][0], self.vel[self.last][0], nv * sizeof(float))
                memcpy(self.vel[slot][1], self.vel[self.last][1], na * sizeof(float))
            else:
                h3_extrapolate(self.vel[self.last][0], self.vel[self.prev][0], self.ratio_v[i],
                               self.vel[slot][0], nv)
                h3_extrapolate(self.vel[self.last][1], self.vel[self.prev][1], self.ratio_a[i],
                               self.vel[slot][1], na)
            self.cur = slot
            h3_euler_update(self.video, self.vel[slot][0], self.x0[0], self.C, self.T,
                            self.hh * self.ww, self.tv + <int64_t>i * self.T,
                            self.sv + <int64_t>i * self.T, self.sv + <int64_t>(i + 1) * self.T)
            h3_euler_update(self.audio, self.vel[slot][1], self.x0[1], 2 * self.Ca, 1, self.A,
                            self.ta + i, self.sa + i, self.sa + i + 1)
            if self.has_hook:
                with gil:
                    self._py_step_end(i)
                if self.stopped:
                    break
        return 0

    def run(self, select_model, select_steps, step_hook=None, on_progress=None, cancel=None,
            double interval=0.05, bint check_signals=False):
        """Run every step.  select_model(i) -> the DiT of step i, called at the steps
        flagged in select_steps ((steps,) uint8; step 0 must be flagged) and after every
        hook call when step_hook is given.  step_hook(i, vel_v, vel_a, x0_v, x0_a) -> True
        stops the loop.  Returns (stopped, (x0_v, x0_a))."""
        sel = np.ascontiguousarray(select_steps, np.uint8)
        if sel.shape != (self.n_steps,) or (self.n_steps and not sel[0]):
            raise H3ValueError("select_steps must flag step 0")
        if step_hook is not None:
            sel = np.ones(self.n_steps, np.uint8)
        cdef const uint8_t *sp = <const uint8_t *>cnp.PyArray_DATA(<cnp.ndarray>sel)
        self.select_model, self.step_hook = select_model, step_hook
        self.has_hook = step_hook is not None
        self.on_progress = on_progress
        self.has_progress = on_progress is not None
        self.cancel = cancel
        self.cancel_flag = NULL
        self.py_cancel = False
        cdef CancelFlag flag
        if cancel is not None:
            f = getattr(cancel, "_flag", None)
            if isinstance(f, CancelFlag):
                flag = f
                self.cancel_flag = &flag.v
            else:
                self.py_cancel = True
        self.interval = interval
        self.last_report = 0.0
        self.check_signals = check_signals
        self.total = int(self.ev_arr.astype(np.int64).sum()) * self.n_active
        self.done = 0
        self.stopped = False
        self.eval_seconds = 0.0
        self.evaluations = 0
        keep = (cancel, sel)
        try:
            with nogil:
                self._loop(sp)
        finally:
            self._unlock()
        del keep
        return bool(self.stopped), self._x0_obj
