/* gemm_avx512.c — AVX-512 GEMM micro-kernels (float modes).
 *
 * f32 micro-kernel: 14 x 32 tile, 28 zmm accumulators + 2 zmm of B; A comes in through
 * embedded broadcasts, so the loop body is 2 loads + 28 FMAs per k.  Tails (mr < 14,
 * nr < 32) compute the full tile on zero-padded panels and store the valid corner with
 * masks.  bf16/f16 weights are widened to f32 once per cache block by `unpack`, so the
 * inner loop is the same for every float storage type.
 * Compiled with -mavx512f -mavx512bw -mavx512vl -mavx512dq (+bf16/vnni for other files). */
#include "gemm_impl.h"

#include <immintrin.h>

#include "gemm_store_avx512.h"
#include "simd_avx512.h"
#include "gemm_swiglu.inc" /* gemm_swiglu_row_avx512 */

#define MR 14
#define NR 32

/* R rows (R >= mr) x 32 columns; each row's k loop is the same whatever R is (same bits). */
static inline __attribute__((always_inline)) void f32_rows(const int R, int64_t kc, const float *ap,
                                                          const float *bp, float *c, int64_t ldc, int mr,
                                                          int nr, int accumulate) {
    __m512 acc[R][2];
#pragma GCC unroll 14
    for (int i = 0; i < R; i++) acc[i][0] = acc[i][1] = _mm512_setzero_ps();
    for (int64_t k = 0; k < kc; k++) {
        __m512 b0 = _mm512_load_ps(bp + k * NR);
        __m512 b1 = _mm512_load_ps(bp + k * NR + 16);
        const float *a = ap + k * MR;
#pragma GCC unroll 14
        for (int i = 0; i < R; i++) {
            __m512 av = _mm512_set1_ps(a[i]);
            acc[i][0] = _mm512_fmadd_ps(av, b0, acc[i][0]);
            acc[i][1] = _mm512_fmadd_ps(av, b1, acc[i][1]);
        }
    }
#pragma GCC unroll 14
    for (int i = 0; i < R; i++)
        if (i < mr) store_row(c + i * ldc, acc[i][0], acc[i][1], nr, accumulate);
}

/* A short last row tile runs the smallest of 2/4/7/14 rows that covers it, not all 14 (as
 * in gemm_bf16_avx512.c). */
static void ukr_f32_avx512(int mr_, int nr_, int64_t kc, const float *ap, const float *bp,
                           float *c, int64_t ldc, int mr, int nr, int accumulate) {
    (void)mr_; (void)nr_;
    prefetch_c_tile(c, ldc, mr);
    GEMM_ROWS_DISPATCH(mr, MR, f32_rows, kc, ap, bp, c, ldc, mr, nr, accumulate);
}

static inline __m512 maskload_w(int wtype, const void *w, int64_t idx, __mmask16 m);

/* W block -> f32 panels out[j/NR][k][j%NR]: 16 rows x 16 k per step, widened and
 * transposed in registers, so every store is a full 64-byte panel row. */
static void unpack_avx512(int wtype, const void *w, int64_t ldw, int64_t n0, int64_t nc,
                          int64_t n_valid, int64_t k0, int64_t kc, float *out, int nr) {
    if (nr % 16 || nc % 16) {
        gemm_unpack_ref(wtype, w, ldw, n0, nc, n_valid, k0, kc, out, nr);
        return;
    }
    for (int64_t j = 0; j < nc; j += 16) {
        float *o = out + (j / nr) * kc * nr + (j % nr);
        for (int64_t k = 0; k < kc; k += 16) {
            int kk = (int)H3_MIN(16, kc - k);
            __mmask16 km = (__mmask16)((1u << kk) - 1u);
            __m512 r[16];
            for (int t = 0; t < 16; t++) {
                int64_t n = n0 + j + t;
                r[t] = n < n_valid ? maskload_w(wtype, w, n * ldw + k0 + k, km) : _mm512_setzero_ps();
            }
            h3v_transpose16(r);
            for (int t = 0; t < kk; t++) _mm512_store_ps(o + (k + t) * nr, r[t]);
        }
    }
}

/* A rows -> panel [kc][MR] (rows past `rows` zero): 16 k per step through a transpose. */
static void pack_a_avx512(const float *x, int64_t ldx, int64_t rows, int64_t kc, int MR_, void *dst_) {
    float *dst = (float *)dst_;
    if (MR_ > 16) { /* not this table's; plain copy */
        for (int64_t k = 0; k < kc; k++)
            for (int i = 0; i < MR_; i++) dst[k * MR_ + i] = i < rows ? x[i * ldx + k] : 0.0f;
        return;
    }
    const __mmask16 rm = (__mmask16)((1u << MR_) - 1u);
    for (int64_t k = 0; k < kc; k += 16) {
        int kk = (int)H3_MIN(16, kc - k);
        __mmask16 km = (__mmask16)((1u << kk) - 1u);
        __m512 r[16];
        for (int i = 0; i < 16; i++)
            r[i] = i < rows ? _mm512_maskz_loadu_ps(km, x + i * ldx + k) : _mm512_setzero_ps();
        h3v_transpose16(r);
        for (int t = 0; t < kk; t++) _mm512_mask_storeu_ps(dst + (k + t) * MR_, rm, r[t]);
    }
}

static inline __m512 load_w16(int wtype, const void *w, int64_t idx) {
    if (wtype == H3_DT_F32) return _mm512_loadu_ps((const float *)w + idx);
    __m256i h = _mm256_loadu_si256((const __m256i *)((const uint16_t *)w + idx));
    if (wtype == H3_DT_BF16) return _mm512_castsi512_ps(_mm512_slli_epi32(_mm512_cvtepu16_epi32(h), 16));
    return _mm512_cvtph_ps(h);
}
static inline __m512 maskload_w(int wtype, const void *w, int64_t idx, __mmask16 m) {
    if (wtype == H3_DT_F32) return _mm512_maskz_loadu_ps(m, (const float *)w + idx);
    __m256i h = _mm256_maskz_loadu_epi16(m, (const uint16_t *)w + idx);
    if (wtype == H3_DT_BF16) return _mm512_castsi512_ps(_mm512_slli_epi32(_mm512_cvtepu16_epi32(h), 16));
    return _mm512_cvtph_ps(h);
}

/* Small M: 4 weight rows x up to 4 activation rows per pass over K; W is read once. */
static void gemv_avx512(int wtype, int64_t M, int64_t K, const float *x, int64_t ldx,
                        const void *w, int64_t ldw, int64_t n0, int64_t n1, float *y,
                        int64_t ldy) {
    for (int64_t m0 = 0; m0 < M; m0 += 4) {
        int mm = (int)H3_MIN(4, M - m0);
        int64_t n = n0;
        for (; n < n1; n += 4) {
            int nn = (int)H3_MIN(4, n1 - n);
            __m512 acc[4][4];
            for (int i = 0; i < 4; i++)
                for (int j = 0; j < 4; j++) acc[i][j] = _mm512_setzero_ps();
            int64_t k = 0;
            for (; k < K; k += 16) {
                __mmask16 km = (K - k) >= 16 ? 0xffff : (__mmask16)((1u << (K - k)) - 1u);
                __m512 wv[4];
                for (int j = 0; j < 4; j++)
                    wv[j] = j < nn ? (km == 0xffff ? load_w16(wtype, w, (n + j) * ldw + k)
                                                   : maskload_w(wtype, w, (n + j) * ldw + k, km))
                                   : _mm512_setzero_ps();
                for (int i = 0; i < mm; i++) {
                    __m512 xv = _mm512_maskz_loadu_ps(km, x + (m0 + i) * ldx + k);
                    for (int j = 0; j < 4; j++) acc[i][j] = _mm512_fmadd_ps(xv, wv[j], acc[i][j]);
                }
            }
            for (int i = 0; i < mm; i++)
                for (int j = 0; j < nn; j++)
                    y[(m0 + i) * ldy + (n + j - n0)] = _mm512_reduce_add_ps(acc[i][j]);
        }
    }
}

#define AVX512_TABLE(i8, i4, i4w)                                                              \
    .mr = MR, .nr = NR, .kc = 384, .mc = MR * 24, .nc = 512,                              \
    .gemv_max_m = 4, .ukr_f32 = ukr_f32_avx512, .unpack = unpack_avx512, .gemv = gemv_avx512, \
    .pack_a = pack_a_avx512, \
    .ukr_i8 = i8, .ukr_i4 = i4, .ukr_i4w = i4w, .quant_row = gemm_quant_row_avx512, .swiglu_row = gemm_swiglu_row_avx512

const gemm_kernels gemm_kernels_avx512 = {AVX512_TABLE(gemm_ukr_i8_avx512vnni, gemm_ukr_i4_avx512vnni, gemm_ukr_i4w_avx512vnni)};
/* Same layouts, integer dots through vpmaddubsw/vpmaddwd (exact; see gemm_int_avx512.c). */
const gemm_kernels gemm_kernels_avx512_novnni = {AVX512_TABLE(gemm_ukr_i8_avx512bw, gemm_ukr_i4_avx512bw, gemm_ukr_i4w_avx512bw)};
