# _qwen_vision.pxi — the Qwen3-VL vision tower's C driver (included by _kernels.pyx): one
# call runs a whole vision block or merger in C with the GIL released; plus the position
# grid's resampling add, exact GELU and the deepstack row add.  h3cy/models/vision_tower.py
# checks inputs and allocates; these convert to pointers and map C status codes to
# exceptions.  `ws`: a uint8 workspace array (aligned here to 64 bytes; None: allocated in C).


def gelu_erf(const float[::1] x, float[::1] out, ThreadPool pool):
    """out[n] = 0.5 x (1 + erf(x / sqrt 2)) (torch nn.GELU())."""
    cdef h3_err err
    cdef h3_status rc
    cdef int64_t n = x.shape[0]
    _same("out", (out.shape[0],), (n,))
    cdef const float *xp = _cf1(x)
    cdef float *op = _f1(out)
    with pool.lock:
        with nogil:
            rc = h3_gelu_erf(xp, op, n, pool.c, &err)
    check(rc, &err)


def qvis_pos_add(float[:, ::1] h, const float[:, ::1] table, const int64_t[:, ::1] idx,
                 const float[:, ::1] w, int round_bf16):
    """h[r] += sum_t w[r, t] * table[idx[r, t]] (h3_qvis_pos_add)."""
    cdef h3_err err
    cdef h3_status rc
    cdef int64_t S = h.shape[0]
    cdef int C = <int>h.shape[1], taps = <int>idx.shape[1]
    _same("table", (table.shape[1],), (C,))
    _same("idx", (idx.shape[0],), (S,))
    _same("w", (w.shape[0], w.shape[1]), (S, taps))
    cdef float *hp = &h[0, 0] if S > 0 else NULL
    cdef const float *tp = &table[0, 0] if table.shape[0] > 0 else NULL
    cdef const int64_t *ip = &idx[0, 0] if S > 0 and taps > 0 else NULL
    cdef const float *wp = &w[0, 0] if S > 0 and taps > 0 else NULL
    cdef int64_t P = table.shape[0]
    with nogil:
        rc = h3_qvis_pos_add(hp, tp, P, ip, wp, taps, S, C, round_bf16, &err)
    check(rc, &err)


def rows_add(float[:, ::1] h, const int64_t[::1] rows, const float[:, ::1] src, int round_bf16):
    """h[rows[i]] += src[i] (the deepstack add, h3_rows_add)."""
    cdef h3_err err
    cdef h3_status rc
    cdef int64_t L = h.shape[0], n = rows.shape[0]
    cdef int C = <int>h.shape[1]
    _same("src", (src.shape[0], src.shape[1]), (n, C))
    cdef float *hp = &h[0, 0] if L > 0 else NULL
    cdef const int64_t *rp = &rows[0] if n > 0 else NULL
    cdef const float *sp = &src[0, 0] if n > 0 else NULL
    with nogil:
        rc = h3_rows_add(hp, L, rp, sp, n, C, round_bf16, &err)
    check(rc, &err)


cdef class QwenVisionBlockCore:
    """One vision block's weights, as C pointers into objects this instance keeps alive."""
    cdef h3_qvis_block w
    cdef object _refs
    cdef readonly ThreadPool pool
    cdef readonly int hidden, heads, ffn
    cdef h3_isa isa          # the path its linears were made for: the block runs on it

    def __cinit__(self, LinearCore q, LinearCore k, LinearCore v, LinearCore proj,
                  LinearCore fc1, LinearCore fc2, norm1_w, norm1_b, norm2_w, norm2_b,
                  int heads, ThreadPool pool):
        self.hidden = proj.N
        self.heads = heads
        self.ffn = fc1.N
        C = self.hidden
        if (q.N != C or q.K != C or k.N != C or k.K != C or v.N != C or v.K != C or proj.K != C
                or fc1.K != C or fc2.N != C or fc2.K != self.ffn or heads < 1 or C % heads):
            raise H3ValueError("vision block weights do not fit together (q/k/v/proj/fc1/fc2 shapes)")
        memset(&self.w, 0, sizeof(self.w))
        self.w.q = q.c
        self.w.k = k.c
        self.w.v = v.c
        self.w.proj = proj.c
        self.w.fc1 = fc1.c
        self.w.fc2 = fc2.c
        self.w.norm1_w = _fptr(norm1_w, "norm1.weight", C)
        self.w.norm1_b = _fptr(norm1_b, "norm1.bias", C)
        self.w.norm2_w = _fptr(norm2_w, "norm2.weight", C)
        self.w.norm2_b = _fptr(norm2_b, "norm2.bias", C)
        self._refs = (q, k, v, proj, fc1, fc2, norm1_w, norm1_b, norm2_w, norm2_b)
        self.pool = pool
        self.isa = h3_linear_isa(q.c)

    cdef void _args(self, h3_qvis_block_args *a, int64_t S):
        memset(a, 0, sizeof(a[0]))
        a.S = S; a.hidden = self.hidden; a.heads = self.heads; a.ffn = self.ffn; a.nseg = 1

    def workspace_bytes(self, int64_t S):
        cdef h3_qvis_block_args a
        cdef int64_t seg[2]
        self._args(&a, S)
        seg[0] = 0
        seg[1] = S
        a.seg = seg
        return h3_qvis_block_workspace_bytes(&self.w, &a, self.pool.threads) + 64

    def forward(self, float[:, ::1] h, const int64_t[::1] seg, cos, sin, float eps,
                int round_bf16, ws):
        """h: (S, hidden) updated in place; seg: cu_seqlens (one segment per image);
        cos, sin: (S, head_dim/2) float32."""
        cdef h3_qvis_block_args a
        cdef h3_err err
        cdef h3_status rc
        cdef int64_t S = h.shape[0]
        cdef size_t wb
        cdef char *wp = _ws_ptr(ws, &wb)
        if h.shape[1] != self.hidden:
            raise H3ValueError(f"h has {h.shape[1]} columns, expected {self.hidden}")
        if seg.shape[0] < 2:
            raise H3ValueError("seg needs at least two offsets")
        self._args(&a, S)
        a.nseg = <int>(seg.shape[0] - 1)
        a.seg = &seg[0]
        a.eps = eps
        a.round_bf16 = round_bf16
        D = self.hidden // self.heads
        a.cos = _fptr(cos, "cos", S * (D // 2))
        a.sin = _fptr(sin, "sin", S * (D // 2))
        cdef float *hp = &h[0, 0] if S > 0 else NULL
        with self.pool.lock:
            with nogil:
                rc = h3_qvis_block_forward(&self.w, &a, hp, self.pool.c, wp, wb, self.isa, &err)
        check(rc, &err)


cdef class QwenVisionMergerCore:
    """A patch merger's weights (final: postshuffle=0; deepstack: postshuffle=1)."""
    cdef h3_qvis_merger w
    cdef object _refs
    cdef readonly ThreadPool pool
    cdef readonly int hidden, unit, out_hidden
    cdef h3_isa isa

    def __cinit__(self, LinearCore fc1, LinearCore fc2, norm_w, norm_b, int hidden, int unit,
                  int postshuffle, ThreadPool pool):
        self.hidden = hidden
        self.unit = unit
        self.out_hidden = fc2.N
        K = hidden * unit
        if fc1.N != K or fc1.K != K or fc2.K != K:
            raise H3ValueError("merger weights do not fit together (fc1/fc2 shapes)")
        memset(&self.w, 0, sizeof(self.w))
        self.w.fc1 = fc1.c
        self.w.fc2 = fc2.c
        n = K if postshuffle else hidden
        self.w.norm_w = _fptr(norm_w, "norm.weight", n)
        self.w.norm_b = _fptr(norm_b, "norm.bias", n)
        self.w.postshuffle = postshuffle
        self._refs = (fc1, fc2, norm_w, norm_b)
        self.pool = pool
        self.isa = h3_linear_isa(fc1.c)

    def workspace_bytes(self, int64_t S):
        return h3_qvis_merger_workspace_bytes(&self.w, S, self.hidden, self.unit, self.pool.threads) + 64

    def forward(self, const float[:, ::1] x, float[:, ::1] out, float eps, int round_bf16, ws):
        """out (S/unit, out_hidden) = merger(x (S, hidden))."""
        cdef h3_err err
        cdef h3_status rc
        cdef int64_t S = x.shape[0]
        cdef size_t wb
        cdef char *wp = _ws_ptr(ws, &wb)
        if x.shape[1] != self.hidden:
            raise H3ValueError(f"x has {x.shape[1]} columns, expected {self.hidden}")
        _same("out", (out.shape[0], out.shape[1]), (S // self.unit, self.out_hidden))
        cdef const float *xp = &x[0, 0] if S > 0 else NULL
        cdef float *op = &out[0, 0] if S > 0 else NULL
        with self.pool.lock:
            with nogil:
                rc = h3_qvis_merger_forward(&self.w, xp, S, self.hidden, self.unit, eps, round_bf16,
                                            op, self.pool.c, wp, wb, self.isa, &err)
        check(rc, &err)
