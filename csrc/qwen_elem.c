/* qwen_elem.c — the bf16-rounding element-wise ops of the Qwen text layer (h3_qwen.h):
 * the scalar reference kernels (the executable spec, torch's op order, compiled with
 * -ffp-contract=off) and the public entries (validation, dispatch, rows over the pool). */
#include "qwen_elem_impl.h"

#include <math.h>
#include <string.h>

#define rb h3_round_to_bf16

/* ---- scalar reference ----------------------------------------------------------- */
/* transformers: xf = float32(x); xf * rsqrt(mean(xf^2) + eps) -> bf16; w * that -> bf16
 * (h3_internal.h). */
static void rms_bf16_ref(const float *x, const float *w, float *out, int64_t rows, int64_t n,
                         float eps) {
    h3_rmsnorm_rows_ref(x, w, out, rows, n, eps, 1);
}

/* torch bf16: q*cos -> bf16, rotate_half(q)*sin -> bf16, sum -> bf16; the negation in
 * rotate_half is exact, so bf16(a) + bf16(-b) is bf16(a) - bf16(b). */
static void rope_bf16_ref(float *x, const float *cos, const float *sin, int heads,
                          int head_dim, int rot_dim) {
    const int half = rot_dim / 2;
    for (int h = 0; h < heads; h++) {
        float *y = x + (int64_t)h * head_dim;
        for (int i = 0; i < half; i++) {
            float c = rb(cos[i]), s = rb(sin[i]);
            float x1 = y[i], x2 = y[i + half];
            y[i] = rb(rb(x1 * c) - rb(x2 * s));
            y[i + half] = rb(rb(x2 * c) + rb(x1 * s));
        }
    }
}

/* torch bf16 silu: computed in float32, rounded; the product rounded again. */
static void swiglu_bf16_ref(const float *g, const float *u, float *out, int64_t n) {
    for (int64_t i = 0; i < n; i++) {
        float s = rb(g[i] / (1.0f + expf(-g[i])));
        out[i] = rb(s * u[i]);
    }
}

static float dot_ref(const float *a, const float *b, int64_t n) {
    float s = 0.0f;
    for (int64_t i = 0; i < n; i++) s += a[i] * b[i];
    return s;
}

static void scale_axpy_ref(float *y, float c, float p, const float *x, int64_t n) {
    for (int64_t i = 0; i < n; i++) y[i] = y[i] * c + p * x[i];
}

static inline float from_bits(uint32_t u) {
    float f;
    memcpy(&f, &u, sizeof f);
    return f;
}

float h3_fexp_u20(float x) {
    if (x < from_bits(H3_FEXP_LO)) return 0.0f;
    if (x > from_bits(H3_FEXP_HI)) return INFINITY;
    if (x != x) return -0.0f;                     /* the vector code's trunc(NaN) bits */
    const float t = x * from_bits(H3_FEXP_LOG2E);
    const float f = t - floorf(t);
    float p = fmaf(f, H3_FEXP_C3, H3_FEXP_C2);
    p = fmaf(f, p, H3_FEXP_C1);
    p = fmaf(f, p, H3_FEXP_C0);
    const float y = fmaf(8388608.0f, t - p, 1065353216.0f);  /* 2^23 (t - p) + 127 2^23 */
    return from_bits((uint32_t)(int32_t)y);                  /* y in (0, 2^31): trunc */
}

static float exp_sum_bf16p_ref(float *s, int64_t nv, int64_t nb, float m) {
    float a[16] = {0}, b[16] = {0}, c[16] = {0};
    const int64_t n32 = nb / 32 * 32, n16 = nb / 16 * 16;
    int64_t t = 0;
    for (; t < H3_MIN(nv, n32); t++) {
        const float e = h3_fexp_u20(s[t] - m);
        if (t & 16) b[t & 15] += e;
        else a[t & 15] += e;
        s[t] = rb(e);
    }
    for (; t < H3_MIN(nv, n16); t++) {
        const float e = h3_fexp_u20(s[t] - m);
        c[t & 15] += e;
        s[t] = rb(e);
    }
    for (int l = 0; l < 16; l++) a[l] = (a[l] + c[l]) + b[l];
    for (int w = 8; w >= 1; w /= 2)
        for (int l = 0; l < w; l++) a[l] += a[l + w];
    float sum = a[0];
    for (t = n16; t < nv; t++) {
        const float e = expf(s[t] - m);
        sum += e;
        s[t] = rb(e);
    }
    return sum;
}

const h3_qwen_elem_kernels h3_qwen_elem_ref = {H3_ISA_REF, rms_bf16_ref, rope_bf16_ref,
                                               swiglu_bf16_ref, dot_ref, scale_axpy_ref,
                                               exp_sum_bf16p_ref};

/* ---- dispatch and threading ------------------------------------------------------- */
const h3_qwen_elem_kernels *h3_qwen_elem_for(h3_isa isa) {
    switch (h3_isa_vector(isa)) {
#if H3_X86
    case H3_ISA_AVX512: return &h3_qwen_elem_avx512;
#endif
    default: return &h3_qwen_elem_ref; /* AVX2, NEON: the scalar kernels */
    }
}

static h3_status get_table(const char *op, h3_isa isa, const h3_qwen_elem_kernels **k,
                           h3_err *err) {
    h3_status st = h3_isa_check(isa, err);
    if (st) return st;
    *k = h3_qwen_elem_for(isa);
    (void)op;
    return H3_OK;
}

enum { QOP_RMS, QOP_ROPE, QOP_SWIGLU };
#define MIN_PER_THREAD 8192

typedef struct {
    const h3_qwen_elem_kernels *k;
    int op;
    int64_t units, n;
    const float *x, *w, *cos, *sin, *u;
    float *out, *xm;
    int heads, head_dim;
    float eps;
} qjob;

static void qtask(void *ctx, int ith, int nth) {
    const qjob *j = (const qjob *)ctx;
    int64_t u0 = j->units * ith / nth, u1 = j->units * (ith + 1) / nth;
    if (u1 <= u0) return;
    switch (j->op) {
    case QOP_RMS:
        j->k->rms_bf16(j->x + u0 * j->n, j->w, j->out + u0 * j->n, u1 - u0, j->n, j->eps);
        break;
    case QOP_ROPE: {
        const int64_t half = j->head_dim / 2, rowlen = (int64_t)j->heads * j->head_dim;
        for (int64_t r = u0; r < u1; r++)
            j->k->rope_bf16(j->xm + r * rowlen, j->cos + r * half, j->sin + r * half, j->heads,
                            j->head_dim, j->head_dim);
        break;
    }
    case QOP_SWIGLU: {
        /* units are blocks of 16 floats, so the vector kernels never split a lane group */
        int64_t e0 = u0 * 16, e1 = H3_MIN(u1 * 16, j->n);
        if (e1 > e0) j->k->swiglu_bf16(j->x + e0, j->u + e0, j->out + e0, e1 - e0);
        break;
    }
    }
}

static void qrun(qjob *j, h3_pool *pool, int64_t elems) {
    int64_t parts = H3_MIN((int64_t)h3_pool_threads(pool), H3_MAX((int64_t)1, elems / MIN_PER_THREAD));
    if (parts <= 1 || j->units <= 1) qtask(j, 0, 1);
    else h3_pool_run(pool, qtask, j);
}

static int bad_size(int64_t rows, int64_t n) { return rows < 0 || n < 1 || (rows > 0 && rows > (INT64_MAX / 16) / n); }

h3_status h3_qwen_rmsnorm_bf16(const float *x, const float *w, float *out, int64_t rows,
                               int64_t n, float eps, h3_pool *pool, h3_isa isa, h3_isa *ran,
                               h3_err *err) {
    const h3_qwen_elem_kernels *k;
    h3_status st = get_table("qwen_rmsnorm_bf16", isa, &k, err);
    if (st) return st;
    if (bad_size(rows, n))
        return h3_fail(err, H3_EINVAL, "qwen_rmsnorm_bf16: bad size rows=%lld n=%lld", (long long)rows, (long long)n);
    if (!(eps >= 0.0f) || isinf(eps))
        return h3_fail(err, H3_EINVAL, "qwen_rmsnorm_bf16: eps must be finite and >= 0, got %g", (double)eps);
    if (rows > 0 && (!x || !out || !w)) return h3_fail(err, H3_EINVAL, "qwen_rmsnorm_bf16: x, w or out is NULL");
    if (rows > 0) {
        qjob j = {.k = k, .op = QOP_RMS, .units = rows, .n = n, .x = x, .w = w, .out = out, .eps = eps};
        qrun(&j, pool, rows * n);
    }
    if (ran) *ran = k->isa;
    return H3_OK;
}

h3_status h3_rope_bf16(float *x, const float *cos, const float *sin, int64_t rows, int heads,
                       int head_dim, h3_pool *pool, h3_isa isa, h3_isa *ran, h3_err *err) {
    const h3_qwen_elem_kernels *k;
    h3_status st = get_table("rope_bf16", isa, &k, err);
    if (st) return st;
    if (heads < 1 || head_dim < 2 || head_dim % 2 || bad_size(rows, (int64_t)heads * head_dim))
        return h3_fail(err, H3_EINVAL, "rope_bf16: bad geometry rows=%lld heads=%d head_dim=%d (even, >= 2)",
                       (long long)rows, heads, head_dim);
    if (rows > 0 && (!x || !cos || !sin)) return h3_fail(err, H3_EINVAL, "rope_bf16: x, cos or sin is NULL");
    if (rows > 0) {
        qjob j = {.k = k, .op = QOP_ROPE, .units = rows, .xm = x, .cos = cos, .sin = sin,
                  .heads = heads, .head_dim = head_dim};
        qrun(&j, pool, rows * heads * head_dim);
    }
    if (ran) *ran = k->isa;
    return H3_OK;
}

h3_status h3_swiglu_bf16(const float *g, const float *u, float *out, int64_t n, h3_pool *pool,
                         h3_isa isa, h3_isa *ran, h3_err *err) {
    const h3_qwen_elem_kernels *k;
    h3_status st = get_table("swiglu_bf16", isa, &k, err);
    if (st) return st;
    if (n < 0 || n > INT64_MAX / 16) return h3_fail(err, H3_EINVAL, "swiglu_bf16: bad size n=%lld", (long long)n);
    if (n > 0 && (!g || !u || !out)) return h3_fail(err, H3_EINVAL, "swiglu_bf16: g, u or out is NULL");
    if (n > 0) {
        qjob j = {.k = k, .op = QOP_SWIGLU, .units = (n + 15) / 16, .n = n, .x = g, .u = u, .out = out};
        qrun(&j, pool, n);
    }
    if (ran) *ran = k->isa;
    return H3_OK;
}

/* ---- attention with bf16 probabilities (torch CPU flash attention, bf16 inputs) ------ */
/* torch blocks the queries by QS (32, 64 or 256 by sequence length) and the keys by 512.
 * Row i of query block [m0, m0 + qb) visits key blocks n0 = 0, 512, .. below
 * min(m0 + qb, S) (causal; S otherwise), each min(512, S - n0) keys wide with the keys
 * after i masked; the block width (not the count of valid keys) decides which keys get
 * the vector exp (exp_sum_bf16p).  Per block:
 *   m' = max(m, max_j s_j), s_j = scale q.k_j;  c = expf(m - m')
 *   l = sum_j E(s_j - m') + c l;  acc = c acc + sum_j bf16(E(s_j - m')) v_j  (in key order)
 * and out = acc * (1/l). */
#define QATTN_KV_BLOCK 512

static int64_t qattn_q_split(int64_t S) {
    const int64_t qs = S >= 768 ? 256 : S >= 192 ? 64 : 32;
    return H3_MIN(qs, S);
}

typedef struct {
    const h3_qwen_elem_kernels *k;
    const h3_attn_args *a;
    const float *q, *kk, *v;
    float *out;
    float *scratch; /* per thread: 512 scores + head_dim accumulators (+16 slack) */
    int64_t per_thread;
} qattn_job;

static void qattn_task(void *ctx, int ith, int nth) {
    const qattn_job *j = (const qattn_job *)ctx;
    const h3_attn_args *a = j->a;
    const int64_t S = a->S, units = S * a->Hq, qs = qattn_q_split(S);
    const int D = a->D, group = a->Hq / a->Hkv;
    float *sc = j->scratch + (int64_t)ith * j->per_thread, *acc = sc + QATTN_KV_BLOCK;
    for (int64_t u = units * ith / nth; u < units * (ith + 1) / nth; u++) {
        const int h = (int)(u / S);
        const int64_t i = u % S, m0 = i / qs * qs;
        const int64_t nk = a->causal ? H3_MIN(m0 + qs, S) : S;    /* keys visited */
        const int64_t last = a->causal ? i : S - 1;                 /* last unmasked key */
        const float *qi = j->q + i * a->ldq + (int64_t)h * D;
        const int g = h / group;
        float m = -INFINITY, l = 0.0f;
        for (int d = 0; d < D; d++) acc[d] = 0.0f;
        for (int64_t b0 = 0; b0 < nk; b0 += QATTN_KV_BLOCK) {
            const int64_t nb = H3_MIN(QATTN_KV_BLOCK, S - b0);       /* block width */
            const int64_t nv = H3_MIN(nb, last - b0 + 1);            /* valid keys (>= 1) */
            float bm = -INFINITY;
            for (int64_t t = 0; t < nv; t++) {
                sc[t] = j->k->dot(qi, j->kk + (b0 + t) * a->ldk + (int64_t)g * D, D) * a->scale;
                if (sc[t] > bm) bm = sc[t];
            }
            const float mn = bm > m ? bm : m;
            const float c = expf(m - mn);                            /* 0 for the first block */
            const float bl = j->k->exp_sum_bf16p(sc, nv, nb, mn);
            l = bl + c * l;
            for (int64_t t = 0; t < nv; t++)
                j->k->scale_axpy(acc, t == 0 ? c : 1.0f, sc[t], j->v + (b0 + t) * a->ldv + (int64_t)g * D, D);
            m = mn;
        }
        float *o = j->out + i * a->ldo + (int64_t)h * D;
        const float r = 1.0f / l;
        for (int d = 0; d < D; d++) o[d] = acc[d] * r;
    }
}

size_t h3_attention_bf16p_workspace_bytes(const h3_attn_args *a, int n_threads) {
    if (!a || a->S < 0) return 0;
    return (size_t)(n_threads < 1 ? 1 : n_threads) * (size_t)(QATTN_KV_BLOCK + a->D + 16) * sizeof(float);
}

h3_status h3_attention_bf16p(const h3_attn_args *a, const float *q, const float *k,
                             const float *v, float *out, h3_pool *pool, void *ws,
                             size_t ws_bytes, h3_isa isa, h3_err *err) {
    const h3_qwen_elem_kernels *kt;
    h3_status st = get_table("attention_bf16p", isa, &kt, err);
    if (st) return st;
    if (!a || a->S < 0 || a->Hq < 1 || a->Hkv < 1 || a->Hq % a->Hkv || a->D < 1 || a->D > 256 ||
        a->ldq < (int64_t)a->Hq * a->D || a->ldk < (int64_t)a->Hkv * a->D ||
        a->ldv < (int64_t)a->Hkv * a->D || a->ldo < (int64_t)a->Hq * a->D)
        return h3_fail(err, H3_EINVAL, "attention_bf16p: bad geometry");
    if (a->S == 0) return H3_OK;
    if (!q || !k || !v || !out) return h3_fail(err, H3_EINVAL, "attention_bf16p: NULL array");
    const int nth = h3_pool_threads(pool);
    const size_t need = h3_attention_bf16p_workspace_bytes(a, nth);
    void *own = NULL;
    if (!ws) {
        own = ws = h3_alloc(need);
        if (!ws) return h3_fail(err, H3_ENOMEM, "attention_bf16p: cannot allocate %zu bytes", need);
    } else if (ws_bytes < need) {
        return h3_fail(err, H3_EINVAL, "attention_bf16p: workspace too small (%zu < %zu)", ws_bytes, need);
    }
    qattn_job j = {kt, a, q, k, v, out, (float *)ws, QATTN_KV_BLOCK + a->D + 16};
    if (nth <= 1 || a->S * a->Hq < 2) qattn_task(&j, 0, 1);
    else h3_pool_run(pool, qattn_task, &j);
    h3_free(own);
    return H3_OK;
}
