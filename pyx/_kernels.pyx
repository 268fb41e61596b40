# _kernels.pyx — thin typed wrappers over csrc/ (h3.h) for h3cy.ops, tests and bench.
#
# Python checks and allocates (h3cy/ops/_base.py); this module converts to C pointers, drops
# the GIL for the arithmetic and maps C status codes to h3cy exceptions.  Nothing here
# holds a pointer into a numpy buffer after a call returns.
from libc.stdint cimport int8_t, int32_t, int64_t, uint8_t, uint16_t, uint64_t
from libc.stdlib cimport free
from libc.string cimport memcpy, memset
from cpython.pythread cimport (PyThread_type_lock, PyThread_allocate_lock, PyThread_free_lock,
                               PyThread_acquire_lock, PyThread_release_lock, WAIT_LOCK)

cimport numpy as cnp
import numpy as np
import threading

from h3 cimport *
from h3cy import _config
from h3cy.errors import H3Error, UnsupportedCPUError, Cancelled, H3ValueError

cnp.import_array()


cdef int _raise(h3_status rc, h3_err *err) except -1:
    """The one status -> exception map."""
    msg = err.msg.decode("utf-8", "replace")
    if rc == H3_EINVAL or rc == H3_EFORMAT:
        raise H3ValueError(msg)
    if rc == H3_ENOMEM:
        raise MemoryError(msg)
    if rc == H3_EIO:
        raise OSError(msg)
    if rc == H3_EUNSUPPORTED:
        raise UnsupportedCPUError(msg)
    if rc == H3_ECANCELLED:
        raise Cancelled(msg)
    raise H3Error(f"h3 error {rc}: {msg}")


cdef inline int check(h3_status rc, h3_err *err) except -1:
    if rc != H3_OK:
        _raise(rc, err)
    return 0


ISA_NAMES = tuple(h3_isa_name(<h3_isa>i).decode() for i in range(<int>H3_ISA_COUNT))


cdef const float *_fptr(object a, str name, int64_t n) except? NULL:
    """Pointer to a C-contiguous float32 array of n elements (None -> NULL)."""
    if a is None:
        return NULL
    cdef cnp.ndarray arr = a
    if arr.dtype != np.float32 or not arr.flags.c_contiguous or arr.size != n:
        raise H3ValueError(f"{name} must be a C-contiguous float32 array of {n} values")
    return <const float *>cnp.PyArray_DATA(arr)


cdef h3_isa isa_id(str name) except *:
    cdef h3_isa out
    b = name.encode()
    if not h3_isa_from_name(b, &out):
        raise H3ValueError(f"unknown ISA {name!r}; expected one of {', '.join(ISA_NAMES)}")
    return out


def isa_supported(str name):
    """True if this CPU and OS can run the named path."""
    return bool(h3_isa_supported(isa_id(name)))


def isa_check(str name):
    """Raise UnsupportedCPUError (with the reason) if the named path cannot run here."""
    cdef h3_err err
    check(h3_isa_check(isa_id(name), &err), &err)


def int_panel_width(str name):
    """Output columns per packed panel of the int8/int4 kernels on the named path."""
    return h3_linear_int_panel_width(isa_id(name))


def isa_vector(str name):
    """The path whose vector kernels (element-wise, float attention) run for ``name``."""
    return h3_isa_name(h3_isa_vector(isa_id(name))).decode()


def isa_best():
    return h3_isa_name(h3_isa_best()).decode()


# The neon path's optional extensions (h3.h H3_EXT_*), by name, in bit order.
EXT_NAMES = ("i8mm", "bf16")


cdef tuple _ext_names(int bits):
    return tuple(n for i, n in enumerate(EXT_NAMES) if (bits >> i) & 1)


def cpu_extensions():
    """The neon path's optional extensions this CPU has (AArch64 Linux HWCAP2), before
    H3CY_NEON_EXT: a tuple of "i8mm", "bf16"; empty elsewhere."""
    return _ext_names(h3_cpu_extensions())


cdef int _ext_off() except -1:
    """H3_EXT_* bits H3CY_NEON_EXT turns off (read by _config at import)."""
    cdef int off = 0
    for i, n in enumerate(EXT_NAMES):
        if n not in _config.neon_extensions():
            off |= 1 << i
    return off


def cpu_features():
    """Names of the CPU/OS features detected (cpuid/xgetbv/hwcap, AMX permission)."""
    cdef uint64_t f = h3_cpu_features()
    out = []
    cdef int i = 0
    while h3_cpu_feature_name(i) != NULL:
        if (f >> i) & 1:
            out.append(h3_cpu_feature_name(i).decode())
        i += 1
    return out


cdef class PoolLock:
    """ThreadPool.lock: ``with lock:`` from Python (waits with the GIL released), and
    acquire/release from nogil code (the denoising loop releases it between blocks)."""
    cdef PyThread_type_lock c

    def __cinit__(self):
        self.c = PyThread_allocate_lock()
        if self.c == NULL:
            raise MemoryError("cannot allocate a lock")

    def __dealloc__(self):
        if self.c != NULL:
            PyThread_free_lock(self.c)

    def __enter__(self):
        with nogil:
            PyThread_acquire_lock(self.c, WAIT_LOCK)
        return self

    def __exit__(self, *exc):
        PyThread_release_lock(self.c)
        return False


cdef class ThreadPool:
    """A pthread pool owned by one model or op (never global).  Calls on one pool are
    serialised by a lock, so two Python threads can share it safely."""
    cdef h3_pool *c
    cdef readonly int threads
    cdef PoolLock lock

    def __cinit__(self, int threads):
        cdef h3_err err
        check(h3_pool_create(threads, &self.c, &err), &err)
        self.threads = threads
        self.lock = PoolLock()

    def __dealloc__(self):
        h3_pool_free(self.c)


cdef int _dtype_id(str name) except -1:
    ids = {"fp32": H3_DT_F32, "bf16": H3_DT_BF16, "fp16": H3_DT_F16, "int8": H3_DT_I8,
           "int4": H3_DT_I4}
    if name not in ids:
        raise H3ValueError(f"unknown weights mode {name!r}; expected fp32, bf16, fp16, int8 or int4")
    return ids[name]


cdef class LinearCore:
    """Owns an h3_linear (weights converted at construction)."""
    cdef h3_linear *c
    cdef readonly ThreadPool pool
    cdef readonly str isa
    cdef readonly int64_t N, K
    cdef readonly int pair
    cdef readonly object storage   # attached storage (mmap views) kept alive while c uses it
    cdef readonly object lora      # the LoraCore attached to c, or None

    def __cinit__(self, weight=None, int src_dtype=0, bias=None, str weights="fp32",
                  int group_size=0, int act_group=0, int pair=0, str isa="ref",
                  ThreadPool pool=None, int bf16_inputs=0, int rot_group=0):
        # weight None: an empty shell filled by linear_attach()
        if weight is None:
            self.isa = isa
            self.pool = pool
            return
        cdef h3_linear_opts opts
        cdef h3_err err
        cdef h3_status rc
        cdef cnp.ndarray w = weight
        cdef const float *bptr = NULL
        cdef cnp.ndarray b
        memset(&opts, 0, sizeof(opts))
        opts.wtype = _dtype_id(weights)
        opts.group_size = group_size
        opts.act_group = act_group
        opts.pair = pair
        opts.bf16_inputs = bf16_inputs
        opts.isa = isa_id(isa)
        opts.small_pages = not _config.huge_pages()
        opts.rot_group = rot_group
        opts.ext_off = _ext_off()
        self.N = w.shape[0]
        self.K = w.shape[1]
        self.pair = pair
        if bias is not None:
            b = bias
            bptr = <const float *>cnp.PyArray_DATA(b)
        cdef const void *wptr = cnp.PyArray_DATA(w)
        cdef int64_t N = self.N, K = self.K
        with nogil:
            rc = h3_linear_create(wptr, src_dtype, N, K, bptr, &opts, &self.c, &err)
        check(rc, &err)
        self.isa = isa
        self.pool = pool

    def __dealloc__(self):
        h3_linear_free(self.c)

    def set_lora(self, LoraCore lora):
        """Attach a low-rank addend (None detaches: the plain linear, bit for bit).  The
        core keeps a reference, so the addend outlives its use."""
        cdef h3_err err
        check(h3_linear_set_lora(self.c, lora.c if lora is not None else NULL, &err), &err)
        self.lora = lora

    @property
    def weight_bytes(self):
        return h3_linear_weight_bytes(self.c)

    @property
    def gguf_q8d(self):
        """True when this GGUF linear runs Q8_0 blocks in place on the tile route
        (csrc/gguf_q8d_amx.c; H3CY_GGUF_Q8D)."""
        return bool(h3_linear_gguf_q8d(self.c))

    @property
    def gguf_kq_tiles(self):
        """True when this GGUF linear's forward runs Q4_K / Q5_K with its activations in the
        K-quant kernel's 32-row tile layout (csrc/gguf_kq_amx.c; H3CY_GGUF_KQ)."""
        return bool(h3_linear_gguf_kq_tiles(self.c))

    @property
    def bf16_activations(self):
        return bool(h3_linear_bf16_activations(self.c))

    @property
    def extensions(self):
        """The neon extensions this linear's kernels use: a tuple of EXT_NAMES."""
        return _ext_names(h3_linear_extensions(self.c))

    def export(self):
        """(layout dict, weight bytes, scale bytes or None): copies of the converted
        storage, for writing a cache file that linear_attach() maps back."""
        cdef h3_linear_layout lay
        cdef const void *w
        cdef const float *sc
        cdef h3_err err
        check(h3_linear_layout_get(self.c, &lay, &w, &sc, &err), &err)
        layout = dict(wtype=lay.wtype, group_size=lay.group_size, act_group=lay.act_group,
                      pair=lay.pair, nr=lay.nr, N=lay.N, K=lay.K, Kp=lay.Kp,
                      w_bytes=lay.w_bytes, s_bytes=lay.s_bytes, bf16_inputs=lay.bf16_inputs)
        wb = np.empty(lay.w_bytes, np.uint8)
        if lay.w_bytes:
            memcpy(<void *>cnp.PyArray_DATA(wb), w, lay.w_bytes)
        sbuf = None
        if lay.s_bytes:
            sbuf = np.empty(lay.s_bytes, np.uint8)
            memcpy(<void *>cnp.PyArray_DATA(sbuf), <const void *>sc, lay.s_bytes)
        return layout, wb, sbuf

    def dequantized(self):
        cdef h3_err err
        out = np.empty((self.N, self.K), dtype=np.float32)
        cdef float[:, ::1] o = out
        check(h3_linear_dequant(self.c, &o[0, 0], &err), &err)
        return out

    def forward(self, const float[:, ::1] x, float[:, ::1] out, int kind,
                resid=None, gate=None, gate_row=None):
        cdef h3_epilogue epi
        cdef h3_err err
        cdef h3_status rc
        cdef const float[:, ::1] rv
        cdef const float[:, ::1] gv
        cdef const int32_t[::1] grv
        memset(&epi, 0, sizeof(epi))
        epi.kind = kind
        if resid is not None:
            rv = resid
            epi.resid = &rv[0, 0]
        if gate is not None:
            gv = gate
            epi.gate = &gv[0, 0]
            epi.gate_rows = gv.shape[0]
        if gate_row is not None:
            grv = gate_row
            epi.gate_row = &grv[0]
        cdef int64_t M = x.shape[0]
        if M == 0:
            return
        with self.pool.lock:
            with nogil:
                rc = h3_linear_forward(self.c, self.pool.c, &x[0, 0], M, &out[0, 0], &epi,
                                       NULL, 0, &err)
        check(rc, &err)


cdef class LoraCore:
    """Owns an h3_lora: y += ((x . A^T) * scale) . B^T, run inside the linear's GEMM.
    a (R, K), b (N, R), scale (R,) float32 (copied).  fused: the up product inside an
    int8/int4 base's micro-kernel store (True) or in a second pass over the output (False);
    None: the isa's default (fused on AMX only; h3.h h3_lora_set_fused).  int_down: on an
    int8/int4 base, the down product x . A^T from the base's int8-quantised x on its int
    kernel (True) or in float (False, bf16 tiles on AMX); None: the default (True on every
    isa; h3_lora_set_int_down).  Both are read when the LoRA is attached."""
    cdef h3_lora *c
    cdef readonly int64_t R, N, K

    def __cinit__(self, const float[:, ::1] a, const float[:, ::1] b, const float[::1] scale,
                  str isa="ref", fused=None, int_down=None):
        cdef h3_err err
        cdef h3_status rc
        if b.shape[1] != a.shape[0] or scale.shape[0] != a.shape[0]:
            raise H3ValueError(f"LoRA shapes disagree: A ({a.shape[0]}, {a.shape[1]}), "
                               f"B ({b.shape[0]}, {b.shape[1]}), scale ({scale.shape[0]},)")
        self.R, self.N, self.K = a.shape[0], b.shape[0], a.shape[1]
        cdef h3_isa path = isa_id(isa)
        with nogil:
            rc = h3_lora_create(&a[0, 0], &b[0, 0], &scale[0], self.R, self.N, self.K, path,
                                &self.c, &err)
        check(rc, &err)
        if fused is not None:
            check(h3_lora_set_fused(self.c, 1 if fused else 0, &err), &err)
        if int_down is not None:
            check(h3_lora_set_int_down(self.c, 1 if int_down else 0, &err), &err)

    def __dealloc__(self):
        h3_lora_free(self.c)

    def set_scale(self, const float[::1] scale):
        cdef h3_err err
        if scale.shape[0] != self.R:
            raise H3ValueError(f"scale must have {self.R} values, got {scale.shape[0]}")
        check(h3_lora_set_scale(self.c, &scale[0], &err), &err)


def linear_create_q8(const int8_t[:, ::1] q, const float[::1] scales, bias, str isa, ThreadPool pool,
                     int pair=0, int rot_group=0, int act_group=0):
    """A LinearCore over int8 weights quantised elsewhere: W = q * scales[:, None]
    (q (N, K) int8, scales (N,) float32), packed at creation (q is not kept); rot_group > 0:
    q holds W rotated by the block Hadamard of that group (int8-convrot), and x is rotated
    the same way before it is quantised."""
    cdef h3_linear_opts opts
    cdef h3_err err
    cdef h3_status rc
    cdef const float *bp = NULL
    cdef const float[::1] bv
    cdef int64_t N = q.shape[0], K = q.shape[1]
    if scales.shape[0] != N:
        raise H3ValueError(f"scales has {scales.shape[0]} values, expected {N} (one per row)")
    if bias is not None:
        bv = bias
        if bv.shape[0] != N:
            raise H3ValueError(f"bias has {bv.shape[0]} values, expected {N}")
        bp = &bv[0]
    memset(&opts, 0, sizeof(opts))
    opts.wtype = H3_DT_I8
    opts.act_group = act_group
    opts.pair = pair
    opts.isa = isa_id(isa)
    opts.small_pages = not _config.huge_pages()
    opts.rot_group = rot_group
    opts.ext_off = _ext_off()
    cdef LinearCore core = LinearCore(None, isa=isa, pool=pool)
    cdef const int8_t *qp = &q[0, 0] if N > 0 and K > 0 else NULL
    cdef const float *sp = &scales[0] if N > 0 else NULL
    with nogil:
        rc = h3_linear_create_q8(qp, sp, N, K, bp, &opts, &core.c, &err)
    check(rc, &err)
    core.N = N
    core.K = K
    core.pair = pair
    return core


def gguf_type_size(int type):
    """(values per block, bytes per block) of GGUF type id ``type``, or None if h3cy
    does not read it."""
    cdef int blk = 0, nb = 0
    if not h3_gguf_type_size(type, &blk, &nb):
        return None
    return blk, nb


def gguf_dequant(int type, const uint8_t[::1] src, int64_t n, float[::1] out):
    """out[:n] = the n values of GGUF type ``type`` stored in src (whole blocks)."""
    cdef int blk = 0, nb = 0
    cdef h3_err err
    cdef h3_status rc
    if not h3_gguf_type_size(type, &blk, &nb):
        raise H3ValueError(f"unknown GGUF type {type}")
    if n < 0 or n % blk or <int64_t>src.shape[0] < n // blk * nb or out.shape[0] < n:
        raise H3ValueError(f"gguf_dequant: {n} values need {n // blk * nb} bytes (got {src.shape[0]}) "
                           f"and {n} outputs (got {out.shape[0]})")
    if n == 0:
        return
    with nogil:
        rc = h3_gguf_dequant(type, &src[0], n, &out[0], &err)
    check(rc, &err)


def gguf_quant_act(const float[:, ::1] x, int8_t[:, ::1] q, float[:, ::1] d):
    """The GGUF linear's activation quantiser (per row, per group of 256 values; the last
    group the rest of the row), for tests: x (M, K), K a multiple of 32 -> q (M, K) int8,
    d (M, ceil(K / 256)) float32."""
    cdef h3_err err
    cdef int64_t M = x.shape[0], K = x.shape[1]
    if K % 32 or K == 0 or q.shape[0] != M or q.shape[1] != K or d.shape[0] != M or d.shape[1] != (K + 255) // 256:
        raise H3ValueError("gguf_quant_act: x (M, K) with K a positive multiple of 32, q (M, K), d (M, ceil(K / 256))")
    if M == 0:
        return
    check(h3_gguf_quant_act(&x[0, 0], M, K, &q[0, 0], &d[0, 0], &err), &err)


def linear_attach_gguf(parts, types, int64_t N, int64_t K, bias, int pair, str isa, ThreadPool pool):
    """A LinearCore over GGUF blocks the caller keeps alive (parts: up to 3 C-contiguous
    uint8 arrays, each the N/len(parts) rows of one tensor as stored; types: their GGUF
    type ids).  No copy; the core keeps the arrays.  The A/B switches H3CY_GGUF_KQ,
    H3CY_GGUF_GROUP, H3CY_GGUF_Q8D and H3CY_GGUF_PF (h3cy._config) are applied here
    (h3_linear_set_gguf_opts, h3_linear_set_gguf_prefetch)."""
    from h3cy import _config
    cdef const void *pp[3]
    cdef int tt[3]
    cdef int nparts = len(parts)
    cdef cnp.ndarray pa
    cdef const float *bp = NULL
    cdef h3_err err
    cdef int blk = 0, nb = 0
    if not 1 <= nparts <= 3 or len(types) != nparts:
        raise H3ValueError(f"a GGUF linear comes in 1 to 3 parts with a type each, got {nparts}")
    if N < 1 or N % nparts:
        raise H3ValueError(f"{N} rows do not split into {nparts} parts")
    for i in range(nparts):
        pa = parts[i]
        tt[i] = types[i]
        if not h3_gguf_type_size(tt[i], &blk, &nb) or blk == 1:
            raise H3ValueError(f"part {i}: GGUF type {tt[i]} is not a quantised type h3cy reads")
        if pa.dtype != np.uint8 or not pa.flags.c_contiguous or K % blk or \
                <int64_t>pa.nbytes != (N // nparts) * (K // blk) * nb:
            raise H3ValueError(f"part {i}: expected {(N // nparts) * (K // blk) * nb} C-contiguous uint8 bytes "
                               f"for {N // nparts} rows of {K} values")
        pp[i] = cnp.PyArray_DATA(pa)
    bp = _fptr(bias, "bias", N)
    cdef LinearCore core = LinearCore(None, isa=isa, pool=pool)
    cdef int kq = _config.gguf_kq(), group = _config.gguf_group(), q8d = _config.gguf_q8d()
    cdef int pf = _config.gguf_pf()
    check(h3_linear_attach_gguf(pp, tt, nparts, N, K, bp, pair, isa_id(isa), &core.c, &err), &err)
    check(h3_linear_set_gguf_opts(core.c, kq, group, q8d, &err), &err)
    check(h3_linear_set_gguf_prefetch(core.c, pf, &err), &err)
    core.N = N
    core.K = K
    core.pair = pair
    core.storage = tuple(parts)
    return core


def linear_attach_nvfp4(parts, int64_t N, int64_t K, bias, int pair, str isa, ThreadPool pool):
    """A LinearCore over NVFP4 tensors the caller keeps alive.  parts: up to 3 tuples
    (codes, scales, scale_2, pre_scale) of one tensor each, its N/len(parts) rows: codes
    C-contiguous uint8 [>= rows, ld] (two E2M1 codes a byte, the even input high), scales
    the C-contiguous uint8 e4m3 bytes in cuBLAS's blocked layout over (rows rounded up to
    128, 2 ld / 16 rounded up to 4), scale_2 a float, pre_scale None or K float32.  No copy
    of codes or scales; the core keeps the arrays."""
    cdef h3_nvfp4_part pp[3]
    cdef int nparts = len(parts)
    cdef cnp.ndarray ca, sa, pa
    cdef const float *bp = NULL
    cdef h3_err err
    cdef int64_t rows, ld, want
    if not 1 <= nparts <= 3:
        raise H3ValueError(f"an NVFP4 linear comes in 1 to 3 parts, got {nparts}")
    if N < 1 or N % nparts:
        raise H3ValueError(f"{N} rows do not split into {nparts} parts")
    rows = N // nparts
    keep = []
    for i in range(nparts):
        codes, scales, s2, pre = parts[i]
        ca, sa = codes, scales
        if ca.dtype != np.uint8 or ca.ndim != 2 or not ca.flags.c_contiguous or ca.shape[0] < rows \
                or 2 * ca.shape[1] < K:
            raise H3ValueError(f"part {i}: codes must be C-contiguous uint8 [>= {rows}, >= {K // 2}], "
                               f"got {ca.dtype} {list(np.shape(codes))}")
        ld = ca.shape[1]
        want = ((rows + 127) // 128 * 128) * ((2 * ld // 16 + 3) // 4 * 4)
        if sa.dtype != np.uint8 or not sa.flags.c_contiguous or <int64_t>sa.size != want:
            raise H3ValueError(f"part {i}: scales must be {want} C-contiguous uint8 bytes (the blocked "
                               f"layout of {rows} rows by {2 * ld // 16} blocks), got {sa.dtype} {sa.size}")
        pp[i].codes = <const uint8_t *>cnp.PyArray_DATA(ca)
        pp[i].ld = ld
        pp[i].scales = <const uint8_t *>cnp.PyArray_DATA(sa)
        pp[i].scale_2 = float(s2)
        pp[i].pre_scale = NULL
        if pre is not None:
            pa = pre
            if pa.dtype != np.float32 or not pa.flags.c_contiguous or pa.size != K:
                raise H3ValueError(f"part {i}: pre_scale must be {K} C-contiguous float32 values")
            pp[i].pre_scale = <const float *>cnp.PyArray_DATA(pa)
        keep += [codes, scales]
    bp = _fptr(bias, "bias", N)
    cdef LinearCore core = LinearCore(None, isa=isa, pool=pool)
    check(h3_linear_attach_nvfp4(pp, nparts, N, K, bp, pair, isa_id(isa), &core.c, &err), &err)
    core.N = N
    core.K = K
    core.pair = pair
    core.storage = tuple(keep)
    return core


NVFP4_ROUTES = {"auto": 0, "int8": 1, "bf16": 2}


def linear_nvfp4_route(LinearCore core, str route, int64_t min_rows=0):
    """Set the product an NVFP4 core's forward computes (h3.h h3_linear_nvfp4_route):
    "int8" (activations int8 per 32; every path the same bits), "bf16" (activations rounded
    to bf16, float32 sums: AMX tiles on isa "amx", else the scalar reference) or "auto"
    (bf16 on AMX for calls of at least min_rows rows, else int8)."""
    cdef h3_err err
    if route not in NVFP4_ROUTES:
        raise H3ValueError(f"NVFP4 route {route!r}: expected one of {sorted(NVFP4_ROUTES)}")
    check(h3_linear_nvfp4_route(core.c, NVFP4_ROUTES[route], min_rows, &err), &err)


def hadamard(float[:, ::1] x, int group, str isa, ThreadPool pool):
    """Rotate every run of `group` values of x (rows, n) in place by the normalised
    regular Hadamard H_group (h3_hadamard); returns the ISA that ran."""
    cdef h3_err err
    cdef h3_status rc
    cdef h3_isa ran = H3_ISA_COUNT
    cdef h3_isa want = isa_id(isa)
    cdef int64_t rows = x.shape[0], n = x.shape[1]
    cdef float *xp = &x[0, 0] if rows > 0 and n > 0 else NULL
    with pool.lock:
        with nogil:
            rc = h3_hadamard(xp, rows, n, group, pool.c, want, &ran, &err)
    check(rc, &err)
    return h3_isa_name(ran).decode()


def linear_attach(dict layout, w, scales, bias, str isa, ThreadPool pool):
    """A LinearCore over storage the caller keeps alive (w: uint8/uint16/float32 array of
    the layout's bytes, e.g. an mmap view; scales: float32 array or None).  No copy.
    w may also be a list of up to 3 arrays of equal size: row-major float weights whose
    rows lie in separate tensors (h3_linear_attach_parts; layout w_bytes counts all)."""
    cdef h3_linear_layout lay
    cdef h3_err err
    cdef h3_status rc
    cdef cnp.ndarray wa
    cdef cnp.ndarray sa
    cdef const float *sp = NULL
    cdef const float *bp = NULL
    cdef const void *parts[3]
    cdef int nparts = 0
    memset(&lay, 0, sizeof(lay))
    lay.wtype = layout["wtype"]; lay.group_size = layout["group_size"]
    lay.act_group = layout["act_group"]; lay.pair = layout["pair"]; lay.nr = layout["nr"]
    lay.N = layout["N"]; lay.K = layout["K"]; lay.Kp = layout["Kp"]
    lay.w_bytes = layout["w_bytes"]; lay.s_bytes = layout["s_bytes"]
    lay.bf16_inputs = layout.get("bf16_inputs", 0)
    lay.f32_exact = layout.get("f32_exact", 0)
    lay.small_pages = not _config.huge_pages()   # a run-time switch, never a stored one
    lay.ext_off = _ext_off()                     # likewise
    plist = list(w) if isinstance(w, (list, tuple)) else [w]
    if not 1 <= len(plist) <= 3:
        raise H3ValueError(f"attached weights come in 1 to 3 parts, got {len(plist)}")
    total = 0
    for part in plist:
        wa = part
        if not wa.flags.c_contiguous or wa.nbytes != plist[0].nbytes:
            raise H3ValueError("attached weight parts must be C-contiguous and of equal size")
        parts[nparts] = cnp.PyArray_DATA(wa)
        nparts += 1
        total += wa.nbytes
    if <uint64_t>total != lay.w_bytes:
        raise H3ValueError(f"attached weights must be {lay.w_bytes} contiguous bytes, got {total}")
    if scales is not None:
        sa = scales
        if sa.dtype != np.float32 or not sa.flags.c_contiguous or <uint64_t>sa.nbytes != lay.s_bytes:
            raise H3ValueError(f"attached scales must be {lay.s_bytes} bytes of C-contiguous float32")
        sp = <const float *>cnp.PyArray_DATA(sa)
    elif lay.s_bytes:
        raise H3ValueError("this layout needs scales")
    bp = _fptr(bias, "bias", lay.N)
    cdef LinearCore core = LinearCore(None, isa=isa, pool=pool)
    if nparts == 1:
        rc = h3_linear_attach(&lay, parts[0], sp, bp, isa_id(isa), &core.c, &err)
    else:
        if sp != NULL:
            raise H3ValueError("weights in parts carry no scales")
        rc = h3_linear_attach_parts(&lay, parts, nparts, bp, isa_id(isa), &core.c, &err)
    check(rc, &err)
    core.N = lay.N
    core.K = lay.K
    core.pair = lay.pair
    core.storage = tuple(plist) + (scales,)   # the arrays the core reads (page advice)
    return core


include "_kernels_attn.pxi"
include "_kernels_elem.pxi"
include "_dit.pxi"
include "_qwen.pxi"
include "_vit.pxi"
include "_audio.pxi"
include "_video.pxi"
include "_qwen_vision.pxi"
include "_loop.pxi"
