/* simd_avx512.h — the vector vocabulary for AVX-512 (16 floats).  Loops written once
 * against h3v_* in a .inc body compile per ISA by including the matching simd_<isa>.h. */
#ifndef H3_SIMD_AVX512_H
#define H3_SIMD_AVX512_H
#include <immintrin.h>
#include <stdint.h>

#define H3V_LANES 16
#define H3V_ISA_SUFFIX avx512
typedef __m512 h3v;

static inline h3v h3v_zero(void) { return _mm512_setzero_ps(); }
static inline h3v h3v_set1(float a) { return _mm512_set1_ps(a); }
static inline h3v h3v_load(const float *p) { return _mm512_loadu_ps(p); }
static inline void h3v_store(float *p, h3v v) { _mm512_storeu_ps(p, v); }
/* first n (< LANES) lanes; the rest read as 0 / are not written */
static inline h3v h3v_load_n(const float *p, int n) {
    return _mm512_maskz_loadu_ps((__mmask16)((1u << n) - 1u), p);
}
static inline void h3v_store_n(float *p, h3v v, int n) {
    _mm512_mask_storeu_ps(p, (__mmask16)((1u << n) - 1u), v);
}
static inline h3v h3v_add(h3v a, h3v b) { return _mm512_add_ps(a, b); }
static inline h3v h3v_sub(h3v a, h3v b) { return _mm512_sub_ps(a, b); }
static inline h3v h3v_mul(h3v a, h3v b) { return _mm512_mul_ps(a, b); }
static inline h3v h3v_div(h3v a, h3v b) { return _mm512_div_ps(a, b); }
static inline h3v h3v_fma(h3v a, h3v b, h3v c) { return _mm512_fmadd_ps(a, b, c); } /* a*b+c */
static inline h3v h3v_max(h3v a, h3v b) { return _mm512_max_ps(a, b); }
static inline h3v h3v_min(h3v a, h3v b) { return _mm512_min_ps(a, b); }
static inline float h3v_hsum(h3v v) { return _mm512_reduce_add_ps(v); }
static inline float h3v_hmax(h3v v) { return _mm512_reduce_max_ps(v); }
/* bf16 (uint16 bits) / f16 -> f32, LANES values */
static inline h3v h3v_load_bf16(const uint16_t *p) {
    __m256i h = _mm256_loadu_si256((const __m256i *)p);
    return _mm512_castsi512_ps(_mm512_slli_epi32(_mm512_cvtepu16_epi32(h), 16));
}
static inline h3v h3v_load_f16(const uint16_t *p) {
    return _mm512_cvtph_ps(_mm256_loadu_si256((const __m256i *)p));
}
/* LANES x uint32, for number-format bits (elem_body.inc's bf16 and f16 stores) */
typedef __m512i h3vu;
static inline h3vu h3vu_bits(h3v v) { return _mm512_castps_si512(v); }
static inline h3vu h3vu_set1(uint32_t a) { return _mm512_set1_epi32((int)a); }
static inline h3vu h3vu_add(h3vu a, h3vu b) { return _mm512_add_epi32(a, b); }
static inline h3vu h3vu_and(h3vu a, h3vu b) { return _mm512_and_si512(a, b); }
static inline h3vu h3vu_or(h3vu a, h3vu b) { return _mm512_or_si512(a, b); }
static inline h3vu h3vu_shr16(h3vu a) { return _mm512_srli_epi32(a, 16); }
/* a in the lanes where v is NaN, b in the others */
static inline h3vu h3vu_where_nan(h3v v, h3vu a, h3vu b) {
    return _mm512_mask_blend_epi32(_mm512_cmp_ps_mask(v, v, _CMP_UNORD_Q), b, a);
}
/* f16 bits of each lane: vcvtps2ph rounds to nearest even with the immediate, gives inf on
 * overflow and exact subnormals (NaN payloads are the caller's to replace) */
static inline h3vu h3vu_f16_bits(h3v v) {
    return _mm512_cvtepu16_epi32(_mm512_cvtps_ph(v, _MM_FROUND_TO_NEAREST_INT | _MM_FROUND_NO_EXC));
}
/* each lane's value (<= 0xffff) as LANES uint16 */
static inline void h3vu_store_u16(uint16_t *dst, h3vu a) {
    _mm256_storeu_si256((__m256i *)dst, _mm512_cvtepi32_epi16(a));
}
/* 2^n for integral-valued float n in [-126, 127] */
static inline h3v h3v_pow2n(h3v n) {
    __m512i i = _mm512_cvtps_epi32(n);
    return _mm512_castsi512_ps(_mm512_slli_epi32(_mm512_add_epi32(i, _mm512_set1_epi32(127)), 23));
}
static inline h3v h3v_round(h3v x) { /* to nearest even */
    return _mm512_roundscale_ps(x, _MM_FROUND_TO_NEAREST_INT | _MM_FROUND_NO_EXC);
}
/* inside every 4-float quarter [a b c d] (128-bit lane): [b a d c], [c d a b], [d c b a] */
static inline h3v h3v_swap_pairs(h3v v) { return _mm512_permute_ps(v, _MM_SHUFFLE(2, 3, 0, 1)); }
static inline h3v h3v_swap_halves4(h3v v) { return _mm512_permute_ps(v, _MM_SHUFFLE(1, 0, 3, 2)); }
static inline h3v h3v_reverse4(h3v v) { return _mm512_permute_ps(v, _MM_SHUFFLE(0, 1, 2, 3)); }

/* In-register 16 x 16 transpose of 32-bit lanes, r[i][j] -> r[j][i]: pairs, quads, then
 * two rounds of 128-bit lane shuffles (64 shuffles).  Moves bits only, so it serves float
 * panels (GEMM unpack, attention's K^T) and bf16 pairs alike (cast __m512i to __m512). */
static inline void h3v_transpose16(__m512 r[16]) {
    __m512 t[16];
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
    /* r[4g + j] holds columns j, j+4, j+8, j+12 of rows 4g..4g+3 (one per 128-bit lane) */
    for (int j = 0; j < 4; j++) {
        t[j] = _mm512_shuffle_f32x4(r[j], r[j + 4], 0x88);          /* cols j, j+8: rows 0-7 */
        t[j + 4] = _mm512_shuffle_f32x4(r[j], r[j + 4], 0xdd);      /* cols j+4, j+12 */
        t[j + 8] = _mm512_shuffle_f32x4(r[j + 8], r[j + 12], 0x88); /* rows 8-15 */
        t[j + 12] = _mm512_shuffle_f32x4(r[j + 8], r[j + 12], 0xdd);
    }
    for (int j = 0; j < 8; j++) {
        r[j] = _mm512_shuffle_f32x4(t[j], t[j + 8], 0x88);
        r[j + 8] = _mm512_shuffle_f32x4(t[j], t[j + 8], 0xdd);
    }
}

#include "simd_math.inc"
#endif
