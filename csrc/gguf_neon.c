/* gguf_neon.c — the GGUF micro-kernel for AArch64 Advanced SIMD.  The panel's u are read
 * signed: as they are (u <= 63 for every type but Q8_0, the offset removed after as
 * off * asum) or, for Q8_0 (u = q + 128), flipped back to q (xor 0x80, no offset).  With
 * the ARMv8.2 dot product (asimddp, h3_cpu_has_neon_dotprod: Linux only) SDOT adds each
 * column's four products into int32; on base ARMv8-A, vmull_s8 (|q a| <= 128 * 127) and
 * pairwise-add-accumulate into int32 (vpadalq_s16), then pairwise adds give each column's
 * dot.  Both are the exact integer dot of the reference; the float steps are its order
 * (the same bits).  One row at a time, 16 columns. */
#include "gguf_impl.h"

#include <arm_neon.h>
#include <string.h>

/* the float steps of one segment for the row's 16 columns (dot[r]: columns 4r..4r+3), into
 * the group's sums h */
static inline void fold(float32x4_t h[4], const int32x4_t dot[4], int32_t sum, int off, const float *sc,
                        const float *mn) {
    for (int r = 0; r < 4; r++) {
        const int32x4_t dt = vsubq_s32(dot[r], vdupq_n_s32(off * sum));
        h[r] = vfmaq_f32(h[r], vcvtq_f32_s32(dt), vld1q_f32(sc + 4 * r));
        if (mn) h[r] = vfmaq_f32(h[r], vld1q_f32(mn + 4 * r), vdupq_n_f32((float)sum));
    }
}

static inline int8x16_t weights(const uint8_t *p, uint8x16_t flip) { return vreinterpretq_s8_u8(veorq_u8(vld1q_u8(p), flip)); }

/* One segment's 16 column dots, base ARMv8-A: vmull_s8 and pairwise-add-accumulate. */
static inline void seg_smull(const uint8_t *us, const int8_t *ar, int seg, uint8x16_t flip, int32x4_t dot[4]) {
    int32x4_t lo[4], hi[4];
    for (int r = 0; r < 4; r++) lo[r] = hi[r] = vdupq_n_s32(0);
    for (int j = 0; j < seg / 4; j++) {
        uint32_t v;
        memcpy(&v, ar + j * 4, 4);
        const int8x16_t av = vreinterpretq_s8_u32(vdupq_n_u32(v));
        for (int r = 0; r < 4; r++) {
            const int8x16_t w = weights(us + j * 64 + r * 16, flip);
            lo[r] = vpadalq_s16(lo[r], vmull_s8(vget_low_s8(w), vget_low_s8(av)));
            hi[r] = vpadalq_s16(hi[r], vmull_high_s8(w, av));
        }
    }
    /* lo: columns 4r, 4r+1 (two pair sums each), hi: 4r+2, 4r+3 */
    for (int r = 0; r < 4; r++) dot[r] = vpaddq_s32(lo[r], hi[r]);
}

typedef void (*seg_dot_fn)(const uint8_t *us, const int8_t *ar, int seg, uint8x16_t flip, int32x4_t dot[4]);

/* The rows of the micro-kernel around a segment dot (written once; inlined into each
 * variant below, so that the SDOT one is compiled with the dot-product target). */
static inline __attribute__((always_inline)) void rows(seg_dot_fn seg_dot, int mr, int seg, int nseg, const int8_t *a,
                                                       int64_t lda, const float *d, int64_t ldd, const int32_t *as,
                                                       int64_t ldas, int off, uint8x16_t flip, const uint8_t *u,
                                                       const float *sc, const float *mn, float *cb) {
    const int gs = GGUF_AG / seg;
    for (int i = 0; i < mr; i++) {
        for (int s0 = 0; s0 < nseg; s0 += gs) {
            float32x4_t h[4];
            for (int r = 0; r < 4; r++) h[r] = vdupq_n_f32(0.0f);
            for (int s = s0; s < H3_MIN(s0 + gs, nseg); s++) {
                int32x4_t dot[4];
                seg_dot(u + (int64_t)s * seg * GGUF_NR, a + i * lda + s * seg, seg, flip, dot);
                fold(h, dot, as[i * ldas + s], off, sc + s * GGUF_NR, mn ? mn + s * GGUF_NR : NULL);
            }
            const float32x4_t dv = vdupq_n_f32(d[i * ldd + s0 / gs]);
            for (int r = 0; r < 4; r++)
                vst1q_f32(cb + i * GGUF_NR + 4 * r, vfmaq_f32(vld1q_f32(cb + i * GGUF_NR + 4 * r), dv, h[r]));
        }
    }
}

static void rows_smull(int mr, int seg, int nseg, const int8_t *a, int64_t lda, const float *d, int64_t ldd,
                       const int32_t *as, int64_t ldas, int off, uint8x16_t flip, const uint8_t *u, const float *sc,
                       const float *mn, float *cb) {
    rows(seg_smull, mr, seg, nseg, a, lda, d, ldd, as, ldas, off, flip, u, sc, mn, cb);
}

#if defined(__linux__)
/* the same with SDOT: each column's four products added into int32 */
__attribute__((target("arch=armv8.2-a+dotprod")))
static inline void seg_sdot(const uint8_t *us, const int8_t *ar, int seg, uint8x16_t flip, int32x4_t dot[4]) {
    for (int r = 0; r < 4; r++) dot[r] = vdupq_n_s32(0);
    for (int j = 0; j < seg / 4; j++) {
        uint32_t v;
        memcpy(&v, ar + j * 4, 4);
        const int8x16_t av = vreinterpretq_s8_u32(vdupq_n_u32(v));
        for (int r = 0; r < 4; r++) dot[r] = vdotq_s32(dot[r], weights(us + j * 64 + r * 16, flip), av);
    }
}

__attribute__((target("arch=armv8.2-a+dotprod")))
static void rows_sdot(int mr, int seg, int nseg, const int8_t *a, int64_t lda, const float *d, int64_t ldd,
                      const int32_t *as, int64_t ldas, int off, uint8x16_t flip, const uint8_t *u, const float *sc,
                      const float *mn, float *cb) {
    rows(seg_sdot, mr, seg, nseg, a, lda, d, ldd, as, ldas, off, flip, u, sc, mn, cb);
}
#endif

void gguf_ukr_neon(int mr, const gguf_kind *t, int nseg, const int8_t *a, int64_t lda, const float *d, int64_t ldd,
                   const int32_t *as, int64_t ldas, const uint8_t *u, const float *sc, const float *mn, float *cb) {
    const int q8 = t->off == 128; /* Q8_0: u = q + 128, read back as q */
    const uint8x16_t flip = vdupq_n_u8(q8 ? 0x80 : 0);
    const int off = q8 ? 0 : t->off;
#if defined(__linux__)
    if (h3_cpu_has_neon_dotprod()) {
        rows_sdot(mr, t->seg, nseg, a, lda, d, ldd, as, ldas, off, flip, u, sc, mn, cb);
        return;
    }
#endif
    rows_smull(mr, t->seg, nseg, a, lda, d, ldd, as, ldas, off, flip, u, sc, mn, cb);
}
