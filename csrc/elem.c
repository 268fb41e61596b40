/* elem.c — public entries of the element-wise/row ops and conversions: validation,
 * dispatch to one immutable kernel table per ISA, and splitting rows over the pool.
 *
 * These ops are memory-bound: every kernel streams its rows once (RMSNorm reads a row
 * twice, the second time from L1/L2), and threads take contiguous row ranges so that
 * each thread's bytes are one sequential stream.  Calls too small to pay for waking the
 * pool (< MIN_PER_THREAD elements per thread) run on the calling thread. */
#include "elem_impl.h"

#include <math.h>
#include <string.h>

#define MIN_PER_THREAD 8192 /* floats: ~2 us of streaming, a few pool hand-offs */

static const h3_elem_kernels *elem_table(h3_isa isa) {
    return h3_isa_table(isa, &h3_elem_ref, H3_ON_X86(&h3_elem_avx2), H3_ON_X86(&h3_elem_avx512),
                        H3_ON_ARM64(&h3_elem_neon));
}

static h3_status get_table(const char *op, h3_isa isa, const h3_elem_kernels **k, h3_err *err) {
    h3_status st = h3_isa_check(isa, err);
    if (st) return st;
    *k = elem_table(isa);
    if (!*k)
        return h3_fail(err, H3_EUNSUPPORTED, "%s: no kernels for ISA '%s' in this build", op,
                       h3_isa_name(isa));
    return H3_OK;
}

/* [a, a+an) and [b, b+bn) (bytes) share a byte */
static int overlap(const void *a, size_t an, const void *b, size_t bn) {
    if (!a || !b || !an || !bn) return 0;
    uintptr_t pa = (uintptr_t)a, pb = (uintptr_t)b;
    return pa < pb + bn && pb < pa + an;
}

/* rows * n elements (of up to 16 bytes, with slack) must fit in int64/size_t maths */
static int too_big(int64_t rows, int64_t n) {
    return n > 0 && rows > (INT64_MAX / 16) / n;
}

/* ---- threading ---------------------------------------------------------------- */
enum { OP_RMS, OP_ROPE, OP_ACT, OP_SWIGLU, OP_ADALN, OP_CVT };

typedef struct {
    const h3_elem_kernels *k;
    int op, parts;      /* parts: how many threads take a share (<= pool threads) */
    int64_t units;      /* rows, (row, head) pairs or elements */
    int64_t align;      /* split points are multiples of this (flat ops: a cache line) */
    const float *x, *w, *cos, *sin, *scale, *shift;
    float *out, *xm;
    const int32_t *row_table;
    int64_t n, h;
    int heads, head_dim, rot_dim, act;
    float eps;
    const void *src;
    void *dst;
    int sdt, ddt;
} elem_job;

static int64_t split_at(const elem_job *j, int i) {
    if (i >= j->parts) return j->units;
    int64_t p = (int64_t)((double)j->units * i / j->parts); /* no int64 overflow */
    return p / j->align * j->align;
}

static void elem_task(void *ctx, int ith, int nth) {
    const elem_job *j = (const elem_job *)ctx;
    (void)nth;
    if (ith >= j->parts) return;
    int64_t u0 = split_at(j, ith), u1 = split_at(j, ith + 1);
    if (u1 <= u0) return;
    const h3_elem_kernels *k = j->k;
    switch (j->op) {
    case OP_RMS:
        k->rmsnorm(j->x + u0 * j->n, j->w, j->out + u0 * j->n, u1 - u0, j->n, j->eps);
        break;
    case OP_ROPE: { /* units are (row, head) pairs: rows may be few and heads many */
        int64_t u = u0;
        while (u < u1) {
            int64_t r = u / j->heads;
            int h0 = (int)(u % j->heads);
            int nh = (int)H3_MIN((int64_t)(j->heads - h0), u1 - u);
            int64_t half = j->rot_dim / 2;
            k->rope(j->xm + (r * j->heads + h0) * (int64_t)j->head_dim, j->cos + r * half,
                    j->sin + r * half, nh, j->head_dim, j->rot_dim);
            u += nh;
        }
        break;
    }
    case OP_ACT: k->act(j->x + u0, j->out + u0, u1 - u0, j->act); break;
    case OP_SWIGLU:
        k->swiglu(j->x + u0 * 2 * j->h, j->out + u0 * j->h, u1 - u0, j->h);
        break;
    case OP_ADALN:
        for (int64_t r = u0; r < u1; r++) {
            int64_t t = j->row_table ? j->row_table[r] : 0;
            k->adaln(j->x + r * j->n, j->scale + t * j->n, j->shift + t * j->n,
                     j->out + r * j->n, j->n);
        }
        break;
    case OP_CVT: {
        size_t ss = j->sdt == H3_DT_F32 ? 4 : 2, ds = j->ddt == H3_DT_F32 ? 4 : 2;
        k->convert((const char *)j->src + u0 * ss, j->sdt, (char *)j->dst + u0 * ds, j->ddt,
                   u1 - u0);
        break;
    }
    }
}

/* Run job over `units`, each worth `elems_per_unit` elements of traffic. */
static void run_job(elem_job *j, h3_pool *pool, int64_t elems_per_unit, int allow_threads) {
    int nth = allow_threads ? h3_pool_threads(pool) : 1;
    if (j->align <= 0) j->align = 1;
    int64_t total = j->units * elems_per_unit;
    int64_t want = H3_MAX((int64_t)1, total / MIN_PER_THREAD);
    j->parts = (int)H3_MIN((int64_t)nth, H3_MIN(want, H3_MAX(j->units / j->align, (int64_t)1)));
    if (j->parts <= 1) {
        j->parts = 1;
        elem_task(j, 0, 1);
    } else {
        h3_pool_run(pool, elem_task, j);
    }
}

static void report(h3_isa *ran, const h3_elem_kernels *k) {
    if (ran) *ran = k->isa;
}

/* A validated call's end: run its job (nothing when it has no units), say the path. */
static h3_status finish(elem_job *j, h3_pool *pool, int64_t elems_per_unit, int allow_threads,
                        h3_isa *ran) {
    if (j->units > 0) run_job(j, pool, elems_per_unit, allow_threads);
    report(ran, j->k);
    return H3_OK;
}

/* ---- public entries -------------------------------------------------------------- */
h3_status h3_rmsnorm(const float *x, const float *w, float *out, int64_t rows, int64_t n,
                     float eps, h3_pool *pool, h3_isa isa, h3_isa *ran, h3_err *err) {
    const h3_elem_kernels *k;
    h3_status st = get_table("rmsnorm", isa, &k, err);
    if (st) return st;
    if (rows < 0) return h3_fail(err, H3_EINVAL, "rmsnorm: rows must be >= 0, got %lld", (long long)rows);
    if (n < 1) return h3_fail(err, H3_EINVAL, "rmsnorm: n (row length) must be >= 1, got %lld", (long long)n);
    if (too_big(rows, n)) return h3_fail(err, H3_EINVAL, "rmsnorm: rows x n = %lld x %lld is too large", (long long)rows, (long long)n);
    if (!(eps >= 0.0f) || isinf(eps))
        return h3_fail(err, H3_EINVAL, "rmsnorm: eps must be finite and >= 0, got %g", (double)eps);
    if (rows > 0 && (!x || !out)) return h3_fail(err, H3_EINVAL, "rmsnorm: x or out is NULL");
    size_t bytes = (size_t)(rows * n) * 4;
    if (out != x && overlap(out, bytes, x, bytes))
        return h3_fail(err, H3_EINVAL, "rmsnorm: out overlaps x without being x");
    if (overlap(out, bytes, w, (size_t)n * 4)) return h3_fail(err, H3_EINVAL, "rmsnorm: out overlaps w");
    elem_job j = {.k = k, .op = OP_RMS, .units = rows, .align = 1, .x = x, .w = w,
                  .out = out, .n = n, .eps = eps};
    return finish(&j, pool, n, 1, ran);
}

h3_status h3_rope(float *x, const float *cos, const float *sin, int64_t rows, int heads,
                  int head_dim, int rot_dim, h3_pool *pool, h3_isa isa, h3_isa *ran,
                  h3_err *err) {
    const h3_elem_kernels *k;
    h3_status st = get_table("rope", isa, &k, err);
    if (st) return st;
    if (rows < 0) return h3_fail(err, H3_EINVAL, "rope: rows must be >= 0, got %lld", (long long)rows);
    if (heads < 1 || head_dim < 1)
        return h3_fail(err, H3_EINVAL, "rope: heads and head_dim must be >= 1, got %d and %d", heads, head_dim);
    if (rot_dim < 2 || rot_dim > head_dim || rot_dim % 2)
        return h3_fail(err, H3_EINVAL, "rope: rot_dim must be even and in [2, head_dim = %d], got %d", head_dim, rot_dim);
    if (too_big(rows, (int64_t)heads * head_dim))
        return h3_fail(err, H3_EINVAL, "rope: rows x heads x head_dim is too large");
    if (rows > 0 && (!x || !cos || !sin)) return h3_fail(err, H3_EINVAL, "rope: x, cos or sin is NULL");
    size_t xb = (size_t)(rows * heads * head_dim) * 4, tb = (size_t)(rows * (rot_dim / 2)) * 4;
    if (overlap(x, xb, cos, tb) || overlap(x, xb, sin, tb))
        return h3_fail(err, H3_EINVAL, "rope: x (written in place) overlaps cos or sin");
    elem_job j = {.k = k, .op = OP_ROPE, .units = rows * heads, .align = 1, .xm = x,
                  .cos = cos, .sin = sin, .heads = heads, .head_dim = head_dim,
                  .rot_dim = rot_dim};
    return finish(&j, pool, rot_dim, 1, ran);
}

h3_status h3_activation(const float *x, float *out, int64_t n, int act, h3_pool *pool,
                        h3_isa isa, h3_isa *ran, h3_err *err) {
    const h3_elem_kernels *k;
    h3_status st = get_table("activation", isa, &k, err);
    if (st) return st;
    if (act != H3_ACT_SILU && act != H3_ACT_GELU_TANH)
        return h3_fail(err, H3_EINVAL, "activation: act must be H3_ACT_SILU (0) or H3_ACT_GELU_TANH (1), got %d", act);
    if (n < 0 || too_big(1, n)) return h3_fail(err, H3_EINVAL, "activation: bad n = %lld", (long long)n);
    if (n > 0 && (!x || !out)) return h3_fail(err, H3_EINVAL, "activation: x or out is NULL");
    if (out != x && overlap(out, (size_t)n * 4, x, (size_t)n * 4))
        return h3_fail(err, H3_EINVAL, "activation: out overlaps x without being x");
    elem_job j = {.k = k, .op = OP_ACT, .units = n, .align = 16, .x = x, .out = out, .act = act};
    return finish(&j, pool, 1, 1, ran);
}

h3_status h3_swiglu(const float *x, float *out, int64_t rows, int64_t h, h3_pool *pool,
                    h3_isa isa, h3_isa *ran, h3_err *err) {
    const h3_elem_kernels *k;
    h3_status st = get_table("swiglu", isa, &k, err);
    if (st) return st;
    if (rows < 0) return h3_fail(err, H3_EINVAL, "swiglu: rows must be >= 0, got %lld", (long long)rows);
    if (h < 1) return h3_fail(err, H3_EINVAL, "swiglu: h (output width) must be >= 1, got %lld", (long long)h);
    if (too_big(rows, 2 * h)) return h3_fail(err, H3_EINVAL, "swiglu: rows x 2h is too large");
    if (rows > 0 && (!x || !out)) return h3_fail(err, H3_EINVAL, "swiglu: x or out is NULL");
    int in_place = (const float *)out == x;
    if (!in_place && overlap(out, (size_t)(rows * h) * 4, x, (size_t)(rows * 2 * h) * 4))
        return h3_fail(err, H3_EINVAL, "swiglu: out overlaps x without being x");
    elem_job j = {.k = k, .op = OP_SWIGLU, .units = rows, .align = 1, .x = x, .out = out, .h = h};
    /* in place, row r's output lands on rows < r of x: only a single upward walk is safe */
    return finish(&j, pool, 3 * h, !in_place, ran);
}

h3_status h3_adaln_modulate(const float *x, const float *scale, const float *shift,
                            const int32_t *row_table, int64_t table_rows, float *out,
                            int64_t rows, int64_t n, h3_pool *pool, h3_isa isa,
                            h3_isa *ran, h3_err *err) {
    const h3_elem_kernels *k;
    h3_status st = get_table("adaln_modulate", isa, &k, err);
    if (st) return st;
    if (rows < 0) return h3_fail(err, H3_EINVAL, "adaln_modulate: rows must be >= 0, got %lld", (long long)rows);
    if (n < 1) return h3_fail(err, H3_EINVAL, "adaln_modulate: n (row length) must be >= 1, got %lld", (long long)n);
    if (table_rows < 1)
        return h3_fail(err, H3_EINVAL, "adaln_modulate: table_rows (rows of scale/shift) must be >= 1, got %lld", (long long)table_rows);
    if (too_big(rows, n) || too_big(table_rows, n))
        return h3_fail(err, H3_EINVAL, "adaln_modulate: rows x n is too large");
    if (rows > 0 && (!x || !out || !scale || !shift))
        return h3_fail(err, H3_EINVAL, "adaln_modulate: x, scale, shift or out is NULL");
    size_t xb = (size_t)(rows * n) * 4, tb = (size_t)(table_rows * n) * 4;
    if (out != x && overlap(out, xb, x, xb))
        return h3_fail(err, H3_EINVAL, "adaln_modulate: out overlaps x without being x");
    if (overlap(out, xb, scale, tb) || overlap(out, xb, shift, tb) ||
        overlap(out, xb, row_table, (size_t)rows * 4))
        return h3_fail(err, H3_EINVAL, "adaln_modulate: out overlaps scale, shift or row_table");
    if (row_table)
        for (int64_t i = 0; i < rows; i++)
            if (row_table[i] < 0 || row_table[i] >= table_rows)
                return h3_fail(err, H3_EINVAL,
                               "adaln_modulate: row_table[%lld] = %d is out of range [0, %lld)",
                               (long long)i, (int)row_table[i], (long long)table_rows);
    elem_job j = {.k = k, .op = OP_ADALN, .units = rows, .align = 1, .x = x, .scale = scale,
                  .shift = shift, .row_table = row_table, .out = out, .n = n};
    return finish(&j, pool, n, 1, ran);
}

static int dt_ok(int dt) { return dt == H3_DT_F32 || dt == H3_DT_BF16 || dt == H3_DT_F16; }

h3_status h3_convert_mt(const void *src, int src_dtype, void *dst, int dst_dtype, int64_t n,
                        h3_pool *pool, h3_isa isa, h3_isa *ran, h3_err *err) {
    const h3_elem_kernels *k;
    h3_status st = get_table("convert", isa, &k, err);
    if (st) return st;
    if (!dt_ok(src_dtype) || !dt_ok(dst_dtype))
        return h3_fail(err, H3_EINVAL, "convert: dtypes %d -> %d not supported (f32=%d, bf16=%d, f16=%d)",
                       src_dtype, dst_dtype, H3_DT_F32, H3_DT_BF16, H3_DT_F16);
    if (n < 0 || too_big(1, n)) return h3_fail(err, H3_EINVAL, "convert: bad n = %lld", (long long)n);
    if (n > 0 && (!src || !dst)) return h3_fail(err, H3_EINVAL, "convert: src or dst is NULL");
    size_t ss = src_dtype == H3_DT_F32 ? 4 : 2, ds = dst_dtype == H3_DT_F32 ? 4 : 2;
    if (src_dtype == dst_dtype) {
        if (n > 0) memmove(dst, src, (size_t)n * ss);
    } else {
        if (overlap(src, (size_t)n * ss, dst, (size_t)n * ds))
            return h3_fail(err, H3_EINVAL, "convert: src and dst overlap");
        if (n > 0) {
            elem_job j = {.k = k, .op = OP_CVT, .units = n, .align = 32, .src = src, .dst = dst,
                          .sdt = src_dtype, .ddt = dst_dtype};
            run_job(&j, pool, 1, 1);
        }
    }
    report(ran, k);
    return H3_OK;
}

h3_status h3_convert(const void *src, int src_dtype, void *dst, int dst_dtype, int64_t n,
                     h3_isa isa, h3_err *err) {
    return h3_convert_mt(src, src_dtype, dst, dst_dtype, n, NULL, isa, NULL, err);
}
