/* gguf_amx.c — the GGUF micro-kernel on AMX tiles (Sapphire Rapids and later): per segment
 * (the type's 16 or 32 inputs with one weight scale), one tile product gives the exact
 * int32 dots of 16 rows of x by the panel's 16 columns; they are stored (1 KB) and folded
 * into the float sums with AVX-512 in the reference's order (gguf_impl.h), so the results
 * are the reference's bits, as on every other path.
 *
 * Tiles (configured here, per call: the K depth is the segment, not amx_tiles.h's 64):
 *   A  tmm4, tmm5: 16 rows x SEG bytes of the activations, read in place (stride K);
 *   B  tmm6, tmm7: SEG/4 quads x 64 bytes: a segment of the decoded panel, which is
 *      already AMX's VNNI B layout ([quad][16 columns][4], 64-byte rows);
 *   C  tmm0..3: 2 row tiles (rows 0-15, 16-31) x 2 segments (s, s + 1) of 16x16 int32.
 * TDPBSSD (signed x signed): the panel's u = q + off are turned back into the signed q
 * once per call (vpsubb: ~1% of the fold's instructions at PN_MC rows), so a dot is
 * sum q a, which is exactly the reference's sum u a - off * asum (|q a| summed over 32
 * inputs < 2^20) and the fold needs no offset step.  The types with a min have off = 0 and u <= 31: read as
 * signed they are the same bytes.
 *
 * Software pipeline: each step issues the 4 tile products of one (32 rows, 2 segments)
 * block, then folds the previous step's stored tiles (vector ports, while the tile unit
 * works), then stores its own tiles to the other of two buffers.
 *
 * Fold per row and segment (16 columns, one zmm): vcvtdq2ps (load folded), vfmadd by the
 * scales into the group's sum, [vfmadd of the min by the float asum: types with a min];
 * per group of 256 inputs one vfmadd by the activation scale into cb -- 2 or 3 vector
 * instructions for 16 x SEG multiply-adds (the float asums are converted once per 32-row group, 1/nseg of that);
 * docs/gguf.md turns that into the bound on what any such kernel reaches.  LDTILECFG runs
 * once per call (a panel's K block: ~2-4 M multiply-adds), as the segment may differ
 * between calls and other AMX kernels load their own configuration between linears.
 *
 * Rows past the last multiple of 16 go to the AVX-512 VNNI kernel on signed activations
 * (gguf_ukr_avx512_signed; the same bits). */
#include "gguf_impl.h"

#include <immintrin.h>
#include <string.h>

#include "amx_tiles.h"

/* tile configurations for 32- and 16-input segments (see above) */
static amx_tilecfg make_cfg(int seg) {
    amx_tilecfg c;
    memset(&c, 0, sizeof c);
    c.palette_id = 1;
    for (int t = 0; t < 4; t++) { c.rows[t] = 16; c.colsb[t] = 64; }
    for (int t = 4; t < 6; t++) { c.rows[t] = 16; c.colsb[t] = (uint16_t)seg; }
    for (int t = 6; t < 8; t++) { c.rows[t] = (uint8_t)(seg / 4); c.colsb[t] = 64; }
    return c;
}

/* one pipeline step: rows [i0, i0 + rows) (rows 16 or 32) by segments s (and s + 1 if two) */
typedef struct {
    int i0, rows, s, two, par; /* par: which float-asum buffer the step's row group uses */
} step;

static inline __attribute__((always_inline)) void products(const int SEG, const step *st, const int8_t *a,
                                                           int64_t lda, const int8_t *q) {
    const int8_t *a0 = a + st->i0 * lda + st->s * SEG;
    const int8_t *b0 = q + st->s * SEG * GGUF_NR;
    _tile_zero(0);
    _tile_loadd(6, b0, 64);
    _tile_loadd(4, a0, lda);
    if (st->two) {
        _tile_zero(2);
        _tile_loadd(7, b0 + SEG * GGUF_NR, 64);
        _tile_loadd(5, a0 + SEG, lda);
    }
    _tile_dpbssd(0, 4, 6);
    if (st->two) _tile_dpbssd(2, 5, 7);
    if (st->rows == 32) {
        _tile_zero(1);
        _tile_loadd(4, a0 + 16 * lda, lda);
        _tile_dpbssd(1, 4, 6);
        if (st->two) {
            _tile_zero(3);
            _tile_loadd(5, a0 + 16 * lda + SEG, lda);
            _tile_dpbssd(3, 5, 7);
        }
    }
}

/* buf: [tile][16 rows][16] int32, tile = row half + 2 * (segment - s) */
static inline void store_tiles(const step *st, int32_t *buf) {
    MEMORY_FENCE();
    _tile_stored(0, buf, 64);
    if (st->rows == 32) _tile_stored(1, buf + 256, 64);
    if (st->two) _tile_stored(2, buf + 512, 64);
    if (st->two && st->rows == 32) _tile_stored(3, buf + 768, 64);
    MEMORY_FENCE();
}

/* the step's stored dots into its rows' group sums hb ([32 rows][16]), in the reference's
 * float order; at a group's end (of 256 inputs, or of the call) cb += d * the sum */
static inline __attribute__((always_inline)) void fold(const int SEG, const int MIN, const step *st, int nseg,
                                                       const int32_t *buf, const float *d, int64_t ldd,
                                                       const float *fas, const float *sc, const float *mn,
                                                       float *hb, float *cb) {
    const int s = st->s, gs = GGUF_AG / SEG, end = s + 1 + st->two;
    const int first = s % gs == 0, last = end % gs == 0 || end >= nseg; /* a step's pair never spans groups */
    const __m512 s0 = _mm512_loadu_ps(sc + s * GGUF_NR);
    const __m512 s1 = st->two ? _mm512_loadu_ps(sc + (s + 1) * GGUF_NR) : s0;
    const __m512 m0 = MIN ? _mm512_loadu_ps(mn + s * GGUF_NR) : s0;
    const __m512 m1 = MIN && st->two ? _mm512_loadu_ps(mn + (s + 1) * GGUF_NR) : m0;
    for (int r = 0; r < st->rows; r++) {
        const int64_t i = st->i0 + r;
        const int32_t *b = buf + (r >> 4) * 256 + (r & 15) * 16;
        __m512 h = first ? _mm512_setzero_ps() : _mm512_load_ps(hb + r * 16);
        h = _mm512_fmadd_ps(_mm512_cvtepi32_ps(_mm512_load_si512((const void *)b)), s0, h);
        if (MIN) h = _mm512_fmadd_ps(m0, _mm512_set1_ps(fas[r * 32 + s]), h);
        if (st->two) {
            h = _mm512_fmadd_ps(_mm512_cvtepi32_ps(_mm512_load_si512((const void *)(b + 512))), s1, h);
            if (MIN) h = _mm512_fmadd_ps(m1, _mm512_set1_ps(fas[r * 32 + s + 1]), h);
        }
        if (last)
            _mm512_storeu_ps(cb + i * GGUF_NR, _mm512_fmadd_ps(_mm512_set1_ps(d[i * ldd + s / gs]), h,
                                                               _mm512_loadu_ps(cb + i * GGUF_NR)));
        else
            _mm512_store_ps(hb + r * 16, h);
    }
}

/* fas[r][s] = (float)as of row i0 + r, segment s < nseg (<= 32) */
static inline void float_sums(int i0, int rows, int nseg, const int32_t *as, int64_t ldas, float *fas) {
    const __mmask16 k0 = nseg >= 16 ? 0xffff : (__mmask16)((1u << nseg) - 1u);
    const __mmask16 k1 = nseg >= 32 ? 0xffff : nseg <= 16 ? 0 : (__mmask16)((1u << (nseg - 16)) - 1u);
    for (int r = 0; r < rows; r++) {
        const int32_t *src = as + (i0 + r) * ldas;
        _mm512_store_ps(fas + r * 32, _mm512_cvtepi32_ps(_mm512_maskz_loadu_epi32(k0, src)));
        _mm512_store_ps(fas + r * 32 + 16, _mm512_cvtepi32_ps(_mm512_maskz_loadu_epi32(k1, src + 16)));
    }
}

static inline __attribute__((always_inline)) void body(const int SEG, const int MIN, int mr, const gguf_kind *t,
                                                       int nseg, const int8_t *a, int64_t lda, const float *d,
                                                       int64_t ldd, const int32_t *as, int64_t ldas,
                                                       const uint8_t *u, const float *sc, const float *mn,
                                                       float *cb) {
    int8_t qb[GGUF_KB * GGUF_NR] __attribute__((aligned(64)));
    int32_t buf[2][4 * 256] __attribute__((aligned(64)));
    float fas[2][32 * 32] __attribute__((aligned(64)));
    float hb[32 * 16] __attribute__((aligned(64)));
    if (mr < 16) {
        gguf_ukr_avx512_signed(mr, t, nseg, a, lda, d, ldd, as, ldas, u, sc, mn, cb);
        return;
    }
    const int8_t *q = (const int8_t *)u;
    if (t->off) { /* u - off: the signed q (no starts: the tiles multiply signed by signed) */
        gguf_panel_signed_avx2(t, nseg, u, qb, NULL);
        q = qb;
        MEMORY_FENCE();
    }
    const amx_tilecfg cfg = make_cfg(SEG);
    _tile_loadconfig(&cfg);
    step prev = {0, 0, 0, 0, 0};
    int have = 0, nb = 0, grp = 0, i0 = 0;
    for (; i0 + 16 <= mr; grp++) {
        const int rows = i0 + 32 <= mr ? 32 : 16;
        if (MIN) float_sums(i0, rows, nseg, as, ldas, fas[grp & 1]);
        for (int s = 0; s < nseg; s += 2) {
            const step cur = {i0, rows, s, s + 1 < nseg, grp & 1};
            products(SEG, &cur, a, lda, q);
            if (have) fold(SEG, MIN, &prev, nseg, buf[nb ^ 1], d, ldd, fas[prev.par], sc, mn, hb, cb);
            store_tiles(&cur, buf[nb]);
            prev = cur;
            have = 1;
            nb ^= 1;
        }
        i0 += rows;
    }
    if (have) fold(SEG, MIN, &prev, nseg, buf[nb ^ 1], d, ldd, fas[prev.par], sc, mn, hb, cb);
    if (i0 < mr)
        gguf_ukr_avx512_signed(mr - i0, t, nseg, a + i0 * lda, lda, d + i0 * ldd, ldd, as + i0 * ldas, ldas, u, sc, mn,
                        cb + i0 * GGUF_NR);
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
