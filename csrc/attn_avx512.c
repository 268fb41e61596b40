/* attn_avx512.c — attention for AVX-512 (also the AMX path): 6 x 4-vector register tile
 * (24 accumulators of 32), 64 queries per unit. */
#include "simd_avx512.h"
#define ATTN_MR 6
#define ATTN_NV 4
#define ATTN_BK 128

/* dst[c * ldd + r] = src[r * lds + c] * s for a 16 x 16 block: pairs, quads, then two
 * rounds of 128-bit lane shuffles (64 shuffles for 256 floats). */
#define ATTN_HAVE_TRANSPOSE 1
static inline void attn_transpose_lxl(const float *src, int64_t lds, float *dst, int64_t ldd,
                                      __m512 s) {
    __m512 r[16], t[16];
    for (int i = 0; i < 16; i++) r[i] = _mm512_mul_ps(_mm512_loadu_ps(src + i * lds), s);
    for (int i = 0; i < 16; i += 2) {
        t[i] = _mm512_unpacklo_ps(r[i], r[i + 1]);
        t[i + 1] = _mm512_unpackhi_ps(r[i], r[i + 1]);
    }
    for (int i = 0; i < 16; i += 4) {
        __m512d a = _mm512_castps_pd(t[i]), b = _mm512_castps_pd(t[i + 2]);
        __m512d c = _mm512_castps_pd(t[i + 1]), d = _mm512_castps_pd(t[i + 3]);
        r[i] = _mm512_castpd_ps(_mm512_unpacklo_pd(a, b));
        r[i + 1] = _mm512_castpd_ps(_mm512_unpackhi_pd(a, b));
        r[i + 2] = _mm512_castpd_ps(_mm512_unpacklo_pd(c, d));
        r[i + 3] = _mm512_castpd_ps(_mm512_unpackhi_pd(c, d));
    }
    /* r[4g + j] holds columns j, j+4, j+8, j+12 of rows 4g..4g+3 */
    for (int j = 0; j < 4; j++) {
        t[j] = _mm512_shuffle_f32x4(r[j], r[j + 4], 0x88);         /* cols j, j+8: rows 0-7 */
        t[j + 4] = _mm512_shuffle_f32x4(r[j], r[j + 4], 0xdd);     /* cols j+4, j+12 */
        t[j + 8] = _mm512_shuffle_f32x4(r[j + 8], r[j + 12], 0x88); /* rows 8-15 */
        t[j + 12] = _mm512_shuffle_f32x4(r[j + 8], r[j + 12], 0xdd);
    }
    for (int j = 0; j < 8; j++) {
        _mm512_storeu_ps(dst + j * ldd, _mm512_shuffle_f32x4(t[j], t[j + 8], 0x88));
        _mm512_storeu_ps(dst + (j + 8) * ldd, _mm512_shuffle_f32x4(t[j], t[j + 8], 0xdd));
    }
}
#include "attn_body.inc"
