/* nvfp4_neon.c — the NVFP4 micro-kernel for AArch64 Advanced SIMD (base ARMv8-A: no SDOT
 * needed).  One row at a time: the row's quad is broadcast and made signed (a + 128 xor
 * 0x80 = a), vmull_s8 multiplies it by four columns' quads (|q a| <= 12 * 127), the four
 * quads of a segment add up in int16 (<= 6096 a lane), then pairwise adds give each
 * column's int32 dot -- the exact sum of q a, as the reference's dot - corr.  The float
 * steps are the reference's (the same bits). */
#include "nvfp4_impl.h"

#include <arm_neon.h>
#include <string.h>

/* e[r] = the exact int32 dots of segment t of row ar, columns 4r .. 4r + 3 */
static inline void dots(const uint8_t *ar, int t, const int8_t *q, int32x4_t e[4]) {
    const uint32x4_t flip = vdupq_n_u32(0x80808080u);
    const int8_t *qs = q + (int64_t)t * 4 * NV_NR * 4;
    int16x8_t lo[4], hi[4];
    for (int r = 0; r < 4; r++) lo[r] = hi[r] = vdupq_n_s16(0);
    for (int j = 0; j < 4; j++) {
        uint32_t v;
        memcpy(&v, ar + t * NV_SEG + j * 4, 4);
        const int8x16_t av = vreinterpretq_s8_u32(veorq_u32(vdupq_n_u32(v), flip));
        for (int r = 0; r < 4; r++) {
            const int8x16_t w = vld1q_s8(qs + j * 64 + r * 16);
            lo[r] = vaddq_s16(lo[r], vmull_s8(vget_low_s8(w), vget_low_s8(av)));
            hi[r] = vaddq_s16(hi[r], vmull_high_s8(w, av));
        }
    }
    /* lo: columns 4r, 4r+1 (4 products each), hi: 4r+2, 4r+3 */
    for (int r = 0; r < 4; r++) e[r] = vpaddq_s32(vpaddlq_s16(lo[r]), vpaddlq_s16(hi[r]));
}

void nvfp4_ukr_neon(int mr, int nseg, const uint8_t *a, int64_t lda, const float *d, int64_t ldd,
                    const int8_t *q, const float *sw, const int32_t *corr, float *cb) {
    (void)corr;
    for (int i = 0; i < mr; i++) {
        float32x4_t f[4];
        for (int r = 0; r < 4; r++) f[r] = vld1q_f32(cb + i * NV_NR + 4 * r);
        for (int s = 0; s < nseg; s += 2) { /* an activation block: two segments, one d */
            int32x4_t e[4];
            float32x4_t g[4];
            dots(a + i * lda, s, q, e);
            for (int r = 0; r < 4; r++) g[r] = vmulq_f32(vcvtq_f32_s32(e[r]), vld1q_f32(sw + s * NV_NR + 4 * r));
            dots(a + i * lda, s + 1, q, e);
            const float32x4_t dv = vdupq_n_f32(d[i * ldd + s / 2]);
            for (int r = 0; r < 4; r++) {
                g[r] = vfmaq_f32(g[r], vcvtq_f32_s32(e[r]), vld1q_f32(sw + (s + 1) * NV_NR + 4 * r));
                f[r] = vfmaq_f32(f[r], dv, g[r]);
            }
        }
        for (int r = 0; r < 4; r++) vst1q_f32(cb + i * NV_NR + 4 * r, f[r]);
    }
}
