/* simd_avx2.h — the vector vocabulary for AVX2 + FMA + F16C (8 floats). */
#ifndef H3_SIMD_AVX2_H
#define H3_SIMD_AVX2_H
#include <immintrin.h>
#include <stdint.h>

#define H3V_LANES 8
#define H3V_ISA_SUFFIX avx2
typedef __m256 h3v;

static inline __m256i h3v__mask(int n) {
    return _mm256_cmpgt_epi32(_mm256_set1_epi32(n), _mm256_setr_epi32(0, 1, 2, 3, 4, 5, 6, 7));
}
static inline h3v h3v_zero(void) { return _mm256_setzero_ps(); }
static inline h3v h3v_set1(float a) { return _mm256_set1_ps(a); }
static inline h3v h3v_load(const float *p) { return _mm256_loadu_ps(p); }
static inline void h3v_store(float *p, h3v v) { _mm256_storeu_ps(p, v); }
static inline h3v h3v_load_n(const float *p, int n) { return _mm256_maskload_ps(p, h3v__mask(n)); }
static inline void h3v_store_n(float *p, h3v v, int n) { _mm256_maskstore_ps(p, h3v__mask(n), v); }
static inline h3v h3v_add(h3v a, h3v b) { return _mm256_add_ps(a, b); }
static inline h3v h3v_sub(h3v a, h3v b) { return _mm256_sub_ps(a, b); }
static inline h3v h3v_mul(h3v a, h3v b) { return _mm256_mul_ps(a, b); }
static inline h3v h3v_div(h3v a, h3v b) { return _mm256_div_ps(a, b); }
static inline h3v h3v_fma(h3v a, h3v b, h3v c) { return _mm256_fmadd_ps(a, b, c); }
static inline h3v h3v_max(h3v a, h3v b) { return _mm256_max_ps(a, b); }
static inline h3v h3v_min(h3v a, h3v b) { return _mm256_min_ps(a, b); }
static inline float h3v_hsum(h3v v) {
    __m128 s = _mm_add_ps(_mm256_castps256_ps128(v), _mm256_extractf128_ps(v, 1));
    s = _mm_add_ps(s, _mm_movehl_ps(s, s));
    s = _mm_add_ss(s, _mm_movehdup_ps(s));
    return _mm_cvtss_f32(s);
}
static inline float h3v_hmax(h3v v) {
    __m128 s = _mm_max_ps(_mm256_castps256_ps128(v), _mm256_extractf128_ps(v, 1));
    s = _mm_max_ps(s, _mm_movehl_ps(s, s));
    s = _mm_max_ss(s, _mm_movehdup_ps(s));
    return _mm_cvtss_f32(s);
}
static inline h3v h3v_load_bf16(const uint16_t *p) {
    __m128i h = _mm_loadu_si128((const __m128i *)p);
    return _mm256_castsi256_ps(_mm256_slli_epi32(_mm256_cvtepu16_epi32(h), 16));
}
static inline h3v h3v_load_f16(const uint16_t *p) {
    return _mm256_cvtph_ps(_mm_loadu_si128((const __m128i *)p));
}
/* LANES x uint32, for number-format bits (elem_body.inc's bf16 and f16 stores) */
typedef __m256i h3vu;
static inline h3vu h3vu_bits(h3v v) { return _mm256_castps_si256(v); }
static inline h3vu h3vu_set1(uint32_t a) { return _mm256_set1_epi32((int)a); }
static inline h3vu h3vu_add(h3vu a, h3vu b) { return _mm256_add_epi32(a, b); }
static inline h3vu h3vu_and(h3vu a, h3vu b) { return _mm256_and_si256(a, b); }
static inline h3vu h3vu_or(h3vu a, h3vu b) { return _mm256_or_si256(a, b); }
static inline h3vu h3vu_shr16(h3vu a) { return _mm256_srli_epi32(a, 16); }
/* a in the lanes where v is NaN, b in the others */
static inline h3vu h3vu_where_nan(h3v v, h3vu a, h3vu b) {
    return _mm256_blendv_epi8(b, a, _mm256_castps_si256(_mm256_cmp_ps(v, v, _CMP_UNORD_Q)));
}
/* f16 bits of each lane by F16C: nearest even, inf on overflow, exact subnormals */
static inline h3vu h3vu_f16_bits(h3v v) {
    return _mm256_cvtepu16_epi32(_mm256_cvtps_ph(v, _MM_FROUND_TO_NEAREST_INT | _MM_FROUND_NO_EXC));
}
/* each lane's value (<= 0xffff) as LANES uint16 */
static inline void h3vu_store_u16(uint16_t *dst, h3vu a) {
    _mm_storeu_si128((__m128i *)dst, _mm_packus_epi32(_mm256_castsi256_si128(a), _mm256_extracti128_si256(a, 1)));
}
static inline h3v h3v_pow2n(h3v n) {
    __m256i i = _mm256_cvtps_epi32(n);
    return _mm256_castsi256_ps(_mm256_slli_epi32(_mm256_add_epi32(i, _mm256_set1_epi32(127)), 23));
}
static inline h3v h3v_round(h3v x) { return _mm256_round_ps(x, _MM_FROUND_TO_NEAREST_INT | _MM_FROUND_NO_EXC); }
/* inside every 4-float quarter [a b c d]: [b a d c], [c d a b], [d c b a] */
static inline h3v h3v_swap_pairs(h3v v) { return _mm256_permute_ps(v, _MM_SHUFFLE(2, 3, 0, 1)); }
static inline h3v h3v_swap_halves4(h3v v) { return _mm256_permute_ps(v, _MM_SHUFFLE(1, 0, 3, 2)); }
static inline h3v h3v_reverse4(h3v v) { return _mm256_permute_ps(v, _MM_SHUFFLE(0, 1, 2, 3)); }
#include "simd_math.inc"
#endif
