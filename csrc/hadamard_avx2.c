/* hadamard_avx2.c — the block Hadamard rotation for the avx2 path (8 floats): strides 1
 * and 4 in registers, the rest as whole-vector butterflies (hadamard_body.inc).
 * Compiled only with -mavx2 -mfma -mf16c. */
#include "hadamard_impl.h"
#include "simd_avx2.h"

#define HADAMARD_SMALL_MAX 4

/* Strides 1 and 4 of one group (G % 16 == 0).  Stride 1: each 128-bit lane is [a b c d];
 * stride 4: a 16-float block is two vectors [a|b] and [c|d] of 4-float quarters.  The sums
 * (a+b)+(c+d) are formed lane-wise from swapped copies (float + is commutative, so every
 * lane holds the reference's bits). */
static inline void hadamard_small(float *g, int64_t G) {
    const __m256 half = _mm256_set1_ps(0.5f);
    for (int64_t j = 0; j < G; j += 8) {
        __m256 v = _mm256_loadu_ps(g + j);
        __m256 p = _mm256_add_ps(v, _mm256_permute_ps(v, _MM_SHUFFLE(2, 3, 0, 1)));
        __m256 s = _mm256_add_ps(p, _mm256_permute_ps(p, _MM_SHUFFLE(1, 0, 3, 2)));
        __m256 h = _mm256_mul_ps(half, s);
        _mm256_storeu_ps(g + j, _mm256_sub_ps(h, _mm256_permute_ps(v, _MM_SHUFFLE(0, 1, 2, 3))));
    }
    for (int64_t j = 0; j < G; j += 16) {
        __m256 lo = _mm256_loadu_ps(g + j), hi = _mm256_loadu_ps(g + j + 8);
        __m256 lsw = _mm256_permute2f128_ps(lo, lo, 0x01), hsw = _mm256_permute2f128_ps(hi, hi, 0x01);
        __m256 h = _mm256_mul_ps(half, _mm256_add_ps(_mm256_add_ps(lo, lsw), _mm256_add_ps(hi, hsw)));
        _mm256_storeu_ps(g + j, _mm256_sub_ps(h, hsw));
        _mm256_storeu_ps(g + j + 8, _mm256_sub_ps(h, lsw));
    }
}

#include "hadamard_body.inc"
