/* hadamard_avx512.c — the block Hadamard rotation for the avx512 path (16 floats): strides
 * 1 and 4 inside one vector, the rest as whole-vector butterflies (hadamard_body.inc).
 * Compiled only with the AVX-512 flags. */
#include "hadamard_impl.h"
#include "simd_avx512.h"

#define HADAMARD_SMALL_MAX 4

#include "hadamard_body.inc"

/* Strides 1 and 4 of one group (G % 16 == 0): stride 1 permutes floats inside each
 * 128-bit lane [a b c d] (hadamard_quarters), stride 4 permutes the four 128-bit lanes
 * [a|b|c|d] in the same pattern (swap pairs, swap halves, reverse). */
static inline void hadamard_small(float *g, int64_t G) {
    const __m512 half = _mm512_set1_ps(0.5f);
    for (int64_t j = 0; j < G; j += 16) {
        __m512 v = hadamard_quarters(_mm512_loadu_ps(g + j));
        __m512 p = _mm512_add_ps(v, _mm512_shuffle_f32x4(v, v, _MM_SHUFFLE(2, 3, 0, 1)));
        __m512 s = _mm512_add_ps(p, _mm512_shuffle_f32x4(p, p, _MM_SHUFFLE(1, 0, 3, 2)));
        v = _mm512_sub_ps(_mm512_mul_ps(half, s), _mm512_shuffle_f32x4(v, v, _MM_SHUFFLE(0, 1, 2, 3)));
        _mm512_storeu_ps(g + j, v);
    }
}
