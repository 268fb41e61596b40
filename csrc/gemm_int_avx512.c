/* gemm_int_avx512.c — AVX-512 integer GEMM micro-kernels (I8/I4 weights x int8
 * activations) and the activation quantiser.
 *
 * Tile: MR rows (the table's, a multiple of the row block RB) x 32 columns.  Per k-quad
 * the 32 columns' weight bytes are two zmm ([32][4] uint8); each row's 4 activation
 * bytes are broadcast.  With VNNI one vpdpbusd does 16 columns x 4 k:
 *   dpbusd(acc, u = q_w + off, a) = acc + sum u*a,
 * and acc starts at -off * sum(a) (asum), so the int32 dot is exact: sum q_w*a.
 * Without VNNI (Skylake-X) the same exact dot comes from vpmaddubsw + vpmaddwd:
 *   int8 weights: |a| x (q_w with a's sign) -- pairs reach 2*127*127 < 2^15, no
 *                 saturation, and no offset (acc starts at 0);
 *   int4 weights: nibble u in [0,15] x a -- pairs reach 2*15*127, no saturation.
 * Per segment the float epilogue is the reference's, in its order:
 *   acc_f = fma((float)dot, sa[m] * sw[n], acc_f), then C = acc_f or C + acc_f,
 * so results are bit-identical to gemm_ukr_i8_ref / gemm_ukr_i4_ref.
 * Compiled with -mavx512f/bw/vl/dq (+vnni; the VNNI kernels are only called when the
 * CPU has it, see gemm_kernels_for). */
#include "gemm_impl.h"

#include <immintrin.h>

#include "gemm_store_avx512.h"
#include <math.h>
#include <string.h>

#define NR 32

/* gemm_ukr_int's parameter list (gemm_impl.h), and its names passed on, for the functions
 * below that only choose a kernel body (NR_: the table's NR as passed; NR is this file's). */
#define GEMM_UKR_INT_PARAMS                                                                   \
    int MR, int NR_, int nseg, int seg_q, const int8_t *ap, const uint8_t *bp, const float *sa, \
        const int32_t *asum, const float *sw, int64_t sw_stride, float *c, int64_t ldc, int mr, \
        int nr, int accumulate
#define GEMM_UKR_INT_ARGS MR, NR_, nseg, seg_q, ap, bp, sa, asum, sw, sw_stride, c, ldc, mr, nr, accumulate

static inline __m512i bcast4(const int8_t *p) {
    int32_t v;
    memcpy(&v, p, 4);
    return _mm512_set1_epi32(v);
}

/* One exact 16-column x 4-k step: acc += sum_t w[t]*a[t] (w as stored, see header). */
static inline __attribute__((always_inline)) __m512i dot4(const int I4, const int VNNI, __m512i acc,
                                                          __m512i w, __m512i a) {
    if (VNNI) {
        /* inline asm: GCC's _mm512_dpbusd_epi32 copies the tied accumulator around every
         * use (two extra moves per dot), which halves the throughput */
        __asm__("vpdpbusd %2, %1, %0" : "+v"(acc) : "v"(w), "v"(a));
        return acc;
    }
    const __m512i ones = _mm512_set1_epi16(1);
    if (I4) return _mm512_add_epi32(acc, _mm512_madd_epi16(_mm512_maddubs_epi16(w, a), ones));
    /* w holds q_w (already xor 0x80): give it a's sign, multiply by |a| */
    __m512i ws = _mm512_mask_sub_epi8(w, _mm512_movepi8_mask(a), _mm512_setzero_si512(), w);
    return _mm512_add_epi32(acc, _mm512_madd_epi16(_mm512_maddubs_epi16(_mm512_abs_epi8(a), ws), ones));
}

/* One segment's float epilogue of one tile row, in the reference's order:
 *   f = fma((float)dot, sa * sw, f), f starting at 0 in the first segment;
 * f stays in the row's L1 tile fb ([32] floats) until the last segment, which writes the
 * C row when it is one of the tile's mr rows (in_tile). */
static inline __attribute__((always_inline)) void
seg_epilogue_row(__m512i acc0, __m512i acc1, float sa_i, __m512 sw0, __m512 sw1, float *fb,
                 int first, int last, int in_tile, float *crow, int nr, int accumulate) {
    __m512 sav = _mm512_set1_ps(sa_i);
    __m512 f0 = first ? _mm512_setzero_ps() : _mm512_load_ps(fb);
    __m512 f1 = first ? _mm512_setzero_ps() : _mm512_load_ps(fb + 16);
    f0 = _mm512_fmadd_ps(_mm512_cvtepi32_ps(acc0), _mm512_mul_ps(sav, sw0), f0);
    f1 = _mm512_fmadd_ps(_mm512_cvtepi32_ps(acc1), _mm512_mul_ps(sav, sw1), f1);
    if (!last) {
        _mm512_store_ps(fb, f0);
        _mm512_store_ps(fb + 16, f1);
    } else if (in_tile) {
        store_row(crow, f0, f1, nr, accumulate);
    }
}

/* RB rows starting at the panel's row r0 (ap, sa, asum already offset by r0).
 * I4: 0 int8 weights, 1 int4 nibbles as packed, 2 int4 widened to the int8 layout (bytes
 * q_w + 8, gemm_widen_i4): loaded as int8, multiplied as int4. */
static inline __attribute__((always_inline)) void
int_rows(const int I4, const int VNNI, const int RB, int MR, int nseg, int seg_q, const int8_t *ap,
         const uint8_t *bp, const float *sa, const int32_t *asum, const float *sw, int64_t sw_stride,
         float *c, int64_t ldc, int mr, int nr, int accumulate) {
    /* float accumulators live in L1 (a stack tile), which frees registers for the int
     * ones; a single segment (int8 with whole-row scales) skips them */
    float fbuf[RB * 32] __attribute__((aligned(64)));
    const __m512i m4 = _mm512_set1_epi8(0x0f);
    const __m512i flip = _mm512_set1_epi8((char)0x80);
    const int32_t off = I4 ? 8 : 128;
    /* with 1-2 rows (small M) a second set of accumulators takes every other quad, so
     * that 4+ independent dpbusd chains hide the instruction latency (int32 adds are exact) */
    const int DUAL = RB <= 2;
    prefetch_c_tile(c, ldc, mr);
    for (int s = 0; s < nseg; s++) {
        __m512i acc[RB][2], acc2[RB][2];
#pragma GCC unroll 16
        for (int i = 0; i < RB; i++) {
            acc[i][0] = acc[i][1] = (VNNI || I4) ? _mm512_set1_epi32(-off * asum[s * MR + i]) : _mm512_setzero_si512();
            acc2[i][0] = acc2[i][1] = _mm512_setzero_si512();
        }
        const int8_t *a = ap + (int64_t)s * seg_q * MR * 4;
        if (I4 != 1) {
            const uint8_t *b = bp + (int64_t)s * seg_q * NR * 4;
            for (int q = 0; q < seg_q; q += 2, a += 2 * MR * 4, b += 2 * NR * 4) {
                /* seg_q is even: segments are multiples of 8 k */
                __m512i b0 = _mm512_loadu_si512(b), b1 = _mm512_loadu_si512(b + 64);
                __m512i b2 = _mm512_loadu_si512(b + 128), b3 = _mm512_loadu_si512(b + 192);
                if (!VNNI && !I4) {
                    b0 = _mm512_xor_si512(b0, flip); b1 = _mm512_xor_si512(b1, flip);
                    b2 = _mm512_xor_si512(b2, flip); b3 = _mm512_xor_si512(b3, flip);
                }
#pragma GCC unroll 16
                for (int i = 0; i < RB; i++) {
                    __m512i av = bcast4(a + i * 4);
                    acc[i][0] = dot4(I4, VNNI, acc[i][0], b0, av);
                    acc[i][1] = dot4(I4, VNNI, acc[i][1], b1, av);
                }
#pragma GCC unroll 16
                for (int i = 0; i < RB; i++) {
                    __m512i av = bcast4(a + MR * 4 + i * 4);
                    if (DUAL) {
                        acc2[i][0] = dot4(I4, VNNI, acc2[i][0], b2, av);
                        acc2[i][1] = dot4(I4, VNNI, acc2[i][1], b3, av);
                    } else {
                        acc[i][0] = dot4(I4, VNNI, acc[i][0], b2, av);
                        acc[i][1] = dot4(I4, VNNI, acc[i][1], b3, av);
                    }
                }
            }
        } else {
            const uint8_t *b = bp + (int64_t)s * (seg_q / 2) * NR * 4;
            for (int q = 0; q < seg_q; q += 2, a += 2 * MR * 4, b += NR * 4) {
                __m512i v0 = _mm512_loadu_si512(b), v1 = _mm512_loadu_si512(b + 64);
                __m512i l0 = _mm512_and_si512(v0, m4), l1 = _mm512_and_si512(v1, m4);
#pragma GCC unroll 16
                for (int i = 0; i < RB; i++) {
                    __m512i av = bcast4(a + i * 4);
                    acc[i][0] = dot4(1, VNNI, acc[i][0], l0, av);
                    acc[i][1] = dot4(1, VNNI, acc[i][1], l1, av);
                }
                __m512i h0 = _mm512_and_si512(_mm512_srli_epi16(v0, 4), m4);
                __m512i h1 = _mm512_and_si512(_mm512_srli_epi16(v1, 4), m4);
#pragma GCC unroll 16
                for (int i = 0; i < RB; i++) {
                    __m512i av = bcast4(a + MR * 4 + i * 4);
                    if (DUAL) {
                        acc2[i][0] = dot4(1, VNNI, acc2[i][0], h0, av);
                        acc2[i][1] = dot4(1, VNNI, acc2[i][1], h1, av);
                    } else {
                        acc[i][0] = dot4(1, VNNI, acc[i][0], h0, av);
                        acc[i][1] = dot4(1, VNNI, acc[i][1], h1, av);
                    }
                }
            }
        }
        if (DUAL) {
#pragma GCC unroll 16
            for (int i = 0; i < RB; i++) {
                acc[i][0] = _mm512_add_epi32(acc[i][0], acc2[i][0]);
                acc[i][1] = _mm512_add_epi32(acc[i][1], acc2[i][1]);
            }
        }
        const __m512 sw0 = _mm512_loadu_ps(sw + s * sw_stride), sw1 = _mm512_loadu_ps(sw + s * sw_stride + 16);
        const int last = s == nseg - 1;
#pragma GCC unroll 16
        for (int i = 0; i < RB; i++)
            seg_epilogue_row(acc[i][0], acc[i][1], sa[s * MR + i], sw0, sw1, fbuf + i * 32, s == 0, last,
                             i < mr, c + i * ldc, nr, accumulate);
    }
}

/* VNNI, 7 rows x 32 columns over seg_q k-quads of int8-layout weights (int8, or int4
 * widened: the offset is in acc's starting value): acc[i][h] += the rows' dots. */
static inline __attribute__((always_inline)) void quads7(__m512i acc[7][2], int MR, int seg_q, const int8_t *a,
                                                        const uint8_t *b) {
    for (int q = 0; q < seg_q; q += 2, a += 2 * MR * 4, b += 2 * NR * 4) {
        __m512i b0 = _mm512_loadu_si512(b), b1 = _mm512_loadu_si512(b + 64);
        __m512i b2 = _mm512_loadu_si512(b + 128), b3 = _mm512_loadu_si512(b + 192);
#pragma GCC unroll 7
        for (int i = 0; i < 7; i++) {
            __m512i av = bcast4(a + i * 4);
            acc[i][0] = dot4(1, 1, acc[i][0], b0, av);
            acc[i][1] = dot4(1, 1, acc[i][1], b1, av);
        }
#pragma GCC unroll 7
        for (int i = 0; i < 7; i++) {
            __m512i av = bcast4(a + MR * 4 + i * 4);
            acc[i][0] = dot4(1, 1, acc[i][0], b2, av);
            acc[i][1] = dot4(1, 1, acc[i][1], b3, av);
        }
    }
}

/* VNNI, one full 7-row block of int8 weights (off 128) or widened int4 ones (off 8, the
 * I8 layout).  The float partial sums stay in an L1 tile that starts at zero, so every
 * segment runs the same branch-free epilogue (fma(dot, sa*sw, 0) is what the reference's
 * first segment computes: same bits) and C is written once.  int_rows' per-segment
 * branches (first / last / i < mr) made GCC keep the int32 accumulators in memory around
 * the epilogue: ~20% of an int4 (group 128) call at M = 2048, against ~10% for the
 * epilogue's arithmetic itself. */
static inline __attribute__((always_inline)) void
rows7_vnni(const int32_t off, int MR, int nseg, int seg_q, const int8_t *ap, const uint8_t *bp,
           const float *sa, const int32_t *asum, const float *sw, int64_t sw_stride, float *c,
           int64_t ldc, int nr, int accumulate) {
    float fbuf[7 * 32] __attribute__((aligned(64)));
#pragma GCC unroll 14
    for (int i = 0; i < 14; i++) _mm512_store_ps(fbuf + i * 16, _mm512_setzero_ps());
    prefetch_c_tile(c, ldc, 7);
    for (int s = 0; s < nseg; s++) {
        __m512i acc[7][2];
#pragma GCC unroll 7
        for (int i = 0; i < 7; i++) acc[i][0] = acc[i][1] = _mm512_set1_epi32(-off * asum[s * MR + i]);
        quads7(acc, MR, seg_q, ap + (int64_t)s * seg_q * MR * 4, bp + (int64_t)s * seg_q * NR * 4);
        const __m512 sw0 = _mm512_loadu_ps(sw + s * sw_stride), sw1 = _mm512_loadu_ps(sw + s * sw_stride + 16);
#pragma GCC unroll 7
        for (int i = 0; i < 7; i++) {
            __m512 sav = _mm512_set1_ps(sa[s * MR + i]);
            __m512 f0 = _mm512_fmadd_ps(_mm512_cvtepi32_ps(acc[i][0]), _mm512_mul_ps(sav, sw0),
                                        _mm512_load_ps(fbuf + i * 32));
            __m512 f1 = _mm512_fmadd_ps(_mm512_cvtepi32_ps(acc[i][1]), _mm512_mul_ps(sav, sw1),
                                        _mm512_load_ps(fbuf + i * 32 + 16));
            _mm512_store_ps(fbuf + i * 32, f0);
            _mm512_store_ps(fbuf + i * 32 + 16, f1);
        }
    }
    for (int i = 0; i < 7; i++)
        store_row(c + i * ldc, _mm512_load_ps(fbuf + i * 32), _mm512_load_ps(fbuf + i * 32 + 16), nr, accumulate);
}

/* The table's MR in row blocks of 7; the last block (and small M, where the GEMM is
 * memory-bound) uses the smallest of 1/2/4/7 rows that covers it.  A macro, the file's
 * only one over code: an always_inline function taking I4 and VNNI would be optimised
 * once with both unknown before being inlined, and GCC 12 then compiled every kernel
 * with other register allocations and inlining choices (compared with objdump).  Each
 * entry point below reaches its kernel body through plain calls to at most two functions
 * these two macros define, never a macro inside a macro. */
#define ROW_BLOCKS_KERNEL(name, I4, VNNI)                                                         \
    static void name(GEMM_UKR_INT_PARAMS) {                                                       \
        (void)NR_;                                                                                \
        for (int r0 = 0; r0 < mr; r0 += 7) {                                                      \
            int rows = H3_MIN(7, mr - r0);                                                        \
            const int8_t *a = ap + r0 * 4;                                                        \
            float *cc = c + r0 * ldc;                                                             \
            if (rows == 1)                                                                        \
                int_rows(I4, VNNI, 1, MR, nseg, seg_q, a, bp, sa + r0, asum + r0, sw, sw_stride,  \
                         cc, ldc, rows, nr, accumulate);                                          \
            else if (rows == 2)                                                                   \
                int_rows(I4, VNNI, 2, MR, nseg, seg_q, a, bp, sa + r0, asum + r0, sw, sw_stride,  \
                         cc, ldc, rows, nr, accumulate);                                          \
            else if (rows <= 4)                                                                   \
                int_rows(I4, VNNI, 4, MR, nseg, seg_q, a, bp, sa + r0, asum + r0, sw, sw_stride,  \
                         cc, ldc, rows, nr, accumulate);                                          \
            else                                                                                  \
                int_rows(I4, VNNI, 7, MR, nseg, seg_q, a, bp, sa + r0, asum + r0, sw, sw_stride,  \
                         cc, ldc, rows, nr, accumulate);                                          \
        }                                                                                         \
    }

ROW_BLOCKS_KERNEL(ukr_i8_vnni_rb0, 0, 1)
ROW_BLOCKS_KERNEL(ukr_i4_vnni_rb, 1, 1)
ROW_BLOCKS_KERNEL(ukr_i8_bw_rb, 0, 0)
ROW_BLOCKS_KERNEL(ukr_i4_bw_rb, 1, 0)
ROW_BLOCKS_KERNEL(ukr_i4w_vnni_rb, 2, 1)
ROW_BLOCKS_KERNEL(ukr_i4w_bw_rb, 2, 0)

/* VNNI for int8 and widened int4: full 7-row blocks through rows7_vnni (off: the weights'
 * offset, 128 or 8), a last partial block through a row-block kernel (rest).  A macro for
 * the same reason as ROW_BLOCKS_KERNEL. */
#define ROWS7_KERNEL(name, off, rest)                                                             \
    static void name(GEMM_UKR_INT_PARAMS) {                                                       \
        for (int r0 = 0; r0 < mr; r0 += 7) {                                                      \
            if (mr - r0 >= 7)                                                                     \
                rows7_vnni(off, MR, nseg, seg_q, ap + r0 * 4, bp, sa + r0, asum + r0, sw,         \
                           sw_stride, c + r0 * ldc, ldc, nr, accumulate);                         \
            else                                                                                  \
                rest(MR, NR_, nseg, seg_q, ap + r0 * 4, bp, sa + r0, asum + r0, sw, sw_stride,    \
                     c + r0 * ldc, ldc, mr - r0, nr, accumulate);                                 \
        }                                                                                         \
    }

ROWS7_KERNEL(ukr_i8_vnni_rb, 128, ukr_i8_vnni_rb0)
ROWS7_KERNEL(ukr_i4w_vnni_7, 8, ukr_i4w_vnni_rb)

/* int4 with VNNI and two 7-row blocks (small M; large M comes widened from the driver):
 * each segment's nibbles are widened once into an L1 buffer in the int8 layout ([q][32][4],
 * values q+8), shared by both row blocks, so the inner loop is the int8 one.  Same integer
 * dots and epilogue order (same bits).  The quad loop is rows7_vnni's (quads7); widening
 * the whole K block first and calling rows7_vnni instead measured ~13% slower at M = 32-56
 * (a 32 KB buffer written and read back per call, where this one stays at 4 KB). */
static inline __attribute__((always_inline)) void
seg_rows7_i4(int MR, int seg_q, const int8_t *a, const uint8_t *bdec, const float *sa_s,
             const int32_t *asum_s, const float *sw_s, float *fbuf, int first, int last, float *c,
             int64_t ldc, int mr, int nr, int accumulate) {
    __m512i acc[7][2];
#pragma GCC unroll 7
    for (int i = 0; i < 7; i++) acc[i][0] = acc[i][1] = _mm512_set1_epi32(-8 * asum_s[i]);
    quads7(acc, MR, seg_q, a, bdec);
    const __m512 sw0 = _mm512_loadu_ps(sw_s), sw1 = _mm512_loadu_ps(sw_s + 16);
#pragma GCC unroll 7
    for (int i = 0; i < 7; i++)
        seg_epilogue_row(acc[i][0], acc[i][1], sa_s[i], sw0, sw1, fbuf + i * 32, first, last, i < mr,
                         c + i * ldc, nr, accumulate);
}

static void ukr_i4_vnni_big(GEMM_UKR_INT_PARAMS) {
    uint8_t bdec[32 * NR * 4] __attribute__((aligned(64)));
    float fbuf[2][7 * 32] __attribute__((aligned(64)));
    const __m512i m4 = _mm512_set1_epi8(0x0f);
    for (int s = 0; s < nseg; s++) {
        const uint8_t *b = bp + (int64_t)s * (seg_q / 2) * NR * 4;
        for (int j = 0; j < seg_q / 2; j++, b += NR * 4) {
            __m512i v0 = _mm512_loadu_si512(b), v1 = _mm512_loadu_si512(b + 64);
            _mm512_store_si512(bdec + (2 * j) * 128, _mm512_and_si512(v0, m4));
            _mm512_store_si512(bdec + (2 * j) * 128 + 64, _mm512_and_si512(v1, m4));
            _mm512_store_si512(bdec + (2 * j + 1) * 128, _mm512_and_si512(_mm512_srli_epi16(v0, 4), m4));
            _mm512_store_si512(bdec + (2 * j + 1) * 128 + 64, _mm512_and_si512(_mm512_srli_epi16(v1, 4), m4));
        }
        const int8_t *a = ap + (int64_t)s * seg_q * MR * 4;
        for (int r0 = 0; r0 < mr; r0 += 7)
            seg_rows7_i4(MR, seg_q, a + r0 * 4, bdec, sa + s * MR + r0, asum + s * MR + r0,
                         sw + s * sw_stride, fbuf[r0 / 7], s == 0, s == nseg - 1, c + r0 * ldc, ldc,
                         H3_MIN(7, mr - r0), nr, accumulate);
    }
    (void)NR_;
}

static void ukr_i4_vnni_sel(GEMM_UKR_INT_PARAMS) {
    if (MR == 14 && mr > 7 && seg_q <= 32)
        ukr_i4_vnni_big(GEMM_UKR_INT_ARGS);
    else
        ukr_i4_vnni_rb(GEMM_UKR_INT_ARGS);
}

/* Entry points: NR must be 32 and MR a multiple of 7; anything else is the reference's. */
static int tile_ok(int MR, int NR_) { return NR_ == NR && MR % 7 == 0; }
void gemm_ukr_i8_avx512vnni(GEMM_UKR_INT_PARAMS) { (tile_ok(MR, NR_) ? ukr_i8_vnni_rb : gemm_ukr_i8_ref)(GEMM_UKR_INT_ARGS); }
void gemm_ukr_i4_avx512vnni(GEMM_UKR_INT_PARAMS) { (tile_ok(MR, NR_) ? ukr_i4_vnni_sel : gemm_ukr_i4_ref)(GEMM_UKR_INT_ARGS); }
void gemm_ukr_i8_avx512bw(GEMM_UKR_INT_PARAMS) { (tile_ok(MR, NR_) ? ukr_i8_bw_rb : gemm_ukr_i8_ref)(GEMM_UKR_INT_ARGS); }
void gemm_ukr_i4_avx512bw(GEMM_UKR_INT_PARAMS) { (tile_ok(MR, NR_) ? ukr_i4_bw_rb : gemm_ukr_i4_ref)(GEMM_UKR_INT_ARGS); }
/* Widened int4 (ukr_i4w, the driver's large-M path): only in the tables above, whose
 * MR (14) and NR (32) the row blocks are written for. */
void gemm_ukr_i4w_avx512vnni(GEMM_UKR_INT_PARAMS) { ukr_i4w_vnni_7(GEMM_UKR_INT_ARGS); }
void gemm_ukr_i4w_avx512bw(GEMM_UKR_INT_PARAMS) { ukr_i4w_bw_rb(GEMM_UKR_INT_ARGS); }

/* gemm_quant_row_ref, 16 lanes at a time (same operations, so the same bits):
 * amax = max |x| (exact in any order), inv = 127/amax, q = clamp(rint(x*inv)),
 * scale = amax/127; a NaN/Inf in the group gives q = 0 and scale NaN. */
void gemm_quant_row_avx512(const float *x, int64_t K, int64_t Kp, int64_t ag, int8_t *q,
                           float *scales) {
    const __m512 inf = _mm512_set1_ps(INFINITY);
    const __m512 lo = _mm512_set1_ps(-127.0f), hi = _mm512_set1_ps(127.0f);
    int64_t ng = H3_CEIL_DIV(Kp, ag);
    for (int64_t g = 0; g < ng; g++) {
        int64_t k0 = g * ag, k1 = H3_MIN(k0 + ag, K), kend = H3_MIN(k0 + ag, Kp);
        __m512 vmax = _mm512_setzero_ps();
        __mmask16 bad = 0;
        for (int64_t k = k0; k < k1; k += 16) {
            __mmask16 m = (k1 - k) >= 16 ? 0xffff : (__mmask16)((1u << (k1 - k)) - 1u);
            __m512 a = _mm512_abs_ps(_mm512_maskz_loadu_ps(m, x + k));
            bad |= _mm512_cmp_ps_mask(a, inf, _CMP_NLT_UQ);
            vmax = _mm512_max_ps(vmax, a);
        }
        float amax = _mm512_reduce_max_ps(vmax);
        if (bad || !(amax > 0.0f)) {
            if (kend > k0) memset(q + k0, 0, (size_t)(kend - k0));
            scales[g] = bad ? NAN : 0.0f;
            continue;
        }
        const __m512 inv = _mm512_set1_ps(127.0f / amax);
        for (int64_t k = k0; k < kend; k += 16) {
            __mmask16 ms = (kend - k) >= 16 ? 0xffff : (__mmask16)((1u << (kend - k)) - 1u);
            __mmask16 ml = k >= K ? 0 : ((K - k) >= 16 ? 0xffff : (__mmask16)((1u << (K - k)) - 1u));
            __m512 v = _mm512_mul_ps(_mm512_maskz_loadu_ps(ml, x + k), inv);
            v = _mm512_roundscale_ps(v, _MM_FROUND_TO_NEAREST_INT | _MM_FROUND_NO_EXC);
            v = _mm512_min_ps(hi, _mm512_max_ps(lo, v));
            _mm512_mask_cvtepi32_storeu_epi8(q + k, ms, _mm512_cvtps_epi32(v));
        }
        scales[g] = amax / 127.0f;
    }
}
