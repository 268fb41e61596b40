/* conv3d.c — the video encoder's causal Conv3d over channels-last video (h3_video.h), as
 * im2col around the GEMM (h3_linear_forward), one linear per temporal tap.
 *
 * For each output frame, a chunk of R output pixels at a time: for each temporal tap
 * that lands on a real input frame (last tap first), the pool gathers the chunk's im2col
 * rows from that frame (reflect padding is an index map, so no padded copy of x is ever
 * made), then the GEMM (split over the pool by the linear) writes the chunk -- the first
 * tap plainly (or onto resid), the others through the residual epilogue onto y.  Taps on
 * the causal zero frames are skipped, so a single frame costs one 2-D convolution.
 * Each output element's sum runs over its valid taps in that order and, inside a tap,
 * over K in the GEMM's fixed order. */
#include "h3_internal.h"

#include <string.h>

static int64_t out_len(int64_t n, int pad, int k, int s) { return (n + pad - k) / s + 1; }

/* rows per GEMM call: the im2col chunk stays <= ~16 MB */
static int64_t chunk_rows(int64_t rows, int64_t K) {
    return H3_MIN(rows, H3_MAX((int64_t)256, ((int64_t)16 << 20) / (4 * K)));
}

static size_t col_bytes(int64_t R, int64_t K) { return H3_ALIGN_UP((size_t)(R * K) * 4, 64); }

typedef struct {
    const h3_conv3d_args *a;
    const float *xf;   /* the input frame of the tap being gathered: [H, W, Cin] */
    float *col;        /* [r1 - r0, K] */
    int64_t Wo, r0, r1;
} c3_job;

static inline int64_t reflect(int64_t i, int64_t n) { return i < 0 ? -i : (i >= n ? 2 * (n - 1) - i : i); }

/* col[r - r0, (dy*kw + dx)*Cin + ci] = x[reflect(oy*sh + dy - pad_top), reflect(ox*sw + dx - pad_left), ci] */
static void gather_task(void *p, int ith, int nth) {
    const c3_job *c = (const c3_job *)p;
    const h3_conv3d_args *a = c->a;
    const int64_t Cin = a->Cin, K = (int64_t)a->kh * a->kw * Cin, n = c->r1 - c->r0;
    const int64_t lo = c->r0 + n * ith / nth, hi = c->r0 + n * (ith + 1) / nth;
    for (int64_t r = lo; r < hi; r++) {
        const int64_t oy = r / c->Wo, ox = r % c->Wo;
        float *dst = c->col + (r - c->r0) * K;
        const int64_t x0 = ox * a->sw - a->pad_left;
        const int inside = x0 >= 0 && x0 + a->kw <= a->W;   /* the kw taps are consecutive pixels */
        for (int dy = 0; dy < a->kh; dy++) {
            const float *row = c->xf + reflect(oy * a->sh + dy - a->pad_top, a->H) * a->W * Cin;
            float *d = dst + (int64_t)dy * a->kw * Cin;
            if (inside) {
                memcpy(d, row + x0 * Cin, (size_t)(a->kw * Cin) * 4);
                continue;
            }
            for (int dx = 0; dx < a->kw; dx++)
                memcpy(d + dx * Cin, row + reflect(x0 + dx, a->W) * Cin, (size_t)Cin * 4);
        }
    }
}

static h3_status check_args(const h3_conv3d_args *a, const h3_linear *const *taps, h3_err *err) {
    if (!a || !taps) return h3_fail(err, H3_EINVAL, "conv3d: NULL argument");
    if (a->T < 1 || a->H < 1 || a->W < 1 || a->Cin < 1 || a->kt < 1 || a->kh < 1 || a->kw < 1 || a->st < 1
        || a->sh < 1 || a->sw < 1 || a->pad_t < 0 || a->pad_top < 0 || a->pad_bottom < 0 || a->pad_left < 0
        || a->pad_right < 0)
        return h3_fail(err, H3_EINVAL, "conv3d: bad geometry x=[%lld,%lld,%lld,%lld] k=%dx%dx%d s=%dx%dx%d",
                       (long long)a->T, (long long)a->H, (long long)a->W, (long long)a->Cin, a->kt, a->kh,
                       a->kw, a->st, a->sh, a->sw);
    if (a->pad_top >= a->H || a->pad_bottom >= a->H || a->pad_left >= a->W || a->pad_right >= a->W)
        return h3_fail(err, H3_EINVAL, "conv3d: reflect padding (%d,%d,%d,%d) must be < the frame size %lldx%lld",
                       a->pad_top, a->pad_bottom, a->pad_left, a->pad_right, (long long)a->H, (long long)a->W);
    if (a->T + a->pad_t < a->kt || a->H + a->pad_top + a->pad_bottom < a->kh
        || a->W + a->pad_left + a->pad_right < a->kw)
        return h3_fail(err, H3_EINVAL, "conv3d: the padded input is smaller than the %dx%dx%d kernel", a->kt,
                       a->kh, a->kw);
    const int64_t K = (int64_t)a->kh * a->kw * a->Cin;
    for (int j = 0; j < a->kt; j++) {
        if (!taps[j]) return h3_fail(err, H3_EINVAL, "conv3d: tap %d is NULL", j);
        if (h3_linear_k(taps[j]) != K)
            return h3_fail(err, H3_EINVAL, "conv3d: tap %d has K = %lld, expected kh*kw*Cin = %lld", j,
                           (long long)h3_linear_k(taps[j]), (long long)K);
        if (h3_linear_n(taps[j]) != h3_linear_n(taps[0]))
            return h3_fail(err, H3_EINVAL, "conv3d: tap %d has N = %lld, tap 0 N = %lld", j,
                           (long long)h3_linear_n(taps[j]), (long long)h3_linear_n(taps[0]));
    }
    return H3_OK;
}

size_t h3_conv3d_workspace_bytes(const h3_conv3d_args *a, const h3_linear *const *taps, int n_threads) {
    if (check_args(a, taps, NULL) || n_threads < 1) return 0;
    const int64_t K = (int64_t)a->kh * a->kw * a->Cin;
    const int64_t rows = out_len(a->H, a->pad_top + a->pad_bottom, a->kh, a->sh)
                         * out_len(a->W, a->pad_left + a->pad_right, a->kw, a->sw);
    const int64_t R = chunk_rows(rows, K);
    h3_epilogue epi = {H3_EPI_RESID, NULL, NULL, NULL, 0};
    size_t g = 0;
    for (int j = 0; j < a->kt; j++) g = H3_MAX(g, h3_linear_workspace_bytes(taps[j], R, n_threads, &epi));
    return col_bytes(R, K) + g;
}

static int overlaps(const void *a, size_t an, const void *b, size_t bn) {
    uintptr_t pa = (uintptr_t)a, pb = (uintptr_t)b;
    return pa < pb + bn && pb < pa + an;
}

h3_status h3_conv3d(const h3_conv3d_args *a, const h3_linear *const *taps, const float *x,
                    const float *resid, float *y, h3_pool *pool, void *ws, size_t ws_bytes,
                    h3_err *err) {
    h3_status st = check_args(a, taps, err);
    if (st) return st;
    if (!x || !y) return h3_fail(err, H3_EINVAL, "conv3d: NULL argument");
    const int64_t N = h3_linear_n(taps[0]), K = (int64_t)a->kh * a->kw * a->Cin;
    const int64_t To = out_len(a->T, a->pad_t, a->kt, a->st);
    const int64_t Ho = out_len(a->H, a->pad_top + a->pad_bottom, a->kh, a->sh);
    const int64_t Wo = out_len(a->W, a->pad_left + a->pad_right, a->kw, a->sw);
    const int64_t rows = Ho * Wo;
    const size_t xb = (size_t)(a->T * a->H * a->W * a->Cin) * 4, yb = (size_t)(To * rows * N) * 4;
    if (overlaps(x, xb, y, yb)) return h3_fail(err, H3_EINVAL, "conv3d: y overlaps x");
    if (resid && resid != y && overlaps(resid, yb, y, yb))
        return h3_fail(err, H3_EINVAL, "conv3d: resid overlaps y without being y");
    const int nth = h3_pool_threads(pool);
    const size_t need = h3_conv3d_workspace_bytes(a, taps, nth);
    void *own;
    st = h3_workspace(&ws, &ws_bytes, need, &own, "conv3d", err);
    if (st) return st;
    const int64_t R = chunk_rows(rows, K);
    const size_t cb = col_bytes(R, K);
    c3_job c = {a, NULL, (float *)ws, Wo, 0, 0};
    for (int64_t t = 0; t < To && !st; t++) {
        for (int64_t r0 = 0; r0 < rows && !st; r0 += R) {
            const int64_t r1 = H3_MIN(rows, r0 + R);
            float *yc = y + (t * rows + r0) * N;
            int first = 1;
            for (int jt = a->kt - 1; jt >= 0 && !st; jt--) {
                const int64_t ti = t * a->st + jt - a->pad_t;
                if (ti < 0 || ti >= a->T) continue;      /* a causal zero frame */
                c.xf = x + ti * a->H * a->W * a->Cin;
                c.r0 = r0;
                c.r1 = r1;
                if (r1 - r0 < 64) gather_task(&c, 0, 1);
                else h3_pool_run(pool, gather_task, &c);
                const float *rs = first ? (resid ? resid + (t * rows + r0) * N : NULL) : yc;
                h3_epilogue epi = {H3_EPI_RESID, rs, NULL, NULL, 0};
                st = h3_linear_forward(taps[jt], pool, c.col, r1 - r0, yc, rs ? &epi : NULL, (char *)ws + cb,
                                       ws_bytes - cb, err);
                first = 0;
            }
        }
    }
    h3_free(own);
    return st;
}
