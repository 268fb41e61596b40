/* gemm_neon.c — GEMM micro-kernels for AArch64 Advanced SIMD (baseline ARMv8.0 NEON).
 *
 * f32 micro-kernel: 8 x 12 tile, 24 q-register accumulators; per k one 8-float A column
 * (2 loads) and one 12-float B row (3 loads), 24 vfmaq_laneq_f32.  Each accumulator is a
 * chain of fused multiply-adds in k order starting from zero, exactly as
 * gemm_ukr_f32_ref, so this kernel gives the reference's bits.  bf16/f16 weights are
 * widened once per cache block by `unpack` (bf16: shift left 16; f16: FCVTL, exact).
 *
 * Integer kernels (same 8 x 12 tile, the packed layout follows the table's NR): no SDOT
 * in ARMv8.0, so each k-quad does SMULL/SMULL2 of int8 activations by signed weights
 * (u8 q+128 -> s8 by xor 0x80; i4 nibbles minus 8) into int16 (|product| <= 128*128 fits)
 * and SADALP into int32 lanes; a final ADDP folds the pairs.  The dots are exact, and
 * each segment is folded in as fmaf((float)dot, sa*sw, acc) in segment order, so the
 * results are bit-identical to gemm_ukr_i8_ref / gemm_ukr_i4_ref.  CPUs with the
 * ARMv8.2 dot-product extension (asimddp, h3_cpu_has_neon_dotprod) use SDOT instead: one
 * instruction per 4 columns x 4 k of one row, the same exact int32 dots, the same bits.
 *
 * Small M (<= 4) uses the row-major gemv: 4 weight rows x up to 4 activation rows per
 * pass, so W streams from memory once (summation order differs from ref: float-close).
 * Activation quantisation stays on the reference (it is O(M K), and exact). */
#include "gemm_impl.h"

#if H3_ARM64
#include <arm_neon.h>
#include <math.h>

#include "simd_neon.h"
#include "gemm_swiglu.inc" /* gemm_swiglu_row_neon */

#define MR 8
#define NR 12

/* The tile's valid mr x nr corner to C, written or added. */
static inline void store_tile(float32x4_t acc[MR][3], float *c, int64_t ldc, int mr, int nr, int accumulate) {
    for (int i = 0; i < mr; i++) {
        float *ci = c + i * ldc;
        if (nr == NR) {
            for (int j = 0; j < 3; j++) {
                float32x4_t v = acc[i][j];
                if (accumulate) v = vaddq_f32(vld1q_f32(ci + 4 * j), v);
                vst1q_f32(ci + 4 * j, v);
            }
        } else {
            float row[NR];
            for (int j = 0; j < 3; j++) vst1q_f32(row + 4 * j, acc[i][j]);
            for (int j = 0; j < nr; j++) ci[j] = accumulate ? ci[j] + row[j] : row[j];
        }
    }
}

/* ------------------------------------------------------------ f32 micro-kernel */

static void ukr_f32_neon(int mr_, int nr_, int64_t kc, const float *ap, const float *bp,
                         float *c, int64_t ldc, int mr, int nr, int accumulate) {
    (void)mr_; (void)nr_;
    float32x4_t c00 = vdupq_n_f32(0), c01 = c00, c02 = c00, c10 = c00, c11 = c00, c12 = c00;
    float32x4_t c20 = c00, c21 = c00, c22 = c00, c30 = c00, c31 = c00, c32 = c00;
    float32x4_t c40 = c00, c41 = c00, c42 = c00, c50 = c00, c51 = c00, c52 = c00;
    float32x4_t c60 = c00, c61 = c00, c62 = c00, c70 = c00, c71 = c00, c72 = c00;
    for (int64_t k = 0; k < kc; k++) {
        const float32x4_t a0 = vld1q_f32(ap), a1 = vld1q_f32(ap + 4);
        const float32x4_t b0 = vld1q_f32(bp), b1 = vld1q_f32(bp + 4), b2 = vld1q_f32(bp + 8);
        ap += MR;
        bp += NR;
#define ROW(r, a, l)                             \
    c##r##0 = vfmaq_laneq_f32(c##r##0, b0, a, l); \
    c##r##1 = vfmaq_laneq_f32(c##r##1, b1, a, l); \
    c##r##2 = vfmaq_laneq_f32(c##r##2, b2, a, l);
        ROW(0, a0, 0) ROW(1, a0, 1) ROW(2, a0, 2) ROW(3, a0, 3)
        ROW(4, a1, 0) ROW(5, a1, 1) ROW(6, a1, 2) ROW(7, a1, 3)
#undef ROW
    }
    float32x4_t t[MR][3] = {{c00, c01, c02}, {c10, c11, c12}, {c20, c21, c22}, {c30, c31, c32},
                            {c40, c41, c42}, {c50, c51, c52}, {c60, c61, c62}, {c70, c71, c72}};
    store_tile(t, c, ldc, mr, nr, accumulate);
}

/* ------------------------------------------------------------ weight widening */

static inline float32x4_t load4_w(int wtype, const void *w, int64_t idx) {
    if (wtype == H3_DT_F32) return vld1q_f32((const float *)w + idx);
    uint16x4_t h = vld1_u16((const uint16_t *)w + idx);
    if (wtype == H3_DT_BF16) return vreinterpretq_f32_u32(vshll_n_u16(h, 16));
    return vcvt_f32_f16(vreinterpret_f16_u16(h));
}

/* W block -> panels out[j/nr][k][j%nr]: 4 rows x 4 k are loaded, widened and transposed
 * so that each store writes 4 consecutive j of one k (nr is a multiple of 4 here). */
static void unpack_neon(int wtype, const void *w, int64_t ldw, int64_t n0, int64_t nc,
                        int64_t n_valid, int64_t k0, int64_t kc, float *out, int nr) {
    int64_t j = 0;
    if (nr % 4 == 0) {
        for (; j + 4 <= nc; j += 4) {
            float *o = out + (j / nr) * kc * nr + (j % nr);
            int64_t rows = H3_MIN(4, n_valid - (n0 + j));
            if (rows < 4) break; /* rows past the weight: the scalar loop zero-fills */
            const int64_t base = (n0 + j) * ldw + k0;
            int64_t k = 0;
            for (; k + 4 <= kc; k += 4) {
                float32x4_t r0 = load4_w(wtype, w, base + k);
                float32x4_t r1 = load4_w(wtype, w, base + ldw + k);
                float32x4_t r2 = load4_w(wtype, w, base + 2 * ldw + k);
                float32x4_t r3 = load4_w(wtype, w, base + 3 * ldw + k);
                float32x4x2_t t01 = vtrnq_f32(r0, r1), t23 = vtrnq_f32(r2, r3);
                vst1q_f32(o + (k + 0) * nr, vcombine_f32(vget_low_f32(t01.val[0]), vget_low_f32(t23.val[0])));
                vst1q_f32(o + (k + 1) * nr, vcombine_f32(vget_low_f32(t01.val[1]), vget_low_f32(t23.val[1])));
                vst1q_f32(o + (k + 2) * nr, vcombine_f32(vget_high_f32(t01.val[0]), vget_high_f32(t23.val[0])));
                vst1q_f32(o + (k + 3) * nr, vcombine_f32(vget_high_f32(t01.val[1]), vget_high_f32(t23.val[1])));
            }
            for (; k < kc; k++)
                for (int t = 0; t < 4; t++) o[k * nr + t] = gemm_w_at(wtype, w, base + t * ldw + k);
        }
    }
    for (; j < nc; j++) { /* the rest: rows at or past n_valid (zeros), odd leftovers */
        float *o = out + (j / nr) * kc * nr + (j % nr);
        int64_t n = n0 + j;
        if (n >= n_valid)
            for (int64_t k = 0; k < kc; k++) o[k * nr] = 0.0f;
        else
            for (int64_t k = 0; k < kc; k++) o[k * nr] = gemm_w_at(wtype, w, n * ldw + k0 + k);
    }
}

/* ------------------------------------------------------------ small-M gemv */

static void gemv_neon(int wtype, int64_t M, int64_t K, const float *x, int64_t ldx,
                      const void *w, int64_t ldw, int64_t n0, int64_t n1, float *y,
                      int64_t ldy) {
    for (int64_t m0 = 0; m0 < M; m0 += 4) {
        const int mm = (int)H3_MIN(4, M - m0);
        for (int64_t n = n0; n < n1; n += 4) {
            const int nn = (int)H3_MIN(4, n1 - n);
            float32x4_t acc[4][4];
            for (int i = 0; i < 4; i++)
                for (int jj = 0; jj < 4; jj++) acc[i][jj] = vdupq_n_f32(0.0f);
            int64_t k = 0;
            for (; k + 4 <= K; k += 4) {
                float32x4_t wv[4];
                for (int jj = 0; jj < 4; jj++)
                    wv[jj] = jj < nn ? load4_w(wtype, w, (n + jj) * ldw + k) : vdupq_n_f32(0.0f);
                for (int i = 0; i < mm; i++) {
                    float32x4_t xv = vld1q_f32(x + (m0 + i) * ldx + k);
                    for (int jj = 0; jj < 4; jj++) acc[i][jj] = vfmaq_f32(acc[i][jj], xv, wv[jj]);
                }
            }
            for (int i = 0; i < mm; i++)
                for (int jj = 0; jj < nn; jj++) {
                    float s = vaddvq_f32(acc[i][jj]);
                    for (int64_t kk = k; kk < K; kk++)
                        s = fmaf(x[(m0 + i) * ldx + kk], gemm_w_at(wtype, w, (n + jj) * ldw + kk), s);
                    y[(m0 + i) * ldy + (n + jj - n0)] = s;
                }
        }
    }
}

/* ------------------------------------------------------------ integer micro-kernels */

/* The pieces both int kernels (SMULL below, SDOT after it) share.  Signed weights of one
 * k-quad for the 12 columns: int8 is stored q + 128; an int4 byte row holds two quads,
 * quad q in the low nibbles and q + 1 in the high ones, stored q + 8. */
static inline void weights_i8(const uint8_t *b, int8x16_t w[3]) {
    for (int j = 0; j < 3; j++) w[j] = vreinterpretq_s8_u8(veorq_u8(vld1q_u8(b + 16 * j), vdupq_n_u8(0x80)));
}
static inline void weights_i4(const uint8_t *b, int8x16_t lo[3], int8x16_t hi[3]) {
    const int8x16_t eight = vdupq_n_s8(8);
    for (int j = 0; j < 3; j++) {
        const uint8x16_t r = vld1q_u8(b + 16 * j);
        lo[j] = vsubq_s8(vreinterpretq_s8_u8(vandq_u8(r, vdupq_n_u8(0x0f))), eight);
        hi[j] = vsubq_s8(vreinterpretq_s8_u8(vshrq_n_u8(r, 4)), eight);
    }
}

/* One row's segment into its float accumulators: acc = fmaf((float)dot, sa * sw, acc),
 * as the reference folds it. */
static inline void fold_segment(float32x4_t acc[3], const int32x4_t dot[3], float sa, const float *sw) {
    const float32x4_t sav = vdupq_n_f32(sa);
    for (int j = 0; j < 3; j++)
        acc[j] = vfmaq_f32(acc[j], vcvtq_f32_s32(dot[j]), vmulq_f32(sav, vld1q_f32(sw + 4 * j)));
}

/* One k-quad for 4 rows: a holds the 4 rows' 4 int8 each; b0..b2 the 12 columns' 4
 * signed weights each.  lo/hi[r][j] collect pair sums of columns 4j..4j+3 of row r
 * (lo: columns 4j, 4j+1; hi: 4j+2, 4j+3). */
#define QROW(r, a, b0, b1, b2)                                                         \
    do {                                                                               \
        const int8x16_t ar_ = vreinterpretq_s8_s32(vdupq_laneq_s32(vreinterpretq_s32_s8(a), r)); \
        const int8x8_t al_ = vget_low_s8(ar_);                                         \
        lo[r][0] = vpadalq_s16(lo[r][0], vmull_s8(al_, vget_low_s8(b0)));              \
        hi[r][0] = vpadalq_s16(hi[r][0], vmull_high_s8(ar_, b0));                      \
        lo[r][1] = vpadalq_s16(lo[r][1], vmull_s8(al_, vget_low_s8(b1)));              \
        hi[r][1] = vpadalq_s16(hi[r][1], vmull_high_s8(ar_, b1));                      \
        lo[r][2] = vpadalq_s16(lo[r][2], vmull_s8(al_, vget_low_s8(b2)));              \
        hi[r][2] = vpadalq_s16(hi[r][2], vmull_high_s8(ar_, b2));                      \
    } while (0)
#define QUAD_4ROWS(a, b0, b1, b2) \
    do { QROW(0, a, b0, b1, b2); QROW(1, a, b0, b1, b2); QROW(2, a, b0, b1, b2); QROW(3, a, b0, b1, b2); } while (0)

static inline void ukr_int_neon(int is_i4, int nseg, int seg_q, const int8_t *ap,
                                const uint8_t *bp, const float *sa, const float *sw,
                                int64_t sw_stride, float *c, int64_t ldc, int mr, int nr,
                                int accumulate) {
    float32x4_t acc[MR][3];
    for (int i = 0; i < MR; i++) acc[i][0] = acc[i][1] = acc[i][2] = vdupq_n_f32(0.0f);
    for (int s = 0; s < nseg; s++) {
        const int q0 = s * seg_q, q1 = q0 + seg_q;
        for (int rg = 0; rg < MR; rg += 4) {
            int32x4_t lo[4][3], hi[4][3];
            for (int r = 0; r < 4; r++)
                for (int j = 0; j < 3; j++) lo[r][j] = hi[r][j] = vdupq_n_s32(0);
            if (!is_i4) {
                for (int q = q0; q < q1; q++) {
                    int8x16_t w[3];
                    weights_i8(bp + (int64_t)q * NR * 4, w);
                    int8x16_t a = vld1q_s8(ap + ((int64_t)q * MR + rg) * 4);
                    QUAD_4ROWS(a, w[0], w[1], w[2]);
                }
            } else {
                for (int q = q0; q < q1; q += 2) {
                    int8x16_t wl[3], wh[3];
                    weights_i4(bp + (int64_t)(q / 2) * NR * 4, wl, wh);
                    int8x16_t a = vld1q_s8(ap + ((int64_t)q * MR + rg) * 4);
                    QUAD_4ROWS(a, wl[0], wl[1], wl[2]);
                    a = vld1q_s8(ap + ((int64_t)(q + 1) * MR + rg) * 4);
                    QUAD_4ROWS(a, wh[0], wh[1], wh[2]);
                }
            }
            for (int r = 0; r < 4; r++) {
                int32x4_t dot[3];
                for (int j = 0; j < 3; j++) dot[j] = vpaddq_s32(lo[r][j], hi[r][j]);
                fold_segment(acc[rg + r], dot, sa[s * MR + rg + r], sw + s * sw_stride);
            }
        }
    }
    store_tile(acc, c, ldc, mr, nr, accumulate);
}

/* ---- ARMv8.2 dot product (SDOT by element): compiled for +dotprod, run only when cpu.c
 * reports asimddp (it can tell on Linux only, so elsewhere the kernel is left out).  Same
 * signed weights, same per-segment fold as above. */
#if defined(__linux__)
#define H3_HAVE_DOTPROD_KERNEL 1
static int has_dotprod(void) { return h3_cpu_has_neon_dotprod(); }

/* One k-quad for the 8 rows (a0: rows 0-3, a1: rows 4-7, 4 int8 each) against the 12
 * columns' signed weights w[3]: d[r][j] += the exact dots of columns 4j..4j+3. */
#define DROW(r, a, l, w)                                   \
    do {                                                   \
        d[r][0] = vdotq_laneq_s32(d[r][0], w[0], a, l);    \
        d[r][1] = vdotq_laneq_s32(d[r][1], w[1], a, l);    \
        d[r][2] = vdotq_laneq_s32(d[r][2], w[2], a, l);    \
    } while (0)
#define DQUAD(a0, a1, w) \
    do { DROW(0, a0, 0, w); DROW(1, a0, 1, w); DROW(2, a0, 2, w); DROW(3, a0, 3, w); \
         DROW(4, a1, 0, w); DROW(5, a1, 1, w); DROW(6, a1, 2, w); DROW(7, a1, 3, w); } while (0)

__attribute__((target("arch=armv8.2-a+dotprod")))
static void ukr_int_dot(int is_i4, int nseg, int seg_q, const int8_t *ap, const uint8_t *bp,
                        const float *sa, const float *sw, int64_t sw_stride, float *c,
                        int64_t ldc, int mr, int nr, int accumulate) {
    float32x4_t acc[MR][3];
    for (int i = 0; i < MR; i++) acc[i][0] = acc[i][1] = acc[i][2] = vdupq_n_f32(0.0f);
    for (int s = 0; s < nseg; s++) {
        const int q0 = s * seg_q, q1 = q0 + seg_q;
        int32x4_t d[MR][3];
        for (int r = 0; r < MR; r++) d[r][0] = d[r][1] = d[r][2] = vdupq_n_s32(0);
        if (!is_i4) {
            for (int q = q0; q < q1; q++) {
                int8x16_t w[3];
                weights_i8(bp + (int64_t)q * NR * 4, w);
                const int8x16_t a0 = vld1q_s8(ap + (int64_t)q * MR * 4), a1 = vld1q_s8(ap + (int64_t)q * MR * 4 + 16);
                DQUAD(a0, a1, w);
            }
        } else {
            for (int q = q0; q < q1; q += 2) {
                int8x16_t wl[3], wh[3];
                weights_i4(bp + (int64_t)(q / 2) * NR * 4, wl, wh);
                const int8x16_t a0 = vld1q_s8(ap + (int64_t)q * MR * 4), a1 = vld1q_s8(ap + (int64_t)q * MR * 4 + 16);
                DQUAD(a0, a1, wl);
                const int8x16_t a2 = vld1q_s8(ap + (int64_t)(q + 1) * MR * 4);
                const int8x16_t a3 = vld1q_s8(ap + (int64_t)(q + 1) * MR * 4 + 16);
                DQUAD(a2, a3, wh);
            }
        }
        for (int r = 0; r < MR; r++) fold_segment(acc[r], d[r], sa[s * MR + r], sw + s * sw_stride);
    }
    store_tile(acc, c, ldc, mr, nr, accumulate);
}
#else
#define H3_HAVE_DOTPROD_KERNEL 0
static int has_dotprod(void) { return 0; }
#endif

/* The int8 (is_i4 0) and int4 (1) tiles: SDOT where the CPU has it, else SMULL; a layout
 * not this table's (cannot happen via the driver) or an odd int4 segment (segments always
 * hold whole byte rows) goes to the reference.  The weight scales are read 12 wide: for I8
 * (sw_stride 0) that is the panel's own 12 channels, for I4 a [NR] row per segment, so no
 * read past the packed scales. */
static inline __attribute__((always_inline)) void
ukr_int_tile(const int is_i4, int mr_, int nr_, int nseg, int seg_q, const int8_t *ap, const uint8_t *bp,
             const float *sa, const int32_t *asum, const float *sw, int64_t sw_stride, float *c, int64_t ldc,
             int mr, int nr, int accumulate) {
    if (mr_ != MR || nr_ != NR || (is_i4 && (seg_q & 1))) {
        (is_i4 ? gemm_ukr_i4_ref : gemm_ukr_i8_ref)(mr_, nr_, nseg, seg_q, ap, bp, sa, asum, sw, sw_stride, c,
                                                    ldc, mr, nr, accumulate);
        return;
    }
#if H3_HAVE_DOTPROD_KERNEL
    if (has_dotprod()) {
        ukr_int_dot(is_i4, nseg, seg_q, ap, bp, sa, sw, sw_stride, c, ldc, mr, nr, accumulate);
        return;
    }
#endif
    ukr_int_neon(is_i4, nseg, seg_q, ap, bp, sa, sw, sw_stride, c, ldc, mr, nr, accumulate);
}

static void ukr_i8_neon(int mr_, int nr_, int nseg, int seg_q, const int8_t *ap, const uint8_t *bp,
                        const float *sa, const int32_t *asum, const float *sw, int64_t sw_stride,
                        float *c, int64_t ldc, int mr, int nr, int accumulate) {
    ukr_int_tile(0, mr_, nr_, nseg, seg_q, ap, bp, sa, asum, sw, sw_stride, c, ldc, mr, nr, accumulate);
}

static void ukr_i4_neon(int mr_, int nr_, int nseg, int seg_q, const int8_t *ap, const uint8_t *bp,
                        const float *sa, const int32_t *asum, const float *sw, int64_t sw_stride,
                        float *c, int64_t ldc, int mr, int nr, int accumulate) {
    ukr_int_tile(1, mr_, nr_, nseg, seg_q, ap, bp, sa, asum, sw, sw_stride, c, ldc, mr, nr, accumulate);
}

_Static_assert(NR % 4 == 0 && MR % 4 == 0, "NEON kernels work in 4-lane groups");

const gemm_kernels gemm_kernels_neon = {
    .mr = MR, .nr = NR, .kc = 256, .mc = MR * 8, .nc = NR * 20,
    .gemv_max_m = 4,
    .ukr_f32 = ukr_f32_neon, .unpack = unpack_neon, .gemv = gemv_neon,
    .ukr_i8 = ukr_i8_neon, .ukr_i4 = ukr_i4_neon,
    .swiglu_row = gemm_swiglu_row_neon, .lora_add = gemm_lora_add_neon,
};
#endif
