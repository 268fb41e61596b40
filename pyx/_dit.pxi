# _dit.pxi — the transformer block driver (included by _kernels.pyx): one call runs a
# whole block in C with the GIL released.

from libc.stdint cimport uintptr_t


DIT_STAGE_NAMES = tuple(h3_dit_stage_names[i].decode() for i in range(H3_DIT_STAGES))


cdef class DitBlockCore:
    """The weights of one block, as C pointers into objects this instance keeps alive."""
    cdef h3_dit_block w
    cdef object _refs
    cdef readonly ThreadPool pool
    cdef readonly int hidden, inner, ffn, head_dim
    cdef h3_isa isa          # the path its linears were made for: the block runs on it

    def __cinit__(self, LinearCore qkv, int interleaved, LinearCore out, LinearCore up,
                  LinearCore down, norm1, norm2, norm_q, norm_k, ThreadPool pool):
        self.hidden = out.N
        self.inner = out.K
        self.ffn = down.K
        self.head_dim = norm_q.shape[0]
        if qkv.N != 3 * self.inner or qkv.K != self.hidden or up.N != 2 * self.ffn or not up.pair:
            raise H3ValueError("block weights do not fit together (qkv/out/up/down shapes)")
        self.w.base.qkv = qkv.c
        self.w.base.out = out.c
        self.w.base.up = up.c
        self.w.base.down = down.c
        self.w.base.qkv_interleaved = interleaved
        self.w.base.norm1 = _fptr(norm1, "norm1", self.hidden)
        self.w.base.norm2 = _fptr(norm2, "norm2", self.hidden)
        self.w.norm_q = _fptr(norm_q, "norm_q", self.head_dim)
        self.w.norm_k = _fptr(norm_k, "norm_k", self.head_dim)
        self._refs = (qkv, out, up, down, norm1, norm2, norm_q, norm_k)
        self.pool = pool
        self.isa = h3_linear_isa(qkv.c)

    def workspace_bytes(self, int64_t S, int heads, int rot_dim):
        cdef h3_dit_block_args a
        memset(&a, 0, sizeof(a))
        a.shape.S = S; a.shape.hidden = self.hidden; a.shape.heads = heads
        a.shape.head_dim = self.head_dim; a.shape.ffn = self.ffn; a.shape.rot_dim = rot_dim
        return h3_dit_block_workspace_bytes(&self.w, &a, self.pool.threads)

    def forward(self, float[:, ::1] h, int heads, int rot_dim, float eps, float qk_eps,
                int round_bf16, ws, rows=None, tables=None, cos=None, sin=None,
                double[::1] stage_seconds=None, int attn_bf16=0):
        """h: (S, hidden) updated in place.  tables: (shift_msa, scale1p_msa, gate_msa,
        shift_mlp, scale1p_mlp, gate_mlp), each (T, hidden); rows: (S,) int32 in [0, T).
        stage_seconds: optional float64 (8,) array; wall seconds per stage are added to it
        (names in DIT_STAGE_NAMES; profiling).  attn_bf16: bf16 products in the attention
        where the CPU has them (h3_dit_block_args.attn_bf16)."""
        cdef h3_dit_block_args a
        cdef h3_err err
        cdef h3_status rc
        cdef int64_t S = h.shape[0]
        cdef int64_t T = 0
        cdef cnp.ndarray wsa = ws
        cdef char *wp = <char *>cnp.PyArray_DATA(wsa)
        cdef size_t wb = wsa.nbytes
        cdef uintptr_t mis = (<uintptr_t>wp) & 63
        if mis:
            wp += 64 - mis
            wb -= 64 - mis
        memset(&a, 0, sizeof(a))
        if h.shape[1] != self.hidden:
            raise H3ValueError(f"h has {h.shape[1]} columns, expected {self.hidden}")
        a.shape.S = S; a.shape.hidden = self.hidden; a.shape.heads = heads
        a.shape.head_dim = self.head_dim; a.shape.ffn = self.ffn; a.shape.rot_dim = rot_dim
        a.eps = eps; a.qk_eps = qk_eps
        a.round_bf16 = round_bf16
        a.attn_bf16 = attn_bf16
        cdef cnp.ndarray rarr
        if tables is not None:
            T = tables[0].shape[0]
            a.table_rows = T
            a.shift_msa = _fptr(tables[0], "shift_msa", T * self.hidden)
            a.scale1p_msa = _fptr(tables[1], "scale1p_msa", T * self.hidden)
            a.gate_msa = _fptr(tables[2], "gate_msa", T * self.hidden)
            a.shift_mlp = _fptr(tables[3], "shift_mlp", T * self.hidden)
            a.scale1p_mlp = _fptr(tables[4], "scale1p_mlp", T * self.hidden)
            a.gate_mlp = _fptr(tables[5], "gate_mlp", T * self.hidden)
            rarr = rows
            if rarr.dtype != np.int32 or rarr.ndim != 1 or rarr.shape[0] != S or not rarr.flags.c_contiguous:
                raise H3ValueError(f"rows must be a C-contiguous int32 array of {S} entries")
            a.rows = <const int32_t *>cnp.PyArray_DATA(rarr)
        if cos is not None:
            a.cos = _fptr(cos, "cos", S * (rot_dim // 2))
            a.sin = _fptr(sin, "sin", S * (rot_dim // 2))
        if stage_seconds is not None:
            if stage_seconds.shape[0] != H3_DIT_STAGES:
                raise H3ValueError(f"stage_seconds must have {H3_DIT_STAGES} entries")
            a.stage_seconds = &stage_seconds[0]
        cdef float *hp = &h[0, 0] if S > 0 else NULL
        with self.pool.lock:
            with nogil:
                rc = h3_dit_block_forward(&self.w, &a, hp, self.pool.c, wp, wb, self.isa, &err)
        check(rc, &err)
