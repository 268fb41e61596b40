/* hadamard_avx2.c — the block Hadamard rotation for the avx2 path (8 floats): strides 1
 * and 4 in registers, the rest as whole-vector butterflies (hadamard_body.inc).
 * Compiled only with -mavx2 -mfma -mf16c. */
#include "hadamard_impl.h"
#include "simd_avx2.h"

#define HADAMARD_SMALL_MAX 4

#include "hadamard_body.inc"

/* Strides 1 and 4 of one group (G % 16 == 0).  Stride 1: each 128-bit lane is a quarter
 * [a b c d] (hadamard_quarters); stride 4: a 16-float block is two vectors [a|b] and [c|d]
 * of 4-float quarters, whose sums (a+b)+(c+d) are formed lane-wise from swapped copies. */
static inline void hadamard_small(float *g, int64_t G) {
    const __m256 half = _mm256_set1_ps(0.5f);
    for (int64_t j = 0; j < G; j += 8) _mm256_storeu_ps(g + j, hadamard_quarters(_mm256_loadu_ps(g + j)));
    for (int64_t j = 0; j < G; j += 16) {
        __m256 lo = _mm256_loadu_ps(g + j), hi = _mm256_loadu_ps(g + j + 8);
        __m256 lsw = _mm256_permute2f128_ps(lo, lo, 0x01), hsw = _mm256_permute2f128_ps(hi, hi, 0x01);
        __m256 h = _mm256_mul_ps(half, _mm256_add_ps(_mm256_add_ps(lo, lsw), _mm256_add_ps(hi, hsw)));
        _mm256_storeu_ps(g + j, _mm256_sub_ps(h, hsw));
        _mm256_storeu_ps(g + j + 8, _mm256_sub_ps(h, lsw));
    }
}
