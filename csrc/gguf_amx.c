/* gguf_amx.c — the GGUF micro-kernel on AMX tiles (Sapphire Rapids and later): per 16 rows
 * of x and segment (the type's 16 or 32 inputs with one weight scale), one tile product gives
 * the exact int32 dots of the 16 rows by the panel's 16 columns; they are stored (1 KB) and
 * folded into the float sums with AVX-512 in the reference's order (gguf_impl.h), so the
 * results are the reference's bits, as on every other path.
 *
 * Tiles (configured per call: the K depth is the segment):
 *   C  tmm0..3: 16x16 int32, one per step, in rotation;
 *   A  tmm4, tmm5: 16 rows x SEG bytes of the activations, read in place (stride K);
 *   B  tmm6, tmm7: SEG/4 quads x 64 bytes, a segment of the decoded panel, which is already
 *      AMX's VNNI B layout ([quad][16 columns][4], 64-byte rows).
 * TDPBSSD (signed x signed): the panel's u = q + off are turned back into the signed q once
 * per call (gguf_panel_signed_avx2), so a dot is sum q a, exactly the reference's
 * sum u a - off * asum (|q a| summed over 32 inputs < 2^20).  The types with a min have
 * off = 0 and u <= 31: read as signed they are the same bytes.
 *
 * One step = (16-row tile, segment), the tiles' segments in order, one stream over all the
 * call's rows.  Step t issues its product into C(t mod 4), stores C of step t - 2 and folds
 * step t - 3's stored dots: a tile is stored two steps after its product and zeroed again two
 * steps after its store, so no tile instruction waits on the one just before it.  What this
 * replaced (32 rows x 2 segments a step, 4 products then their stores back to back, the
 * group sums in memory) ran 1.8x slower on one SPR core, and measured without its stores
 * 4x faster: the tile stores are the cost to hide (bench/gguf_ukr_avx2.c, docs/gguf.md).
 *
 * The fold keeps the 16 rows' group sums in registers (h0..h15) across the tile's segments:
 * per row and segment vcvtdq2ps (its load folded) and vfmadd by the scales, [vfmadd of the
 * min by the float asum: types with a min]; per group of 256 inputs (or the call's end) one
 * vfmadd by the activation scale into cb.
 *
 * Rows past the last multiple of 16 go to the AVX-512 VNNI kernel on signed activations
 * (gguf_ukr_avx512_signed; the same bits). */
#include "gguf_impl.h"

#include <immintrin.h>
#include <string.h>

#include "amx_tiles.h"

/* steps between a tile's product and its store (1..3: the 4 C tiles rotate); build-time knob */
#ifndef GGUF_AMX_LAG
#define GGUF_AMX_LAG 2
#endif
/* A rows prefetched this many cache lines ahead (0: none); build-time knob for A/B */
#ifndef GGUF_AMX_PF
#define GGUF_AMX_PF 0
#endif
_Static_assert(GGUF_AMX_LAG >= 1 && GGUF_AMX_LAG <= 3, "a C tile is stored before its next product");

/* fas[r][s] = (float)as of row i0 + r, segment s < nseg (<= 32) */
static inline void float_sums(int64_t i0, int nseg, const int32_t *as, int64_t ldas, float *fas) {
    const __mmask16 k0 = nseg >= 16 ? 0xffff : (__mmask16)((1u << nseg) - 1u);
    const __mmask16 k1 = nseg >= 32 ? 0xffff : nseg <= 16 ? 0 : (__mmask16)((1u << (nseg - 16)) - 1u);
    for (int r = 0; r < 16; r++) {
        const int32_t *src = as + (i0 + r) * ldas;
        _mm512_store_ps(fas + r * 32, _mm512_cvtepi32_ps(_mm512_maskz_loadu_epi32(k0, src)));
        _mm512_store_ps(fas + r * 32 + 16, _mm512_cvtepi32_ps(_mm512_maskz_loadu_epi32(k1, src + 16)));
    }
}

/* the 16 rows' group sums are 16 named registers (an array of them went to the stack) */
#define H16(X) X(0) X(1) X(2) X(3) X(4) X(5) X(6) X(7) X(8) X(9) X(10) X(11) X(12) X(13) X(14) X(15)
#define H_ZERO(r) h##r = _mm512_setzero_ps();
#define H_SEG(r)                                                                                          \
    h##r = _mm512_fmadd_ps(_mm512_cvtepi32_ps(_mm512_load_si512((const void *)(dots + r * 16))), s0, h##r); \
    if (MIN) h##r = _mm512_fmadd_ps(m0, _mm512_set1_ps(fas[r * 32 + s]), h##r);
#define H_END(r)                                                                                          \
    {                                                                                                     \
        float *c = cb + (i0 + r) * GGUF_NR;                                                               \
        _mm512_storeu_ps(c, _mm512_fmadd_ps(_mm512_set1_ps(d[(i0 + r) * ldd + s / gs]), h##r, _mm512_loadu_ps(c))); \
    }

/* step t's stored dots (row tile fi, segment fs: the caller's counters, no division a step)
 * into the group sums, in the reference's float order; at a group's end (of 256 inputs, or of
 * the call) cb += d * the sum */
#define FOLD(t)                                                                                 \
    do {                                                                                        \
        const int s = fs;                                                                       \
        const int64_t i0 = fi * 16;                                                             \
        const int32_t *dots = buf[(t) & 3];                                                     \
        if (s % gs == 0) { H16(H_ZERO) }                                                        \
        if (MIN && s == 0) float_sums(i0, nseg, as, ldas, fas);                                 \
        const __m512 s0 = _mm512_load_ps(sc + s * GGUF_NR);                                     \
        const __m512 m0 = MIN ? _mm512_load_ps(mn + s * GGUF_NR) : s0;                          \
        H16(H_SEG)                                                                              \
        if ((s + 1) % gs == 0 || s + 1 == nseg) { H16(H_END) }                                  \
    } while (0)

static inline __attribute__((always_inline)) void body(const int SEG, const int MIN, int mr, const gguf_kind *t,
                                                       int nseg, const int8_t *a, int64_t lda, const float *d,
                                                       int64_t ldd, const int32_t *as, int64_t ldas,
                                                       const uint8_t *u, const float *sc, const float *mn,
                                                       float *cb) {
    int8_t qb[GGUF_KB * GGUF_NR] __attribute__((aligned(64)));
    int32_t buf[4][256] __attribute__((aligned(64)));
    float fas[16 * 32] __attribute__((aligned(64)));
    __m512 h0, h1, h2, h3, h4, h5, h6, h7, h8, h9, h10, h11, h12, h13, h14, h15;
    const int tiles = mr / 16, gs = GGUF_AG / SEG;
    if (tiles) {
        const int8_t *q = (const int8_t *)u;
        if (t->off) { /* u - off: the signed q (no starts: the tiles multiply signed by signed) */
            gguf_panel_signed_avx2(t, nseg, u, qb, NULL);
            q = qb;
            MEMORY_FENCE();
        }
        const amx_tilecfg cfg = amx_rot_cfg(SEG);
        amx_load_config(&cfg);
        H16(H_ZERO)
        const int steps = tiles * nseg;
        int64_t ti = 0, fi = 0; /* the row tile and segment of step t, and of the step folded */
        int ts = 0, fs = 0;
        for (int t = 0; t < steps + GGUF_AMX_LAG + 1; t++) {
            if (t < steps) {
#if GGUF_AMX_PF
                if ((ts * SEG) % 64 == 0) { /* the tile's rows, GGUF_AMX_PF cache lines ahead (the next tile's past the block) */
                    int64_t o = (int64_t)ts * SEG + 64 * GGUF_AMX_PF, r = ti * 16;
                    if (o >= (int64_t)nseg * SEG) { o -= (int64_t)nseg * SEG; r += 16; }
                    if (r + 16 <= mr)
                        for (int i = 0; i < 16; i++) _mm_prefetch((const char *)(a + (r + i) * lda + o), _MM_HINT_T0);
                }
#endif
                amx_rot_product(t & 3, a + ti * 16 * lda + ts * SEG, lda, q + ts * SEG * GGUF_NR, 64);
                if (++ts == nseg) { ts = 0; ti++; }
            }
            const int st = t - GGUF_AMX_LAG;
            if (st >= 0 && st < steps) amx_rot_store(st & 3, buf[st & 3]);
            MEMORY_FENCE();
            if (st >= 1) {
                FOLD(st - 1);
                if (++fs == nseg) { fs = 0; fi++; }
            }
        }
    }
    const int64_t i0 = (int64_t)tiles * 16;
    if (i0 < mr)
        gguf_ukr_avx512_signed(mr - (int)i0, t, nseg, a + i0 * lda, lda, d + i0 * ldd, ldd, as + i0 * ldas, ldas, u,
                               sc, mn, cb + i0 * GGUF_NR);
}

#define UKR_VARIANT(name, SEG, MIN)                                                                           \
    static void name(int mr, const gguf_kind *t, int nseg, const int8_t *a, int64_t lda, const float *d,     \
                     int64_t ldd, const int32_t *as, int64_t ldas, const uint8_t *u, const float *sc,        \
                     const float *mn, float *cb) {                                                           \
        body(SEG, MIN, mr, t, nseg, a, lda, d, ldd, as, ldas, u, sc, mn, cb);                                \
    }
UKR_VARIANT(v32_0, 32, 0)
UKR_VARIANT(v32_1, 32, 1)
UKR_VARIANT(v16_0, 16, 0)
UKR_VARIANT(v16_1, 16, 1)

void gguf_ukr_amx(int mr, const gguf_kind *t, int nseg, const int8_t *a, int64_t lda, const float *d, int64_t ldd,
                  const int32_t *as, int64_t ldas, const uint8_t *u, const float *sc, const float *mn, float *cb) {
    if (t->seg == 32) (t->has_min ? v32_1 : v32_0)(mr, t, nseg, a, lda, d, ldd, as, ldas, u, sc, mn, cb);
    else (t->has_min ? v16_1 : v16_0)(mr, t, nseg, a, lda, d, ldd, as, ldas, u, sc, mn, cb);
}
