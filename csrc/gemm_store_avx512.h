/* gemm_store_avx512.h — the one masked row store of the AVX-512 family's 32-column tiles
 * (f32, int, bf16 and AMX micro-kernels): c[0:nr] = v (or += v when accumulate). */
#ifndef H3_GEMM_STORE_AVX512_H
#define H3_GEMM_STORE_AVX512_H
#include <immintrin.h>

static inline void store_row(float *c, __m512 v0, __m512 v1, int nr, int accumulate) {
    __mmask16 m0 = nr >= 16 ? 0xffff : (__mmask16)((1u << nr) - 1u);
    __mmask16 m1 = nr >= 32 ? 0xffff : (nr <= 16 ? 0 : (__mmask16)((1u << (nr - 16)) - 1u));
    if (accumulate) {
        v0 = _mm512_add_ps(v0, _mm512_maskz_loadu_ps(m0, c));
        v1 = _mm512_add_ps(v1, _mm512_maskz_loadu_ps(m1, c + 16));
    }
    _mm512_mask_storeu_ps(c, m0, v0);
    _mm512_mask_storeu_ps(c + 16, m1, v1);
}
#endif
