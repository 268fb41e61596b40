/* elem_neon.c — element-wise/row ops for AArch64 Advanced SIMD.
 * Only the number-format stores are written here; the rest is elem_body.inc.
 * Self-contained apart from the scalar helpers of h3_internal.h / convert.c. */
#include "simd_neon.h"

#define ELEM_ISA H3_ISA_NEON

/* 4 floats -> bf16, RNE by integer rounding; NaN -> (bits >> 16) | 0x40. */
static inline void ev_store_bf16(uint16_t *dst, float32x4_t v) {
    uint32x4_t u = vreinterpretq_u32_f32(v);
    uint32x4_t lsb = vandq_u32(vshrq_n_u32(u, 16), vdupq_n_u32(1));
    uint32x4_t r = vshrq_n_u32(vaddq_u32(vaddq_u32(u, vdupq_n_u32(0x7fff)), lsb), 16);
    uint32x4_t q = vorrq_u32(vshrq_n_u32(u, 16), vdupq_n_u32(0x40));
    uint32x4_t ok = vceqq_f32(v, v); /* false on NaN */
    vst1_u16(dst, vmovn_u32(vbslq_u32(ok, r, q)));
}

/* 4 floats -> f16 (FPCR rounding: nearest even by default; FZ16 off keeps subnormals);
 * NaN lanes -> sign|0x7e00. */
static inline void ev_store_f16(uint16_t *dst, float32x4_t v) {
    uint16x4_t h = vreinterpret_u16_f16(vcvt_f16_f32(v));
    uint32x4_t u = vreinterpretq_u32_f32(v);
    uint32x4_t q = vorrq_u32(vandq_u32(vshrq_n_u32(u, 16), vdupq_n_u32(0x8000)),
                             vdupq_n_u32(0x7e00));
    uint16x4_t ok = vmovn_u32(vceqq_f32(v, v));
    vst1_u16(dst, vbsl_u16(ok, h, vmovn_u32(q)));
}

#include "elem_body.inc"
