# _vit.pxi — the video VAE's ViT decoder driver (included by _kernels.pyx): one call runs
# a whole block in C with the GIL released; plus the output head's LayerNorm.


def elem_layernorm(const float[:, ::1] x, w, b, float[:, ::1] out, float eps, str isa,
                   ThreadPool pool):
    """out[rows, n] = layernorm(x[rows, n]) * w[n] + b[n] (w, b may be None)."""
    cdef h3_err err
    cdef h3_status rc
    cdef h3_isa want = isa_id(isa)
    cdef int64_t rows = x.shape[0], n = x.shape[1]
    _same("out", (out.shape[0], out.shape[1]), (rows, n))
    cdef const float *wp = _fptr(w, "w", n)
    cdef const float *bp = _fptr(b, "b", n)
    cdef const float *xp = _cf2(x)
    cdef float *op = _f2(out)
    with pool.lock:
        with nogil:
            rc = h3_layernorm(xp, wp, bp, op, rows, n, eps, pool.c, want, &err)
    check(rc, &err)


cdef class VitBlockCore:
    """The weights of one ViT decoder block, as C pointers into objects kept alive here."""
    cdef h3_vit_block w
    cdef object _refs
    cdef readonly ThreadPool pool
    cdef readonly int hidden, inner, ffn
    cdef h3_isa isa          # the path its linears were made for: the block runs on it

    def __cinit__(self, LinearCore qkv, int interleaved, LinearCore out, LinearCore up,
                  LinearCore down, norm1, norm2, scale1, scale2, ThreadPool pool):
        self.hidden = out.N
        self.inner = out.K
        self.ffn = down.K
        if qkv.N != 3 * self.inner or qkv.K != self.hidden or up.N != 2 * self.ffn or not up.pair \
                or up.K != self.hidden or down.N != self.hidden:
            raise H3ValueError("ViT block weights do not fit together (qkv/out/up/down shapes)")
        self.w.base.qkv = qkv.c
        self.w.base.out = out.c
        self.w.base.up = up.c
        self.w.base.down = down.c
        self.w.base.qkv_interleaved = interleaved
        self.w.base.norm1 = _fptr(norm1, "norm1", self.hidden)
        self.w.base.norm2 = _fptr(norm2, "norm2", self.hidden)
        self.w.scale1 = _fptr(scale1, "scale1", self.hidden)
        self.w.scale2 = _fptr(scale2, "scale2", self.hidden)
        self._refs = (qkv, out, up, down, norm1, norm2, scale1, scale2)
        self.pool = pool
        self.isa = h3_linear_isa(qkv.c)

    def workspace_bytes(self, int64_t S, int heads, int rot_dim, int round_bf16):
        cdef h3_vit_block_args a
        memset(&a, 0, sizeof(a))
        a.shape.S = S; a.shape.hidden = self.hidden; a.shape.heads = heads
        a.shape.head_dim = self.inner // heads; a.shape.ffn = self.ffn; a.shape.rot_dim = rot_dim
        a.round_bf16 = round_bf16
        return h3_vit_block_workspace_bytes(&self.w, &a, self.pool.threads)

    def forward(self, float[:, ::1] h, int heads, int rot_dim, float eps, int round_bf16,
                ws, cos, sin, int attn_bf16=0):
        """h: (S, hidden) updated in place; cos, sin: (S, rot_dim // 2) float32;
        attn_bf16: bf16 products in the attention where the CPU has them."""
        cdef h3_vit_block_args a
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
        if heads < 1 or self.inner % heads:
            raise H3ValueError(f"heads={heads} does not divide inner={self.inner}")
        memset(&a, 0, sizeof(a))
        a.shape.S = S; a.shape.hidden = self.hidden; a.shape.heads = heads
        a.shape.head_dim = self.inner // heads; a.shape.ffn = self.ffn; a.shape.rot_dim = rot_dim
        a.eps = eps; a.round_bf16 = round_bf16
        a.attn_bf16 = attn_bf16
        a.cos = _fptr(cos, "cos", S * (rot_dim // 2))
        a.sin = _fptr(sin, "sin", S * (rot_dim // 2))
        cdef float *hp = &h[0, 0] if S > 0 else NULL
        with self.pool.lock:
            with nogil:
                rc = h3_vit_block_forward(&self.w, &a, hp, self.pool.c, wp, wb, self.isa, &err)
        check(rc, &err)
