/* gemm_gguf.c — the GGUF linear: an h3_linear of wtype H3_DT_GGUF whose rows are a GGUF
 * file's quantised blocks, borrowed as stored (no repacking, no copy).
 *
 * Why a weight type of h3_linear rather than a linear kind of its own: the DiT block, the
 * text encoder's layers and every other caller already run h3_linear_forward with their
 * epilogues (bias, SwiGLU pairs, gated residuals) and workspace sizing, so a GGUF layer
 * plugs into all of them unchanged; gemm.c only routes this wtype here (forward, workspace,
 * dequant) and refuses what it does not support yet (LoRA, conv rows, cache layouts).
 *
 *   y[M,N] = x[M,K] . W[N,K]^T (+ bias) (+ epilogue)
 *
 * Phase 1 (split by rows): each row of x is quantised per 32 values to int8 with one float
 * scale (gguf_quant_act_row_ref) — the finest activation granularity that every weight
 * sub-block (16 or 32 values, always inside one 32-run) sees whole.  Phase 2 (split by
 * output columns, fixed per thread, so results do not depend on the thread count): each
 * weight row is decoded once to int8 values with a scale and offset per 16
 * (gguf_decode_row_ref), then dotted with every quantised row in integers per 16, the
 * scales applied in float32 (gguf_dot_ref; gguf_dot_avx2 on x86 paths).  Rows of x are
 * taken GGUF_MB at a time (their activation blocks stay in L2 while the thread's columns
 * pass), each weight row decoded once per row block: the decode costs K per row block and
 * column, the dots MB * K. */
#include "gemm_linear.h"
#include "gguf_impl.h"

#include <stdlib.h>
#include <string.h>

h3_status h3_linear_attach_gguf(const void *const *parts, const int *types, int nparts, int64_t N,
                                int64_t K, const float *bias, int pair, h3_isa isa,
                                h3_linear **out, h3_err *err) {
    if (!parts || !types || !out) return h3_fail(err, H3_EINVAL, "linear_attach_gguf: NULL argument");
    h3_status st = h3_isa_check(isa, err);
    if (st) return st;
    if (nparts < 1 || nparts > H3_LINEAR_MAX_PARTS)
        return h3_fail(err, H3_EINVAL, "linear_attach_gguf: %d parts (1..%d)", nparts, H3_LINEAR_MAX_PARTS);
    if (N < 1 || K < 1 || N % nparts || (pair && (N % 2 || nparts > 2)))
        return h3_fail(err, H3_EINVAL, "linear_attach_gguf: [%lld, %lld] does not split into %d%s parts",
                       (long long)N, (long long)K, nparts, pair ? " pair" : "");
    if (K % GGUF_ACT) return h3_fail(err, H3_EINVAL, "linear_attach_gguf: K = %lld is not a multiple of 32", (long long)K);
    h3_linear *l = calloc(1, sizeof *l);
    if (!l) return h3_fail(err, H3_ENOMEM, "linear_attach_gguf: out of memory");
    size_t wb = 0;
    for (int i = 0; i < nparts; i++) {
        int blk, bytes;
        if (!parts[i]) { st = h3_fail(err, H3_EINVAL, "linear_attach_gguf: part %d is NULL", i); break; }
        if (!gguf_is_quant(types[i]) || !h3_gguf_type_size(types[i], &blk, &bytes)) {
            st = h3_fail(err, H3_EINVAL, "linear_attach_gguf: part %d: type %d is not a quantised type h3cy reads",
                         i, types[i]);
            break;
        }
        if (K % blk) {
            st = h3_fail(err, H3_EINVAL, "linear_attach_gguf: part %d: K = %lld is not a multiple of the %d-value block",
                         i, (long long)K, blk);
            break;
        }
        l->part[i] = parts[i];
        l->gtype[i] = types[i];
        l->grow_bytes[i] = K / blk * bytes;
        wb += (size_t)(N / nparts) * (size_t)l->grow_bytes[i];
    }
    if (!st && bias) {
        l->bias = h3_alloc((size_t)N * sizeof(float));
        if (!l->bias) st = h3_fail(err, H3_ENOMEM, "linear_attach_gguf: out of memory");
        else memcpy(l->bias, bias, (size_t)N * sizeof(float));
    }
    if (st) { h3_linear_free(l); return st; }
    l->N = N; l->K = K; l->Kp = K; l->wtype = H3_DT_GGUF; l->pair = pair ? 1 : 0; l->isa = isa;
    l->H = pair ? N / 2 : N;
    l->kt = gemm_kernels_for(isa);
    l->nparts = nparts;
    l->part_rows = N / nparts;
    l->w = (void *)parts[0];
    l->owns_w = 0;
    l->wbytes = wb;
    *out = l;
    return H3_OK;
}

/* the stored blocks of logical row r and their type */
static const uint8_t *grow_at(const h3_linear *l, int64_t r, int *type) {
    const int64_t p = r / l->part_rows;
    *type = l->gtype[p];
    return (const uint8_t *)l->part[p] + (r % l->part_rows) * l->grow_bytes[p];
}

/* one decoded row: q [K], sc and mn [K/16] */
static size_t decoded_bytes(int64_t K) {
    return H3_ALIGN_UP((size_t)K, 64) + 2 * H3_ALIGN_UP((size_t)(K / GGUF_SUB) * 4, 64);
}
static size_t act_bytes(int64_t M, int64_t K) {
    return H3_ALIGN_UP((size_t)M * (size_t)(K / GGUF_ACT) * sizeof(gguf_act_blk), 64);
}

size_t gemm_gguf_workspace_bytes(const h3_linear *l, int64_t M, int nth) {
    return act_bytes(M, l->K) + (size_t)nth * 2 * decoded_bytes(l->K);
}

typedef struct { int8_t *q; float *sc, *mn; int has_min; } decoded;

static decoded decode(const h3_linear *l, int64_t r, char *buf) {
    decoded d;
    int type;
    const uint8_t *row = grow_at(l, r, &type);
    d.q = (int8_t *)buf;
    d.sc = (float *)(buf + H3_ALIGN_UP((size_t)l->K, 64));
    d.mn = d.sc + H3_ALIGN_UP((size_t)(l->K / GGUF_SUB) * 4, 64) / 4;
    d.has_min = gguf_has_min(type);
    gguf_decode_row_ref(type, row, l->K, d.q, d.sc, d.mn);
    return d;
}

#define GGUF_MB 64

typedef struct {
    const h3_linear *l;
    gguf_dot_fn dot;
    const float *x;
    int64_t M;
    float *y;
    const h3_epilogue *epi;
    gguf_act_blk *act;     /* [M][K/32] */
    char *tws;             /* per thread: two decoded rows */
} gguf_ctx;

static void quant_task(void *p, int ith, int nth) {
    gguf_ctx *c = (gguf_ctx *)p;
    const int64_t K = c->l->K, nb = K / GGUF_ACT;
    for (int64_t m = c->M * ith / nth; m < c->M * (ith + 1) / nth; m++)
        gguf_quant_act_row_ref(c->x + m * K, K, c->act + m * nb);
}

static void mul_task(void *p, int ith, int nth) {
    gguf_ctx *c = (gguf_ctx *)p;
    const h3_linear *l = c->l;
    const gguf_dot_fn dot = c->dot;
    const int64_t K = l->K, nb = K / GGUF_ACT, M = c->M;
    const int kind = c->epi ? c->epi->kind : H3_EPI_NONE;
    const int64_t ncol = kind == H3_EPI_SWIGLU ? l->H : l->N;
    char *buf = c->tws + (size_t)ith * 2 * decoded_bytes(K);
    const int64_t n0 = ncol * ith / nth, n1 = ncol * (ith + 1) / nth;
    for (int64_t m0 = 0; m0 < M; m0 += GGUF_MB) {
        const int64_t m1 = H3_MIN(M, m0 + GGUF_MB);
        for (int64_t n = n0; n < n1; n++) {
            decoded w = decode(l, n, buf);
            if (kind == H3_EPI_SWIGLU) {
                decoded v = decode(l, l->H + n, buf + decoded_bytes(K));
                for (int64_t m = m0; m < m1; m++) {
                    float g = dot(w.q, w.sc, w.mn, w.has_min, c->act + m * nb, K);
                    float u = dot(v.q, v.sc, v.mn, v.has_min, c->act + m * nb, K);
                    gemm_swiglu_row_ref(&g, &u, 1, l->bias ? l->bias + n : NULL, l->bias ? l->bias + l->H + n : NULL);
                    c->y[m * ncol + n] = g;
                }
                continue;
            }
            const float b = l->bias ? l->bias[n] : 0.0f;
            for (int64_t m = m0; m < m1; m++) {
                float acc = dot(w.q, w.sc, w.mn, w.has_min, c->act + m * nb, K);
                if (l->bias) acc += b;
                if (kind == H3_EPI_RESID) {
                    const h3_epilogue *e = c->epi;
                    if (e->gate) acc *= e->gate[(e->gate_row ? e->gate_row[m] : m) * ncol + n];
                    acc = e->resid[m * ncol + n] + acc;
                }
                c->y[m * ncol + n] = acc;
            }
        }
    }
}

h3_status gemm_gguf_forward(const h3_linear *l, h3_pool *pool, const float *x, int64_t M, float *y,
                            const h3_epilogue *epi, void *ws, size_t ws_bytes, h3_err *err) {
    const int nth = h3_pool_threads(pool);
    const size_t need = gemm_gguf_workspace_bytes(l, M, nth);
    void *own = NULL;
    h3_status st = h3_workspace(&ws, &ws_bytes, need, &own, "linear_forward", err);
    if (st) return st;
    gguf_ctx c = {l, gguf_dot_for(l->isa), x, M, y, epi, NULL, NULL};
    h3_arena ar = {(char *)ws, 0, ws_bytes};
    c.act = h3_arena_take(&ar, act_bytes(M, l->K));
    c.tws = h3_arena_take(&ar, (size_t)nth * 2 * decoded_bytes(l->K));
    h3_pool_run(pool, quant_task, &c);
    h3_pool_run(pool, mul_task, &c);
    h3_free(own);
    return H3_OK;
}

h3_status gemm_gguf_dequant(const h3_linear *l, float *out, h3_err *err) {
    for (int64_t n = 0; n < l->N; n++) {
        int type;
        const uint8_t *row = grow_at(l, n, &type);
        h3_status st = h3_gguf_dequant(type, row, l->K, out + n * l->K, err);
        if (st) return st;
    }
    return H3_OK;
}
