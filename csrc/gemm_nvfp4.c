/* gemm_nvfp4.c — the NVFP4 linear: an h3_linear of wtype H3_DT_NVFP4 over a file's E2M1
 * codes and e4m3 block scales as stored (borrowed: nothing is widened or copied in memory;
 * only the AWQ pre-scale vectors and a 256-entry scale table per part are the linear's).
 * A weight type of h3_linear for the reason gemm_gguf.c gives: every caller's epilogues
 * (bias, SwiGLU pairs, gated residuals) and workspace sizing work unchanged.
 *
 *   y[M,N] = (x * pre)[M,K] . W[N,K]^T (+ bias) (+ epilogue)
 *
 * Phase 1 (split by rows): each row of x, times each distinct pre-scale of the parts, is
 * quantised per 32 inputs (nvfp4_quant_act_row_ref).  Phase 2 (split by output panels of
 * 16 columns, fixed per thread, so results do not depend on the thread count): for a block
 * of NV_MC rows of x, each panel's 16 weight rows are widened a K block (NV_KB inputs) at a
 * time to int8 (nvfp4_decode_ref: a few KB that stay in L1 while the block's rows pass)
 * and the micro-kernel of the path (nvfp4_impl.h) accumulates the block's float sums; the
 * epilogue writes the panel.  The widening costs ~1/NV_MC of the dots. */
#include "gemm_linear.h"
#include "nvfp4_impl.h"

#include <math.h>
#include <stdlib.h>
#include <string.h>

#define NV_MC 64  /* rows of x per block: the decoded panel is reused by all of them */
#define NV_KB 512  /* inputs per decoded K block: 8 KB of int8 + 4 KB of scales */

void gemm_nvfp4_free(h3_linear *l) {
    if (!l->nv) return;
    for (int i = 0; i < l->nparts; i++) free(l->nv[i].pre);
    free(l->nv);
    l->nv = NULL;
}

h3_status h3_linear_attach_nvfp4(const h3_nvfp4_part *parts, int nparts, int64_t N, int64_t K, const float *bias,
                                 int pair, h3_isa isa, h3_linear **out, h3_err *err) {
    if (!parts || !out) return h3_fail(err, H3_EINVAL, "linear_attach_nvfp4: NULL argument");
    h3_status st = h3_isa_check(isa, err);
    if (st) return st;
    if (nparts < 1 || nparts > H3_LINEAR_MAX_PARTS)
        return h3_fail(err, H3_EINVAL, "linear_attach_nvfp4: %d parts (1..%d)", nparts, H3_LINEAR_MAX_PARTS);
    if (N < 1 || K < 1 || N % nparts || (pair && (N % 2 || nparts > 2)))
        return h3_fail(err, H3_EINVAL, "linear_attach_nvfp4: [%lld, %lld] does not split into %d%s parts",
                       (long long)N, (long long)K, nparts, pair ? " pair" : "");
    if (K % NV_ACT) return h3_fail(err, H3_EINVAL, "linear_attach_nvfp4: K = %lld is not a multiple of 32", (long long)K);
    const int64_t rows = N / nparts;
    h3_linear *l = calloc(1, sizeof *l);
    if (!l) return h3_fail(err, H3_ENOMEM, "linear_attach_nvfp4: out of memory");
    l->nv = calloc((size_t)nparts, sizeof *l->nv);
    l->nparts = nparts;
    if (!l->nv) st = h3_fail(err, H3_ENOMEM, "linear_attach_nvfp4: out of memory");
    size_t wb = 0;
    for (int i = 0; i < nparts && !st; i++) {
        const h3_nvfp4_part *p = &parts[i];
        nvfp4_part *v = &l->nv[i];
        if (!p->codes || !p->scales) { st = h3_fail(err, H3_EINVAL, "linear_attach_nvfp4: part %d is NULL", i); break; }
        if (p->ld < K / 2) {
            st = h3_fail(err, H3_EINVAL, "linear_attach_nvfp4: part %d: %lld bytes a row hold fewer than %lld inputs",
                         i, (long long)p->ld, (long long)K);
            break;
        }
        if (!isfinite(p->scale_2)) { st = h3_fail(err, H3_EINVAL, "linear_attach_nvfp4: part %d: scale_2 is not finite", i); break; }
        v->codes = p->codes;
        v->ld = p->ld;
        v->scales = p->scales;
        v->ncb = ((2 * p->ld / NV_SEG) + 3) / 4;
        for (int b = 0; b < 256; b++) v->lut[b] = nvfp4_e4m3((uint8_t)b) * p->scale_2 * 0.5f;
        for (int64_t r = 0; r < rows && !st; r++)
            for (int64_t b = 0; b < K / NV_SEG; b++)
                if ((p->scales[nvfp4_scale_offset(r, b, v->ncb)] & 0x7f) == 0x7f) {
                    st = h3_fail(err, H3_EINVAL, "linear_attach_nvfp4: part %d: the block scale of row %lld, "
                                 "inputs %lld.. is NaN", i, (long long)r, (long long)(b * NV_SEG));
                    break;
                }
        if (st) break;
        if (p->pre_scale) {
            v->pre = malloc((size_t)K * sizeof(float));
            if (!v->pre) { st = h3_fail(err, H3_ENOMEM, "linear_attach_nvfp4: out of memory"); break; }
            memcpy(v->pre, p->pre_scale, (size_t)K * sizeof(float));
            for (int64_t k = 0; k < K; k++)
                if (!isfinite(v->pre[k])) {
                    st = h3_fail(err, H3_EINVAL, "linear_attach_nvfp4: part %d: pre_scale[%lld] is not finite", i, (long long)k);
                    break;
                }
        }
        /* parts with the same pre-scale (or none) multiply the same quantised activations */
        v->slot = l->nv_slots;
        for (int j = 0; j < i; j++) {
            const nvfp4_part *u = &l->nv[j];
            if ((!u->pre && !v->pre) || (u->pre && v->pre && !memcmp(u->pre, v->pre, (size_t)K * sizeof(float)))) {
                v->slot = u->slot;
                break;
            }
        }
        if (v->slot == l->nv_slots) l->nv_slots++;
        l->part[i] = p->codes;
        wb += (size_t)rows * (size_t)(K / 2 + K / NV_SEG);
    }
    if (!st && bias) {
        l->bias = h3_alloc((size_t)N * sizeof(float));
        if (!l->bias) st = h3_fail(err, H3_ENOMEM, "linear_attach_nvfp4: out of memory");
        else memcpy(l->bias, bias, (size_t)N * sizeof(float));
    }
    if (st) { h3_linear_free(l); return st; }
    l->N = N; l->K = K; l->Kp = K; l->wtype = H3_DT_NVFP4; l->pair = pair ? 1 : 0; l->isa = isa;
    l->H = pair ? N / 2 : N;
    l->kt = gemm_kernels_for(isa);
    l->part_rows = rows;
    l->w = (void *)parts[0].codes;
    l->owns_w = 0;
    l->wbytes = wb;
    *out = l;
    return H3_OK;
}

/* the source of logical row r */
static nvfp4_row row_at(const h3_linear *l, int64_t r, int *slot) {
    const nvfp4_part *p = &l->nv[r / l->part_rows];
    const int64_t lr = r % l->part_rows;
    nvfp4_row s = {p->codes + lr * p->ld, p->scales + nvfp4_scale_offset(lr, 0, p->ncb), p->lut};
    *slot = p->slot;
    return s;
}

/* per thread: the decoded K block (q, sw, corr) and two float panels of NV_MC rows */
static size_t thread_bytes(void) {
    return (size_t)NV_KB * NV_NR + 2 * (size_t)(NV_KB / NV_SEG) * NV_NR * 4 + 2 * (size_t)NV_MC * NV_NR * 4;
}
static size_t act_bytes(int64_t M, int64_t K) {
    return H3_ALIGN_UP((size_t)M * (size_t)K, 64) + H3_ALIGN_UP((size_t)M * (size_t)(K / NV_ACT) * 4, 64);
}

size_t gemm_nvfp4_workspace_bytes(const h3_linear *l, int64_t M, int nth) {
    return (size_t)l->nv_slots * act_bytes(M, l->K) + (size_t)nth * thread_bytes();
}

typedef struct {
    const h3_linear *l;
    nvfp4_ukr_fn ukr;
    nvfp4_decode_fn decode;
    const float *x;
    int64_t M;
    float *y;
    const h3_epilogue *epi;
    uint8_t *a[H3_LINEAR_MAX_PARTS];  /* per slot: [M][K] int8 + 128 */
    float *d[H3_LINEAR_MAX_PARTS];    /* per slot: [M][K/32] */
    char *tws;
} nv_ctx;

static void quant_task(void *p, int ith, int nth) {
    nv_ctx *c = (nv_ctx *)p;
    const h3_linear *l = c->l;
    const int64_t K = l->K;
    for (int s = 0; s < l->nv_slots; s++) {
        const float *pre = NULL; /* the slot's pre-scale: its first part's */
        for (int i = 0; i < l->nparts; i++)
            if (l->nv[i].slot == s) { pre = l->nv[i].pre; break; }
        for (int64_t m = c->M * ith / nth; m < c->M * (ith + 1) / nth; m++)
            nvfp4_quant_act_row_ref(c->x + m * K, pre, K, c->a[s] + m * K, c->d[s] + m * (K / NV_ACT));
    }
}

/* the float sums of rows [m0, m0 + mc) by logical weight rows [r0, r0 + nr) into cb */
static void panel(const nv_ctx *c, int64_t m0, int64_t mc, int64_t r0, int nr, char *buf, float *cb) {
    const h3_linear *l = c->l;
    const int64_t K = l->K;
    nvfp4_row rs[NV_NR];
    int slot = 0;
    for (int j = 0; j < nr; j++) rs[j] = row_at(l, r0 + j, &slot); /* a panel never spans two parts */
    int8_t *q = (int8_t *)buf;
    float *sw = (float *)(buf + NV_KB * NV_NR);
    int32_t *corr = (int32_t *)(sw + (NV_KB / NV_SEG) * NV_NR);
    memset(cb, 0, (size_t)mc * NV_NR * sizeof(float));
    const uint8_t *a = c->a[slot] + m0 * K;
    const float *d = c->d[slot] + m0 * (K / NV_ACT);
    for (int64_t k0 = 0; k0 < K; k0 += NV_KB) {
        const int nseg = (int)(H3_MIN(NV_KB, K - k0) / NV_SEG);
        c->decode(rs, nr, k0 / NV_SEG, nseg, q, sw, corr);
        c->ukr((int)mc, nseg, a + k0, K, d + k0 / NV_ACT, K / NV_ACT, q, sw, corr, cb);
    }
}

static void mul_task(void *p, int ith, int nth) {
    nv_ctx *c = (nv_ctx *)p;
    const h3_linear *l = c->l;
    const int kind = c->epi ? c->epi->kind : H3_EPI_NONE;
    const int swiglu = kind == H3_EPI_SWIGLU;
    const int64_t ncol = swiglu ? l->H : l->N;
    /* panels: SwiGLU, 16 columns of the half (rows n and H + n); else 16 rows of one part */
    const int64_t rows = swiglu ? l->H : l->part_rows, per = (rows + NV_NR - 1) / NV_NR;
    const int64_t npan = swiglu ? per : per * l->nparts;
    char *buf = c->tws + (size_t)ith * thread_bytes();
    float *cbg = (float *)(buf + (size_t)NV_KB * NV_NR + 2 * (size_t)(NV_KB / NV_SEG) * NV_NR * 4);
    float *cbv = cbg + NV_MC * NV_NR;
    const int64_t p0 = npan * ith / nth, p1 = npan * (ith + 1) / nth;
    for (int64_t m0 = 0; m0 < c->M; m0 += NV_MC) {
        const int64_t mc = H3_MIN(NV_MC, c->M - m0);
        for (int64_t pi = p0; pi < p1; pi++) {
            const int64_t lc = (pi % per) * NV_NR, n0 = (pi / per) * rows + lc;
            const int nr = (int)H3_MIN(NV_NR, rows - lc);
            panel(c, m0, mc, n0, nr, buf, cbg);
            if (swiglu) {
                panel(c, m0, mc, l->H + n0, nr, buf, cbv);
                for (int64_t i = 0; i < mc; i++) {
                    float *g = cbg + i * NV_NR;
                    gemm_swiglu_row_ref(g, cbv + i * NV_NR, nr, l->bias ? l->bias + n0 : NULL,
                                        l->bias ? l->bias + l->H + n0 : NULL);
                    memcpy(c->y + (m0 + i) * ncol + n0, g, (size_t)nr * sizeof(float));
                }
                continue;
            }
            for (int64_t i = 0; i < mc; i++) {
                const int64_t m = m0 + i;
                for (int j = 0; j < nr; j++) {
                    const int64_t n = n0 + j;
                    float acc = cbg[i * NV_NR + j];
                    if (l->bias) acc += l->bias[n];
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
}

h3_status gemm_nvfp4_forward(const h3_linear *l, h3_pool *pool, const float *x, int64_t M, float *y,
                             const h3_epilogue *epi, void *ws, size_t ws_bytes, h3_err *err) {
    const int nth = h3_pool_threads(pool);
    const size_t need = gemm_nvfp4_workspace_bytes(l, M, nth);
    void *own = NULL;
    h3_status st = h3_workspace(&ws, &ws_bytes, need, &own, "linear_forward", err);
    if (st) return st;
    nv_ctx c;
    memset(&c, 0, sizeof c);
    c.l = l; c.ukr = nvfp4_ukr_for(l->isa); c.decode = nvfp4_decode_for(l->isa); c.x = x; c.M = M; c.y = y; c.epi = epi;
    h3_arena ar = {(char *)ws, 0, ws_bytes};
    for (int s = 0; s < l->nv_slots; s++) {
        c.a[s] = h3_arena_take(&ar, H3_ALIGN_UP((size_t)M * (size_t)l->K, 64));
        c.d[s] = h3_arena_take(&ar, H3_ALIGN_UP((size_t)M * (size_t)(l->K / NV_ACT) * 4, 64));
    }
    c.tws = h3_arena_take(&ar, (size_t)nth * thread_bytes());
    h3_pool_run(pool, quant_task, &c);
    h3_pool_run(pool, mul_task, &c);
    h3_free(own);
    return H3_OK;
}

h3_status gemm_nvfp4_dequant(const h3_linear *l, float *out, h3_err *err) {
    (void)err;
    const int64_t K = l->K;
    for (int64_t n = 0; n < l->N; n++) {
        int slot;
        const nvfp4_row r = row_at(l, n, &slot);
        const float *pre = l->nv[n / l->part_rows].pre;
        for (int64_t k = 0; k < K; k++) {
            const uint8_t b = r.codes[k / 2];
            const int8_t q = nvfp4_q_of_code[k % 2 ? b & 15 : b >> 4];
            const int64_t s = k / NV_SEG;
            float w = (float)q * r.lut[r.scales[(s / 4) * 512 + s % 4]];
            out[n * K + k] = pre ? w * pre[k] : w;
        }
    }
    return H3_OK;
}
