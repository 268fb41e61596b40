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
 * Run by the panel driver (gemm_panel.c, panel_impl.h) that the NVFP4 linear shares:
 * each row of x is quantised per group of 256 values to int8 with one float scale, with the
 * integer sums of each 16 and 32 (gguf_quant_act_row_ref; gguf_impl.h says why 256); each panel of 16
 * weight rows is decoded a K block at a time (gguf_decode_panel_*) to unsigned int8 with a
 * scale (and offset) per segment, and the path's micro-kernel (gguf_impl.h: the float order
 * every path shares) runs a block of rows of x over it (256-1024 by K: gguf_rows_per_block).
 * Parts may differ in type (a panel never spans two parts). */
#include "gguf_impl.h"
#include "panel_impl.h"

#include <stdlib.h>
#include <string.h>

_Static_assert(GGUF_NR == PN_NR && 2 * GGUF_NR <= PN_NR_MAX && GGUF_KB == PN_KB, "the GGUF panel is the driver's");
/* the driver keeps K / PN_ACT floats of scales a row; a K block is whole groups */
_Static_assert(GGUF_AG % PN_ACT == 0 && GGUF_KB % GGUF_AG == 0, "a row's group scales fit the driver's");

h3_status h3_linear_attach_gguf(const void *const *parts, const int *types, int nparts, int64_t N,
                                int64_t K, const float *bias, int pair, h3_isa isa,
                                h3_linear **out, h3_err *err) {
    static const char who[] = "linear_attach_gguf";
    if (!parts || !types || !out) return h3_fail(err, H3_EINVAL, "%s: NULL argument", who);
    h3_linear *l;
    h3_status st = pn_attach_begin(who, nparts, N, K, pair, isa, &l, err);
    if (st) return st;
    size_t wb = 0;
    for (int i = 0; i < nparts; i++) {
        int blk, bytes;
        if (!parts[i]) { st = h3_fail(err, H3_EINVAL, "linear_attach_gguf: part %d is NULL", i); break; }
        if (!gguf_is_quant(types[i]) || !h3_gguf_type_size(types[i], &blk, &bytes)) {
            st = h3_fail(err, H3_EINVAL, "linear_attach_gguf: part %d: type %d is not a quantised type h3cy reads",
                         i, types[i]);
            break;
        }
        if (!gguf_kind_of(types[i])) {
            st = h3_fail(err, H3_EINVAL, "linear_attach_gguf: part %d: type %d has no GEMM", i, types[i]);
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
    if (!st) { /* the run-time choices' defaults: zero but these */
        l->gguf_q8d = l->gguf_pf = 1;
        l->gguf_kq = 2;
    }
    return pn_attach_end(who, st, l, H3_DT_GGUF, N, K, bias, pair, isa, parts[0], wb, out, err);
}

/* the stored blocks of logical row r and their type */
static const uint8_t *grow_at(const h3_linear *l, int64_t r, int *type) {
    const int64_t p = r / l->part_rows;
    *type = l->gtype[p];
    return (const uint8_t *)l->part[p] + (r % l->part_rows) * l->grow_bytes[p];
}

static int slot_of(const h3_linear *l, int64_t r) { (void)l; (void)r; return 0; }

static void quant(const pn_fmt *f, const h3_linear *l, int s, const float *x, uint8_t *a, float *d, int32_t *as) {
    (void)f; (void)s;
    gguf_quant_for(l->isa)(x, l->K, (int8_t *)a, d, as);
}

/* the bytes one decoded 16-row K block takes in buf: u, then sc and mn */
#define GGUF_DEC_BYTES ((size_t)GGUF_KB * GGUF_NR + 2 * (size_t)(GGUF_KB / GGUF_SUB) * GGUF_NR * 4)

/* the AMX path's K-quant form (gguf_kq_amx.c): integer scales and mins per 32, d and -dmin
 * per 256, after the decoded panel in buf */
#define GGUF_KQ_BYTES (2 * (size_t)(GGUF_KB / 32) * GGUF_NR + 2 * (size_t)(GGUF_KB / 256) * GGUF_NR * 4)

/* decode weight rows [r0, r0 + nr) (nr <= 16) of the K block into buf (GGUF_DEC_BYTES); rows
 * (if not NULL) gets the rows' raw blocks of the K block and *type their type */
static const gguf_kind *decode(const pn_fmt *f, const h3_linear *l, int64_t r0, int nr, int64_t k0, int nk, char *buf,
                               const uint8_t **u, const float **sc, const float **mn, const uint8_t **rows_out,
                               int *type_out, int no_scales) {
    const uint8_t *rows[GGUF_NR];
    int type = 0, blk = 1, bytes = 0;
    for (int j = 0; j < nr; j++) rows[j] = grow_at(l, r0 + j, &type); /* a panel never spans two parts */
    h3_gguf_type_size(type, &blk, &bytes);
    for (int j = 0; j < nr; j++) rows[j] += k0 / blk * bytes;
    float *s = (float *)(buf + GGUF_KB * GGUF_NR), *m = s + (GGUF_KB / GGUF_SUB) * GGUF_NR;
    int k4v = 0; /* Q4_K / Q5_K / Q6_K's float scales 16 columns a vector where the path has AVX-512 */
#if H3_X86
    k4v = !no_scales && (type == H3_GGUF_Q4_K || type == H3_GGUF_Q5_K || type == H3_GGUF_Q6_K) &&
          (l->isa == H3_ISA_AVX512 || l->isa == H3_ISA_AMX) && f->decode == (const void *)gguf_decode_panel_avx512;
#endif
    ((gguf_decode_fn)f->decode)(type, rows, nr, nk, (uint8_t *)buf, no_scales || k4v ? NULL : s,
                                no_scales || k4v ? NULL : m);
#if H3_X86
    if (k4v) gguf_float_scales_avx512(type, rows, nr, nk, s, m);
#endif
    *u = (const uint8_t *)buf;
    *sc = s;
    *mn = m;
    if (rows_out) memcpy(rows_out, rows, sizeof(rows[0]) * (size_t)nr);
    if (type_out) *type_out = type;
    return gguf_kind_of(type);
}

/* Prefetch weight rows [r0, r0 + nr)'s next K block (after k0's): the rows are nr streams
 * ldw bytes apart, which a panel's calls walk K block by K block; called before a K block's
 * kernel, whose run hides the memory's latency from the next call's reads.  At the text
 * encoder's M = 128 the decoder waited on them (13-15% of the samples on 2 Zen 4 cores, 0.08x
 * the kernel warm): with the prefetch Q4_K ran 1.24x, Q5_K 1.15x, Q6_K 1.13x, Q8_0 1.01-1.05x
 * (bench/gguf_switch_ab.py --switch PF, docs/gguf.md session 30); M = 2048 unchanged.  Into
 * the outer caches (locality 1): into L1 (3) the 9-17 KB a call evicted the kernel's
 * activations first (Q8_0 0.99x, Q4_K 1.07x).  Not on the amx path by default (gguf_pf 1):
 * on the 16-core SPR it measured 0.96-1.05x (Q8_0 in place 0.955-0.99x), its hardware
 * prefetchers already keeping up; gguf_pf 2 prefetches there too. */
static void prefetch_next_kblock(const h3_linear *l, int64_t r0, int nr, int64_t k0, int kb) {
    const int64_t k1 = k0 + kb;
    if (!l->gguf_pf || (l->gguf_pf == 1 && l->isa == H3_ISA_AMX) || k1 >= l->K) return;
    int type, blk = 1, bytes = 0;
    const uint8_t *w = grow_at(l, r0, &type); /* a panel never spans two parts */
    h3_gguf_type_size(type, &blk, &bytes);
    const int64_t ldw = l->grow_bytes[r0 / l->part_rows], off = k1 / blk * bytes;
    const int64_t len = H3_MIN((int64_t)kb, l->K - k1) / blk * bytes;
    for (int j = 0; j < nr; j++) {
        const uintptr_t a = (uintptr_t)(w + j * ldw + off), e = a + (uintptr_t)len;
        for (uintptr_t p = a & ~(uintptr_t)63; p < e; p += 64) __builtin_prefetch((const void *)p, 0, 1);
    }
}

/* decode the panel's K block and run the path's micro-kernel over the block's rows: one
 * 16-row panel, or (AVX-512 VNNI: f->nr = 32) two, whose kernel shares each broadcast
 * activation between them (+5-6% on one Zen 4 core, bench/gguf_ukr_avx2.c -DUKR_X2) */
static void kblock(const pn_fmt *f, const h3_linear *l, int64_t r0, int nr, int64_t k0, int nk, int mc,
                   const pn_act *act, char *buf, float *cb) {
    const uint8_t *u, *u1;
    const float *sc, *mn, *sc1, *mn1;
    const uint8_t *rows[GGUF_NR];
    int type = 0;
    const int nr0 = H3_MIN(nr, GGUF_NR);
    prefetch_next_kblock(l, r0, nr, k0, f->kb);
    grow_at(l, r0, &type);
    int kq = 0; /* the amx path's Q4_K / Q5_K order: its own scales, the decoder's u alone */
#if H3_X86
    kq = f->ukr == (const void *)gguf_ukr_amx && l->gguf_kq && (type == H3_GGUF_Q4_K || type == H3_GGUF_Q5_K);
#endif
    const gguf_kind *t = decode(f, l, r0, nr0, k0, nk, buf, &u, &sc, &mn, rows, &type, kq);
    const int8_t *a = (const int8_t *)act->a + k0;
    const float *d = act->d + k0 / GGUF_AG;
    const int32_t *as = act->as + (t->seg == 16 ? k0 / 16 : l->K / 16 + k0 / 32);
    /* the K-quant form's integer scales and mins, d and -dmin (GGUF_KQ_BYTES after the panel) */
    uint8_t *isc = (uint8_t *)buf + GGUF_DEC_BYTES, *imn = isc + (GGUF_KB / 32) * GGUF_NR;
    float *ds = (float *)(imn + (GGUF_KB / 32) * GGUF_NR), *dm = ds + (GGUF_KB / 256) * GGUF_NR;
    if (f->a_tile) { /* the kq route (kq_route): the activations in the 32-row tile layout */
        const int8_t *at = (const int8_t *)act->a + k0 / 64 * GGUF_KQ_CHUNK;
        const int64_t ldt = act->lda * GGUF_KQ_TILE;
#if H3_X86
        if (kq) {
            gguf_kq_scales_avx512(type, rows, nr0, nk, isc, imn, ds, dm);
            gguf_ukr_amx_kq_tiles(mc, nk / 256, at, ldt, d, act->ldd, as, act->ldas, u, isc, imn, ds, dm, cb);
            return;
        }
#endif
        gguf_kq_scales(type, rows, nr0, nk, isc, imn, ds, dm); /* kq 3 off AMX: the scalar kernel */
        gguf_ukr_kq_tiles_ref(mc, nk / 256, at, ldt, d, act->ldd, as, act->ldas, u, isc, imn, ds, dm, cb);
        return;
    }
#if H3_X86
    if (kq) {
        gguf_kq_scales_avx512(type, rows, nr0, nk, isc, imn, ds, dm);
        gguf_ukr_amx_kq(mc, nk / 256, a, act->lda, d, act->ldd, as, act->ldas, u, isc, imn, ds, dm, cb);
        return;
    }
    if (f->nr == 2 * GGUF_NR) { /* a second panel past 16 rows (else the first again, its sums unused) */
        if (nr > GGUF_NR)
            decode(f, l, r0 + GGUF_NR, nr - GGUF_NR, k0, nk, buf + GGUF_DEC_BYTES, &u1, &sc1, &mn1, NULL, NULL, 0);
        else { u1 = u; sc1 = sc; mn1 = mn; }
        gguf_ukr_avx512_x2(mc, t, nk / t->seg, a, act->lda, d, act->ldd, as, act->ldas, u, sc, t->has_min ? mn : NULL, u1,
                           sc1, t->has_min ? mn1 : NULL, cb);
        return;
    }
#endif
    ((gguf_ukr_fn)f->ukr)(mc, t, nk / t->seg, a, act->lda, d, act->ldd, as, act->ldas, u, sc, t->has_min ? mn : NULL, cb);
}

/* ---- the Q8_0 tile route (gguf_q8d_amx.c): the file's blocks as the tiles' A operand ---- */

/* row x quantised signed (the AVX-512 kernels' quantiser stores a + 128: not for the tiles),
 * group by group (each group's scale is its own, so the values and d are the row's), written
 * in the 16-row tile layout: input k at (k / 4) * 64 + k % 4 from the row's first chunk; x
 * NULL: a zero row past M */
static void quant_tiles(const pn_fmt *f, const h3_linear *l, int s, const float *x, uint8_t *a, float *d,
                        int32_t *as) {
    (void)f; (void)s; (void)as;
    const int64_t K = l->K;
    if (!x) {
        for (int64_t j = 0; j < K / 4; j++) memset(a + j * 64, 0, 4);
        return;
    }
    int8_t q[GGUF_AG];
    int32_t sums[GGUF_AG / 16 + GGUF_AG / 32];
    const gguf_quant_fn qf = h3_isa_x86_simd(l->isa) ? H3_ON_X86(gguf_quant_act_row_avx2) : gguf_quant_act_row_ref;
    for (int64_t g = 0; g < K; g += GGUF_AG) {
        const int64_t n = H3_MIN(GGUF_AG, K - g);
        qf(x + g, n, q, d + g / GGUF_AG, sums);
        for (int64_t j = 0; j < n / 4; j++) memcpy(a + (g / 4 + j) * 64, q + 4 * j, 4);
    }
}

/* row x quantised signed with int32 sums (as quant does on the amx path; kq 3 elsewhere too),
 * its values written in the kq route's 32-row tile layout: input k at (k / 64) * GGUF_KQ_CHUNK + k % 64
 * from the row's first chunk (a_row: the row's 64 bytes in its tile); x NULL: a zero row past M */
static void quant_kq_tiles(const pn_fmt *f, const h3_linear *l, int s, const float *x, uint8_t *a, float *d,
                           int32_t *as) {
    (void)f; (void)s;
    const int64_t K = l->K, cs = GGUF_KQ_CHUNK;
    if (!x) {
        for (int64_t j = 0; j < K / 64; j++) memset(a + j * cs, 0, 64);
        return;
    }
    int8_t q[GGUF_AG];
    int32_t sums[GGUF_AG / 16 + GGUF_AG / 32];
    const gguf_quant_fn qf = h3_isa_x86_simd(l->isa) ? H3_ON_X86(gguf_quant_act_row_avx2) : gguf_quant_act_row_ref;
    for (int64_t g = 0; g < K; g += GGUF_AG) { /* a group's scale and sums are its own */
        const int64_t n = H3_MIN(GGUF_AG, K - g);
        qf(x + g, n, q, d + g / GGUF_AG, sums);
        memcpy(as + g / 16, sums, sizeof(int32_t) * (size_t)(n / 16));
        memcpy(as + K / 16 + g / 32, sums + n / 16, sizeof(int32_t) * (size_t)(n / 32));
        for (int64_t j = 0; j < n / 64; j++) memcpy(a + (g / 64 + j) * cs, q + 64 * j, 64);
    }
}

/* the tile kernel over the panel's rows in place: 16 weight rows of one part, ldw bytes apart;
 * a partial panel (the part's last, fewer than 16 rows) is copied with zero rows after it */
static void kblock_q8d(const pn_fmt *f, const h3_linear *l, int64_t r0, int nr, int64_t k0, int nk, int mc,
                       const pn_act *act, char *buf, float *cb) {
    int type;
    prefetch_next_kblock(l, r0, nr, k0, f->kb);
    const uint8_t *w = grow_at(l, r0, &type) + k0 / 32 * 34;
    int64_t ldw = l->grow_bytes[r0 / l->part_rows];
    if (nr < GGUF_NR || ldw > INT32_MAX / GGUF_NR) { /* (rows past 2^27 values: the kernel's 32-bit offsets) */
        const size_t rb = (size_t)nk / 32 * 34;
        for (int j = 0; j < GGUF_NR; j++) {
            if (j < nr) memcpy(buf + j * rb, w + j * ldw, rb);
            else memset(buf + j * rb, 0, rb);
        }
        w = (const uint8_t *)buf;
        ldw = (int64_t)rb;
    }
    gguf_ukr_q8d_fn k = gguf_ukr_q8d_ref;
#if H3_X86
    if (f->ukr == (const void *)gguf_ukr_amx) k = gguf_ukr_amx_q8d;
#endif
    k(mc, nk / 32, w, ldw, (const int8_t *)act->a + k0 * 16, act->lda * 16, act->d + k0 / GGUF_AG, act->ldd, cb, mc);
}

/* whether a linear takes a tile route: every part of type t0 or t1, and the switch at on_amx
 * on the amx path or at anywhere on every path (there the route's scalar kernel, for tests) */
static int tile_route(const h3_linear *l, gguf_ukr_fn k, int t0, int t1, int sw, int on_amx, int anywhere) {
    for (int i = 0; i < l->nparts; i++)
        if (l->gtype[i] != t0 && l->gtype[i] != t1) return 0;
    if (sw == anywhere) return 1;
#if H3_X86
    if (sw == on_amx && k == gguf_ukr_amx) return 1;
#endif
    (void)k; (void)on_amx;
    return 0;
}

/* a linear whose parts are all Q8_0 takes the route on the amx path (q8d 1, the default), on
 * every path (q8d 2: the scalar kernel off AMX, for tests) or on none (0) */
static int q8d_route(const h3_linear *l, gguf_ukr_fn k) {
    return tile_route(l, k, H3_GGUF_Q8_0, H3_GGUF_Q8_0, l->gguf_q8d, 1, 2);
}

int h3_linear_gguf_q8d(const h3_linear *l) {
    return l && l->wtype == H3_DT_GGUF && q8d_route(l, gguf_ukr_for(l->isa));
}

/* a linear whose parts are all Q4_K / Q5_K takes the kq route -- gguf_kq_amx.c's kernel on the
 * activations in the 32-row tile layout -- on the amx path (kq 2, the default), on every path
 * (kq 3: its scalar kernel off AMX, for tests) or on none (kq 0 or 1: the rows in place) */
static int kq_route(const h3_linear *l, gguf_ukr_fn k) {
    return tile_route(l, k, H3_GGUF_Q4_K, H3_GGUF_Q5_K, l->gguf_kq, 2, 3);
}

int h3_linear_gguf_kq_tiles(const h3_linear *l) {
    return l && l->wtype == H3_DT_GGUF && kq_route(l, gguf_ukr_for(l->isa));
}

/* Rows of x per block: each decoded K block of a panel serves them all, so more rows mean
 * less decode per row (Q8_0's decode was 18% of the AVX-512 VNNI kernel's time at 256 rows,
 * Zen 4), but each panel rereads the block's activations (rows x K bytes) and beyond a few MB
 * they drop out of the last-level cache: measured on 2 Zen 4 cores at M = 2048, 1024 rows made
 * qkv (K = 5376, 5.5 MB) 1.2x faster and down (K = 14336, 14.7 MB) 1.25x slower.  So as
 * many rows as keep the block within 4 MB, 256 to 1024, a multiple of 32. */
#ifndef H3_GGUF_BLOCK_BYTES /* build-time knobs, for measuring other caches (CFLAGS=-D...) */
#define H3_GGUF_BLOCK_BYTES ((int64_t)4 << 20)
#endif
#ifndef H3_GGUF_MIN_ROWS
#define H3_GGUF_MIN_ROWS PN_MC
#endif
static int gguf_rows_per_block(int64_t K) {
    const int64_t mc = ((int64_t)(H3_GGUF_BLOCK_BYTES) / K) / 32 * 32;
    return (int)H3_MAX(H3_GGUF_MIN_ROWS, H3_MIN(4 * PN_MC, mc));
}

/* Column panels per pass over the K blocks (gemm_panel.c): 4 on the AMX tiles, whose A tile
 * loads from L3 were half the K-quant kernel's time at the 768-row blocks (one SPR core,
 * bench/gguf_ukr_avx2.c -DUKR_KQ with the loads taken out: 2.2x); with each K block's
 * activations reused from L2 by 4 panels the driver ran Q4_K / Q5_K 1.2-1.5x and Q8_0 1.15x
 * faster on one core, on 16 within the host's noise (docs/gguf.md, session 27).  1 elsewhere:
 * on 2 Zen 4 cores 4 measured 0.86x (session 26).  h3_linear_set_gguf_opts overrides it. */
static int gguf_group(gguf_ukr_fn k) {
#if H3_X86
    if (k == gguf_ukr_amx) return 4;
#endif
    (void)k;
    return 1;
}

pn_fmt gguf_panel_fmt(const h3_linear *l) {
    const gguf_ukr_fn k = gguf_ukr_for(l->isa);
    /* the general form (the decoded panels, activations row by row), which the routes adjust */
    pn_fmt f = {.nslots = 1, .sums = 3, .buf_bytes = GGUF_DEC_BYTES, .nr = GGUF_NR, .mc = gguf_rows_per_block(l->K),
                .kb = GGUF_KB, .a_esize = 1, .group = l->gguf_group ? l->gguf_group : gguf_group(k), .quant = quant,
                .slot_of = slot_of, .kblock = kblock, .ukr = (const void *)k,
                .decode = (const void *)gguf_decode_for(l->isa)};
    if (q8d_route(l, k)) { /* no decode: buf only for a partial panel's copy (16 rows of a K block) */
        _Static_assert(GGUF_DEC_BYTES >= (size_t)GGUF_NR * (GGUF_KB / 32) * 34, "a partial panel fits buf");
        f.sums = 0;
        f.a_tile = 16;
        f.a_chunk = 4;
        f.cb_t = 1;
        f.quant = quant_tiles;
        f.kblock = kblock_q8d;
        return f;
    }
    if (kq_route(l, k)) { /* one panel a call, the activations in the 32-row tile layout */
        f.buf_bytes += GGUF_KQ_BYTES;
        f.a_tile = GGUF_KQ_TILE;
        f.a_chunk = 64;
        f.quant = quant_kq_tiles;
        return f;
    }
#if H3_X86
    if (k == gguf_ukr_avx512) { /* two panels a kernel call: the AVX-512 VNNI kernel's x2 form */
        f.buf_bytes = 2 * GGUF_DEC_BYTES;
        f.nr = 2 * GGUF_NR;
    }
    if (k == gguf_ukr_amx) f.buf_bytes += GGUF_KQ_BYTES; /* the K-quant scales after the decoded panel (kblock) */
#endif
    return f;
}

h3_status h3_linear_set_gguf_opts(h3_linear *lin, int kq, int group, int q8d, h3_err *err) {
    if (!lin || lin->wtype != H3_DT_GGUF) return h3_fail(err, H3_EINVAL, "linear_set_gguf_opts: not a GGUF linear");
    if (kq < 0 || kq > 3 || group < 0 || group > PN_GROUP_MAX || q8d < 0 || q8d > 2)
        return h3_fail(err, H3_EINVAL, "linear_set_gguf_opts: kq %d (0..3), group %d (0..%d), q8d %d (0..2)", kq,
                       group, PN_GROUP_MAX, q8d);
    lin->gguf_kq = kq;
    lin->gguf_group = group;
    lin->gguf_q8d = q8d;
    return H3_OK;
}

h3_status h3_linear_set_gguf_prefetch(h3_linear *lin, int on, h3_err *err) {
    if (!lin || lin->wtype != H3_DT_GGUF) return h3_fail(err, H3_EINVAL, "linear_set_gguf_prefetch: not a GGUF linear");
    if (on < 0 || on > 2) return h3_fail(err, H3_EINVAL, "linear_set_gguf_prefetch: on %d (0, 1 or 2)", on);
    lin->gguf_pf = on;
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
