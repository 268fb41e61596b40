# _audio.pxi — drivers of the audio VAE decoder kernels (included by _kernels.pyx):
# channels-last 1-D convolutions over an h3_linear and the anti-aliased SnakeBeta.
# h3cy/models/audio_vae.py checks shapes and allocates; these convert to pointers, drop the GIL
# while holding the pool's lock, and map C status codes to exceptions.  `ws` is an
# optional uint8 workspace array (aligned here to 64 bytes; None: allocated in C).

cdef char *_ws_ptr(object ws, size_t *nbytes) except? NULL:
    if ws is None:
        nbytes[0] = 0
        return NULL
    cdef cnp.ndarray arr = ws
    if arr.dtype != np.uint8 or not arr.flags.c_contiguous:
        raise H3ValueError("workspace must be a C-contiguous uint8 array")
    cdef char *p = <char *>cnp.PyArray_DATA(arr)
    cdef size_t n = arr.nbytes
    cdef uintptr_t mis = (<uintptr_t>p) & 63
    if mis:
        if n < 64:
            raise H3ValueError("workspace too small")
        p += 64 - mis
        n -= 64 - mis
    nbytes[0] = n
    return p


def conv1d_workspace_bytes(LinearCore lin, int64_t T_out, bint im2col=False):
    """Bytes (plus 64 for alignment) conv1d needs for T_out output steps."""
    return h3_conv1d_workspace_bytes(lin.c, T_out, lin.pool.threads, H3_CONV_IM2COL if im2col else 0) + 64


def conv_transpose1d_workspace_bytes(LinearCore lin, int64_t T, int stride):
    """Bytes (plus 64 for alignment) conv_transpose1d needs for T input steps."""
    return h3_conv_transpose1d_workspace_bytes(lin.c, T, stride, lin.pool.threads) + 64


def conv1d(LinearCore lin, const float[:, ::1] x, int k, int dil, int pad,
           float[:, ::1] y, bint add=False, ws=None, bint im2col=False):
    """y[T_out, Cout] = conv1d(x[T, Cin]) (+ y itself with add=True); see h3_audio.h.
    im2col=True builds the im2col rows first (the A/B reference route; same bits)."""
    cdef h3_err err
    cdef h3_status rc
    cdef size_t wsb = 0
    cdef char *wp = _ws_ptr(ws, &wsb)
    cdef int64_t T = x.shape[0], Cin = x.shape[1]
    cdef int64_t T_out = T + 2 * pad - dil * (k - 1)
    if T < 1 or Cin < 1:
        raise H3ValueError(f"x must have shape (T >= 1, Cin >= 1), got ({T}, {Cin})")
    if T_out < 1:
        raise H3ValueError(f"conv1d: output length T + 2*padding - dilation*(k-1) = {T_out} < 1")
    if y.shape[0] != T_out or y.shape[1] != lin.N:
        raise H3ValueError(f"y has shape ({y.shape[0]}, {y.shape[1]}), expected ({T_out}, {lin.N})")
    cdef const float *xp = &x[0, 0]
    cdef float *yp = &y[0, 0]
    cdef const float *rp = yp if add else NULL
    cdef int flags = H3_CONV_IM2COL if im2col else 0
    with lin.pool.lock:
        with nogil:
            rc = h3_conv1d(lin.c, xp, T, Cin, k, dil, pad, rp, yp, flags, lin.pool.c, wp, wsb, &err)
    check(rc, &err)


def conv_transpose1d(LinearCore lin, const float[:, ::1] x, int64_t Cout, int k, int stride,
                     int pad, bias, float[:, ::1] y, ws=None):
    """y[T_out, Cout] = conv_transpose1d(x[T, Cin]) + bias; see h3_audio.h."""
    cdef h3_err err
    cdef h3_status rc
    cdef size_t wsb = 0
    cdef char *wp = _ws_ptr(ws, &wsb)
    cdef int64_t T = x.shape[0]
    cdef int64_t T_out = (T - 1) * stride - 2 * pad + k
    if T < 1 or x.shape[1] != lin.K:
        raise H3ValueError(f"x has shape ({T}, {x.shape[1]}), expected (T >= 1, {lin.K})")
    if T_out < 1:
        raise H3ValueError(f"conv_transpose1d: output length (T-1)*stride - 2*padding + k = {T_out} < 1")
    if y.shape[0] != T_out or y.shape[1] != Cout:
        raise H3ValueError(f"y has shape ({y.shape[0]}, {y.shape[1]}), expected ({T_out}, {Cout})")
    cdef const float *bp = _fptr(bias, "bias", Cout)
    cdef const float *xp = &x[0, 0]
    cdef float *yp = &y[0, 0]
    with lin.pool.lock:
        with nogil:
            rc = h3_conv_transpose1d(lin.c, xp, T, Cout, k, stride, pad, bp, yp, lin.pool.c,
                                     wp, wsb, &err)
    check(rc, &err)


def snake_aa(const float[:, ::1] x, float[:, ::1] y, const float[::1] alpha,
             const float[::1] beta, const float[::1] fu, const float[::1] fd, str isa,
             ThreadPool pool):
    """y[T, C] = anti-aliased SnakeBeta of x[T, C]; returns the ISA whose kernels ran."""
    cdef h3_err err
    cdef h3_status rc
    cdef h3_isa ran = H3_ISA_COUNT
    cdef h3_isa want = isa_id(isa)
    cdef int64_t T = x.shape[0], C = x.shape[1]
    if T < 1 or C < 1:
        raise H3ValueError(f"x must have shape (T >= 1, C >= 1), got ({T}, {C})")
    _same("y", (y.shape[0], y.shape[1]), (T, C))
    _same("alpha", (alpha.shape[0],), (C,))
    _same("beta", (beta.shape[0],), (C,))
    _same("upsample filter", (fu.shape[0],), (12,))
    _same("downsample filter", (fd.shape[0],), (12,))
    cdef const float *xp = &x[0, 0]
    cdef float *yp = &y[0, 0]
    with pool.lock:
        with nogil:
            rc = h3_snake_aa(xp, yp, T, C, &alpha[0], &beta[0], &fu[0], &fd[0], pool.c, want,
                             &ran, &err)
    check(rc, &err)
    return h3_isa_name(ran).decode()
