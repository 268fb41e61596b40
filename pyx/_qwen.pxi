# _qwen.pxi — the Qwen3-VL text layer driver and its bf16 element-wise ops (included by
# _kernels.pyx).  QwenLayerCore.forward runs a whole decoder layer in C with the GIL
# released; the qwen_* functions expose the element-wise kernels per ISA for tests.


def qwen_rmsnorm_bf16(const float[:, ::1] x, const float[::1] w, float[:, ::1] out, float eps,
                      str isa, ThreadPool pool):
    """out[rows, n] = bf16(w * bf16(x * rsqrt(mean(x^2) + eps))); returns the ISA that ran."""
    cdef h3_err err
    cdef h3_status rc
    cdef h3_isa ran = H3_ISA_COUNT
    cdef h3_isa want = isa_id(isa)
    cdef int64_t rows = x.shape[0], n = x.shape[1]
    _same("out", (out.shape[0], out.shape[1]), (rows, n))
    _same("w", (w.shape[0],), (n,))
    cdef const float *xp = _cf2(x)
    cdef const float *wp = _cf1(w)
    cdef float *op = _f2(out)
    with pool.lock:
        with nogil:
            rc = h3_qwen_rmsnorm_bf16(xp, wp, op, rows, n, eps, pool.c, want, &ran, &err)
    check(rc, &err)
    return h3_isa_name(ran).decode()


def qwen_rope_bf16(float[:, :, ::1] x, const float[:, ::1] cos, const float[:, ::1] sin,
                   str isa, ThreadPool pool):
    """bf16-rounded rotate-half RoPE of x[rows, heads, D] in place; returns the ISA that ran."""
    cdef h3_err err
    cdef h3_status rc
    cdef h3_isa ran = H3_ISA_COUNT
    cdef h3_isa want = isa_id(isa)
    cdef int64_t rows = x.shape[0]
    cdef int heads = <int>x.shape[1], head_dim = <int>x.shape[2]
    _same("cos", (cos.shape[0], cos.shape[1]), (rows, head_dim // 2))
    _same("sin", (sin.shape[0], sin.shape[1]), (rows, head_dim // 2))
    cdef float *xp = &x[0, 0, 0] if x.shape[0] > 0 and heads > 0 and head_dim > 0 else NULL
    cdef const float *cp = _cf2(cos)
    cdef const float *sp = _cf2(sin)
    with pool.lock:
        with nogil:
            rc = h3_rope_bf16(xp, cp, sp, rows, heads, head_dim, pool.c, want, &ran, &err)
    check(rc, &err)
    return h3_isa_name(ran).decode()


def qwen_attention_bf16p(const float[:, :, ::1] q, const float[:, :, ::1] k,
                          const float[:, :, ::1] v, float[:, :, ::1] out, float scale, bint causal,
                          str isa, ThreadPool pool):
    """torch's bf16 CPU flash attention (h3_attention_bf16p): q/out (S, Hq, D), k/v (S, Hkv, D),
    float32 holding bf16 values; out is not rounded.  Returns the ISA asked for."""
    cdef h3_attn_args a
    cdef h3_err err
    cdef h3_status rc
    cdef h3_isa isa_c = isa_id(isa)
    memset(&a, 0, sizeof(a))
    a.S = q.shape[0]
    a.Hq = <int>q.shape[1]
    a.Hkv = <int>k.shape[1]
    a.D = <int>q.shape[2]
    a.ldq = a.ldo = <int64_t>a.Hq * a.D
    a.ldk = a.ldv = <int64_t>a.Hkv * a.D
    a.scale = scale
    a.causal = causal
    _same("k", (k.shape[0], k.shape[2]), (a.S, a.D))
    _same("v", (v.shape[0], v.shape[1], v.shape[2]), (a.S, a.Hkv, a.D))
    _same("out", (out.shape[0], out.shape[1], out.shape[2]), (a.S, a.Hq, a.D))
    cdef bint some = a.S > 0 and a.Hq > 0 and a.Hkv > 0 and a.D > 0
    cdef const float *qp = &q[0, 0, 0] if some else NULL
    cdef const float *kp = &k[0, 0, 0] if some else NULL
    cdef const float *vp = &v[0, 0, 0] if some else NULL
    cdef float *op = &out[0, 0, 0] if some else NULL
    with pool.lock:
        with nogil:
            rc = h3_attention_bf16p(&a, qp, kp, vp, op, pool.c, NULL, 0, isa_c, &err)
    check(rc, &err)
    return h3_isa_name(isa_c).decode()


def qwen_swiglu_bf16(const float[::1] g, const float[::1] u, float[::1] out, str isa,
                     ThreadPool pool):
    """out[n] = bf16(bf16(silu(g)) * u); returns the ISA that ran."""
    cdef h3_err err
    cdef h3_status rc
    cdef h3_isa ran = H3_ISA_COUNT
    cdef h3_isa want = isa_id(isa)
    cdef int64_t n = g.shape[0]
    _same("u", (u.shape[0],), (n,))
    _same("out", (out.shape[0],), (n,))
    cdef const float *gp = _cf1(g)
    cdef const float *up = _cf1(u)
    cdef float *op = _f1(out)
    with pool.lock:
        with nogil:
            rc = h3_swiglu_bf16(gp, up, op, n, pool.c, want, &ran, &err)
    check(rc, &err)
    return h3_isa_name(ran).decode()


cdef class QwenLayerCore:
    """One decoder layer's weights, as C pointers into objects this instance keeps alive.
    gate_up (pair linear) or gate and up (separate) feed the MLP."""
    cdef h3_qwen_layer w
    cdef object _refs
    cdef readonly ThreadPool pool
    cdef readonly int hidden, heads, kv_heads, head_dim, ffn
    cdef h3_isa isa          # the path its linears were made for: the layer runs on it

    def __cinit__(self, LinearCore q, LinearCore k, LinearCore v, LinearCore o,
                  LinearCore gate_up, LinearCore gate, LinearCore up, LinearCore down,
                  input_norm, post_norm, q_norm, k_norm, int heads, int kv_heads,
                  ThreadPool pool):
        self.head_dim = q_norm.shape[0]
        self.hidden = o.N
        self.heads = heads
        self.kv_heads = kv_heads
        self.ffn = down.K
        if (q.N != heads * self.head_dim or k.N != kv_heads * self.head_dim or v.N != k.N
                or o.K != q.N or q.K != self.hidden):
            raise H3ValueError("layer weights do not fit together (q/k/v/o shapes)")
        if gate_up is None and (gate is None or up is None):
            raise H3ValueError("the MLP needs gate_up or both gate and up")
        memset(&self.w, 0, sizeof(self.w))
        self.w.q = q.c
        self.w.k = k.c
        self.w.v = v.c
        self.w.o = o.c
        self.w.down = down.c
        if gate_up is not None:
            if not gate_up.pair:
                raise H3ValueError("gate_up must be a pair linear")
            self.w.gate_up = gate_up.c
        else:
            self.w.gate = gate.c
            self.w.up = up.c
        self.w.input_norm = _fptr(input_norm, "input_layernorm", self.hidden)
        self.w.post_norm = _fptr(post_norm, "post_attention_layernorm", self.hidden)
        self.w.q_norm = _fptr(q_norm, "q_norm", self.head_dim)
        self.w.k_norm = _fptr(k_norm, "k_norm", self.head_dim)
        self._refs = (q, k, v, o, gate_up, gate, up, down, input_norm, post_norm, q_norm, k_norm)
        self.pool = pool
        self.isa = h3_linear_isa(q.c)

    cdef void _args(self, h3_qwen_layer_args *a, int64_t S):
        memset(a, 0, sizeof(a[0]))
        a.S = S; a.hidden = self.hidden; a.heads = self.heads; a.kv_heads = self.kv_heads
        a.head_dim = self.head_dim; a.ffn = self.ffn

    def workspace_bytes(self, int64_t S):
        cdef h3_qwen_layer_args a
        self._args(&a, S)
        return h3_qwen_layer_workspace_bytes(&self.w, &a, self.pool.threads)

    def forward(self, float[:, ::1] h, float eps, int round_bf16, ws, cos, sin):
        """h: (S, hidden) updated in place; cos, sin: (S, head_dim/2) float32."""
        cdef h3_qwen_layer_args a
        cdef h3_err err
        cdef h3_status rc
        cdef int64_t S = h.shape[0]
        cdef cnp.ndarray wsa = ws
        cdef char *wp = <char *>cnp.PyArray_DATA(wsa)
        cdef size_t wb = wsa.nbytes
        cdef uintptr_t mis = (<uintptr_t>wp) & 63
        if mis:
            wp += 64 - mis
            wb -= 64 - mis
        if h.shape[1] != self.hidden:
            raise H3ValueError(f"h has {h.shape[1]} columns, expected {self.hidden}")
        self._args(&a, S)
        a.eps = eps
        a.round_bf16 = round_bf16
        a.cos = _fptr(cos, "cos", S * (self.head_dim // 2))
        a.sin = _fptr(sin, "sin", S * (self.head_dim // 2))
        cdef float *hp = &h[0, 0] if S > 0 else NULL
        with self.pool.lock:
            with nogil:
                rc = h3_qwen_layer_forward(&self.w, &a, hp, self.pool.c, wp, wb, self.isa, &err)
        check(rc, &err)
