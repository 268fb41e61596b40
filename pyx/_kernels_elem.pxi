# _kernels_elem.pxi — element-wise/row op and conversion wrappers (included by _kernels.pyx).
#
# Python (h3cy/ops/elem.py) checks dtypes, shapes and contiguity and allocates; these
# take typed memoryviews, drop the GIL around the C call while holding the pool's lock,
# and return the name of the ISA whose kernels ran (the C entry's `ran` report), which
# the Python wrapper compares with the path it asked for.  Empty arrays pass NULL: the C
# entries accept that for zero rows and still validate and report.

cdef inline const float *_cf2(const float[:, ::1] a):
    return &a[0, 0] if a.shape[0] > 0 and a.shape[1] > 0 else NULL

cdef inline float *_f2(float[:, ::1] a):
    return &a[0, 0] if a.shape[0] > 0 and a.shape[1] > 0 else NULL

cdef inline const float *_cf1(const float[::1] a):
    return &a[0] if a is not None and a.shape[0] > 0 else NULL

cdef inline float *_f1(float[::1] a):
    return &a[0] if a.shape[0] > 0 else NULL


cdef int _same(str what, tuple got, tuple want) except -1:
    """Shape agreement between the buffers of one call (C only sees pointers)."""
    if got != want:
        raise H3ValueError(f"{what} has shape {got}, expected {want}")
    return 0


def elem_rmsnorm(const float[:, ::1] x, const float[::1] w, float[:, ::1] out, float eps,
                 str isa, ThreadPool pool):
    """out[rows, n] = rmsnorm(x[rows, n]) (* w[n]); returns the ISA that ran."""
    cdef h3_err err
    cdef h3_status rc
    cdef h3_isa ran = H3_ISA_COUNT
    cdef h3_isa want = isa_id(isa)
    cdef int64_t rows = x.shape[0], n = x.shape[1]
    _same("out", (out.shape[0], out.shape[1]), (rows, n))
    if w is not None:
        _same("w", (w.shape[0],), (n,))
    cdef const float *xp = _cf2(x)
    cdef const float *wp = _cf1(w)
    cdef float *op = _f2(out)
    with pool.lock:
        with nogil:
            rc = h3_rmsnorm(xp, wp, op, rows, n, eps, pool.c, want, &ran, &err)
    check(rc, &err)
    return h3_isa_name(ran).decode()


def elem_rope(float[:, :, ::1] x, const float[:, ::1] cos, const float[:, ::1] sin,
              int rot_dim, str isa, ThreadPool pool):
    """Rotate-half RoPE of x[rows, heads, head_dim] in place; returns the ISA that ran."""
    cdef h3_err err
    cdef h3_status rc
    cdef h3_isa ran = H3_ISA_COUNT
    cdef h3_isa want = isa_id(isa)
    cdef int64_t rows = x.shape[0]
    cdef int heads = <int>x.shape[1], head_dim = <int>x.shape[2]
    if 2 <= rot_dim <= head_dim and rot_dim % 2 == 0:
        _same("cos", (cos.shape[0], cos.shape[1]), (rows, rot_dim // 2))
        _same("sin", (sin.shape[0], sin.shape[1]), (rows, rot_dim // 2))
    cdef float *xp = &x[0, 0, 0] if x.shape[0] > 0 and heads > 0 and head_dim > 0 else NULL
    cdef const float *cp = _cf2(cos)
    cdef const float *sp = _cf2(sin)
    with pool.lock:
        with nogil:
            rc = h3_rope(xp, cp, sp, rows, heads, head_dim, rot_dim, pool.c, want, &ran, &err)
    check(rc, &err)
    return h3_isa_name(ran).decode()


def elem_activation(const float[::1] x, float[::1] out, int act, str isa, ThreadPool pool):
    """out[n] = act(x[n]) (0: SiLU, 1: GELU-tanh); returns the ISA that ran."""
    cdef h3_err err
    cdef h3_status rc
    cdef h3_isa ran = H3_ISA_COUNT
    cdef h3_isa want = isa_id(isa)
    cdef int64_t n = x.shape[0]
    _same("out", (out.shape[0],), (n,))
    cdef const float *xp = _cf1(x)
    cdef float *op = _f1(out)
    with pool.lock:
        with nogil:
            rc = h3_activation(xp, op, n, act, pool.c, want, &ran, &err)
    check(rc, &err)
    return h3_isa_name(ran).decode()


def elem_swiglu(const float[:, ::1] x, float[:, ::1] out, str isa, ThreadPool pool):
    """out[rows, h] = silu(x[:, :h]) * x[:, h:]; returns the ISA that ran."""
    cdef h3_err err
    cdef h3_status rc
    cdef h3_isa ran = H3_ISA_COUNT
    cdef h3_isa want = isa_id(isa)
    cdef int64_t rows = x.shape[0], h = out.shape[1]
    _same("x", (x.shape[0], x.shape[1]), (rows, 2 * h))
    cdef const float *xp = _cf2(x)
    cdef float *op = _f2(out)
    with pool.lock:
        with nogil:
            rc = h3_swiglu(xp, op, rows, h, pool.c, want, &ran, &err)
    check(rc, &err)
    return h3_isa_name(ran).decode()


def elem_adaln(const float[:, ::1] x, const float[:, ::1] scale, const float[:, ::1] shift,
               const int32_t[::1] row_table, float[:, ::1] out, str isa, ThreadPool pool):
    """out = x * (1 + scale[row_table]) + shift[row_table]; returns the ISA that ran."""
    cdef h3_err err
    cdef h3_status rc
    cdef h3_isa ran = H3_ISA_COUNT
    cdef h3_isa want = isa_id(isa)
    cdef int64_t rows = x.shape[0], n = x.shape[1], trows = scale.shape[0]
    _same("out", (out.shape[0], out.shape[1]), (rows, n))
    _same("scale", (scale.shape[0], scale.shape[1]), (trows, n))
    _same("shift", (shift.shape[0], shift.shape[1]), (trows, n))
    if row_table is not None:
        _same("row_table", (row_table.shape[0],), (rows,))
    cdef const float *xp = _cf2(x)
    cdef const float *scp = _cf2(scale)
    cdef const float *shp = _cf2(shift)
    cdef const int32_t *tp = NULL
    if row_table is not None and row_table.shape[0] > 0:
        tp = &row_table[0]
    cdef float *op = _f2(out)
    with pool.lock:
        with nogil:
            rc = h3_adaln_modulate(xp, scp, shp, tp, trows, op, rows, n, pool.c, want, &ran,
                                   &err)
    check(rc, &err)
    return h3_isa_name(ran).decode()


def elem_convert(cnp.ndarray src, int src_dtype, cnp.ndarray dst, int dst_dtype, str isa,
                 ThreadPool pool):
    """Convert src (f32/bf16-bits/f16, C-contiguous) into dst; returns the ISA that ran."""
    cdef h3_err err
    cdef h3_status rc
    cdef h3_isa ran = H3_ISA_COUNT
    cdef h3_isa want = isa_id(isa)
    sizes = {H3_DT_F32: 4, H3_DT_BF16: 2, H3_DT_F16: 2}
    if src_dtype not in sizes or dst_dtype not in sizes:
        raise H3ValueError(f"convert: dtype ids {src_dtype} -> {dst_dtype} not supported")
    if not (src.flags.c_contiguous and dst.flags.c_contiguous) or not dst.flags.writeable:
        raise H3ValueError("convert: src and dst must be C-contiguous and dst writeable")
    if src.itemsize != sizes[src_dtype] or dst.itemsize != sizes[dst_dtype]:
        raise H3ValueError("convert: array item sizes do not match the dtype ids")
    if src.size != dst.size:
        raise H3ValueError(f"convert: src has {src.size} elements, dst {dst.size}")
    cdef int64_t n = src.size
    cdef const void *sp = cnp.PyArray_DATA(src)
    cdef void *dp = cnp.PyArray_DATA(dst)
    with pool.lock:
        with nogil:
            rc = h3_convert_mt(sp, src_dtype, dp, dst_dtype, n, pool.c, want, &ran, &err)
    check(rc, &err)
    return h3_isa_name(ran).decode()
