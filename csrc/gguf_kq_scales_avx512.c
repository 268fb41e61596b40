/* gguf_kq_scales_avx512.c — gguf_kq_scales (gguf_panel_ref.c: Q4_K / Q5_K super-blocks' integer
 * sub-block scales and mins, d and -dmin, for the AMX path's K-quant kernel) for the panel's 16
 * columns at once, one column a lane: per super-block four gathers of the 16 rows' bytes 0..15
 * (d and dmin, the 12 packed scale bytes), byte arithmetic in 32-bit lanes, and one vcvtph2ps
 * for d and one for dmin.  The same bytes and floats as the reference (the C driver checks
 * them).  Why: the scalar version (a float16 call and eight 6-bit unpacks per column and
 * super-block) ran once per 16-row K block and call, 15-20% of the kq kernel's time at the
 * text encoder's M = 128 (docs/gguf.md, session 27).  Needs AVX-512F; the amx path has it. */
#include "gguf_impl.h"

#include <immintrin.h>

static inline __m512i byte_at(__m512i q, int t) { return _mm512_and_si512(_mm512_srli_epi32(q, 8 * t), _mm512_set1_epi32(255)); }

void gguf_kq_scales_avx512(int type, const uint8_t *const *rows, int nr, int nk, uint8_t *isc, uint8_t *imn, float *ds,
                           float *dm) {
    int blk = 256, bytes = 0;
    h3_gguf_type_size(type, &blk, &bytes);
    int32_t off[GGUF_NR] = {0};
    for (int c = 1; c < nr; c++) {
        const ptrdiff_t o = rows[c] - rows[0];
        if (o < 0 || o > INT32_MAX - GGUF_KB) { /* rows too far apart for 32-bit gather offsets */
            gguf_kq_scales(type, rows, nr, nk, isc, imn, ds, dm);
            return;
        }
        off[c] = (int32_t)o;
    }
    const __mmask16 live = nr >= GGUF_NR ? (__mmask16)0xffff : (__mmask16)((1u << nr) - 1u);
    const __m512i vo = _mm512_loadu_si512(off), z = _mm512_setzero_si512(), m63 = _mm512_set1_epi32(63);
    for (int b = 0; b < nk / blk; b++) {
        const uint8_t *p = rows[0] + (int64_t)b * bytes;
        const __m512i dd = _mm512_mask_i32gather_epi32(z, live, vo, (const void *)p, 1); /* d | dmin << 16 */
        const __m512i q0 = _mm512_mask_i32gather_epi32(z, live, vo, (const void *)(p + 4), 1);
        const __m512i q1 = _mm512_mask_i32gather_epi32(z, live, vo, (const void *)(p + 8), 1);
        const __m512i q2 = _mm512_mask_i32gather_epi32(z, live, vo, (const void *)(p + 12), 1);
        _mm512_storeu_ps(ds + b * GGUF_NR, _mm512_cvtph_ps(_mm512_cvtepi32_epi16(dd)));
        /* -dmin (the reference's negation: -0.0 for a zero dmin), 0.0 past nr */
        const __m512i dmn = _mm512_castps_si512(_mm512_cvtph_ps(_mm512_cvtepi32_epi16(_mm512_srli_epi32(dd, 16))));
        _mm512_storeu_si512(dm + b * GGUF_NR, _mm512_maskz_xor_epi32(live, dmn, _mm512_set1_epi32((int)0x80000000u)));
        for (int j = 0; j < 8; j++) { /* gguf_k4_scale_min(p + 4, j) per lane */
            __m512i s, m;
            if (j < 4) {
                s = _mm512_and_si512(byte_at(q0, j), m63);
                m = _mm512_and_si512(byte_at(q1, j), m63);
            } else {
                const __m512i hi = byte_at(q2, j - 4);
                s = _mm512_or_si512(_mm512_and_si512(hi, _mm512_set1_epi32(15)),
                                    _mm512_slli_epi32(_mm512_srli_epi32(byte_at(q0, j - 4), 6), 4));
                m = _mm512_or_si512(_mm512_srli_epi32(hi, 4), _mm512_slli_epi32(_mm512_srli_epi32(byte_at(q1, j - 4), 6), 4));
            }
            _mm_storeu_si128((__m128i *)(isc + (b * 8 + j) * GGUF_NR), _mm512_cvtepi32_epi8(s));
            _mm_storeu_si128((__m128i *)(imn + (b * 8 + j) * GGUF_NR), _mm512_cvtepi32_epi8(m));
        }
    }
}
