# _kernels_attn.pxi — attention wrappers (included by _kernels.pyx).
#
# q: (S, Hq, D), k/v: (S, Hkv, D), out: (S, Hq, D), float32.  Each sequence row must be
# contiguous over (heads, D); rows may be strided (views into a fused QKV buffer), so the
# views are generic and the row stride is passed to C.  h3cy/ops/attention.py checks shapes.

cdef int64_t _row_stride(const float[:, :, :] x, str name) except -1:
    """Row stride in floats; the inner (heads, D) block must be C-contiguous."""
    cdef Py_ssize_t isz = sizeof(float)
    if x.strides[2] != isz or x.strides[1] != x.shape[2] * isz:
        raise H3ValueError(f"{name}: each row must be C-contiguous over (heads, D), got "
                           f"strides {tuple(x.strides[i] for i in range(3))}")
    if x.shape[0] > 1 and (x.strides[0] <= 0 or x.strides[0] % isz != 0):
        raise H3ValueError(f"{name}: row stride must be a positive multiple of 4 bytes, got "
                           f"{x.strides[0]}")
    if x.shape[0] <= 1:
        return x.shape[1] * x.shape[2]
    return x.strides[0] // isz


def attn_workspace_bytes(int64_t S, int Hq, int Hkv, int D, int threads, bint causal=False):
    """Scratch bytes h3_attention needs with `threads` threads (0 if the sizes are invalid)."""
    cdef h3_attn_args a
    memset(&a, 0, sizeof(a))
    a.S = S
    a.Hq = Hq
    a.Hkv = Hkv
    a.D = D
    a.ldq = a.ldo = <int64_t>Hq * D
    a.ldk = a.ldv = <int64_t>Hkv * D
    a.scale = 1.0
    a.causal = causal
    return h3_attn_workspace_bytes(&a, threads)


def attention(const float[:, :, :] q, const float[:, :, :] k, const float[:, :, :] v,
              float[:, :, :] out, float scale, bint causal, str isa, ThreadPool pool,
              bint bf16_inputs=False):
    """out = softmax(q k^T * scale) v per head; returns the name of the ISA path that ran.
    bf16_inputs: q, k, v are bf16-valued (see h3_attn_args; AMX then uses bf16 tiles)."""
    cdef h3_attn_args a
    cdef h3_err err
    cdef h3_status rc
    cdef h3_isa isa_c = isa_id(isa)
    memset(&a, 0, sizeof(a))
    a.S = q.shape[0]
    a.Hq = <int>q.shape[1]
    a.Hkv = <int>k.shape[1]
    a.D = <int>q.shape[2]
    a.ldq = _row_stride(q, "q")
    a.ldk = _row_stride(k, "k")
    a.ldv = _row_stride(v, "v")
    a.ldo = _row_stride(out, "out")
    a.scale = scale
    a.causal = causal
    a.bf16_inputs = bf16_inputs
    if (k.shape[0] != a.S or v.shape[0] != a.S or out.shape[0] != a.S
            or v.shape[1] != a.Hkv or out.shape[1] != a.Hq
            or k.shape[2] != a.D or v.shape[2] != a.D or out.shape[2] != a.D):
        raise H3ValueError("attention: q/out (S, Hq, D) and k/v (S, Hkv, D) disagree")
    cdef const float *qp = NULL
    cdef const float *kp = NULL
    cdef const float *vp = NULL
    cdef float *op = NULL
    if a.S > 0 and a.Hq > 0 and a.Hkv > 0 and a.D > 0:
        qp = &q[0, 0, 0]
        kp = &k[0, 0, 0]
        vp = &v[0, 0, 0]
        op = &out[0, 0, 0]
    with pool.lock:
        with nogil:
            rc = h3_attention(&a, qp, kp, vp, op, pool.c, NULL, 0, isa_c, &err)
    check(rc, &err)
    return h3_isa_name(isa_c).decode()
