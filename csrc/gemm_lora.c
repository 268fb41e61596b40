/* gemm_lora.c — a LoRA's low-rank addend on a linear, y += ((x . A^T) * scale) . B^T.
 *
 * The base weights are never touched (they stay int8/int4/bf16 and shared, e.g. mapped
 * from a cache file): h3_linear_forward computes u = (x . A^T) * scale with the GEMM
 * driver on a small float32 linear, then adds u . B^T to each output tile right after
 * the base product and before the bias and the epilogue (gemm.c, run_block), so the
 * fused SwiGLU and gated-residual epilogues see the adapted product.  Each output element
 * is still computed by one thread in a fixed order: results do not depend on the thread
 * count. */
#include "gemm_linear.h"

#include <stdlib.h>
#include <string.h>

void h3_lora_free(h3_lora *lo) {
    if (!lo) return;
    h3_linear_free(lo->a);
    h3_free(lo->bt);
    h3_free(lo->scale);
    h3_free(lo->lo);
    h3_free(lo->hi);
    h3_free(lo->seg_at);
    h3_free(lo->seg_off);
    h3_free(lo->seg_rank);
    h3_free(lo);
}

static int cmp_i64(const void *a, const void *b) {
    const int64_t x = *(const int64_t *)a, y = *(const int64_t *)b;
    return (x > y) - (x < y);
}

/* seg_*: the column boundaries of every rank's nonzero run, sorted and unique, and per
 * segment the ranks whose run covers it (a run covers a segment whole, since every run's
 * ends are boundaries). */
static h3_status build_segments(h3_lora *lo, h3_err *err) {
    const int64_t R = lo->R, N = lo->N;
    int64_t *at = h3_alloc((size_t)(2 * R + 2) * 8);
    if (!at) return h3_fail(err, H3_ENOMEM, "lora_create: out of memory (segments)");
    int64_t n = 0;
    at[n++] = 0;
    at[n++] = N;
    for (int64_t r = 0; r < R; r++)
        if (lo->lo[r] < lo->hi[r]) {
            at[n++] = lo->lo[r];
            at[n++] = lo->hi[r];
        }
    qsort(at, (size_t)n, 8, cmp_i64);
    int64_t u = 0;
    for (int64_t i = 0; i < n; i++)
        if (u == 0 || at[i] != at[u - 1]) at[u++] = at[i];
    const int64_t nseg = u - 1;
    int64_t total = 0;
    for (int64_t s = 0; s < nseg; s++)
        for (int64_t r = 0; r < R; r++) total += lo->lo[r] <= at[s] && at[s + 1] <= lo->hi[r];
    lo->seg_at = at;
    lo->nseg = nseg;
    lo->seg_off = h3_alloc((size_t)(nseg + 1) * 8);
    lo->seg_rank = h3_alloc((size_t)(total ? total : 1) * 8);
    if (!lo->seg_off || !lo->seg_rank) return h3_fail(err, H3_ENOMEM, "lora_create: out of memory (segments)");
    int64_t k = 0;
    for (int64_t s = 0; s < nseg; s++) {
        lo->seg_off[s] = k;
        for (int64_t r = 0; r < R; r++)
            if (lo->lo[r] <= at[s] && at[s + 1] <= lo->hi[r]) lo->seg_rank[k++] = r;
    }
    lo->seg_off[nseg] = k;
    return H3_OK;
}

h3_status h3_lora_create(const float *a, const float *b, const float *scale, int64_t R, int64_t N,
                         int64_t K, h3_isa isa, h3_lora **out, h3_err *err) {
    if (!a || !b || !scale || !out) return h3_fail(err, H3_EINVAL, "lora_create: NULL argument");
    if (R < 1 || N < 1 || K < 1)
        return h3_fail(err, H3_EINVAL, "lora_create: R = %lld, N = %lld, K = %lld must be >= 1",
                       (long long)R, (long long)N, (long long)K);
    h3_status st = H3_ENOMEM;
    h3_lora *lo = h3_alloc(sizeof *lo);
    if (!lo) return h3_fail(err, H3_ENOMEM, "lora_create: out of memory");
    memset(lo, 0, sizeof *lo);
    lo->N = N; lo->K = K; lo->R = R;
    h3_linear_opts o;
    memset(&o, 0, sizeof o);
    o.wtype = H3_DT_F32;
    o.isa = isa;
    o.small_pages = 1;
    st = h3_linear_create(a, H3_DT_F32, R, K, NULL, &o, &lo->a, err);
    if (st) goto fail;
    lo->bt = h3_alloc((size_t)R * (size_t)N * 4);
    lo->scale = h3_alloc((size_t)R * 4);
    lo->lo = h3_alloc((size_t)R * 8);
    lo->hi = h3_alloc((size_t)R * 8);
    if (!lo->bt || !lo->scale || !lo->lo || !lo->hi) {
        st = h3_fail(err, H3_ENOMEM, "lora_create: cannot allocate B^T (%lld x %lld)", (long long)R,
                     (long long)N);
        goto fail;
    }
    for (int64_t r = 0; r < R; r++) {
        int64_t first = N, last = -1;
        for (int64_t n = 0; n < N; n++) {
            float v = b[n * R + r];
            lo->bt[r * N + n] = v;
            if (v != 0.0f) {
                if (first == N) first = n;
                last = n;
            }
        }
        lo->lo[r] = first;
        lo->hi[r] = last + 1;   /* an all-zero rank: the empty range [N, 0) */
    }
    st = build_segments(lo, err);
    if (st) goto fail;
    st = h3_lora_set_scale(lo, scale, err);
    if (st) goto fail;
    *out = lo;
    return H3_OK;
fail:
    h3_lora_free(lo);
    return st;
}

h3_status h3_lora_set_scale(h3_lora *lo, const float *scale, h3_err *err) {
    if (!lo || !scale) return h3_fail(err, H3_EINVAL, "lora_set_scale: NULL argument");
    memcpy(lo->scale, scale, (size_t)lo->R * 4);
    return H3_OK;
}

h3_status h3_linear_set_lora(h3_linear *lin, const h3_lora *lo, h3_err *err) {
    if (!lin) return h3_fail(err, H3_EINVAL, "linear_set_lora: NULL linear");
    if (lo && lin->wtype == H3_DT_GGUF)
        return h3_fail(err, H3_EUNSUPPORTED, "linear_set_lora: a LoRA on a GGUF linear is not supported yet");
    if (lo && lin->wtype == H3_DT_NVFP4)
        return h3_fail(err, H3_EUNSUPPORTED, "linear_set_lora: a LoRA on an NVFP4 linear is not supported yet");
    if (lo && (lo->N != lin->N || lo->K != lin->K))
        return h3_fail(err, H3_EINVAL, "linear_set_lora: the LoRA is [%lld x %lld], the linear [%lld x %lld]",
                       (long long)lo->N, (long long)lo->K, (long long)lin->N, (long long)lin->K);
    lin->lora = lo;
    return H3_OK;
}

static size_t u_bytes(const h3_lora *lo, int64_t M) { return H3_ALIGN_UP((size_t)M * (size_t)lo->R * 4, 64); }

size_t gemm_lora_workspace_bytes(const h3_linear *l, int64_t M, int nth) {
    const h3_lora *lo = l->lora;
    if (!lo) return 0;
    return u_bytes(lo, M) + h3_linear_workspace_bytes(lo->a, H3_MIN(M, H3_LORA_CHUNK), nth, NULL);
}

h3_status gemm_lora_u(const h3_linear *l, h3_pool *pool, const float *x, int64_t M, float *u,
                      void *ws, size_t ws_bytes, h3_err *err) {
    const h3_lora *lo = l->lora;
    const int64_t R = lo->R;
    for (int64_t m0 = 0; m0 < M; m0 += H3_LORA_CHUNK) {
        int64_t mc = H3_MIN(H3_LORA_CHUNK, M - m0);
        h3_status st = h3_linear_forward(lo->a, pool, x + m0 * lo->K, mc, u + m0 * R, NULL, ws, ws_bytes, err);
        if (st) return st;
    }
    for (int64_t m = 0; m < M; m++)
        for (int64_t r = 0; r < R; r++) u[m * R + r] *= lo->scale[r];
    return H3_OK;
}

/* The reference tile add (the spec the SIMD versions in gemm_lora_body.inc match bit for
 * bit): rank by rank, each row's product added over the rank's nonzero run. */
void gemm_lora_add_ref(const h3_lora *lo, const float *u, float *target, int64_t ld, int64_t m0,
                   int64_t m1, int64_t c0, int64_t w) {
    const int64_t R = lo->R, N = lo->N;
    for (int64_t r = 0; r < R; r++) {
        /* the part of [c0, c0 + w) where rank r's column of B is nonzero */
        const int64_t a = H3_MAX(c0, lo->lo[r]), b = H3_MIN(c0 + w, lo->hi[r]);
        if (a >= b) continue;
        const float *brow = lo->bt + r * N;
        for (int64_t m = m0; m < m1; m++) {
            const float ur = u[m * R + r];
            if (ur == 0.0f) continue;   /* a zero strength leaves the base bits alone */
            float *t = target + m * ld - c0;
            for (int64_t j = a; j < b; j++) t[j] += ur * brow[j];
        }
    }
}
