/* elem_avx512.c — element-wise/row ops for AVX-512 F/BW/VL/DQ (also run for AMX).
 * Only the number-format stores are written here; the rest is elem_body.inc. */
#include "simd_avx512.h"

#define ELEM_ISA H3_ISA_AVX512

/* 16 floats -> bf16, RNE by integer rounding (vcvtneps2bf16 needs AVX512-BF16 and
 * flushes subnormal inputs, so it is not used). */
static inline void ev_store_bf16(uint16_t *dst, __m512 v) {
    __m512i u = _mm512_castps_si512(v);
    __m512i lsb = _mm512_and_si512(_mm512_srli_epi32(u, 16), _mm512_set1_epi32(1));
    __m512i r = _mm512_srli_epi32(
        _mm512_add_epi32(_mm512_add_epi32(u, _mm512_set1_epi32(0x7fff)), lsb), 16);
    __m512i q = _mm512_or_si512(_mm512_srli_epi32(u, 16), _mm512_set1_epi32(0x40));
    __mmask16 nan = _mm512_cmp_ps_mask(v, v, _CMP_UNORD_Q);
    r = _mm512_mask_blend_epi32(nan, r, q);
    _mm256_storeu_si256((__m256i *)dst, _mm512_cvtepi32_epi16(r));
}

/* 16 floats -> f16: vcvtps2ph rounds to nearest even with the immediate, gives inf on
 * overflow and exact subnormals; NaN lanes are replaced by sign|0x7e00 (the reference's
 * canonical quiet NaN; the hardware would keep payload bits). */
static inline void ev_store_f16(uint16_t *dst, __m512 v) {
    __m256i h = _mm512_cvtps_ph(v, _MM_FROUND_TO_NEAREST_INT | _MM_FROUND_NO_EXC);
    __m512i u = _mm512_castps_si512(v);
    __m512i q = _mm512_or_si512(
        _mm512_and_si512(_mm512_srli_epi32(u, 16), _mm512_set1_epi32(0x8000)),
        _mm512_set1_epi32(0x7e00));
    __mmask16 nan = _mm512_cmp_ps_mask(v, v, _CMP_UNORD_Q);
    h = _mm256_mask_blend_epi16(nan, h, _mm512_cvtepi32_epi16(q));
    _mm256_storeu_si256((__m256i *)dst, h);
}

#include "elem_body.inc"
