/* gemm_nvfp4.c — the NVFP4 linear: an h3_linear of wtype H3_DT_NVFP4 over a file's E2M1
 * codes and e4m3 block scales as stored (borrowed: nothing is widened or copied in memory;
 * only the AWQ pre-scale vectors and a 256-entry scale table per part are the linear's).
 * A weight type of h3_linear for the reason gemm_gguf.c gives: every caller's epilogues
 * (bias, SwiGLU pairs, gated residuals) and workspace sizing work unchanged.
 *
 *   y[M,N] = (x * pre)[M,K] . W[N,K]^T (+ bias) (+ epilogue)
 *
 * Run by the panel driver (gemm_panel.c, panel_impl.h) that the GGUF linear shares: each
 * row of x, times each distinct pre-scale of the parts (an activation "slot"), is
 * quantised per 32 inputs (nvfp4_quant_act_row_ref); each panel's 16 weight rows are
 * widened a K block at a time to int8 (nvfp4_decode_*: a few KB that stay in L1 while
 * PN_MC rows of x pass) and the micro-kernel of the path (nvfp4_impl.h) accumulates the
 * float sums.  The widening costs ~1/PN_MC of the dots.
 *
 * The bf16 route (h3_linear_nvfp4_route; the default on AMX) is another format of the same
 * driver: x (* pre) rounded to bf16 in the tile layout, 32-row panels decoded per 1024
 * inputs to e2m1 * e4m3 in bf16 (exact), the AMX bf16 micro-kernel (nvfp4_impl.h). */
#include "nvfp4_impl.h"
#include "panel_impl.h"

#include <math.h>
#include <stdlib.h>
#include <string.h>

#define NV_KB PN_KB /* inputs per decoded K block: 8 KB of int8 + 4 KB of scales */
_Static_assert(NV_NR == PN_NR && NV_ACT == PN_ACT, "the NVFP4 panel is the driver's");

void gemm_nvfp4_free(h3_linear *l) {
    if (!l->nv) return;
    for (int i = 0; i < l->nparts; i++) free(l->nv[i].pre);
    free(l->nv);
    l->nv = NULL;
}

h3_status h3_linear_attach_nvfp4(const h3_nvfp4_part *parts, int nparts, int64_t N, int64_t K, const float *bias,
                                 int pair, h3_isa isa, h3_linear **out, h3_err *err) {
    static const char who[] = "linear_attach_nvfp4";
    if (!parts || !out) return h3_fail(err, H3_EINVAL, "%s: NULL argument", who);
    h3_linear *l;
    h3_status st = pn_attach_begin(who, nparts, N, K, pair, isa, &l, err);
    if (st) return st;
    const int64_t rows = N / nparts;
    l->nv = calloc((size_t)nparts, sizeof *l->nv);
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
        v->scale_2 = p->scale_2;
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
    if (!st) { l->nv_route = H3_NVFP4_ROUTE_AUTO; l->nv_min_rows = H3_NVFP4_AMX_MIN_ROWS; }
    return pn_attach_end(who, st, l, H3_DT_NVFP4, N, K, bias, pair, isa, parts[0].codes, wb, out, err);
}

h3_status h3_linear_nvfp4_route(h3_linear *l, int route, int64_t min_rows, h3_err *err) {
    if (!l || l->wtype != H3_DT_NVFP4) return h3_fail(err, H3_EINVAL, "linear_nvfp4_route: not an NVFP4 linear");
    if (route < H3_NVFP4_ROUTE_AUTO || route > H3_NVFP4_ROUTE_BF16 || min_rows < 0)
        return h3_fail(err, H3_EINVAL, "linear_nvfp4_route: route %d, min_rows %lld", route, (long long)min_rows);
    l->nv_route = route;
    l->nv_min_rows = min_rows;
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

/* the sources of logical rows r0 .. r0 + nr - 1 (a panel's) */
static void panel_rows(const h3_linear *l, int64_t r0, int nr, nvfp4_row *rs) {
    int slot;
    for (int j = 0; j < nr; j++) rs[j] = row_at(l, r0 + j, &slot);
}

static int slot_of(const h3_linear *l, int64_t r) { return l->nv[r / l->part_rows].slot; }

/* the AWQ pre-scale of activation slot s: its first part's (NULL: none) */
static const float *pre_of(const h3_linear *l, int s) {
    for (int i = 0; i < l->nparts; i++)
        if (l->nv[i].slot == s) return l->nv[i].pre;
    return NULL;
}

/* row x times the slot's pre-scale (its first part's), quantised per 32 as a + 128 */
static void quant(const pn_fmt *f, const h3_linear *l, int s, const float *x, uint8_t *a, float *d, int32_t *as) {
    (void)f; (void)as;
    nvfp4_quant_act_row_ref(x, pre_of(l, s), l->K, a, d);
}

/* decode the panel's K block (q, sw, corr: NV_KB * NV_NR + 2 * (NV_KB / NV_SEG) * NV_NR * 4
 * bytes of buf) and run the path's micro-kernel over the block's rows */
static void kblock(const pn_fmt *f, const h3_linear *l, int64_t r0, int nr, int64_t k0, int nk, int mc,
                   const pn_act *act, char *buf, float *cb) {
    nvfp4_row rs[NV_NR];
    panel_rows(l, r0, nr, rs);
    int8_t *q = (int8_t *)buf;
    float *sw = (float *)(buf + NV_KB * NV_NR);
    int32_t *corr = (int32_t *)(sw + (NV_KB / NV_SEG) * NV_NR);
    const int nseg = nk / NV_SEG;
    ((nvfp4_decode_fn)f->decode)(rs, nr, k0 / NV_SEG, nseg, q, sw, corr);
    ((nvfp4_ukr_fn)f->ukr)(mc, nseg, act->a + k0, act->lda, act->d + k0 / NV_ACT, act->ldd, q, sw, corr, cb);
}

/* ---- the bf16 route (nvfp4_impl.h): x (* pre) rounded to bf16 in the tile layout, the
 * panel's 32 rows decoded to bf16 pairs a K block at a time, float sums times scale_2 ---- */

static void quant_bf16(const pn_fmt *f, const h3_linear *l, int s, const float *x, uint8_t *a, float *d,
                       int32_t *as) {
    (void)f; (void)d; (void)as;
    nvfp4_bquant_for(l->isa)(x, pre_of(l, s), l->K, (uint16_t *)a);
}

static void kblock_bf16(const pn_fmt *f, const h3_linear *l, int64_t r0, int nr, int64_t k0, int nk, int mc,
                        const pn_act *act, char *buf, float *cb) {
    nvfp4_row rs[NV_BNR];
    panel_rows(l, r0, nr, rs);
    uint16_t *b = (uint16_t *)buf;
    ((nvfp4_bdecode_fn)f->decode)(rs, nr, k0, nk, b);
    /* the group's chunk of input k0 (k0 * 32 values on); groups 32 rows of K values apart */
    const uint16_t *a = (const uint16_t *)act->a + k0 * PN_TILE;
    ((nvfp4_bukr_fn)f->ukr)(mc, nk, a, (act->lda / 2) * PN_TILE, b, l->nv[r0 / l->part_rows].scale_2, cb);
}

/* the route a call of M rows takes */
static int bf16_route(const h3_linear *l, int64_t M) {
    if (l->nv_route == H3_NVFP4_ROUTE_AUTO) return l->isa == H3_ISA_AMX && M >= l->nv_min_rows;
    return l->nv_route == H3_NVFP4_ROUTE_BF16;
}

pn_fmt nvfp4_panel_fmt(const h3_linear *l, int64_t M) {
    if (bf16_route(l, M)) {
        pn_fmt f = {.nslots = l->nv_slots, .sums = 0, .buf_bytes = (size_t)NV_BKB * NV_BNR * 2,
                    .nr = NV_BNR, .mc = NV_BMC, .kb = NV_BKB, .a_esize = 2, .a_tile = PN_TILE, .a_chunk = PN_TILE,
                    .quant = quant_bf16, .slot_of = slot_of, .kblock = kblock_bf16,
                    .ukr = (const void *)nvfp4_bukr_for(l->isa), .decode = (const void *)nvfp4_bdecode_for(l->isa)};
        return f;
    }
    pn_fmt f = {.nslots = l->nv_slots, .sums = 0,
                .buf_bytes = (size_t)NV_KB * NV_NR + 2 * (size_t)(NV_KB / NV_SEG) * NV_NR * 4,
                .nr = NV_NR, .mc = PN_MC, .kb = NV_KB, .a_esize = 1,
                .quant = quant, .slot_of = slot_of, .kblock = kblock,
                .ukr = (const void *)nvfp4_ukr_for(l->isa), .decode = (const void *)nvfp4_decode_for(l->isa)};
    return f;
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
