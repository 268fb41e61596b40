/* gemm.c — the GEMM's run-time driver: blocking, packing of A and threading (the weight
 * storage it multiplies by is gemm_weights.c).
 *
 *   y[M,N] = x[M,K] . W[N,K]^T (+ bias) (+ epilogue)
 *
 * Float modes keep W row-major ([N,K] f32/bf16/f16) and widen each KC x NC block to f32
 * panels in a per-thread buffer that stays in cache while every row block of x streams
 * past it (so bf16/f16 weights run at the f32 FMA rate for large M, and at half the
 * memory traffic for small M through the row-major gemv kernel).
 * Int modes pack W once, at create, into the micro-kernel's k-quad layout (see
 * gemm_impl.h), quantise x per row (phase 1, split by rows), then multiply (phase 2,
 * split by columns).  Each output element is computed by exactly one thread in a fixed
 * order, so results do not depend on the thread count. */
#include "gemm_linear.h"
#include "hadamard_impl.h"

#include <string.h>

typedef struct {
    const h3_linear *l;
    const gemm_kernels *kt;
    const float *x;
    int64_t M;
    float *y;
    int64_t ldy;            /* output row stride (N, or H for SWIGLU) */
    const h3_epilogue *epi;
    /* int phase 1 results: A quantised and packed once for the whole call, so that the
     * column blocks of phase 2 never repack it.  Per MR-row panel p:
     *   qa + p*MR*Kp + pc*MR: the K block at pc, [kb/4][MR][4] (or 64-k chunks of MR
     *                         rows when kt->int_a_tiles), kb = that block's length;
     *   sa/asum + (p*nsg + g)*MR: scale and int32 sum of each row over segment g. */
    int8_t *qa;
    float *sa;
    int32_t *asum;
    int64_t nsg, segeff;    /* segments over Kp and their length */
    int64_t nag;            /* activation scales per row */
    char *qtmp;             /* per thread: one quantised row [Kp] + its scales [nag] */
    /* float phase 1: A packed once for the call, per MR-row panel p and K block pc at
     * fa + p*MR*K + pc*MR ([kc][MR] f32, or the table's pack_a layout in that room) */
    float *fa;
    size_t qtmp_bytes;
    /* A given as conv rows (h3_linear_forward_rows) instead of x: gathered a span at a
     * time into rowtmp (per thread, rowtmp_bytes each; float modes use tws instead) */
    const h3_conv_rows *rows;
    char *rowtmp;
    size_t rowtmp_bytes;
    /* rotated linears (l->rot_group): each row is copied into rowtmp and rotated there */
    hadamard_row_fn rot;
    /* per-thread scratch */
    char *tws;
    size_t tws_bytes;
    int need_scratch;
    /* the low-rank addend's u = (x . A^T) * scale [M, R] (l->lora), added to each output
     * tile right after the base product; NULL without one */
    const float *lora_u;
    void *lora_ws;          /* the workspace's LoRA part (gemm_lora_workspace_bytes) */
    /* gemm_lora_fuses: the int kernel adds u . B^T as it stores the last K block, from
     * this operand (gemm_lora_u_operand) of row stride lora_ldu; else NULL */
    const void *lora_uop;
    int64_t lora_ldu;
} run_ctx;

static size_t float_thread_bytes(const gemm_kernels *kt, int64_t M, int need_scratch) {
    size_t b = (size_t)kt->nc * kt->kc * 4 + 256;
    if (need_scratch) b += (size_t)M * kt->nc * 4 + 128;
    return H3_ALIGN_UP(b, 64);
}
/* Large-M int4 calls widen one K block of a column block's nibbles at a time (ukr_i4w). */
static int widens_i4(const h3_linear *l, int64_t M) {
    return l->wtype == H3_DT_I4 && l->kt->ukr_i4w && M > 4 * (int64_t)l->kt->mr;
}
static size_t int_thread_bytes(const h3_linear *l, int64_t M, int need_scratch) {
    const gemm_kernels *kt = l->kt;
    size_t b = 256;
    if (widens_i4(l, M)) b += H3_ALIGN_UP((size_t)l->kci * kt->nc, 64);
    if (need_scratch) b += (size_t)M * kt->nc * 4 + 128;
    return H3_ALIGN_UP(b, 64);
}
static int64_t int_segeff(const h3_linear *l) { return H3_MIN(l->seg, l->kci); }
static size_t int_qtmp_bytes(const h3_linear *l) {
    return H3_ALIGN_UP((size_t)l->Kp, 64) + H3_ALIGN_UP((size_t)(l->Kp / l->act_group) * 4, 64);
}

static int needs_scratch(const h3_epilogue *epi) {
    return epi && (epi->kind == H3_EPI_RESID || epi->kind == H3_EPI_SWIGLU);
}

size_t h3_linear_workspace_bytes(const h3_linear *l, int64_t M, int nth,
                                 const h3_epilogue *epi) {
    if (!l || M < 0 || nth < 1) return 0;
    if ((l->wtype == H3_DT_GGUF || l->wtype == H3_DT_NVFP4) && l->lora) return gemm_lora_gguf_workspace_bytes(l, M, nth, epi);
    if (l->wtype == H3_DT_GGUF || l->wtype == H3_DT_NVFP4) return gemm_panel_workspace_bytes(l, M, nth);
    int ns = needs_scratch(epi);
    if (is_int(l->wtype)) {
        size_t Mp = (size_t)H3_ALIGN_UP(M, l->kt->mr);
        size_t nsg = (size_t)(l->Kp / int_segeff(l));
        size_t shared = H3_ALIGN_UP(Mp * (size_t)l->Kp, 64) + 2 * H3_ALIGN_UP(Mp * nsg * 4, 64);
        size_t rot = l->rot_group ? H3_ALIGN_UP((size_t)l->K * 4, 64) : 0; /* the rotated row */
        return gemm_lora_workspace_bytes(l, M, nth) + shared +
               (size_t)nth * (int_qtmp_bytes(l) + int_thread_bytes(l, M, ns) + rot);
    }
    size_t shared = M > l->kt->gemv_max_m
                        ? H3_ALIGN_UP((size_t)H3_ALIGN_UP(M, l->kt->mr) * (size_t)l->K * 4, 64) : 0;
    return gemm_lora_workspace_bytes(l, M, nth) + shared + (size_t)nth * float_thread_bytes(l->kt, M, ns);
}

/* A[m, k0 : k0+n] of conv rows into dst: the values an im2col row holds there. */
static void conv_row_span(const h3_conv_rows *a, int64_t m, int64_t k0, int64_t n, float *dst) {
    const int64_t Cin = a->Cin, t0 = a->r0 + m - a->pad;
    int64_t j = k0 / Cin, ci = k0 - j * Cin;
    if (a->dil == 1 && t0 + j >= 0 && t0 + (k0 + n - 1) / Cin < a->T) {
        memcpy(dst, a->x + (t0 + j) * Cin + ci, (size_t)n * 4); /* consecutive steps of x */
        return;
    }
    while (n > 0) {
        const int64_t len = H3_MIN(n, Cin - ci), t = t0 + j * a->dil;
        if (t < 0 || t >= a->T) memset(dst, 0, (size_t)len * 4);
        else h3_copy_tap(dst, a->x + t * Cin + ci, len);
        dst += len;
        n -= len;
        j++;
        ci = 0;
    }
}

/* Float phase 1 (split by MR-row panels): pack A once, so that the column blocks of
 * phase 2 (and both threads) share it instead of each repacking it.  Conv rows are
 * first gathered, one K block of the panel's rows, into the thread's (still unused)
 * phase-2 area: an L1-sized copy instead of an im2col buffer in memory. */
static void fpack_task(void *p, int ith, int nth) {
    run_ctx *c = (run_ctx *)p;
    const gemm_kernels *kt = c->kt;
    const int MR = kt->mr;
    const int64_t K = c->l->K, P = H3_CEIL_DIV(c->M, MR);
    float *tmp = (float *)(c->tws + (size_t)ith * c->tws_bytes); /* MR*kc <= nc*kc floats */
    for (int64_t pp = P * ith / nth; pp < P * (ith + 1) / nth; pp++) {
        const int64_t rows = H3_MIN(MR, c->M - pp * MR);
        for (int64_t pc = 0; pc < K; pc += kt->kc) {
            int64_t kc = H3_MIN(kt->kc, K - pc);
            float *dst = c->fa + pp * MR * K + pc * MR;
            const float *src;
            int64_t lds;
            if (c->rows) {
                for (int64_t i = 0; i < rows; i++) conv_row_span(c->rows, pp * MR + i, pc, kc, tmp + i * kc);
                src = tmp;
                lds = kc;
            } else {
                src = c->x + pp * MR * K + pc;
                lds = K;
            }
            if (kt->pack_a) {
                kt->pack_a(src, lds, rows, kc, MR, dst);
                continue;
            }
            for (int64_t k = 0; k < kc; k++) {
                int i = 0;
                for (; i < rows; i++) dst[k * MR + i] = src[i * lds + k];
                for (; i < MR; i++) dst[k * MR + i] = 0.0f;
            }
        }
    }
}

/* Phase 1 (split by rows): quantise each row (copied and rotated first for a rotated
 * linear), scatter it into its MR-row panel's layout of every K block, and record
 * per-segment scales and sums.  Split by rows, not by panels: at small M there are fewer
 * panels than threads (M = 128 on AMX's 32-row panels: 4 panels for 16 threads), and the
 * rotation makes a row's work several passes over it while 12 of 16 threads wait (convrot
 * at M = 128 on the 16-core SPR measured 0.59x h3cy int8 for K = 7168 with the panel
 * split).  Each row's bytes are the same whichever thread writes them. */
static void quant_task(void *p, int ith, int nth) {
    run_ctx *c = (run_ctx *)p;
    const h3_linear *l = c->l;
    const int MR = c->kt->mr, tiles = c->kt->int_a_tiles;
    const int64_t Kp = l->Kp, kci = l->kci, seg = c->segeff, nsg = c->nsg;
    const int64_t Mp = H3_CEIL_DIV(c->M, MR) * MR;
    int8_t *row = (int8_t *)(c->qtmp + (size_t)ith * c->qtmp_bytes);
    float *rs = (float *)(row + H3_ALIGN_UP((size_t)Kp, 64));
    float *xr = c->rowtmp ? (float *)(c->rowtmp + (size_t)ith * c->rowtmp_bytes) : NULL;
    for (int64_t m = Mp * ith / nth; m < Mp * (ith + 1) / nth; m++) {
        const int64_t pp = m / MR;
        const int i = (int)(m % MR);
        int8_t *panel = c->qa + pp * MR * Kp;
        if (m < c->M) {
            if (c->rows) conv_row_span(c->rows, m, 0, l->K, xr);
            else if (c->rot) memcpy(xr, c->x + m * l->K, (size_t)l->K * 4);
            if (c->rot) c->rot(xr, l->K, l->rot_group); /* x H, as W was stored rotated */
            c->kt->quant_row(xr ? xr : c->x + m * l->K, l->K, Kp, l->act_group, row, rs);
        } else {
            memset(row, 0, (size_t)Kp);
            for (int64_t g = 0; g < c->nag; g++) rs[g] = 0.0f;
        }
        for (int64_t pc = 0; pc < Kp; pc += kci) {
            int64_t kb = H3_MIN(kci, Kp - pc);
            int8_t *blk = panel + pc * MR;
            if (tiles) {
                for (int64_t k = 0; k < kb; k += 64)
                    memcpy(blk + gemm_int_a_offset(k, i, kb, MR), row + pc + k, (size_t)H3_MIN(64, kb - k));
            } else {
                for (int64_t q = 0; q < kb / 4; q++) memcpy(blk + (q * MR + i) * 4, row + pc + q * 4, 4);
            }
        }
        for (int64_t g = 0; g < nsg; g++) {
            int32_t sum = 0;
            const int8_t *r = row + g * seg;
            for (int64_t k = 0; k < seg; k++) sum += r[k];
            c->asum[(pp * nsg + g) * MR + i] = sum;
            c->sa[(pp * nsg + g) * MR + i] = rs[(g * seg) / l->act_group];
        }
    }
}

/* Multiply rows [m0,m1) of x (m0 a multiple of MR) by logical W rows [r0, r0+w) into C (ldc). */
static void float_block(run_ctx *c, char *tw, int64_t m0, int64_t m1, int64_t r0, int64_t w, float *C,
                        int64_t ldc) {
    const h3_linear *l = c->l;
    const gemm_kernels *kt = c->kt;
    const int MR = kt->mr, NR = kt->nr;
    const int64_t K = l->K, M = c->M;
    /* rows [r0, r0+w) lie in one part (mul_task splits the columns at part borders) */
    int64_t lr0;
    const void *wb = rows_at(l, r0, &lr0);
    if (M <= kt->gemv_max_m) {
        kt->gemv(l->wtype, M, K, c->x, K, wb, K, lr0, lr0 + w, C, ldc);
        return;
    }
    float *bp = (float *)tw;
    const int64_t n_valid = l->nparts ? l->part_rows : l->N; /* rows past the weight are zero-filled */
    if (kt->begin) kt->begin();
    for (int64_t pc = 0; pc < K; pc += kt->kc) {
        int64_t kc = H3_MIN(kt->kc, K - pc);
        int64_t wpad = H3_ALIGN_UP(w, NR);
        kt->unpack(l->wtype, wb, K, lr0, wpad, H3_MIN(n_valid, lr0 + w), pc, kc, bp, NR);
        for (int64_t ic = m0; ic < m1; ic += kt->mc) {
            int64_t mc = H3_MIN(kt->mc, m1 - ic);
            /* each A micro-panel (L1) meets every B panel of the block (L2); C is then
             * walked along its rows */
            for (int64_t ir = 0; ir < mc; ir += MR) {
                int mr = (int)H3_MIN(MR, mc - ir);
                const float *ap = c->fa + ((ic + ir) / MR) * MR * K + pc * MR;
                /* the next A micro-panel comes from L3: fetch a slice of it with each
                 * tile of this one (a cold panel otherwise stalls the kernel ~10%) */
                const char *nxt = (const char *)(ap + MR * K);
                const int64_t nbytes = ir + MR < mc ? (int64_t)MR * kc * 4 : 0;
                const int64_t step = H3_ALIGN_UP(H3_CEIL_DIV(nbytes, H3_CEIL_DIV(w, NR)), 64);
                int64_t pf = 0;
                for (int64_t jr = 0; jr < w; jr += NR) {
                    int nr = (int)H3_MIN(NR, w - jr);
                    const float *b = bp + (jr / NR) * kc * NR;
                    for (int64_t e = H3_MIN(pf + step, nbytes); pf < e; pf += 64) __builtin_prefetch(nxt + pf, 0, 3);
                    kt->ukr_f32(MR, NR, kc, ap, b, C + (ic + ir) * ldc + jr, ldc, mr, nr, pc > 0);
                }
            }
        }
    }
}

void gemm_widen_i4(const uint8_t *src, int64_t kq, int nr, uint8_t *dst) {
    const int64_t row = (int64_t)nr * 4;
    for (int64_t j = 0; j < kq / 2; j++, src += row, dst += 2 * row)
        for (int64_t t = 0; t < row; t++) {
            dst[t] = src[t] & 15;
            dst[row + t] = src[t] >> 4;
        }
}

/* Rows [m0,m1) (m0 a multiple of MR) times packed rows [pr0, pr0+w) (panel aligned)
 * into C (ldc).  A panels come packed from phase 1; per K block, each MR-row A panel (L1)
 * meets every B panel of the column block (L2).  lc0 >= 0 (a multiple of NR): the logical
 * column of C's first, whose LoRA (c->lora_uop) the kernel adds as it stores the last K
 * block (the fused up product); -1: none. */
static void int_block(run_ctx *c, char *tw, int64_t m0, int64_t m1, int64_t pr0, int64_t w, float *C,
                      int64_t ldc, int64_t lc0) {
    const h3_linear *l = c->l;
    const gemm_kernels *kt = c->kt;
    const int MR = kt->mr, NR = kt->nr;
    const int64_t Kp = l->Kp, M = c->M, kci = l->kci, segeff = c->segeff, nsg = c->nsg;
    const int i4 = l->wtype == H3_DT_I4;
    const int64_t ng = i4 ? Kp / l->group_size : 1;
    const uint8_t *pk = (const uint8_t *)l->w;
    gemm_ukr_int_fn ukr = i4 ? kt->ukr_i4 : kt->ukr_i8;
    /* int4 at large M: widen the block's nibbles once per K block into tw (kci x w bytes,
     * L2) and run the int8-layout kernel, rather than widening per micro-kernel call
     * (M/MR times per panel); the widening costs ~1% of the block's arithmetic */
    const int widen = widens_i4(l, M);
    if (widen) ukr = kt->ukr_i4w;
    const int kind = i4 ? (widen ? 2 : 1) : 0;   /* ukr, for ukr_int_lora */
    if (kt->begin) kt->begin();
    /* Small M is weight-bound: walk the weights 8 panels at a time over all of K.  Large
     * M: each A panel (L1) meets every B panel of the block (L2).  Either way every output
     * element sees its K blocks in the same order (same bits). */
    const int small = M <= 4 * (int64_t)MR;
    /* small M: groups of 8 weight panels, so that the K block of the (mostly padding)
     * A panel is reused from L1 while each panel's weights stream contiguously */
    const int64_t jstep = small ? 8 * (int64_t)NR : w;
    for (int64_t j0 = 0; j0 < w; j0 += jstep) {
        for (int64_t pc = 0; pc < Kp; pc += kci) {
            /* Kp is a multiple of segeff, and of kci when seg > kci (choose_kci) */
            const int64_t kb = H3_MIN(kci, Kp - pc);
            const int nseg = (int)(kb / segeff);
            const int fuse = lc0 >= 0 && pc + kb >= Kp;   /* the last K block: add the LoRA */
            if (widen)
                for (int64_t jr = j0; jr < H3_MIN(w, j0 + jstep); jr += NR) {
                    const int64_t p = (pr0 + jr) / NR;
                    gemm_widen_i4(pk + ((p * (Kp / 8) + pc / 8) * NR) * 4, kb / 4, NR,
                                  (uint8_t *)tw + (jr - j0) * kb);
                }
            for (int64_t ir = m0; ir < m1; ir += MR) {
                int mr = (int)H3_MIN(MR, m1 - ir);
                const int64_t pa = ir / MR;
                const int8_t *ap = c->qa + pa * MR * Kp + pc * MR;
                const float *sab = c->sa + (pa * nsg + pc / segeff) * MR;
                const int32_t *asb = c->asum + (pa * nsg + pc / segeff) * MR;
                /* large M: fetch the next A panel slice by slice while this one works */
                const char *nxt = (const char *)(ap + MR * Kp);
                const int64_t nbytes = !small && ir + MR < m1 ? (int64_t)MR * H3_MIN(kci, Kp - pc) : 0;
                const int64_t step = H3_ALIGN_UP(H3_CEIL_DIV(nbytes, H3_CEIL_DIV(w, NR)), 64);
                int64_t pf = 0;
                for (int64_t jr = j0; jr < H3_MIN(w, j0 + jstep); jr += NR) {
                    for (int64_t e = H3_MIN(pf + step, nbytes); pf < e; pf += 64) __builtin_prefetch(nxt + pf, 0, 3);
                    int64_t p = (pr0 + jr) / NR;
                    int nr = (int)H3_MIN(NR, w - jr);
                    const uint8_t *b;
                    const float *sw;
                    int64_t sws;
                    if (i4) {
                        b = widen ? (const uint8_t *)tw + (jr - j0) * kb : pk + ((p * (Kp / 8) + pc / 8) * NR) * 4;
                        sw = l->wscale + (p * ng + pc / l->group_size) * NR;
                        sws = NR;
                    } else {
                        b = pk + ((p * (Kp / 4) + pc / 4) * NR) * 4;
                        sw = l->wscale + p * NR;
                        sws = 0;
                    }
                    gemm_lora_tile lt;
                    if (fuse && gemm_lora_tile_at(l->lora, c->lora_uop, c->lora_ldu, ir, lc0 + jr, &lt))
                        kt->ukr_int_lora(kind, MR, NR, nseg, (int)(segeff / 4), ap, b, sab, asb, sw, sws,
                                         C + ir * ldc + jr, ldc, mr, nr, pc > 0, &lt);
                    else
                        ukr(MR, NR, nseg, (int)(segeff / 4), ap, b, sab, asb, sw, sws, C + ir * ldc + jr, ldc, mr,
                            nr, pc > 0);
                }
            }
        }
    }
}

/* One output run: rows [m0, m1), output columns [o0, o0+w) from logical rows r0 (and
 * r0+H for SWIGLU). */
static void run_block(run_ctx *c, char *tw, char *scratch, float *lora_scratch, int64_t m0, int64_t m1, int64_t o0,
                      int64_t r0, int64_t w) {
    const h3_linear *l = c->l;
    const int kind = c->epi ? c->epi->kind : H3_EPI_NONE;
    const int64_t ldy = c->ldy;
    float *S = (float *)scratch;
    const int64_t lds = c->kt->nc;
    const int intm = is_int(l->wtype);
    /* the LoRA inside the int kernel (c->lora_uop) where its NR-column panels line up with
     * the int ones (the SwiGLU value half at an H that is no multiple of NR does not: there
     * gemm_lora_add's second pass, which handles any column offset) */
#define MUL(rowstart, target, ld)                                                                                   \
    do {                                                                                                            \
        const int fused = c->lora_uop && (rowstart) % c->kt->nr == 0;                                              \
        if (intm) int_block(c, tw, m0, m1, prow_of(l, rowstart), w, target, ld, fused ? (rowstart) : -1);          \
        else float_block(c, tw, m0, m1, rowstart, w, target, ld);                                                   \
        if (c->lora_u && !fused) gemm_lora_add(l->lora, c->lora_u, target, ld, m0, m1, rowstart, w, lora_scratch); \
    } while (0)
    if (kind == H3_EPI_NONE) {
        MUL(r0, c->y + o0, ldy);
        if (l->bias)
            for (int64_t m = m0; m < m1; m++)
                for (int64_t j = 0; j < w; j++) c->y[m * ldy + o0 + j] += l->bias[r0 + j];
    } else if (kind == H3_EPI_RESID) {
        MUL(r0, S, lds);
        const h3_epilogue *e = c->epi;
        for (int64_t m = m0; m < m1; m++) {
            const float *g = e->gate ? e->gate + (e->gate_row ? e->gate_row[m] : m) * l->N + o0 : NULL;
            for (int64_t j = 0; j < w; j++) {
                float v = S[m * lds + j] + (l->bias ? l->bias[r0 + j] : 0.0f);
                float rsd = e->resid[m * ldy + o0 + j];
                c->y[m * ldy + o0 + j] = g ? rsd + g[j] * v : rsd + v;
            }
        }
    } else { /* SWIGLU: gate -> y, value -> scratch */
        MUL(r0, c->y + o0, ldy);
        MUL(r0 + l->H, S, lds);
        for (int64_t m = m0; m < m1; m++)
            c->kt->swiglu_row(c->y + m * ldy + o0, S + m * lds, w, l->bias ? l->bias + r0 : NULL,
                              l->bias ? l->bias + l->H + r0 : NULL);
    }
#undef MUL
}

/* Row groups of the phase-2 thread grid (a power of two dividing nth; the rest split the
 * columns).  Int modes split the rows until a thread's slice of packed A (rows x Kp bytes)
 * fits in L2 (~2 MB): it then stays there across the thread's column blocks instead of
 * streaming from L3 for each one.  At most nth/2 groups, since each weight block is read
 * once per group.  Measured on the 16-core Sapphire Rapids (AMX int8, the four DiT GEMMs
 * at M = 2048): one group 201-236 ms, 8 groups 171-173 ms.  Float modes keep one group
 * (fp32 no change, AMX bf16 slower).  Same bits either way: every output element is
 * still one micro-kernel sequence over K in the same order. */
static int row_groups(const run_ctx *c, int nth) {
    const int64_t MR = c->kt->mr, Pm = H3_CEIL_DIV(c->M, MR);
    if (nth < 4 || !is_int(c->l->wtype) || c->M <= 4 * MR) return 1;
    int gm = 1;
    while (2 * gm <= nth / 2 && nth % (2 * gm) == 0 && 2 * gm <= Pm &&
           H3_CEIL_DIV(c->M, gm) * c->l->Kp > ((int64_t)2 << 20))
        gm *= 2;
    return gm;
}

static void mul_task(void *p, int ith, int nth) {
    run_ctx *c = (run_ctx *)p;
    const h3_linear *l = c->l;
    const int NR = c->kt->nr, NC = c->kt->nc;
    char *tw = c->tws + (size_t)ith * c->tws_bytes;
    float *lora_scratch = c->lora_u ? gemm_lora_scratch(l, c->lora_ws, c->M, ith) : NULL;
    char *scratch = NULL;
    if (c->need_scratch) {
        /* the scratch [M][NC] sits at the end of the thread's area (see *_thread_bytes) */
        size_t sb = H3_ALIGN_UP((size_t)c->M * NC * 4, 64);
        scratch = tw + c->tws_bytes - sb - 64;
    }
    /* Output segments: (out col, logical row, length).  Pair layouts keep the halves apart
     * so that integer panels never straddle them. */
    int64_t seg_o[H3_LINEAR_MAX_PARTS], seg_r[H3_LINEAR_MAX_PARTS], seg_n[H3_LINEAR_MAX_PARTS];
    int nsegs;
    const int kind = c->epi ? c->epi->kind : H3_EPI_NONE;
    if (kind == H3_EPI_SWIGLU || (!l->pair && !l->nparts)) {
        nsegs = 1; seg_o[0] = 0; seg_r[0] = 0; seg_n[0] = kind == H3_EPI_SWIGLU ? l->H : l->N;
    } else if (!l->pair) { /* rows in parts: no float tile straddles two addresses */
        nsegs = l->nparts;
        for (int s = 0; s < nsegs; s++) { seg_o[s] = seg_r[s] = s * l->part_rows; seg_n[s] = l->part_rows; }
    } else {
        nsegs = 2;
        seg_o[0] = 0; seg_r[0] = 0; seg_n[0] = l->H;
        seg_o[1] = l->H; seg_r[1] = l->H; seg_n[1] = l->H;
    }
    int64_t P = 0;
    for (int s = 0; s < nsegs; s++) P += H3_CEIL_DIV(seg_n[s], NR);
    /* threads form gm row groups x gn column groups (see row_groups) */
    const int gm = row_groups(c, nth), gn = nth / gm, ig = ith / gn, jg = ith % gn;
    const int64_t MR = c->kt->mr, Pm = H3_CEIL_DIV(c->M, MR);
    const int64_t m0 = H3_MIN(c->M, Pm * ig / gm * MR), m1 = H3_MIN(c->M, Pm * (ig + 1) / gm * MR);
    if (m0 >= m1) return;
    int64_t p0 = P * jg / gn, p1 = P * (jg + 1) / gn;
    int64_t base = 0;
    for (int s = 0; s < nsegs; s++) {
        int64_t ps = H3_CEIL_DIV(seg_n[s], NR);
        int64_t a = H3_MAX(p0, base), b = H3_MIN(p1, base + ps);
        for (int64_t q = a; q < b; q += NC / NR) {
            int64_t qe = H3_MIN(b, q + NC / NR);
            int64_t off = (q - base) * NR;
            int64_t w = H3_MIN((qe - base) * NR, seg_n[s]) - off;
            run_block(c, tw, scratch, lora_scratch, m0, m1, seg_o[s] + off, seg_r[s] + off, w);
        }
        base += ps;
    }
}

/* What conv rows need beyond h3_linear_workspace_bytes: int modes gather each row before
 * quantising it (one row per thread); float modes at gemv sizes gather the M rows. */
static size_t rows_extra_bytes(const h3_linear *l, int64_t M, int nth) {
    if (is_int(l->wtype)) return l->rot_group ? 0 : (size_t)nth * H3_ALIGN_UP((size_t)l->K * 4, 64);
    return M <= l->kt->gemv_max_m ? H3_ALIGN_UP((size_t)M * (size_t)l->K * 4, 64) : 0;
}

size_t h3_linear_rows_workspace_bytes(const h3_linear *l, int64_t M, int nth, const h3_epilogue *epi) {
    if (!l || M < 0 || nth < 1) return 0;
    return h3_linear_workspace_bytes(l, M, nth, epi) + rows_extra_bytes(l, M, nth);
}

static h3_status forward(const h3_linear *l, h3_pool *pool, const float *x, const h3_conv_rows *rows,
                         int64_t M, float *y, const h3_epilogue *epi, void *ws, size_t ws_bytes,
                         h3_err *err);

h3_status h3_linear_forward(const h3_linear *l, h3_pool *pool, const float *x, int64_t M,
                            float *y, const h3_epilogue *epi, void *ws, size_t ws_bytes,
                            h3_err *err) {
    if (!x) return h3_fail(err, H3_EINVAL, "linear_forward: NULL argument");
    return forward(l, pool, x, NULL, M, y, epi, ws, ws_bytes, err);
}

h3_status h3_linear_forward_rows(const h3_linear *l, h3_pool *pool, const h3_conv_rows *a, int64_t M,
                                 float *y, const h3_epilogue *epi, void *ws, size_t ws_bytes,
                                 h3_err *err) {
    if (!a || !a->x) return h3_fail(err, H3_EINVAL, "linear_forward: NULL argument");
    if (l && (a->Cin < 1 || a->k < 1 || a->dil < 1 || a->pad < 0 || a->T < 1 || a->r0 < 0 ||
              (int64_t)a->k * a->Cin != l->K))
        return h3_fail(err, H3_EINVAL, "linear_forward: conv rows do not match the weight (K = %lld)",
                       (long long)l->K);
    return forward(l, pool, a->x, a, M, y, epi, ws, ws_bytes, err);
}

static h3_status forward(const h3_linear *l, h3_pool *pool, const float *x, const h3_conv_rows *rows,
                         int64_t M, float *y, const h3_epilogue *epi, void *ws, size_t ws_bytes,
                         h3_err *err) {
    if (!l || !x || !y) return h3_fail(err, H3_EINVAL, "linear_forward: NULL argument");
    if (M < 0) return h3_fail(err, H3_EINVAL, "linear_forward: M = %lld < 0", (long long)M);
    if (M == 0) return H3_OK;
    int kind = epi ? epi->kind : H3_EPI_NONE;
    if (kind < H3_EPI_NONE || kind > H3_EPI_RESID) return h3_fail(err, H3_EINVAL, "linear_forward: unknown epilogue %d", kind);
    if (kind == H3_EPI_SWIGLU && !l->pair)
        return h3_fail(err, H3_EINVAL, "linear_forward: the SwiGLU epilogue needs a linear created with pair=1");
    if (kind == H3_EPI_RESID) {
        if (!epi->resid) return h3_fail(err, H3_EINVAL, "linear_forward: the residual epilogue needs resid");
        if (epi->gate && epi->gate_row) {
            for (int64_t m = 0; m < M; m++)
                if (epi->gate_row[m] < 0 || epi->gate_row[m] >= epi->gate_rows)
                    return h3_fail(err, H3_EINVAL, "linear_forward: gate_row[%lld] = %d outside [0, %lld)",
                                   (long long)m, epi->gate_row[m], (long long)epi->gate_rows);
        } else if (epi->gate && epi->gate_rows < M) {
            return h3_fail(err, H3_EINVAL, "linear_forward: gate has %lld rows, need %lld",
                           (long long)epi->gate_rows, (long long)M);
        }
    }
    if (rows && l->lora) return h3_fail(err, H3_EINVAL, "linear_forward: a LoRA on conv rows is not supported");
    h3_status st = h3_isa_check(l->isa, err);
    if (st) return st;
    if (l->wtype == H3_DT_GGUF || l->wtype == H3_DT_NVFP4) {
        if (rows)
            return h3_fail(err, H3_EINVAL, "linear_forward: a%s linear does not take conv rows",
                           l->wtype == H3_DT_GGUF ? " GGUF" : "n NVFP4");
        if (l->lora) return gemm_lora_gguf_forward(l, pool, x, M, y, epi, ws, ws_bytes, err);
        return gemm_panel_forward(l, pool, x, M, y, epi, ws, ws_bytes, err);
    }
    const int nth = h3_pool_threads(pool);
    size_t need = rows ? h3_linear_rows_workspace_bytes(l, M, nth, epi) : h3_linear_workspace_bytes(l, M, nth, epi);
    void *own = NULL;
    if (!ws) {
        own = ws = alloc_streamed(l, need); /* tens of MB for large M: few first-touch faults */
        ws_bytes = need;
        if (!ws) return h3_fail(err, H3_ENOMEM, "linear_forward: cannot allocate %zu bytes of workspace", need);
    } else if (ws_bytes < need) {
        return h3_fail(err, H3_EINVAL, "linear_forward: workspace has %zu bytes, need %zu", ws_bytes, need);
    } else if (((uintptr_t)ws) & 63) {
        return h3_fail(err, H3_EINVAL, "linear_forward: workspace must be 64-byte aligned");
    }
    run_ctx c;
    memset(&c, 0, sizeof c);
    if (l->lora) { /* u first, at the front of the workspace; the base product's arena after it */
        const size_t lb = gemm_lora_workspace_bytes(l, M, nth);
        float *u = (float *)ws;
        if (!l->lora_a8) { /* else from the quantised rows, below */
            st = gemm_lora_u(l, pool, x, M, u, ws, err);
            if (st) { h3_free(own); return st; }
        }
        c.lora_u = u;
        c.lora_ws = ws;
        if (gemm_lora_fuses(l)) c.lora_uop = gemm_lora_u_operand(l, ws, M, &c.lora_ldu);
        ws = (char *)ws + lb;
        ws_bytes -= lb;
    }
    c.l = l; c.kt = l->kt; c.x = x; c.M = M; c.y = y; c.epi = epi;
    c.ldy = kind == H3_EPI_SWIGLU ? l->H : l->N;
    c.need_scratch = needs_scratch(epi);
    h3_arena ar = {(char *)ws, 0, ws_bytes};
    if (is_int(l->wtype)) {
        const int64_t Mp = H3_ALIGN_UP(M, l->kt->mr);
        c.nag = l->Kp / l->act_group;
        c.segeff = int_segeff(l);
        c.nsg = l->Kp / c.segeff;
        c.qa = h3_arena_take(&ar, (size_t)Mp * (size_t)l->Kp);
        c.sa = h3_arena_take(&ar, (size_t)Mp * (size_t)c.nsg * 4);
        c.asum = h3_arena_take(&ar, (size_t)Mp * (size_t)c.nsg * 4);
        c.qtmp_bytes = int_qtmp_bytes(l);
        c.qtmp = h3_arena_take(&ar, c.qtmp_bytes * (size_t)nth);
        c.tws_bytes = int_thread_bytes(l, M, c.need_scratch);
        c.tws = h3_arena_take(&ar, c.tws_bytes * (size_t)nth);
        c.rows = rows;
        if (l->rot_group) c.rot = hadamard_row_for(l->isa);
        if (rows || l->rot_group) { /* one row per thread (rows_extra_bytes, workspace_bytes) */
            c.rowtmp_bytes = H3_ALIGN_UP((size_t)l->K * 4, 64);
            c.rowtmp = h3_arena_take(&ar, c.rowtmp_bytes * (size_t)nth);
        }
        h3_pool_run(pool, quant_task, &c);
        if (l->lora_a8) { /* the LoRA's u = x . A^T from the rows just quantised */
            run_ctx d = c;
            d.l = l->lora_a8; d.kt = d.l->kt; d.y = (float *)c.lora_u; d.ldy = l->lora->R;
            d.epi = NULL; d.need_scratch = 0; d.rows = NULL;
            d.lora_u = NULL; d.lora_ws = NULL; d.lora_uop = NULL;
            h3_pool_run(pool, mul_task, &d);
            gemm_lora_u_finish(l, pool, M, d.y, c.lora_ws);
        }
    } else {
        if (rows && M <= l->kt->gemv_max_m) { /* gemv reads rows of x: gather the few */
            float *xg = h3_arena_take(&ar, (size_t)M * (size_t)l->K * 4);
            for (int64_t m = 0; m < M; m++) conv_row_span(rows, m, 0, l->K, xg + m * l->K);
            c.x = xg;
        } else {
            c.rows = rows;
        }
        if (M > l->kt->gemv_max_m)
            c.fa = h3_arena_take(&ar, (size_t)H3_ALIGN_UP(M, l->kt->mr) * (size_t)l->K * 4);
        c.tws_bytes = float_thread_bytes(l->kt, M, c.need_scratch);
        c.tws = h3_arena_take(&ar, c.tws_bytes * (size_t)nth);
        if (c.fa) h3_pool_run(pool, fpack_task, &c);
    }
    h3_pool_run(pool, mul_task, &c);
    h3_free(own);
    return H3_OK;
}
