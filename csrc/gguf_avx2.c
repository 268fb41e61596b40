/* gguf_avx2.c — the GGUF linear's dot product for AVX2 (+FMA): the same integer dots per
 * 16 values as gguf_dot_ref, 32 values per step.  |w| (maddubs's unsigned operand, -128
 * read as 128) times sign(w) * x: two products sum to at most 128 * 127 * 2 = 32512, so the
 * int16 pairs never saturate; madd with ones gives eight int32 partial sums, lanes 0-3 the
 * block's first 16 values and lanes 4-7 the second 16, scaled by their sub-block's scale
 * times the activation scale.  The offsets (formats with a min) are scalar per 16.  Only
 * the float summation order differs from the reference.  Also used on AVX-512 machines
 * until a VNNI kernel exists. */
#include "gguf_impl.h"

#include <immintrin.h>

float gguf_dot_avx2(const int8_t *q, const float *sc, const float *mn, int has_min,
                    const gguf_act_blk *a, int64_t K) {
    __m256 acc = _mm256_setzero_ps();
    const __m256i ones = _mm256_set1_epi16(1);
    float macc = 0.0f;
    for (int64_t b = 0; b < K / GGUF_ACT; b++, a++) {
        const __m256i w = _mm256_loadu_si256((const __m256i *)(q + b * GGUF_ACT));
        const __m256i x = _mm256_loadu_si256((const __m256i *)a->q);
        const __m256i p16 = _mm256_maddubs_epi16(_mm256_sign_epi8(w, w), _mm256_sign_epi8(x, w));
        const __m256i p32 = _mm256_madd_epi16(p16, ones);
        const __m256 s = _mm256_set_m128(_mm_set1_ps(sc[2 * b + 1] * a->d), _mm_set1_ps(sc[2 * b] * a->d));
        acc = _mm256_fmadd_ps(_mm256_cvtepi32_ps(p32), s, acc);
        if (has_min) macc += a->d * (mn[2 * b] * (float)a->s[0] + mn[2 * b + 1] * (float)a->s[1]);
    }
    __m128 h = _mm_add_ps(_mm256_castps256_ps128(acc), _mm256_extractf128_ps(acc, 1));
    h = _mm_add_ps(h, _mm_movehl_ps(h, h));
    h = _mm_add_ss(h, _mm_movehdup_ps(h));
    return _mm_cvtss_f32(h) + macc;
}
