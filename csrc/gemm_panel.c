/* gemm_panel.c — the panel driver of the block-format linears (NVFP4, GGUF): see
 * panel_impl.h for the two phases.  The format supplies the activation quantiser, the
 * panel decoder and the micro-kernel (one pn_fmt per forward call); this file owns the
 * workspace, the split over threads, the K-block loop and the epilogues. */
#include "panel_impl.h"

#include <stdlib.h>
#include <string.h>
#ifdef H3_PN_PROFILE
#include <stdio.h>

#include "h3_loop.h"
#endif

/* Column panels per pass over the K blocks.  One panel per pass read the block's activations
 * (mc x K bytes, up to 4 MB) from L3 once per panel; G panels take each K block's activations
 * (mc x kb bytes, <= 512 KB) from L2 G - 1 times out of G.  Their float sums (G x mc x nr
 * floats, twice for SwiGLU pairs) stay in L2 beside them. */
#ifndef H3_PN_GROUP /* build-time default for formats that set no f->group (CFLAGS=-D...) */
#define H3_PN_GROUP 1
#endif
_Static_assert(H3_PN_GROUP >= 1 && H3_PN_GROUP <= PN_GROUP_MAX, "panels per pass");

/* G: the format's panels per pass, or the build's default */
static int group_of(const pn_fmt *f) { return f->group >= 1 && f->group <= PN_GROUP_MAX ? f->group : H3_PN_GROUP; }

/* per thread: the format's decoded K block and 2 G float panels of f->mc rows */
static size_t thread_bytes(const pn_fmt *f) {
    return H3_ALIGN_UP(f->buf_bytes, 64) + 2 * (size_t)group_of(f) * (size_t)f->mc * (size_t)f->nr * 4;
}
/* rows of the activation layout: M, or M rounded up to whole tile groups */
static int64_t a_rows(const pn_fmt *f, int64_t M) { return f->a_tile ? H3_ALIGN_UP(M, f->a_tile) : M; }
static size_t a_bytes(const pn_fmt *f, int64_t M, int64_t K) {
    return H3_ALIGN_UP((size_t)a_rows(f, M) * (size_t)K * (size_t)f->a_esize, 64);
}
/* where row m of the activations starts */
static uint8_t *a_row(const pn_fmt *f, uint8_t *a, int64_t m, int64_t K) {
    const size_t e = (size_t)f->a_esize;
    if (!f->a_tile) return a + (size_t)m * (size_t)K * e;
    const size_t T = (size_t)f->a_tile;
    return a + (size_t)m / T * T * (size_t)K * e + (size_t)m % T * (size_t)f->a_chunk * e;
}
static size_t d_bytes(int64_t M, int64_t K) { return H3_ALIGN_UP((size_t)M * (size_t)(K / PN_ACT) * 4, 64); }
static size_t s_bytes(const pn_fmt *f, int64_t M, int64_t K) {
    return H3_ALIGN_UP((size_t)M * (size_t)(K / PN_ACT * f->sums) * 4, 64);
}

size_t pn_workspace_bytes(const pn_fmt *f, const h3_linear *l, int64_t M, int nth) {
    return (size_t)f->nslots * (a_bytes(f, M, l->K) + d_bytes(M, l->K) + s_bytes(f, M, l->K)) +
           (size_t)nth * thread_bytes(f);
}

typedef struct {
    const pn_fmt *f;
    const h3_linear *l;
    const float *x;
    int64_t M;
    float *y;
    const h3_epilogue *epi;
    uint8_t *a[H3_LINEAR_MAX_PARTS]; /* per slot: [M][K] values (a_row) */
    float *d[H3_LINEAR_MAX_PARTS];   /* per slot: [M][K/32] */
    int32_t *s[H3_LINEAR_MAX_PARTS]; /* per slot: [M][K/16] or NULL */
    char *tws;
} pn_ctx;

static void quant_task(void *p, int ith, int nth) {
    pn_ctx *c = (pn_ctx *)p;
    const int64_t K = c->l->K, rows = a_rows(c->f, c->M); /* the rows past M: zero (a tile layout) */
    for (int s = 0; s < c->f->nslots; s++)
        for (int64_t m = rows * ith / nth; m < rows * (ith + 1) / nth; m++)
            c->f->quant(c->f, c->l, s, m < c->M ? c->x + m * K : NULL, a_row(c->f, c->a[s], m, K),
                        m < c->M ? c->d[s] + m * (K / PN_ACT) : NULL,
                        c->s[s] && m < c->M ? c->s[s] + m * (K / PN_ACT * c->f->sums) : NULL);
}

/* the float sums of rows [m0, m0 + mc) by the np panels of logical weight rows
 * [r0[p], r0[p] + nr[p]) into cb + p * mc * nr, K block by K block (H3_PN_GROUP says why) */
static void panels(const pn_ctx *c, int64_t m0, int64_t mc, const int64_t *r0, const int *nr, int np, char *buf,
                   float *cb) {
    const h3_linear *l = c->l;
    const int64_t K = l->K, ea = c->f->a_esize, stride = mc * c->f->nr;
    pn_act act[2 * PN_GROUP_MAX];
    for (int p = 0; p < np; p++) {
        const int slot = c->f->slot_of(l, r0[p]); /* a panel never spans two parts */
        const pn_act a = {a_row(c->f, c->a[slot], m0, K), K * ea, c->d[slot] + m0 * (K / PN_ACT), K / PN_ACT,
                          c->s[slot] ? c->s[slot] + m0 * (K / PN_ACT * c->f->sums) : NULL, K / PN_ACT * c->f->sums};
        act[p] = a;
    }
    memset(cb, 0, (size_t)np * (size_t)stride * sizeof(float));
    for (int64_t k0 = 0; k0 < K; k0 += c->f->kb)
        for (int p = 0; p < np; p++)
            c->f->kblock(c->f, l, r0[p], nr[p], k0, (int)H3_MIN(c->f->kb, K - k0), (int)mc, &act[p], buf,
                         cb + p * stride);
}

/* row i of a panel's float sums: in g itself ([mc][NR]) or, cb_t ([NR][mc]), gathered into tmp */
static float *sums_row(const pn_fmt *f, float *g, int64_t mc, int64_t i, int nr, float *tmp) {
    if (!f->cb_t) return g + i * f->nr;
    for (int j = 0; j < nr; j++) tmp[j] = g[j * mc + i];
    return tmp;
}

/* row i of panel [n0, n0 + nr) of the output from its float sums g (and v: SwiGLU's second half) */
static void epilogue_row(const pn_ctx *c, int64_t m0, int64_t mc, int64_t i, int64_t n0, int nr, float *g,
                         float *v) {
    const h3_linear *l = c->l;
    const int kind = c->epi ? c->epi->kind : H3_EPI_NONE;
    const int64_t ncol = kind == H3_EPI_SWIGLU ? l->H : l->N, m = m0 + i;
    float tg[PN_NR_MAX], tv[PN_NR_MAX];
    float *gi = sums_row(c->f, g, mc, i, nr, tg);
    float *yr = c->y + m * ncol + n0;
    if (kind == H3_EPI_SWIGLU) {
        gemm_swiglu_row_ref(gi, sums_row(c->f, v, mc, i, nr, tv), nr, l->bias ? l->bias + n0 : NULL,
                            l->bias ? l->bias + l->H + n0 : NULL);
        memcpy(yr, gi, (size_t)nr * sizeof(float));
        return;
    }
    if (kind != H3_EPI_RESID) { /* the common case as plain loops the compiler vectorises */
        if (l->bias)
            for (int j = 0; j < nr; j++) yr[j] = gi[j] + l->bias[n0 + j];
        else
            for (int j = 0; j < nr; j++) yr[j] = gi[j];
        return;
    }
    const h3_epilogue *e = c->epi;
    for (int j = 0; j < nr; j++) {
        const int64_t n = n0 + j;
        float acc = gi[j];
        if (l->bias) acc += l->bias[n];
        if (e->gate) acc *= e->gate[(e->gate_row ? e->gate_row[m] : m) * ncol + n];
        acc = e->resid[m * ncol + n] + acc;
        yr[j] = acc;
    }
}

/* The pass's ng panels of the output, rows outer: a row's panels are adjacent columns, so each
 * row is one run of up to ng x 64 bytes, and the run PN_EPI_PF rows on is prefetched for
 * writing.  The output rows are a whole row of y apart, so without the prefetch every run missed
 * in L2 in turn: the epilogue (mostly the copy into y) was 13-15% of Q8_0's samples at M = 2048
 * on 2 AMX cores, with it 8% (perf, session 32; the rows-outer order alone changed nothing).
 * Build with -DPN_EPI_PF=0 to leave the prefetch out. */
#ifndef PN_EPI_PF
#define PN_EPI_PF 16
#endif
static void epilogue(const pn_ctx *c, int64_t m0, int64_t mc, int ng, const int64_t *n0, const int *nr, float *cb,
                     int swiglu) {
    const int64_t stride = mc * c->f->nr, ncol = swiglu ? c->l->H : c->l->N;
    const int last = swiglu ? 2 * (ng - 1) : ng - 1; /* the run's last panel, in nr[] */
    for (int64_t i = 0; i < mc; i++) {
        if (PN_EPI_PF > 0 && i + PN_EPI_PF < mc) {
            const float *yn = c->y + (m0 + i + PN_EPI_PF) * ncol;
            for (int64_t j = n0[0]; j < n0[ng - 1] + nr[last]; j += 16) __builtin_prefetch(yn + j, 1, 3);
        }
        for (int q = 0; q < ng; q++) {
            const int g = swiglu ? 2 * q : q;
            epilogue_row(c, m0, mc, i, n0[q], nr[g], cb + g * stride, swiglu ? cb + (g + 1) * stride : NULL);
        }
    }
}

static void mul_task(void *p, int ith, int nth) {
    pn_ctx *c = (pn_ctx *)p;
    const h3_linear *l = c->l;
    const int swiglu = c->epi && c->epi->kind == H3_EPI_SWIGLU;
    /* panels: SwiGLU, NR columns of the half (rows n and H + n); else NR rows of one part */
    const int NR = c->f->nr, MC = c->f->mc;
    const int64_t rows = swiglu ? l->H : l->part_rows, per = (rows + NR - 1) / NR;
    const int64_t npan = swiglu ? per : per * l->nparts;
    char *buf = c->tws + (size_t)ith * thread_bytes(c->f);
    float *cb = (float *)(buf + H3_ALIGN_UP(c->f->buf_bytes, 64));
    const int64_t p0 = npan * ith / nth, p1 = npan * (ith + 1) / nth;
    const int G = group_of(c->f);
    for (int64_t m0 = 0; m0 < c->M; m0 += MC) {
        const int64_t mc = H3_MIN(MC, c->M - m0);
        for (int64_t pg = p0; pg < p1; pg += G) {
            const int ng = (int)H3_MIN(G, p1 - pg);
            int64_t n0[PN_GROUP_MAX], r0[2 * PN_GROUP_MAX];
            int nr[2 * PN_GROUP_MAX], np = 0;
            for (int q = 0; q < ng; q++) {
                const int64_t pi = pg + q, lc = (pi % per) * NR;
                n0[q] = (pi / per) * rows + lc;
                nr[np] = (int)H3_MIN(NR, rows - lc);
                r0[np++] = n0[q];
                if (swiglu) { nr[np] = nr[np - 1]; r0[np++] = l->H + n0[q]; }
            }
            panels(c, m0, mc, r0, nr, np, buf, cb);
            epilogue(c, m0, mc, ng, n0, nr, cb, swiglu);
        }
    }
}

h3_status pn_forward(const pn_fmt *f, const h3_linear *l, h3_pool *pool, const float *x, int64_t M, float *y,
                     const h3_epilogue *epi, void *ws, size_t ws_bytes, h3_err *err) {
    const int nth = h3_pool_threads(pool);
#ifdef H3_PN_PROFILE
    const double tws0 = h3_monotonic();
#endif
    const size_t need = pn_workspace_bytes(f, l, M, nth);
    void *own = NULL;
    h3_status st = h3_workspace(&ws, &ws_bytes, need, &own, "linear_forward", err);
    if (st) return st;
    pn_ctx c;
    memset(&c, 0, sizeof c);
    c.f = f; c.l = l; c.x = x; c.M = M; c.y = y; c.epi = epi;
    h3_arena ar = {(char *)ws, 0, ws_bytes};
    for (int s = 0; s < f->nslots; s++) {
        c.a[s] = h3_arena_take(&ar, a_bytes(f, M, l->K));
        c.d[s] = h3_arena_take(&ar, d_bytes(M, l->K));
        c.s[s] = f->sums ? h3_arena_take(&ar, s_bytes(f, M, l->K)) : NULL;
    }
    c.tws = h3_arena_take(&ar, (size_t)nth * thread_bytes(f));
#ifdef H3_PN_PROFILE /* a build for measuring the phases (CFLAGS=-DH3_PN_PROFILE): to stderr */
    const double t0 = h3_monotonic();
#endif
    h3_pool_run(pool, quant_task, &c);
#ifdef H3_PN_PROFILE
    const double t1 = h3_monotonic();
#endif
    h3_pool_run(pool, mul_task, &c);
#ifdef H3_PN_PROFILE
    fprintf(stderr, "pn M %lld N %lld K %lld threads %d: workspace %.2f ms quant %.2f ms mul %.2f ms\n",
            (long long)M, (long long)l->N, (long long)l->K, nth, (t0 - tws0) * 1e3, (t1 - t0) * 1e3,
            (h3_monotonic() - t1) * 1e3);
#endif
    h3_free(own);
    return H3_OK;
}

static pn_fmt fmt_of(const h3_linear *l, int64_t M) {
    return l->wtype == H3_DT_NVFP4 ? nvfp4_panel_fmt(l, M) : gguf_panel_fmt(l);
}

size_t gemm_panel_workspace_bytes(const h3_linear *l, int64_t M, int nth) {
    const pn_fmt f = fmt_of(l, M);
    return pn_workspace_bytes(&f, l, M, nth);
}

h3_status gemm_panel_forward(const h3_linear *l, h3_pool *pool, const float *x, int64_t M, float *y,
                             const h3_epilogue *epi, void *ws, size_t ws_bytes, h3_err *err) {
    const pn_fmt f = fmt_of(l, M);
    return pn_forward(&f, l, pool, x, M, y, epi, ws, ws_bytes, err);
}

/* ---- attaching a block-format linear (the parts' own checks are the format's) ---------- */

h3_status pn_attach_begin(const char *who, int nparts, int64_t N, int64_t K, int pair, h3_isa isa,
                          h3_linear **l, h3_err *err) {
    h3_status st = h3_isa_check(isa, err);
    if (st) return st;
    if (nparts < 1 || nparts > H3_LINEAR_MAX_PARTS)
        return h3_fail(err, H3_EINVAL, "%s: %d parts (1..%d)", who, nparts, H3_LINEAR_MAX_PARTS);
    if (N < 1 || K < 1 || N % nparts || (pair && (N % 2 || nparts > 2)))
        return h3_fail(err, H3_EINVAL, "%s: [%lld, %lld] does not split into %d%s parts", who, (long long)N,
                       (long long)K, nparts, pair ? " pair" : "");
    if (K % PN_ACT) return h3_fail(err, H3_EINVAL, "%s: K = %lld is not a multiple of 32", who, (long long)K);
    *l = calloc(1, sizeof **l);
    if (!*l) return h3_fail(err, H3_ENOMEM, "%s: out of memory", who);
    (*l)->nparts = nparts;
    return H3_OK;
}

h3_status pn_attach_end(const char *who, h3_status st, h3_linear *l, int wtype, int64_t N, int64_t K,
                        const float *bias, int pair, h3_isa isa, const void *w, size_t wbytes,
                        h3_linear **out, h3_err *err) {
    if (!st && bias) {
        l->bias = h3_alloc((size_t)N * sizeof(float));
        if (!l->bias) st = h3_fail(err, H3_ENOMEM, "%s: out of memory", who);
        else memcpy(l->bias, bias, (size_t)N * sizeof(float));
    }
    if (st) { h3_linear_free(l); return st; }
    l->N = N; l->K = K; l->Kp = K; l->wtype = wtype; l->pair = pair ? 1 : 0; l->isa = isa;
    l->H = pair ? N / 2 : N;
    l->kt = gemm_kernels_for(isa);
    l->part_rows = N / l->nparts;
    l->w = (void *)w;
    l->owns_w = 0;
    l->wbytes = wbytes;
    *out = l;
    return H3_OK;
}
