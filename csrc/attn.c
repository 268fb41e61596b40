/* attn.c — the public attention: validation, workspace sizing, threading, dispatch.
 *
 * Work is split into units (head, query tile of the table's bq rows); threads take units
 * from an atomic counter, heaviest first when causal (late query tiles see more keys).
 * Each unit runs the whole online softmax for its rows (see attn_impl.h), so no S x S
 * matrix ever exists: scratch is attn_ws_floats() per thread, independent of S. */
#include "attn_impl.h"

#include <math.h>
#include <pthread.h>
#include <stdatomic.h>
#include <string.h>

/* The kernel table a path runs.  AMX has no attention of its own: AVX-512 is a subset
 * of it and the score/value products are f32 (AMX tiles are bf16/int8 only). */
static const attn_kernels *attn_table(h3_isa isa) {
    const attn_kernels *t = h3_isa_table(isa, &attn_kernels_ref, H3_ON_X86(&attn_kernels_avx2),
                                         H3_ON_X86(&attn_kernels_avx512), H3_ON_ARM64(&attn_kernels_neon));
    return t ? t : &attn_kernels_ref;
}

#if H3_X86
/* bf16 models' q, k, v (h3_attn_args.bf16_inputs) take the bf16 dot-product kernels where
 * the CPU has them, for non-causal attention with D a multiple of 32 (attn_bf16.inc) */
static int attn_bf16_usable(const h3_attn_args *a) {
    return a->bf16_inputs && !a->causal && a->D % 32 == 0 && a->D <= 256;
}
#endif

static size_t per_thread_bytes(const attn_kernels *kt, int D) {
    return H3_ALIGN_UP(attn_ws_floats(kt, D) * sizeof(float), 64);
}

static size_t ws_bytes_for(const attn_kernels *kt, int D, int n_threads) {
    return (size_t)n_threads * per_thread_bytes(kt, D);
}

size_t h3_attn_workspace_bytes(const h3_attn_args *a, int n_threads) {
    if (!a || a->D < 1 || a->D > 256 || n_threads < 1) return 0;
    /* the largest over the tables, so one buffer serves whichever path runs */
    size_t best = 0;
    for (int i = 0; i < H3_ISA_COUNT; i++) {
        size_t b = ws_bytes_for(attn_table((h3_isa)i), a->D, n_threads);
        if (b > best) best = b;
    }
#if H3_X86
    /* whatever a->bf16_inputs says: block drivers size one workspace for either mode */
    best = H3_MAX(best, ws_bytes_for(&attn_kernels_amx, a->D, n_threads));
    best = H3_MAX(best, ws_bytes_for(&attn_kernels_bf16dp, a->D, n_threads));
#endif
    return best;
}

/* Whether two [S rows of width w] float views with row strides lda, ldb share an element.
 * Equal strides (views into one fused QKV buffer) are checked exactly: row r of a meets
 * row r + t of b iff -wb < d + t*ld < wa with d = b - a in floats; otherwise the byte
 * spans are compared (conservative). */
static int views_overlap(const float *a, int64_t lda, int64_t wa, const float *b, int64_t ldb,
                         int64_t wb, int64_t S) {
    uintptr_t a0 = (uintptr_t)a, a1 = (uintptr_t)(a + (S - 1) * lda + wa);
    uintptr_t b0 = (uintptr_t)b, b1 = (uintptr_t)(b + (S - 1) * ldb + wb);
    if (!(a0 < b1 && b0 < a1)) return 0;
    if (lda != ldb || ((a0 - b0) % sizeof(float)) != 0) return 1;
    const int64_t ld = lda, d = ((int64_t)b0 - (int64_t)a0) / (int64_t)sizeof(float);
    /* largest t with d + t*ld < wa (floor division), clamped to the rows that exist */
    int64_t num = wa - 1 - d;
    int64_t t = num >= 0 ? num / ld : -((-num + ld - 1) / ld);
    if (t < -(S - 1)) return 0;
    if (t > S - 1) t = S - 1;
    return d + t * ld > -wb;
}

static h3_status validate(const h3_attn_args *a, const float *q, const float *k,
                          const float *v, const float *out, h3_err *err) {
    if (!a) return h3_fail(err, H3_EINVAL, "attention: args is NULL");
    if (a->S < 0) return h3_fail(err, H3_EINVAL, "attention: S must be >= 0, got %lld",
                                 (long long)a->S);
    if (a->D < 1 || a->D > 256)
        return h3_fail(err, H3_EINVAL, "attention: head dim D must be in 1..256, got %d", a->D);
    if (a->Hq < 1 || a->Hkv < 1)
        return h3_fail(err, H3_EINVAL, "attention: head counts must be >= 1, got Hq=%d Hkv=%d",
                       a->Hq, a->Hkv);
    if (a->Hq % a->Hkv != 0)
        return h3_fail(err, H3_EINVAL,
                       "attention: Hq=%d is not a multiple of Hkv=%d (grouped-query heads)",
                       a->Hq, a->Hkv);
    if (!isfinite(a->scale))
        return h3_fail(err, H3_EINVAL, "attention: scale must be finite, got %g",
                       (double)a->scale);
    const int64_t wq = (int64_t)a->Hq * a->D, wkv = (int64_t)a->Hkv * a->D;
    if (a->ldq < wq || a->ldo < wq)
        return h3_fail(err, H3_EINVAL,
                       "attention: row strides ldq=%lld, ldo=%lld must be >= Hq*D=%lld",
                       (long long)a->ldq, (long long)a->ldo, (long long)wq);
    if (a->ldk < wkv || a->ldv < wkv)
        return h3_fail(err, H3_EINVAL,
                       "attention: row strides ldk=%lld, ldv=%lld must be >= Hkv*D=%lld",
                       (long long)a->ldk, (long long)a->ldv, (long long)wkv);
    if (a->S == 0) return H3_OK;
    if (!q || !k || !v || !out)
        return h3_fail(err, H3_EINVAL, "attention: NULL %s pointer",
                       !q ? "q" : !k ? "k" : !v ? "v" : "out");
    if (views_overlap(out, a->ldo, wq, k, a->ldk, wkv, a->S))
        return h3_fail(err, H3_EINVAL, "attention: out overlaps k");
    if (views_overlap(out, a->ldo, wq, v, a->ldv, wkv, a->S))
        return h3_fail(err, H3_EINVAL, "attention: out overlaps v");
    if (out != q && views_overlap(out, a->ldo, wq, q, a->ldq, wq, a->S))
        return h3_fail(err, H3_EINVAL, "attention: out overlaps q (only out == q is allowed)");
    if (out == q && a->ldo != a->ldq)
        return h3_fail(err, H3_EINVAL, "attention: out == q needs ldo == ldq, got %lld and %lld",
                       (long long)a->ldo, (long long)a->ldq);
    return H3_OK;
}

typedef struct {
    const h3_attn_args *a;
    const float *q, *k, *v;
    float *out;
    const attn_kernels *kt;
    char *ws;
    size_t ws_stride;
    int64_t nqt, units;
    _Atomic int64_t next;
} attn_ctx;

static void attn_task(void *p, int ith, int nth) {
    attn_ctx *c = (attn_ctx *)p;
    (void)nth;
    float *ws = (float *)(c->ws + (size_t)ith * c->ws_stride);
    const int Hq = c->a->Hq;
    for (;;) {
        int64_t u = atomic_fetch_add_explicit(&c->next, 1, memory_order_relaxed);
        if (u >= c->units) break;
        int64_t qt;
        int h;
        if (c->a->causal) { /* last query tiles first: they carry the most keys */
            qt = c->nqt - 1 - u / Hq;
            h = (int)(u % Hq);
        } else {            /* one head's tiles in a row: its K/V stay in cache */
            qt = u % c->nqt;
            h = (int)(u / c->nqt);
        }
        c->kt->unit(c->a, c->q, c->k, c->v, c->out, h, qt * c->kt->bq, ws);
    }
}

h3_status h3_attention(const h3_attn_args *a, const float *q, const float *k, const float *v,
                       float *out, h3_pool *pool, void *ws, size_t ws_bytes, h3_isa isa,
                       h3_err *err) {
    h3_status rc = validate(a, q, k, v, out, err);
    if (rc != H3_OK) return rc;
    if ((unsigned)isa >= H3_ISA_COUNT)
        return h3_fail(err, H3_EINVAL, "attention: unknown isa %d", (int)isa);
    rc = h3_isa_check(isa, err);
    if (rc != H3_OK) return rc;
    if (a->S == 0) return H3_OK;

    const attn_kernels *kt = attn_table(isa);
#if H3_X86
    if (attn_bf16_usable(a)) {
        if (isa == H3_ISA_AMX) kt = &attn_kernels_amx;
        else if (isa == H3_ISA_AVX512 && h3_cpu_has_avx512_bf16()) kt = &attn_kernels_bf16dp;
    }
#endif
    const int nth = h3_pool_threads(pool);
    const size_t need = ws_bytes_for(kt, a->D, nth);
    void *own = NULL;
    if (ws) {
        if (ws_bytes < need)
            return h3_fail(err, H3_EINVAL,
                           "attention: workspace of %zu bytes is too small, need %zu "
                           "(h3_attn_workspace_bytes)", ws_bytes, need);
        if ((uintptr_t)ws % 64 != 0)
            return h3_fail(err, H3_EINVAL, "attention: workspace must be 64-byte aligned");
    } else {
        ws = own = h3_alloc(need);
        if (!own)
            return h3_fail(err, H3_ENOMEM, "attention: cannot allocate %zu bytes of workspace",
                           need);
    }

    attn_ctx c;
    c.a = a;
    c.q = q; c.k = k; c.v = v; c.out = out;
    c.kt = kt;
    c.ws = (char *)ws;
    c.ws_stride = per_thread_bytes(kt, a->D);
    c.nqt = H3_CEIL_DIV(a->S, (int64_t)kt->bq);
    c.units = c.nqt * a->Hq;
    atomic_init(&c.next, 0);
    h3_pool_run(pool, attn_task, &c);
    h3_free(own);
    return H3_OK;
}
