/* gemm_store_avx512.h — what the AVX-512 family's 32-column micro-kernels (f32, int, bf16
 * and AMX) share: the masked row store c[0:nr] = v (or += v when accumulate), the C tile
 * prefetch, and the short-tile row dispatch. */
#ifndef H3_GEMM_STORE_AVX512_H
#define H3_GEMM_STORE_AVX512_H
#include <immintrin.h>
#include <stdint.h>

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

/* The C tile is touched only at the end of a micro-kernel call: start its (L3) lines on
 * their way at the beginning. */
static inline void prefetch_c_tile(const float *c, int64_t ldc, int rows) {
    for (int i = 0; i < rows; i++) {
        _mm_prefetch((const char *)(c + i * ldc), _MM_HINT_T0);
        _mm_prefetch((const char *)(c + i * ldc + 16), _MM_HINT_T0);
    }
}

/* fn(R, args...) with the smallest R of 2, 4, 7 and FULL (14) that covers mr rows: a short
 * last tile does not pay for the full tile's rows.  R is a constant in each branch, so an
 * always_inline fn is specialised per row count. */
#define GEMM_ROWS_DISPATCH(mr, FULL, fn, ...)  \
    do {                                        \
        if ((mr) > 7) fn(FULL, __VA_ARGS__);    \
        else if ((mr) > 4) fn(7, __VA_ARGS__);  \
        else if ((mr) > 2) fn(4, __VA_ARGS__);  \
        else fn(2, __VA_ARGS__);                \
    } while (0)
#endif
