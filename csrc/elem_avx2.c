/* elem_avx2.c — element-wise/row ops for AVX2 + FMA + F16C.
 * Only the number-format stores are written here; the rest is elem_body.inc. */
#include "simd_avx2.h"

#define ELEM_ISA H3_ISA_AVX2

/* 8 x int32 (each <= 0xffff) -> 8 x uint16 */
static inline __m128i ev_narrow(__m256i r) {
    return _mm_packus_epi32(_mm256_castsi256_si128(r), _mm256_extracti128_si256(r, 1));
}

/* 8 floats -> bf16, RNE by integer rounding; NaN -> (bits >> 16) | 0x40. */
static inline void ev_store_bf16(uint16_t *dst, __m256 v) {
    __m256i u = _mm256_castps_si256(v);
    __m256i lsb = _mm256_and_si256(_mm256_srli_epi32(u, 16), _mm256_set1_epi32(1));
    __m256i r = _mm256_srli_epi32(
        _mm256_add_epi32(_mm256_add_epi32(u, _mm256_set1_epi32(0x7fff)), lsb), 16);
    __m256i q = _mm256_or_si256(_mm256_srli_epi32(u, 16), _mm256_set1_epi32(0x40));
    __m256i nan = _mm256_castps_si256(_mm256_cmp_ps(v, v, _CMP_UNORD_Q));
    r = _mm256_blendv_epi8(r, q, nan);
    _mm_storeu_si128((__m128i *)dst, ev_narrow(r));
}

/* 8 floats -> f16 via F16C (RNE immediate); NaN lanes -> sign|0x7e00. */
static inline void ev_store_f16(uint16_t *dst, __m256 v) {
    __m128i h = _mm256_cvtps_ph(v, _MM_FROUND_TO_NEAREST_INT | _MM_FROUND_NO_EXC);
    __m256i u = _mm256_castps_si256(v);
    __m256i q = _mm256_or_si256(
        _mm256_and_si256(_mm256_srli_epi32(u, 16), _mm256_set1_epi32(0x8000)),
        _mm256_set1_epi32(0x7e00));
    __m256i nan32 = _mm256_castps_si256(_mm256_cmp_ps(v, v, _CMP_UNORD_Q));
    __m128i nan16 = _mm_packs_epi32(_mm256_castsi256_si128(nan32),
                                    _mm256_extracti128_si256(nan32, 1));
    h = _mm_blendv_epi8(h, ev_narrow(q), nan16);
    _mm_storeu_si128((__m128i *)dst, h);
}

#include "elem_body.inc"
