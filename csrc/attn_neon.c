/* attn_neon.c — attention for AArch64 NEON: 6 x 4-vector register tile (24 accumulators
 * of 32), 16 queries per unit.  Self-contained: needs only h3_internal.h and libm. */
#include "simd_neon.h"
#define ATTN_MR 6
#define ATTN_NV 4
#define ATTN_BK 128

/* dst[c * ldd + r] = src[r * lds + c] * s for a 4 x 4 block. */
#define ATTN_HAVE_TRANSPOSE 1
static inline void attn_transpose_lxl(const float *src, int64_t lds, float *dst, int64_t ldd,
                                      float32x4_t s) {
    float32x4x2_t p01 = vtrnq_f32(vmulq_f32(vld1q_f32(src), s), vmulq_f32(vld1q_f32(src + lds), s));
    float32x4x2_t p23 = vtrnq_f32(vmulq_f32(vld1q_f32(src + 2 * lds), s),
                                  vmulq_f32(vld1q_f32(src + 3 * lds), s));
    vst1q_f32(dst, vcombine_f32(vget_low_f32(p01.val[0]), vget_low_f32(p23.val[0])));
    vst1q_f32(dst + ldd, vcombine_f32(vget_low_f32(p01.val[1]), vget_low_f32(p23.val[1])));
    vst1q_f32(dst + 2 * ldd, vcombine_f32(vget_high_f32(p01.val[0]), vget_high_f32(p23.val[0])));
    vst1q_f32(dst + 3 * ldd, vcombine_f32(vget_high_f32(p01.val[1]), vget_high_f32(p23.val[1])));
}
#include "attn_body.inc"
