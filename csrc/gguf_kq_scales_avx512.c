/* gguf_kq_scales_avx512.c — Q4_K / Q5_K super-blocks' scales for the panel's 16 columns at once,
 * one column a lane: per super-block four gathers of the 16 rows' bytes 0..15 (d and dmin, the 12
 * packed scale bytes), byte arithmetic in 32-bit lanes, one vcvtph2ps for d and one for dmin.
 * Two forms of the same unpacking:
 *   gguf_kq_scales_avx512        gguf_kq_scales's integer sub-block scales and mins, d and -dmin
 *                                (gguf_panel_ref.c; the AMX path's K-quant kernel).  Why: the
 *                                scalar version ran once per 16-row K block and call, 15-20% of
 *                                the kq kernel's time at the text encoder's M = 128 (session 27);
 *   gguf_float_scales_avx512     the panel decoder's float segment scales d * s and offsets
 *                                -(dmin * m) (gguf_decode_panel_ref), for the AVX-512 VNNI kernel;
 *                                also Q6_K's d * its int8 scales (four gathers of its 16 scale
 *                                bytes, d from the dword at 206).  Why: the AVX2 decoder made
 *                                them a column and segment at a time, about half its K-quant time
 *                                (session 30).
 * The same bytes and floats as the reference (the C driver checks them).  Needs AVX-512F. */
#include "gguf_impl.h"

#include <immintrin.h>

static inline __m512i byte_at(__m512i q, int t) { return _mm512_and_si512(_mm512_srli_epi32(q, 8 * t), _mm512_set1_epi32(255)); }

/* column offsets of rows[1..nr) from rows[0] for the 32-bit gathers; 0 when rows are too far
 * apart for them */
static int lane_offsets(const uint8_t *const *rows, int nr, int32_t *off) {
    off[0] = 0;
    for (int c = 1; c < GGUF_NR; c++) off[c] = 0;
    for (int c = 1; c < nr; c++) {
        const ptrdiff_t o = rows[c] - rows[0];
        if (o < 0 || o > INT32_MAX - GGUF_KB) return 0;
        off[c] = (int32_t)o;
    }
    return 1;
}

/* super-block b of the live columns: d and dmin as floats, and sub-block j's 6-bit scale s[j] and
 * min m[j] (gguf_k4_scale_min) in int32 lanes; every lane past nr 0 */
static inline __attribute__((always_inline)) void k4_lanes(const uint8_t *p, __m512i vo, __mmask16 live, __m512 *d,
                                                           __m512 *dmin, __m512i s[8], __m512i m[8]) {
    const __m512i z = _mm512_setzero_si512(), m63 = _mm512_set1_epi32(63);
    const __m512i dd = _mm512_mask_i32gather_epi32(z, live, vo, (const void *)p, 1); /* d | dmin << 16 */
    const __m512i q0 = _mm512_mask_i32gather_epi32(z, live, vo, (const void *)(p + 4), 1);
    const __m512i q1 = _mm512_mask_i32gather_epi32(z, live, vo, (const void *)(p + 8), 1);
    const __m512i q2 = _mm512_mask_i32gather_epi32(z, live, vo, (const void *)(p + 12), 1);
    *d = _mm512_cvtph_ps(_mm512_cvtepi32_epi16(dd));
    *dmin = _mm512_cvtph_ps(_mm512_cvtepi32_epi16(_mm512_srli_epi32(dd, 16)));
    for (int j = 0; j < 4; j++) {
        s[j] = _mm512_and_si512(byte_at(q0, j), m63);
        m[j] = _mm512_and_si512(byte_at(q1, j), m63);
        const __m512i hi = byte_at(q2, j);
        s[j + 4] = _mm512_or_si512(_mm512_and_si512(hi, _mm512_set1_epi32(15)),
                                   _mm512_slli_epi32(_mm512_srli_epi32(byte_at(q0, j), 6), 4));
        m[j + 4] = _mm512_or_si512(_mm512_srli_epi32(hi, 4), _mm512_slli_epi32(_mm512_srli_epi32(byte_at(q1, j), 6), 4));
    }
}

static inline __m512 negated(__mmask16 live, __m512 x) { /* -x (the reference's: -0.0 of 0.0), 0.0 past nr */
    return _mm512_castsi512_ps(_mm512_maskz_xor_epi32(live, _mm512_castps_si512(x), _mm512_set1_epi32((int)0x80000000u)));
}

void gguf_kq_scales_avx512(int type, const uint8_t *const *rows, int nr, int nk, uint8_t *isc, uint8_t *imn, float *ds,
                           float *dm) {
    int blk = 256, bytes = 0;
    h3_gguf_type_size(type, &blk, &bytes);
    int32_t off[GGUF_NR];
    if (!lane_offsets(rows, nr, off)) { /* rows too far apart for 32-bit gather offsets */
        gguf_kq_scales(type, rows, nr, nk, isc, imn, ds, dm);
        return;
    }
    const __mmask16 live = nr >= GGUF_NR ? (__mmask16)0xffff : (__mmask16)((1u << nr) - 1u);
    const __m512i vo = _mm512_loadu_si512(off);
    for (int b = 0; b < nk / blk; b++) {
        __m512 d, dmin;
        __m512i s[8], m[8];
        k4_lanes(rows[0] + (int64_t)b * bytes, vo, live, &d, &dmin, s, m);
        _mm512_storeu_ps(ds + b * GGUF_NR, d);
        _mm512_storeu_ps(dm + b * GGUF_NR, negated(live, dmin));
        for (int j = 0; j < 8; j++) {
            _mm_storeu_si128((__m128i *)(isc + (b * 8 + j) * GGUF_NR), _mm512_cvtepi32_epi8(s[j]));
            _mm_storeu_si128((__m128i *)(imn + (b * 8 + j) * GGUF_NR), _mm512_cvtepi32_epi8(m[j]));
        }
    }
}

void gguf_float_scales_avx512(int type, const uint8_t *const *rows, int nr, int nk, float *sc, float *mn) {
    int blk = 256, bytes = 0;
    h3_gguf_type_size(type, &blk, &bytes);
    int32_t off[GGUF_NR];
    if (!lane_offsets(rows, nr, off)) {
        gguf_float_scales_ref(type, rows, nr, nk, sc, mn);
        return;
    }
    const __mmask16 live = nr >= GGUF_NR ? (__mmask16)0xffff : (__mmask16)((1u << nr) - 1u);
    const __m512i vo = _mm512_loadu_si512(off);
    if (type == H3_GGUF_Q6_K) {
        const __m512i z = _mm512_setzero_si512();
        for (int b = 0; b < nk / blk; b++) {
            const uint8_t *p = rows[0] + (int64_t)b * bytes;
            /* d: the high half of the dword at 206 (the block's last 4 bytes: no read past it) */
            const __m512i dd = _mm512_mask_i32gather_epi32(z, live, vo, (const void *)(p + 206), 1);
            const __m512 d = _mm512_cvtph_ps(_mm512_cvtepi32_epi16(_mm512_srli_epi32(dd, 16)));
            for (int k = 0; k < 4; k++) {
                const __m512i q = _mm512_mask_i32gather_epi32(z, live, vo, (const void *)(p + 192 + 4 * k), 1);
                for (int j = 0; j < 4; j++) { /* scale 4k + j, sign-extended */
                    const __m512i sj = _mm512_srai_epi32(_mm512_slli_epi32(q, 24 - 8 * j), 24);
                    _mm512_storeu_ps(sc + (b * 16 + 4 * k + j) * GGUF_NR, _mm512_mul_ps(d, _mm512_cvtepi32_ps(sj)));
                }
            }
        }
        return;
    }
    for (int b = 0; b < nk / blk; b++) {
        __m512 d, dmin;
        __m512i s[8], m[8];
        k4_lanes(rows[0] + (int64_t)b * bytes, vo, live, &d, &dmin, s, m);
        for (int j = 0; j < 8; j++) { /* put_scales's d * s and -(dmin * m), one segment of 16 columns */
            _mm512_storeu_ps(sc + (b * 8 + j) * GGUF_NR, _mm512_mul_ps(d, _mm512_cvtepi32_ps(s[j])));
            _mm512_storeu_ps(mn + (b * 8 + j) * GGUF_NR, negated(live, _mm512_mul_ps(dmin, _mm512_cvtepi32_ps(m[j]))));
        }
    }
}
