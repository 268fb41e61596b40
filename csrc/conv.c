/* conv.c — Conv1d and ConvTranspose1d over channels-last signals (h3_audio.h), as
 * im2col / col2im around the GEMM (h3_linear_forward).
 *
 * Conv1d's im2col rows are not built by default: the GEMM reads them in place
 * (h3_linear_forward_rows), gathering a K block of a panel's rows into L1 as it packs A.
 * H3_CONV_IM2COL materialises them first (the older route, kept for A/B: same bits).
 *
 * Conv1d picks one of two splits (plan_conv):
 *   BY_TIME  each thread takes a contiguous range of output steps and, chunk by chunk,
 *            gathers its im2col rows and runs a single-threaded GEMM on them.  Every
 *            thread stays busy however narrow the layer (BigVGAN's late stages have 8-64
 *            channels), at the cost of each thread unpacking the weights once per chunk.
 *   BY_COLS  for wide layers over few steps: the pool gathers one chunk, then the GEMM
 *            splits its output columns over the pool (the weights are unpacked once).
 * Either way each output element's sum runs over K in the GEMM's fixed order (chunks
 * of <= 4 rows take the GEMM's small-M path, whose order differs in the last bits).
 * ConvTranspose1d is a GEMM z[t, (j, co)] = x[t] . W[:, co, j] over a chunk of input
 * steps followed by an overlap-add (gathered per output step, so threads never write
 * the same row). */
#include "h3_internal.h"

#include <stdatomic.h>
#include <string.h>

enum { BY_TIME = 0, BY_COLS = 1 };
#define MAX_SHARES 64 /* BY_TIME: threads that take chunks (each needs its own scratch) */

typedef struct { int mode; int64_t R; } conv_plan;

static conv_plan plan_conv(const h3_linear *lin, int64_t T_out, int nth) {
    const int64_t N = h3_linear_n(lin), K = h3_linear_k(lin);
    conv_plan p;
    /* Split the columns only when each thread gets >= 4 weight panels (128 columns) or the
     * signal is too short to split: with fewer, each packed A panel meets too few weight
     * panels to pay for its pack (2 threads, 128 channels over 2000 steps: 160 GFLOP/s by
     * columns, 183 by time) */
    const int64_t n = nth;
    if (nth > 1 && N >= 64 * n && T_out < 2048 * n && (N >= 128 * n || T_out < 256 * n)) {
        p.mode = BY_COLS;
        p.R = H3_MIN(T_out, H3_MAX((int64_t)256, ((int64_t)16 << 20) / (4 * K)));
    } else {
        p.mode = BY_TIME;
        /* ~4 chunks per thread, handed out by an atomic counter, so that a thread slowed
         * by other work on its core does not hold the others up; each chunk re-unpacks
         * the (small, for these layers) weights */
        int64_t rmax = H3_MAX((int64_t)64, H3_MIN((int64_t)1024, ((int64_t)8 << 20) / (4 * K)));
        p.R = H3_MIN(T_out, H3_MIN(rmax, H3_MAX((int64_t)64, H3_CEIL_DIV(T_out, 4 * (int64_t)nth))));
    }
    return p;
}

static size_t col_bytes(int64_t R, int64_t K) { return H3_ALIGN_UP((size_t)(R * K) * 4, 64); }

/* one GEMM call's workspace (and, with im2col, its column buffer) for R rows */
static size_t share_bytes(const h3_linear *lin, int64_t R, int nth, int flags) {
    h3_epilogue epi = {H3_EPI_RESID, NULL, NULL, NULL, 0}; /* the larger of the two */
    if (flags & H3_CONV_IM2COL) return col_bytes(R, h3_linear_k(lin)) + h3_linear_workspace_bytes(lin, R, nth, &epi);
    return h3_linear_rows_workspace_bytes(lin, R, nth, &epi);
}

size_t h3_conv1d_workspace_bytes(const h3_linear *lin, int64_t T_out, int nth, int flags) {
    if (!lin || T_out < 1 || nth < 1) return 0;
    conv_plan p = plan_conv(lin, T_out, nth);
    if (p.mode == BY_COLS) return share_bytes(lin, p.R, nth, flags);
    return (size_t)H3_MIN(nth, MAX_SHARES) * H3_ALIGN_UP(share_bytes(lin, p.R, 1, flags), 64);
}

typedef struct {
    const h3_linear *lin;
    const float *x, *resid;
    float *y;
    int64_t T, Cin, T_out, R;
    int k, dil, pad;
    int im2col;                /* H3_CONV_IM2COL given */
    char *ws;
    size_t per_thread;
    int64_t r0, r1;            /* BY_COLS: the chunk being gathered */
    int nth;                   /* BY_TIME: threads taking chunks (<= MAX_SHARES) */
    _Atomic int64_t next;      /* BY_TIME: first row of the next free chunk */
    _Atomic int failed;
    h3_status st[MAX_SHARES];
    h3_err err[MAX_SHARES];
} conv_job;

/* im2col rows [r0, r1) of the output into col: col[r - r0, j*Cin + ci] = x[r + j*dil - pad, ci] */
static void im2col(const conv_job *c, int64_t r0, int64_t r1, float *col) {
    const int64_t Cin = c->Cin, K = c->k * Cin, dil = c->dil;
    for (int64_t r = r0; r < r1; r++) {
        float *dst = col + (r - r0) * K;
        const int64_t t0 = r - c->pad, tl = t0 + (int64_t)(c->k - 1) * dil;
        if (t0 >= 0 && tl < c->T) {              /* every tap inside the signal */
            if (dil == 1) {                       /* the taps are consecutive rows of x */
                memcpy(dst, c->x + t0 * Cin, (size_t)K * 4);
            } else {
                for (int j = 0; j < c->k; j++) h3_copy_tap(dst + j * Cin, c->x + (t0 + j * dil) * Cin, Cin);
            }
            continue;
        }
        for (int j = 0; j < c->k; j++) {
            int64_t t = t0 + (int64_t)j * dil;
            if (t < 0 || t >= c->T) memset(dst + j * Cin, 0, (size_t)Cin * 4);
            else memcpy(dst + j * Cin, c->x + t * Cin, (size_t)Cin * 4);
        }
    }
}

/* Output rows [r0, r1): from the im2col rows in col, or (col NULL) read in place. */
static h3_status gemm_rows(const conv_job *c, h3_pool *pool, const float *col, int64_t r0,
                           int64_t r1, void *ws, size_t wsb, h3_err *err) {
    const int64_t N = h3_linear_n(c->lin);
    h3_epilogue epi = {H3_EPI_RESID, c->resid ? c->resid + r0 * N : NULL, NULL, NULL, 0};
    if (col)
        return h3_linear_forward(c->lin, pool, col, r1 - r0, c->y + r0 * N, c->resid ? &epi : NULL,
                                 ws, wsb, err);
    h3_conv_rows a = {c->x, c->T, c->Cin, r0, c->k, c->dil, c->pad};
    return h3_linear_forward_rows(c->lin, pool, &a, r1 - r0, c->y + r0 * N, c->resid ? &epi : NULL,
                                  ws, wsb, err);
}

static void by_time_task(void *p, int ith, int pool_nth) {
    conv_job *c = (conv_job *)p;
    (void)pool_nth;
    if (ith >= c->nth) return;
    const int64_t K = h3_linear_k(c->lin);
    char *base = c->ws + (size_t)ith * c->per_thread;
    float *col = c->im2col ? (float *)base : NULL;
    const size_t cb = c->im2col ? col_bytes(c->R, K) : 0;
    char *gws = base + cb;
    const size_t gwsb = c->per_thread - cb;
    c->st[ith] = H3_OK;
    for (;;) {
        const int64_t r0 = atomic_fetch_add(&c->next, c->R);
        if (r0 >= c->T_out || atomic_load(&c->failed)) return;
        const int64_t r1 = H3_MIN(c->T_out, r0 + c->R);
        if (col) im2col(c, r0, r1, col);
        h3_status st = gemm_rows(c, NULL, col, r0, r1, gws, gwsb, &c->err[ith]);
        if (st) {
            c->st[ith] = st;
            atomic_store(&c->failed, 1);
            return;
        }
    }
}

static void gather_task(void *p, int ith, int nth) {
    conv_job *c = (conv_job *)p;
    const int64_t K = h3_linear_k(c->lin), n = c->r1 - c->r0;
    const int64_t a = c->r0 + n * ith / nth, b = c->r0 + n * (ith + 1) / nth;
    im2col(c, a, b, (float *)c->ws + (a - c->r0) * K);
}

static int overlaps(const void *a, size_t an, const void *b, size_t bn) {
    uintptr_t pa = (uintptr_t)a, pb = (uintptr_t)b;
    return pa < pb + bn && pb < pa + an;
}

h3_status h3_conv1d(const h3_linear *lin, const float *x, int64_t T, int64_t Cin, int k,
                    int dil, int pad, const float *resid, float *y, int flags, h3_pool *pool,
                    void *ws, size_t ws_bytes, h3_err *err) {
    if (!lin || !x || !y) return h3_fail(err, H3_EINVAL, "conv1d: NULL argument");
    if (flags & ~H3_CONV_IM2COL) return h3_fail(err, H3_EINVAL, "conv1d: unknown flags 0x%x", (unsigned)flags);
    if (T < 1 || Cin < 1 || k < 1 || dil < 1 || pad < 0)
        return h3_fail(err, H3_EINVAL, "conv1d: bad geometry T=%lld Cin=%lld k=%d dilation=%d padding=%d",
                       (long long)T, (long long)Cin, k, dil, pad);
    if (h3_linear_k(lin) != (int64_t)k * Cin)
        return h3_fail(err, H3_EINVAL, "conv1d: the weight has K = %lld columns, expected k*Cin = %d*%lld",
                       (long long)h3_linear_k(lin), k, (long long)Cin);
    const int64_t T_out = T + 2 * (int64_t)pad - (int64_t)dil * (k - 1);
    if (T_out < 1)
        return h3_fail(err, H3_EINVAL, "conv1d: output length T + 2*padding - dilation*(k-1) = %lld < 1",
                       (long long)T_out);
    const int64_t N = h3_linear_n(lin);
    const size_t yb = (size_t)(T_out * N) * 4;
    if (overlaps(x, (size_t)(T * Cin) * 4, y, yb)) return h3_fail(err, H3_EINVAL, "conv1d: y overlaps x");
    if (resid && resid != y && overlaps(resid, yb, y, yb))
        return h3_fail(err, H3_EINVAL, "conv1d: resid overlaps y without being y");
    const int nth = h3_pool_threads(pool);
    const size_t need = h3_conv1d_workspace_bytes(lin, T_out, nth, flags);
    void *own;
    h3_status st = h3_workspace(&ws, &ws_bytes, need, &own, "conv1d", err);
    if (st) return st;
    conv_plan p = plan_conv(lin, T_out, nth);
    conv_job *c = h3_alloc(sizeof *c);
    if (!c) { h3_free(own); return h3_fail(err, H3_ENOMEM, "conv1d: out of memory"); }
    memset(c, 0, sizeof *c);
    atomic_init(&c->next, 0);
    atomic_init(&c->failed, 0);
    c->lin = lin; c->x = x; c->resid = resid; c->y = y; c->T = T; c->Cin = Cin;
    c->T_out = T_out; c->R = p.R; c->k = k; c->dil = dil; c->pad = pad; c->ws = ws;
    c->im2col = (flags & H3_CONV_IM2COL) != 0;
    if (p.mode == BY_TIME) {
        c->nth = H3_MIN(nth, MAX_SHARES);
        c->per_thread = need / (size_t)c->nth;
        if (nth == 1 || T_out < 2) {
            c->nth = 1;
            by_time_task(c, 0, 1);
        }
        else h3_pool_run(pool, by_time_task, c);
        for (int i = 0; i < c->nth && !st; i++)
            if (c->st[i]) { st = c->st[i]; *err = c->err[i]; }
    } else {
        const size_t cb = c->im2col ? col_bytes(p.R, h3_linear_k(lin)) : 0;
        for (int64_t r0 = 0; r0 < T_out && !st; r0 += p.R) {
            c->r0 = r0;
            c->r1 = H3_MIN(T_out, r0 + p.R);
            if (c->im2col) h3_pool_run(pool, gather_task, c);
            st = gemm_rows(c, pool, c->im2col ? (const float *)ws : NULL, c->r0, c->r1, (char *)ws + cb,
                           ws_bytes - cb, err);
        }
    }
    h3_free(c);
    h3_free(own);
    return st;
}

/* ---- ConvTranspose1d ------------------------------------------------------------- */
typedef struct {
    const float *z, *bias;
    float *y;
    int64_t Cout, T_out, t0, t1; /* z holds input steps [t0, t1) */
    int k, s, pad;
} ct_job;

/* y[o] += sum over j of z[t, j] for t = (o + pad - j) / s in [t0, t1) */
static void overlap_add_task(void *p, int ith, int nth) {
    const ct_job *c = (const ct_job *)p;
    const int64_t Co = c->Cout, N = (int64_t)c->k * Co;
    /* outputs this chunk touches */
    const int64_t olo = H3_MAX((int64_t)0, c->t0 * c->s - c->pad);
    const int64_t ohi = H3_MIN(c->T_out, (c->t1 - 1) * c->s - c->pad + c->k);
    const int64_t a = olo + (ohi - olo) * ith / nth, b = olo + (ohi - olo) * (ith + 1) / nth;
    for (int64_t o = a; o < b; o++) {
        float *yo = c->y + o * Co;
        for (int j = 0; j < c->k; j++) {
            int64_t num = o + c->pad - j;
            if (num < 0 || num % c->s) continue;
            int64_t t = num / c->s;
            if (t < c->t0 || t >= c->t1) continue;
            const float *zr = c->z + (t - c->t0) * N + (int64_t)j * Co;
            for (int64_t co = 0; co < Co; co++) yo[co] += zr[co];
        }
    }
}

/* after the sum, as torch adds it */
static void bias_task(void *p, int ith, int nth) {
    const ct_job *c = (const ct_job *)p;
    for (int64_t o = c->T_out * ith / nth; o < c->T_out * (ith + 1) / nth; o++)
        for (int64_t co = 0; co < c->Cout; co++) c->y[o * c->Cout + co] += c->bias[co];
}

static int64_t ct_chunk(const h3_linear *lin) {
    return H3_MAX((int64_t)64, ((int64_t)16 << 20) / (4 * h3_linear_n(lin)));
}

size_t h3_conv_transpose1d_workspace_bytes(const h3_linear *lin, int64_t T, int stride, int nth) {
    if (!lin || T < 1 || nth < 1) return 0;
    (void)stride;
    const int64_t R = H3_MIN(T, ct_chunk(lin));
    return col_bytes(R, h3_linear_n(lin)) + h3_linear_workspace_bytes(lin, R, nth, NULL);
}

h3_status h3_conv_transpose1d(const h3_linear *lin, const float *x, int64_t T, int64_t Cout,
                              int k, int stride, int pad, const float *bias, float *y,
                              h3_pool *pool, void *ws, size_t ws_bytes, h3_err *err) {
    if (!lin || !x || !y) return h3_fail(err, H3_EINVAL, "conv_transpose1d: NULL argument");
    if (T < 1 || Cout < 1 || k < 1 || stride < 1 || pad < 0)
        return h3_fail(err, H3_EINVAL, "conv_transpose1d: bad geometry T=%lld Cout=%lld k=%d stride=%d padding=%d",
                       (long long)T, (long long)Cout, k, stride, pad);
    if (h3_linear_n(lin) != (int64_t)k * Cout)
        return h3_fail(err, H3_EINVAL, "conv_transpose1d: the weight has N = %lld rows, expected k*Cout = %d*%lld",
                       (long long)h3_linear_n(lin), k, (long long)Cout);
    const int64_t Cin = h3_linear_k(lin);
    const int64_t T_out = (T - 1) * stride - 2 * (int64_t)pad + k;
    if (T_out < 1)
        return h3_fail(err, H3_EINVAL, "conv_transpose1d: output length (T-1)*stride - 2*padding + k = %lld < 1",
                       (long long)T_out);
    if (overlaps(x, (size_t)(T * Cin) * 4, y, (size_t)(T_out * Cout) * 4))
        return h3_fail(err, H3_EINVAL, "conv_transpose1d: y overlaps x");
    const int nth = h3_pool_threads(pool);
    /* the workspace is sized by the input length T */
    const size_t need = h3_conv_transpose1d_workspace_bytes(lin, T, stride, nth);
    void *own;
    h3_status st = h3_workspace(&ws, &ws_bytes, need, &own, "conv_transpose1d", err);
    if (st) return st;
    const int64_t R = H3_MIN(T, ct_chunk(lin));
    const size_t zb = col_bytes(R, h3_linear_n(lin));
    memset(y, 0, (size_t)(T_out * Cout) * 4);
    for (int64_t t0 = 0; t0 < T && !st; t0 += R) {
        const int64_t t1 = H3_MIN(T, t0 + R);
        st = h3_linear_forward(lin, pool, x + t0 * Cin, t1 - t0, (float *)ws, NULL, (char *)ws + zb,
                               ws_bytes - zb, err);
        if (st) break;
        ct_job c = {(const float *)ws, bias, y, Cout, T_out, t0, t1, k, stride, pad};
        h3_pool_run(pool, overlap_add_task, &c);
    }
    if (!st && bias) {
        ct_job c = {NULL, bias, y, Cout, T_out, 0, 0, k, stride, pad};
        h3_pool_run(pool, bias_task, &c);
    }
    h3_free(own);
    return st;
}
