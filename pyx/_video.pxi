# _video.pxi — drivers of the video VAE encoder kernels (included by _kernels.pyx): the
# causal Conv3d over one h3_linear per temporal tap and the per-frame GroupNorm (+ SiLU).
# h3cy/models/video_encoder.py checks shapes and allocates; these convert to pointers, drop
# the GIL while holding the pool's lock, and map C status codes to exceptions.

from libc.stdlib cimport malloc, free


cdef int _conv3d_args(h3_conv3d_args *a, tuple xshape, tuple kernel, tuple stride, int pad_t,
                      tuple pad) except -1:
    if len(xshape) != 4 or len(kernel) != 3 or len(stride) != 3 or len(pad) != 4:
        raise H3ValueError("conv3d: x must be (T, H, W, Cin), kernel and stride 3-tuples, "
                           "pad (top, bottom, left, right)")
    a.T, a.H, a.W, a.Cin = xshape
    a.kt, a.kh, a.kw = kernel
    a.st, a.sh, a.sw = stride
    a.pad_t = pad_t
    a.pad_top, a.pad_bottom, a.pad_left, a.pad_right = pad
    return 0


def conv3d_out_shape(tuple xshape, tuple kernel, tuple stride, int pad_t, tuple pad, int64_t N):
    """(T_out, H_out, W_out, N) of h3_conv3d (see h3_video.h)."""
    T, H, W, _ = xshape
    return ((T + pad_t - kernel[0]) // stride[0] + 1,
            (H + pad[0] + pad[1] - kernel[1]) // stride[1] + 1,
            (W + pad[2] + pad[3] - kernel[2]) // stride[2] + 1, N)


def conv3d(list taps, const float[:, :, :, ::1] x, float[:, :, :, ::1] y, tuple kernel,
           tuple stride, int pad_t, tuple pad, const float[:, :, :, ::1] resid=None, bint add=False):
    """y[T_out, H_out, W_out, Cout] = causal conv3d of x[T, H, W, Cin] (+ resid, or + y
    itself with add=True); taps: kt LinearCores (N = Cout, K = kh*kw*Cin), the bias in the
    last.  See h3_video.h."""
    cdef h3_conv3d_args a
    cdef h3_err err
    cdef h3_status rc
    xshape = (x.shape[0], x.shape[1], x.shape[2], x.shape[3])
    yshape = (y.shape[0], y.shape[1], y.shape[2], y.shape[3])
    _conv3d_args(&a, xshape, kernel, stride, pad_t, pad)
    if len(taps) != a.kt:
        raise H3ValueError(f"conv3d: {len(taps)} tap linears for a temporal kernel of {a.kt}")
    cdef LinearCore t0 = taps[0]
    _same("y", yshape, conv3d_out_shape(xshape, kernel, stride, pad_t, pad, t0.N))
    cdef const float *rp = NULL
    if add:
        rp = &y[0, 0, 0, 0]
    elif resid is not None:
        _same("resid", (resid.shape[0], resid.shape[1], resid.shape[2], resid.shape[3]), yshape)
        rp = &resid[0, 0, 0, 0]
    cdef const float *xp = &x[0, 0, 0, 0]
    cdef float *yp = &y[0, 0, 0, 0]
    cdef const h3_linear **tp = <const h3_linear **>malloc(a.kt * sizeof(h3_linear *))
    if tp == NULL:
        raise MemoryError()
    cdef LinearCore lc
    cdef int j
    try:
        for j in range(a.kt):
            lc = taps[j]
            tp[j] = lc.c
        with t0.pool.lock:
            with nogil:
                rc = h3_conv3d(&a, tp, xp, rp, yp, t0.pool.c, NULL, 0, &err)
        check(rc, &err)
    finally:
        free(tp)


def group_norm(x, y, int groups, gamma, beta, float eps, bint silu, str isa, ThreadPool pool):
    """Per-frame GroupNorm (+ SiLU) of x[T, ..., C] into y (may be x); see h3_video.h.
    Returns the ISA whose kernels ran."""
    cdef h3_err err
    cdef h3_status rc
    cdef h3_isa ran = H3_ISA_COUNT
    cdef h3_isa want = isa_id(isa)
    cdef cnp.ndarray xa = x, ya = y
    for name, arr in (("x", x), ("y", y)):
        if arr.dtype != np.float32 or not arr.flags.c_contiguous or arr.ndim < 2:
            raise H3ValueError(f"group_norm: {name} must be a C-contiguous float32 (T, ..., C) array")
    if not y.flags.writeable:
        raise H3ValueError("group_norm: y must be writable")
    _same("y", tuple(y.shape), tuple(x.shape))
    cdef int64_t T = x.shape[0], C = x.shape[x.ndim - 1]
    cdef int64_t P = x.size // max(T * C, 1)
    cdef const float *gp = _fptr(gamma, "gamma", C) if gamma is not None else NULL
    cdef const float *bp = _fptr(beta, "beta", C) if beta is not None else NULL
    cdef const float *xp = <const float *>cnp.PyArray_DATA(xa)
    cdef float *yp = <float *>cnp.PyArray_DATA(ya)
    with pool.lock:
        with nogil:
            rc = h3_group_norm(xp, yp, T, P, C, groups, gp, bp, eps, silu, pool.c, want, &ran, &err)
    check(rc, &err)
    return h3_isa_name(ran).decode()
