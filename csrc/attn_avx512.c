/* attn_avx512.c — attention for AVX-512 (also the AMX path): 6 x 4-vector register tile
 * (24 accumulators of 32), 64 queries per unit. */
#include "simd_avx512.h"
#define ATTN_MR 6
#define ATTN_NV 4
#define ATTN_BK 128

/* dst[c * ldd + r] = src[r * lds + c] * s for a 16 x 16 block (h3v_transpose16). */
#define ATTN_HAVE_TRANSPOSE 1
static inline void attn_transpose_lxl(const float *src, int64_t lds, float *dst, int64_t ldd,
                                      __m512 s) {
    __m512 r[16];
    for (int i = 0; i < 16; i++) r[i] = _mm512_mul_ps(_mm512_loadu_ps(src + i * lds), s);
    h3v_transpose16(r);
    for (int j = 0; j < 16; j++) _mm512_storeu_ps(dst + j * ldd, r[j]);
}
#include "attn_body.inc"
