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
 * ARMv8.6 extensions, each in its own table that gemm_weights.c gives a linear when cpu.c
 * reports it (HWCAP2) and the linear's ext_off allows it: SMMLA (i8mm) int kernels on the
 * same packed layout, bit-identical to the reference; BFMMLA (bf16) for bf16 weights with
 * bf16-valued inputs, within a stated bound (see the section below).
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

/* A table's int8 / int4 entry point (the gemm_ukr_int signature) over a tile function. */
#define INT_ENTRY(name, is_i4, tile)                                                                         \
    static void name(int mr_, int nr_, int nseg, int seg_q, const int8_t *ap, const uint8_t *bp,           \
                     const float *sa, const int32_t *asum, const float *sw, int64_t sw_stride, float *c,   \
                     int64_t ldc, int mr, int nr, int accumulate) {                                        \
        tile(is_i4, mr_, nr_, nseg, seg_q, ap, bp, sa, asum, sw, sw_stride, c, ldc, mr, nr, accumulate);  \
    }
INT_ENTRY(ukr_i8_neon, 0, ukr_int_tile)
INT_ENTRY(ukr_i4_neon, 1, ukr_int_tile)

/* ---- ARMv8.6 matrix multiply-accumulate: SMMLA (i8mm) and BFMMLA (bf16).
 *
 * Both multiply a 2-row by a 2-column operand into one q register holding a 2 x 2 block
 * of C, row-major: {r0c0, r0c1, r1c0, r1c1}.  SMMLA's operands are 2 rows x 8 int8 k,
 * BFMMLA's 2 rows x 4 bf16 k.  The 8 x 12 tile is 4 row pairs x 6 column pairs: 24
 * accumulators, as in the SDOT kernel, but each instruction does twice SDOT's MACs (32
 * against 16; BFMMLA 16 against FMLA's 4).  Compiled with target attributes, run only
 * through the tables gemm_weights.c picks from cpu.c's HWCAP2 flags (Linux only). */
#if defined(__linux__)
#define H3_HAVE_MMLA_KERNELS 1

/* 2 x 2 blocks acc[p][c] (row pair p, column pair c) -> rows: row 2p is the low halves of
 * acc[p][0..5] in order, row 2p+1 the high halves (one 64-bit zip per 4 columns). */
static inline void blocks_to_rows(const float32x4_t acc[MR / 2][NR / 2], float32x4_t t[MR][3]) {
    for (int p = 0; p < MR / 2; p++)
        for (int j = 0; j < 3; j++) {
            const float64x2_t a = vreinterpretq_f64_f32(acc[p][2 * j]), b = vreinterpretq_f64_f32(acc[p][2 * j + 1]);
            t[2 * p][j] = vreinterpretq_f32_f64(vzip1q_f64(a, b));
            t[2 * p + 1][j] = vreinterpretq_f32_f64(vzip2q_f64(a, b));
        }
}

/* SMMLA int8/int4 kernel on the plain neon packed layout, no repacking: quads q and q+1
 * (q even) of 4 rows are two q registers of 4-byte words {r0, r1, r2, r3}; ZIP1/ZIP2 of
 * their 32-bit words give {r0 q, r0 q+1, r1 q, r1 q+1} and {r2 .., r3 ..}: two SMMLA row
 * pairs with 8 consecutive k.  The weights' column words pair up the same way, and an
 * int4 byte row already holds quads q (low nibbles) and q+1 (high): one row of bytes is
 * the 8 k of 4 columns.  Why not repack the weights at load into SMMLA's 2 x 8 order:
 * that would be a second int layout of the same panel width, which the converted-weight
 * caches (keyed by nr) could not tell apart, and it would save only the ZIPs (10 per 24
 * SMMLA, on the same vector pipes) -- worth measuring first on a machine that has it.
 * The dots are exact int32 and each segment is folded in as the reference does,
 * fmaf((float)dot, sa * sw, acc), in segment order: bit for bit gemm_ukr_i8/i4_ref.
 * Segments hold an even number of quads (kc_int and every act_group/group are multiples of
 * 8 k); an odd one goes to the reference (ukr_int_mm_tile). */
#define ZIP_LO(x, y) vreinterpretq_s8_s32(vzip1q_s32(vreinterpretq_s32_s8(x), vreinterpretq_s32_s8(y)))
#define ZIP_HI(x, y) vreinterpretq_s8_s32(vzip2q_s32(vreinterpretq_s32_s8(x), vreinterpretq_s32_s8(y)))

__attribute__((target("arch=armv8.2-a+i8mm")))
static void ukr_int_mmla(int is_i4, int nseg, int seg_q, const int8_t *ap, const uint8_t *bp,
                         const float *sa, const float *sw, int64_t sw_stride, float *c,
                         int64_t ldc, int mr, int nr, int accumulate) {
    float32x4_t acc[MR / 2][NR / 2];
    for (int p = 0; p < MR / 2; p++)
        for (int j = 0; j < NR / 2; j++) acc[p][j] = vdupq_n_f32(0.0f);
    for (int s = 0; s < nseg; s++) {
        const int q0 = s * seg_q, q1 = q0 + seg_q;
        int32x4_t d[MR / 2][NR / 2];
        for (int p = 0; p < MR / 2; p++)
            for (int j = 0; j < NR / 2; j++) d[p][j] = vdupq_n_s32(0);
        for (int q = q0; q < q1; q += 2) {
            const int8_t *a = ap + (int64_t)q * MR * 4; /* quad q: rows 0-3, 4-7; quad q+1 after */
            const int8x16_t a0 = vld1q_s8(a), a1 = vld1q_s8(a + 16), a2 = vld1q_s8(a + 32), a3 = vld1q_s8(a + 48);
            const int8x16_t ar[MR / 2] = {ZIP_LO(a0, a2), ZIP_HI(a0, a2), ZIP_LO(a1, a3), ZIP_HI(a1, a3)};
            int8x16_t w0[3], w1[3]; /* quads q and q+1 of columns 4j..4j+3 */
            if (is_i4) {
                weights_i4(bp + (int64_t)(q / 2) * NR * 4, w0, w1);
            } else {
                weights_i8(bp + (int64_t)q * NR * 4, w0);
                weights_i8(bp + (int64_t)(q + 1) * NR * 4, w1);
            }
            for (int j = 0; j < 3; j++) {
                const int8x16_t b0 = ZIP_LO(w0[j], w1[j]), b1 = ZIP_HI(w0[j], w1[j]);
                for (int p = 0; p < MR / 2; p++) {
                    d[p][2 * j] = vmmlaq_s32(d[p][2 * j], ar[p], b0);
                    d[p][2 * j + 1] = vmmlaq_s32(d[p][2 * j + 1], ar[p], b1);
                }
            }
        }
        /* lanes {r0c0, r0c1, r1c0, r1c1}: scales {sa r0, sa r0, sa r1, sa r1} x {sw c0, sw c1, ..} */
        const float *sas = sa + s * MR, *sws = sw + s * sw_stride;
        for (int p = 0; p < MR / 2; p++) {
            const float32x4_t sav = vcombine_f32(vdup_n_f32(sas[2 * p]), vdup_n_f32(sas[2 * p + 1]));
            for (int j = 0; j < NR / 2; j++) {
                const float32x2_t w2 = vld1_f32(sws + 2 * j);
                acc[p][j] = vfmaq_f32(acc[p][j], vcvtq_f32_s32(d[p][j]), vmulq_f32(sav, vcombine_f32(w2, w2)));
            }
        }
    }
    float32x4_t t[MR][3];
    blocks_to_rows(acc, t);
    store_tile(t, c, ldc, mr, nr, accumulate);
}
#undef ZIP_LO
#undef ZIP_HI

static inline __attribute__((always_inline)) void
ukr_int_mm_tile(const int is_i4, int mr_, int nr_, int nseg, int seg_q, const int8_t *ap, const uint8_t *bp,
                const float *sa, const int32_t *asum, const float *sw, int64_t sw_stride, float *c, int64_t ldc,
                int mr, int nr, int accumulate) {
    if (mr_ != MR || nr_ != NR || (seg_q & 1)) {
        (is_i4 ? gemm_ukr_i4_ref : gemm_ukr_i8_ref)(mr_, nr_, nseg, seg_q, ap, bp, sa, asum, sw, sw_stride, c,
                                                    ldc, mr, nr, accumulate);
        return;
    }
    ukr_int_mmla(is_i4, nseg, seg_q, ap, bp, sa, sw, sw_stride, c, ldc, mr, nr, accumulate);
}

INT_ENTRY(ukr_i8_i8mm, 0, ukr_int_mm_tile)
INT_ENTRY(ukr_i4_i8mm, 1, ukr_int_mm_tile)

/* BFMMLA bf16 kernel, for bf16 weights whose caller promises bf16-valued inputs
 * (h3_linear_opts.bf16_inputs, as gemm_bf16_avx512.c): the driver's float slots hold bf16
 * panels instead,
 *   A: [kc4/4][MR/2][2][4] (row pair, row, 4 k)  B: [kc4/4][NR/2][2][4] (column pair, ..)
 * kc4 = kc rounded up to 4, zero padded (kc >= 2 fits the f32 room: set_geometry's K-tail
 * rule).  A is rounded to bf16 to nearest even, which changes nothing for the promised
 * inputs.  Products of two bf16 are exact in f32; what differs from gemm_ukr_f32_ref's
 * one fmaf per k is the summation: BFMMLA (Arm ARM BFMatMulAdd, without FEAT_EBF16)
 * adds the two products of each k pair, then that to the accumulator, each sum rounded to
 * f32 with round-to-odd and subnormal inputs and results flushed to zero (qemu rounds the
 * same way).  Bound, per output, against the reference (one fmaf per k, nearest even):
 *   |got - ref| <= 3 * K * 2^-23 * sum_k |x_k w_k|     (+ K * 2^-126 for flushed values)
 * (2 roundings per pair of at most 1 ulp, the reference's K of half an ulp each, on
 * partial sums bounded by sum |x w|).  Observed under qemu -cpu max, K = 2 .. 1030: at
 * most 0.092 of this bound (the C test driver's "neon bf16mm vs ref" line). */
static inline int64_t kc4(int64_t kc) { return (kc + 3) & ~(int64_t)3; }

static void pack_a_bf16mm(const float *x, int64_t ldx, int64_t rows, int64_t kc, int MR_, void *dst) {
    (void)MR_;
    uint16_t *d = (uint16_t *)dst;
    const int64_t kp = kc4(kc);
    for (int64_t k = 0; k < kp; k++)
        for (int i = 0; i < MR; i++)
            d[((k / 4) * (MR / 2) + i / 2) * 8 + (i % 2) * 4 + k % 4] =
                i < rows && k < kc ? h3_f32_to_bf16(x[i * ldx + k]) : 0;
}

/* W block -> per NR-column panel (at the driver's float offset (j/NR)*kc*NR), bf16
 * [kc4/4][NR/2][2][4]; rows past n_valid and k past kc are zero.  Four consecutive k of
 * one row are one 8-byte word of both layouts. */
static void unpack_bf16mm(int wtype, const void *w, int64_t ldw, int64_t n0, int64_t nc,
                          int64_t n_valid, int64_t k0, int64_t kc, float *out, int nr) {
    (void)nr;
    const int64_t kp = kc4(kc);
    const uint16_t *wb = (const uint16_t *)w;
    for (int64_t j = 0; j < nc; j++) {
        uint16_t *panel = (uint16_t *)(out + (j / NR) * kc * NR);
        const int64_t col = j % NR, n = n0 + j;
        uint16_t *o = panel + (col / 2) * 8 + (col % 2) * 4;
        int64_t k = 0;
        if (n < n_valid && wtype == H3_DT_BF16)
            for (; k + 4 <= kc; k += 4) memcpy(o + (k / 4) * NR * 4, wb + n * ldw + k0 + k, 8);
        for (; k < kp; k++)
            o[(k / 4) * NR * 4 + k % 4] = n < n_valid && k < kc ? (wtype == H3_DT_BF16 ? wb[n * ldw + k0 + k]
                                                                  : h3_f32_to_bf16(gemm_w_at(wtype, w, n * ldw + k0 + k)))
                                                                : 0;
    }
}

__attribute__((target("arch=armv8.2-a+bf16")))
static void ukr_bf16mm(int mr_, int nr_, int64_t kc, const float *ap, const float *bp, float *c,
                       int64_t ldc, int mr, int nr, int accumulate) {
    (void)mr_; (void)nr_;
    const bfloat16_t *a = (const bfloat16_t *)ap, *b = (const bfloat16_t *)bp;
    float32x4_t acc[MR / 2][NR / 2];
    for (int p = 0; p < MR / 2; p++)
        for (int j = 0; j < NR / 2; j++) acc[p][j] = vdupq_n_f32(0.0f);
    for (int64_t kk = 0; kk < kc4(kc) / 4; kk++, a += MR * 4, b += NR * 4) {
        bfloat16x8_t ar[MR / 2];
        for (int p = 0; p < MR / 2; p++) ar[p] = vld1q_bf16(a + 8 * p);
        for (int j = 0; j < NR / 2; j++) {
            const bfloat16x8_t bj = vld1q_bf16(b + 8 * j);
            for (int p = 0; p < MR / 2; p++) acc[p][j] = vbfmmlaq_f32(acc[p][j], ar[p], bj);
        }
    }
    float32x4_t t[MR][3];
    blocks_to_rows(acc, t);
    store_tile(t, c, ldc, mr, nr, accumulate);
}
#else
#define H3_HAVE_MMLA_KERNELS 0
#endif

_Static_assert(NR % 4 == 0 && MR % 4 == 0, "NEON kernels work in 4-lane groups");

#define NEON_TABLE_COMMON                                                                  \
    .mr = MR, .nr = NR, .mc = MR * 8, .nc = NR * 20, .gemv_max_m = 4, .gemv = gemv_neon,   \
    .swiglu_row = gemm_swiglu_row_neon

const gemm_kernels gemm_kernels_neon = {
    NEON_TABLE_COMMON, .kc = 256,
    .ukr_f32 = ukr_f32_neon, .unpack = unpack_neon,
    .ukr_i8 = ukr_i8_neon, .ukr_i4 = ukr_i4_neon,
};

/* Without the mmla kernels (not Linux: cpu.c never reports i8mm/bf16 there) the two
 * tables are never chosen; they stay defined, as the plain neon kernels, for the linker. */
#if H3_HAVE_MMLA_KERNELS
const gemm_kernels gemm_kernels_neon_i8mm = {
    NEON_TABLE_COMMON, .kc = 256,
    .ukr_f32 = ukr_f32_neon, .unpack = unpack_neon,
    .ukr_i8 = ukr_i8_i8mm, .ukr_i4 = ukr_i4_i8mm, .quant_row = gemm_quant_row_ref,
};
/* kc 512: BFMMLA does 4x the f32 kernel's MACs per instruction, so a longer K block halves
 * the C passes per MAC; 512 x 12 bf16 B panels are 12 KB, the 8-row A panel 8 KB (L1). */
const gemm_kernels gemm_kernels_neon_bf16 = {
    NEON_TABLE_COMMON, .kc = 512,
    .ukr_f32 = ukr_bf16mm, .unpack = unpack_bf16mm, .pack_a = pack_a_bf16mm,
    .ukr_i8 = ukr_i8_neon, .ukr_i4 = ukr_i4_neon, .quant_row = gemm_quant_row_ref,
};
#else
const gemm_kernels gemm_kernels_neon_i8mm = {
    NEON_TABLE_COMMON, .kc = 256, .ukr_f32 = ukr_f32_neon, .unpack = unpack_neon,
    .ukr_i8 = ukr_i8_neon, .ukr_i4 = ukr_i4_neon, .quant_row = gemm_quant_row_ref,
};
const gemm_kernels gemm_kernels_neon_bf16 = {
    NEON_TABLE_COMMON, .kc = 256, .ukr_f32 = ukr_f32_neon, .unpack = unpack_neon,
    .ukr_i8 = ukr_i8_neon, .ukr_i4 = ukr_i4_neon, .quant_row = gemm_quant_row_ref,
};
#endif
#endif
