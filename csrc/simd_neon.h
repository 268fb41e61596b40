/* simd_neon.h — the vector vocabulary for AArch64 Advanced SIMD (4 floats). */
#ifndef H3_SIMD_NEON_H
#define H3_SIMD_NEON_H
#include <arm_neon.h>
#include <stdint.h>
#include <string.h>

#define H3V_LANES 4
#define H3V_ISA_SUFFIX neon
typedef float32x4_t h3v;

static inline h3v h3v_zero(void) { return vdupq_n_f32(0.0f); }
static inline h3v h3v_set1(float a) { return vdupq_n_f32(a); }
static inline h3v h3v_load(const float *p) { return vld1q_f32(p); }
static inline void h3v_store(float *p, h3v v) { vst1q_f32(p, v); }
static inline h3v h3v_load_n(const float *p, int n) {
    float t[4] = {0, 0, 0, 0};
    memcpy(t, p, (size_t)n * 4);
    return vld1q_f32(t);
}
static inline void h3v_store_n(float *p, h3v v, int n) {
    float t[4];
    vst1q_f32(t, v);
    memcpy(p, t, (size_t)n * 4);
}
static inline h3v h3v_add(h3v a, h3v b) { return vaddq_f32(a, b); }
static inline h3v h3v_sub(h3v a, h3v b) { return vsubq_f32(a, b); }
static inline h3v h3v_mul(h3v a, h3v b) { return vmulq_f32(a, b); }
static inline h3v h3v_div(h3v a, h3v b) { return vdivq_f32(a, b); }
static inline h3v h3v_fma(h3v a, h3v b, h3v c) { return vfmaq_f32(c, a, b); }
static inline h3v h3v_max(h3v a, h3v b) { return vmaxq_f32(a, b); }
static inline h3v h3v_min(h3v a, h3v b) { return vminq_f32(a, b); }
static inline float h3v_hsum(h3v v) { return vaddvq_f32(v); }
static inline float h3v_hmax(h3v v) { return vmaxvq_f32(v); }
static inline h3v h3v_load_bf16(const uint16_t *p) {
    return vreinterpretq_f32_u32(vshll_n_u16(vld1_u16(p), 16));
}
static inline h3v h3v_load_f16(const uint16_t *p) {
    return vcvt_f32_f16(vreinterpret_f16_u16(vld1_u16(p)));
}
/* LANES x uint32, for number-format bits (elem_body.inc's bf16 and f16 stores) */
typedef uint32x4_t h3vu;
static inline h3vu h3vu_bits(h3v v) { return vreinterpretq_u32_f32(v); }
static inline h3vu h3vu_set1(uint32_t a) { return vdupq_n_u32(a); }
static inline h3vu h3vu_add(h3vu a, h3vu b) { return vaddq_u32(a, b); }
static inline h3vu h3vu_and(h3vu a, h3vu b) { return vandq_u32(a, b); }
static inline h3vu h3vu_or(h3vu a, h3vu b) { return vorrq_u32(a, b); }
static inline h3vu h3vu_shr16(h3vu a) { return vshrq_n_u32(a, 16); }
/* a in the lanes where v is NaN, b in the others (v == v is false only on NaN) */
static inline h3vu h3vu_where_nan(h3v v, h3vu a, h3vu b) { return vbslq_u32(vceqq_f32(v, v), b, a); }
/* f16 bits of each lane (FPCR rounding: nearest even by default; FZ16 off keeps subnormals) */
static inline h3vu h3vu_f16_bits(h3v v) { return vmovl_u16(vreinterpret_u16_f16(vcvt_f16_f32(v))); }
/* each lane's value (<= 0xffff) as LANES uint16 */
static inline void h3vu_store_u16(uint16_t *dst, h3vu a) { vst1_u16(dst, vmovn_u32(a)); }
static inline h3v h3v_pow2n(h3v n) {
    int32x4_t i = vcvtnq_s32_f32(n);
    return vreinterpretq_f32_s32(vshlq_n_s32(vaddq_s32(i, vdupq_n_s32(127)), 23));
}
static inline h3v h3v_round(h3v x) { return vrndnq_f32(x); }
/* inside the vector (one 4-float quarter) [a b c d]: [b a d c], [c d a b], [d c b a] */
static inline h3v h3v_swap_pairs(h3v v) { return vrev64q_f32(v); }
static inline h3v h3v_swap_halves4(h3v v) { return vextq_f32(v, v, 2); }
static inline h3v h3v_reverse4(h3v v) { return h3v_swap_halves4(vrev64q_f32(v)); }
#include "simd_math.inc"
#endif
