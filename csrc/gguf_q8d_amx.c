/* gguf_q8d_amx.c — Q8_0 on AMX tiles read from the file's blocks as stored: the weights are
 * the tiles' A operand, the activations their B.
 *
 * Why: a Q8_0 block is a float16 scale and 32 signed bytes, so 16 weight rows' bytes of one
 * block are already an A tile (16 rows x 32 bytes, the rows one tensor row apart).  The
 * per-segment kernel (gguf_amx.c) has them as B instead, which needs AMX's VNNI layout
 * ([quad][16 columns][4]): a decode and a signed copy of each 16-row K block per call, which
 * at the text encoder's 128 rows serve only 8 row tiles (where h3cy trailed ggml's AMX kernels,
 * which repack at load; in place measured 1.04-1.21x the decoded panels, docs/gguf.md session
 * 29).  Here the activations take the
 * VNNI layout instead, once per forward (the driver's 16-row tile layout: per 16 rows,
 * [K / 4][16 rows][4], so one segment of a row tile is 512 contiguous bytes), and no weight
 * byte is copied.
 *
 * The product of step (row tile i, segment s) is C[n][m] = sum_k q[n][k] a[m][k]: 16 weight
 * rows by 16 rows of x, the exact int32 dots of gguf_impl.h's order (Q8_0: off 128, so
 * sum u a - 128 asum = sum q a).  The fold is gguf_amx.c's with the roles turned: register
 * h_n holds weight row n's group sums for the 16 rows of x, h_n = fma((float)dot, sc_n, h_n)
 * per segment, and at a group's end cb_t[n][m] = fma(d_m, h_n[m], cb_t[n][m]), the float sums
 * kept transposed ([16][ldc]: the driver's cb_t) -- per element the reference's operations,
 * so its bits.  The 4 C tiles rotate as in gguf_amx.c (product, store 2 steps later, fold
 * the step after).  Rows of x past mr are the layout's zero rows: their sums are not written.
 * Every K block of 256 inputs or more takes q8d_units8 (the steps of a group unrolled, below);
 * other lengths the run-time walk q8d_any.
 *
 * gguf_ukr_amx_q8d(mr, nseg, w, ldw, a, ldg, d, ldd, cbt, ldc):
 *   w   the K block's first Q8_0 block of 16 weight rows, ldw bytes apart (all 16 readable;
 *       15 * ldw < 2^31: the scales' gather takes 32-bit offsets);
 *   a   the first row tile's K block in the tile layout, the next row tile ldg bytes on;
 *   d   + i * ldd: row i's activation scales from the K block's first group. */
#include "gguf_impl.h"

#include <immintrin.h>
#include <string.h>

#include "amx_tiles.h"

#define Q8_BYTES 34 /* a Q8_0 block: float16 scale, 32 int8 */

/* steps between a tile's product and its store (gguf_amx.c's GGUF_AMX_LAG) */
#define Q8D_LAG 2

#define Q8D_H16(X) X(0) X(1) X(2) X(3) X(4) X(5) X(6) X(7) X(8) X(9) X(10) X(11) X(12) X(13) X(14) X(15)
#define Q8D_ZERO(r) h##r = _mm512_setzero_ps();
#define Q8D_SEG(r) \
    h##r = _mm512_fmadd_ps(_mm512_cvtepi32_ps(_mm512_load_si512((const void *)(dots + r * 16))), \
                           _mm512_set1_ps(sc[s * 16 + r]), h##r);
#define Q8D_END(r)                                                                              \
    {                                                                                         \
        float *c = cbt + r * ldc + i0;                                                        \
        _mm512_mask_storeu_ps(c, live, _mm512_fmadd_ps(dv, h##r, _mm512_maskz_loadu_ps(live, c))); \
    }

/* step t's stored dots (row tile fi, segment fs) into the group sums; at a group's end (of
 * 256 inputs, or of the call) cb_t += d * the sums for the tile's live rows */
#define Q8D_FOLD(t)                                                                                   \
    do {                                                                                          \
        const int s = fs;                                                                         \
        const int64_t i0 = fi * 16;                                                               \
        const int32_t *dots = buf[(t) & 3];                                                       \
        if (s % gs == 0) { Q8D_H16(Q8D_ZERO) }                                                          \
        Q8D_H16(Q8D_SEG)                                                                                \
        if ((s + 1) % gs == 0 || s + 1 == nseg) {                                                 \
            const int nl = mr - (int)i0 < 16 ? mr - (int)i0 : 16;                                 \
            const __mmask16 live = (__mmask16)((1u << nl) - 1u);                                  \
            float dl[16] __attribute__((aligned(64)));                                            \
            for (int m = 0; m < 16; m++) dl[m] = m < nl ? d[(i0 + m) * ldd + s / gs] : 0.0f;      \
            const __m512 dv = _mm512_load_ps(dl);                                                 \
            Q8D_H16(Q8D_END)                                                                            \
        }                                                                                         \
    } while (0)

/* any K block length (fewer than 8 segments, or not a multiple of 8: only in tests' small
 * shapes), the steps' tiles and the group ends found at run time */
static void q8d_any(int mr, int nseg, const uint8_t *w, int64_t ldw, const int8_t *a, int64_t ldg, const float *d,
                    int64_t ldd, float *cbt, int64_t ldc, const float *sc) {
    int32_t buf[4][256] __attribute__((aligned(64)));
    __m512 h0, h1, h2, h3, h4, h5, h6, h7, h8, h9, h10, h11, h12, h13, h14, h15;
    const int gs = GGUF_AG / 32, tiles = (mr + 15) / 16, steps = tiles * nseg;
    Q8D_H16(Q8D_ZERO)
    int64_t ti = 0, fi = 0; /* the row tile and segment of step t, and of the step folded */
    int ts = 0, fs = 0;
    for (int t = 0; t < steps + Q8D_LAG + 1; t++) {
        if (t < steps) {
            amx_rot_product(t & 3, w + ts * Q8_BYTES + 2, ldw, a + ti * ldg + ts * 512, 64);
            if (++ts == nseg) { ts = 0; ti++; }
        }
        const int st = t - Q8D_LAG;
        if (st >= 0 && st < steps) amx_rot_store(st & 3, buf[st & 3]);
        MEMORY_FENCE();
        if (st >= 1) {
            Q8D_FOLD(st - 1);
            if (++fs == nseg) { fs = 0; fi++; }
        }
    }
}

/* Units of 8 segments (every K block of 256 inputs or more): the 8 steps of a unit unrolled,
 * so each step's C tile, its store's and its fold's buffer and the unit's start and end are
 * constants.  Step o of unit u is multiplied at position o, stored at o + 2 and folded at
 * o + 3 (positions 0..2 store and fold the previous unit's last steps).  The walk above finds
 * them at run time with a switch per tile instruction and per-step bookkeeping: on one SPR core
 * its vector side alone took 11-15 ns a step against 6-8 for bench/amx_q8_fold.c's fold, and
 * its tile side 14-16 against 10; the whole kernel here took 22-24 ns a step where the walk
 * took 24-26 (session 31, bench/gguf_q8d_kernel.c). */
typedef struct {
    const uint8_t *wa; /* the unit's first segment's 32 bytes, rows ldw apart */
    const int8_t *b;   /* its first segment's activations (512 bytes a segment) */
    const float *sc;   /* its weight scales, [segment][16] */
    float *cb;         /* cb_t at the row tile's first row */
    const float *d;    /* row i0's activation scale of the unit's group, the next row ldd on */
    int nl;            /* live rows of the tile */
} q8d_unit;

#define U8_P(C, A, B, o) /* the product of the unit's segment o into C tile C (A, B: 4, 6 or 5, 7) */ \
    _tile_loadd(A, cu.wa + (o) * Q8_BYTES, ldw);                                              \
    _tile_loadd(B, cu.b + (o) * 512, 64);                                                        \
    _tile_zero(C);                                                                               \
    _tile_dpbssd(C, A, B);
#define U8_S(C) _tile_stored(C, buf[C], 64); MEMORY_FENCE();
#define U8_F1(r) h##r = _mm512_fmadd_ps(_mm512_cvtepi32_ps(_mm512_load_si512((const void *)(dots + r * 16))), \
                                        _mm512_set1_ps(scs[r]), h##r);
#define U8_F(B, U, o) /* fold buf[B], segment o of unit U */                                          \
    {                                                                                            \
        const int32_t *dots = buf[B];                                                            \
        const float *scs = (U).sc + (o) * 16;                                                    \
        Q8D_H16(U8_F1)                                                                           \
    }
#define U8_E1(r)                                                                                 \
    {                                                                                            \
        float *c = pu.cb + r * ldc;                                                              \
        _mm512_mask_storeu_ps(c, live, _mm512_fmadd_ps(dv, h##r, _mm512_maskz_loadu_ps(live, c))); \
    }
#define U8_END() /* unit pu's sums into its cb_t */                                                  \
    {                                                                                            \
        const __mmask16 live = (__mmask16)((1u << pu.nl) - 1u);                                  \
        const __m512 dv = _mm512_mask_i32gather_ps(_mm512_setzero_ps(), live, drows, pu.d, 4);   \
        Q8D_H16(U8_E1)                                                                           \
    }

static void q8d_units8(int mr, int nseg, const uint8_t *w, int64_t ldw, const int8_t *a, int64_t ldg, const float *d,
                       int64_t ldd, float *cbt, int64_t ldc, const float *sc) {
    int32_t buf[4][256] __attribute__((aligned(64)));
    __m512 h0, h1, h2, h3, h4, h5, h6, h7, h8, h9, h10, h11, h12, h13, h14, h15;
    Q8D_H16(Q8D_ZERO)
    const int tiles = (mr + 15) / 16, units = tiles * (nseg / 8);
    /* the 16 rows' activation scales: a gather, 32-bit offsets (ldd < 2^27 inputs / 256) */
    const __m512i drows = _mm512_mullo_epi32(_mm512_setr_epi32(0, 1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11, 12, 13, 14, 15),
                                             _mm512_set1_epi32((int)ldd));
    q8d_unit cu = {0}, pu = {0};
    int g0 = 0, ti = 0; /* the unit's group (first segment) and row tile: row tiles inner, as the walk */
    for (int u = 0; u < units; u++) {
        cu.wa = w + g0 * Q8_BYTES + 2;
        cu.b = a + ti * ldg + (int64_t)g0 * 512;
        cu.sc = sc + (int64_t)g0 * 16;
        cu.cb = cbt + (int64_t)ti * 16;
        cu.d = d + (int64_t)ti * 16 * ldd + g0 / 8;
        cu.nl = mr - ti * 16 < 16 ? mr - ti * 16 : 16;
        if (++ti == tiles) { ti = 0; g0 += 8; }
        const int prev = u > 0;
        U8_P(0, 4, 6, 0) if (prev) { U8_S(2) U8_F(1, pu, 5) }
        U8_P(1, 5, 7, 1) if (prev) { U8_S(3) U8_F(2, pu, 6) }
        U8_P(2, 4, 6, 2) U8_S(0) if (prev) { U8_F(3, pu, 7) U8_END() }
        U8_P(3, 5, 7, 3) U8_S(1) Q8D_H16(Q8D_ZERO) U8_F(0, cu, 0)
        U8_P(0, 4, 6, 4) U8_S(2) U8_F(1, cu, 1)
        U8_P(1, 5, 7, 5) U8_S(3) U8_F(2, cu, 2)
        U8_P(2, 4, 6, 6) U8_S(0) U8_F(3, cu, 3)
        U8_P(3, 5, 7, 7) U8_S(1) U8_F(0, cu, 4)
        pu = cu;
    }
    /* the last unit's steps 5..7 */
    U8_S(2) U8_F(1, pu, 5)
    U8_S(3) U8_F(2, pu, 6)
    U8_F(3, pu, 7) U8_END()
}

/* bench builds compare the walks: -DQ8D_ANY_ONLY takes the run-time walk for every K block */
void gguf_ukr_amx_q8d(int mr, int nseg, const uint8_t *w, int64_t ldw, const int8_t *a, int64_t ldg, const float *d,
                      int64_t ldd, float *cbt, int64_t ldc) {
    float sc[(GGUF_KB / 32) * 16] __attribute__((aligned(64))); /* [segment][weight row] */
    /* the 16 rows' float16 scales of each segment: one gather and one vcvtph2ps (exact, as
     * h3_f16_to_f32; a scalar call per scale cost ~2 per step at 8 row tiles a call) */
    const __m512i rows = _mm512_mullo_epi32(_mm512_setr_epi32(0, 1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11, 12, 13, 14, 15),
                                            _mm512_set1_epi32((int)ldw));
    for (int s = 0; s < nseg; s++) {
        const __m512i h = _mm512_i32gather_epi32(rows, (const void *)(w + s * Q8_BYTES), 1);
        _mm512_store_ps(sc + s * 16, _mm512_cvtph_ps(_mm512_cvtepi32_epi16(h)));
    }
    const amx_tilecfg cfg = amx_rot_cfg(32); /* A: the weights' 32 bytes; B: the activations' 8 quads */
    amx_load_config(&cfg);
#ifndef Q8D_ANY_ONLY
    if (nseg % 8 == 0 && GGUF_AG / 32 == 8) {
        q8d_units8(mr, nseg, w, ldw, a, ldg, d, ldd, cbt, ldc, sc);
        return;
    }
#endif
    q8d_any(mr, nseg, w, ldw, a, ldg, d, ldd, cbt, ldc, sc);
}
