/* gemm_avx2.c — GEMM micro-kernels for the avx2 path (AVX2 + FMA + F16C, 16 ymm).
 *
 * f32: 6 x 16 tile, 12 ymm accumulators + 2 of B + 1 broadcast.  bf16/f16 weights are
 * widened by `unpack` once per cache block, as on AVX-512.
 * int8/int4: 6 x 16 tile in row blocks of 3, int32 dots made exact without VNNI
 * (vpmaddubsw with a sign fix-up; the body, shared with the AVX-VNNI table below, is
 * gemm_int_avx2.inc, which says how each variant stays bit-identical to the reference).
 * Compiled only with -mavx2 -mfma -mf16c. */
#include "gemm_impl.h"

#include <immintrin.h>
#include <math.h>
#include <string.h>

#include "simd_avx2.h"
#include "gemm_swiglu.inc" /* gemm_swiglu_row_avx2 */

#define MR 6
#define NR 16
#define IRB 3 /* int row block (vpmaddubsw path) */

#include "gemm_int_avx2.inc" /* lane_mask, store_row, bcast4, int_rows, DEFINE_INT_UKR */

static void ukr_f32_avx2(int mr_, int nr_, int64_t kc, const float *ap, const float *bp, float *c,
                         int64_t ldc, int mr, int nr, int accumulate) {
    if (mr_ != MR || nr_ != NR) {
        gemm_ukr_f32_ref(mr_, nr_, kc, ap, bp, c, ldc, mr, nr, accumulate);
        return;
    }
    __m256 acc[MR][2];
#pragma GCC unroll 6
    for (int i = 0; i < MR; i++) acc[i][0] = acc[i][1] = _mm256_setzero_ps();
    for (int64_t k = 0; k < kc; k++) {
        __m256 b0 = _mm256_load_ps(bp + k * NR), b1 = _mm256_load_ps(bp + k * NR + 8);
#pragma GCC unroll 6
        for (int i = 0; i < MR; i++) {
            __m256 av = _mm256_broadcast_ss(ap + k * MR + i);
            acc[i][0] = _mm256_fmadd_ps(av, b0, acc[i][0]);
            acc[i][1] = _mm256_fmadd_ps(av, b1, acc[i][1]);
        }
    }
#pragma GCC unroll 6
    for (int i = 0; i < MR; i++)
        if (i < mr) store_row(c + i * ldc, acc[i][0], acc[i][1], nr, accumulate);
}

static inline __m256 load_w8(int wtype, const void *w, int64_t idx) {
    if (wtype == H3_DT_F32) return _mm256_loadu_ps((const float *)w + idx);
    __m128i h = _mm_loadu_si128((const __m128i *)((const uint16_t *)w + idx));
    if (wtype == H3_DT_BF16) return _mm256_castsi256_ps(_mm256_slli_epi32(_mm256_cvtepu16_epi32(h), 16));
    return _mm256_cvtph_ps(h);
}

/* 8x8 transpose of r[0..7] in place (rows -> columns). */
static inline void transpose8(__m256 r[8]) {
    __m256 t0 = _mm256_unpacklo_ps(r[0], r[1]), t1 = _mm256_unpackhi_ps(r[0], r[1]);
    __m256 t2 = _mm256_unpacklo_ps(r[2], r[3]), t3 = _mm256_unpackhi_ps(r[2], r[3]);
    __m256 t4 = _mm256_unpacklo_ps(r[4], r[5]), t5 = _mm256_unpackhi_ps(r[4], r[5]);
    __m256 t6 = _mm256_unpacklo_ps(r[6], r[7]), t7 = _mm256_unpackhi_ps(r[6], r[7]);
    __m256 s0 = _mm256_shuffle_ps(t0, t2, 0x44), s1 = _mm256_shuffle_ps(t0, t2, 0xee);
    __m256 s2 = _mm256_shuffle_ps(t1, t3, 0x44), s3 = _mm256_shuffle_ps(t1, t3, 0xee);
    __m256 s4 = _mm256_shuffle_ps(t4, t6, 0x44), s5 = _mm256_shuffle_ps(t4, t6, 0xee);
    __m256 s6 = _mm256_shuffle_ps(t5, t7, 0x44), s7 = _mm256_shuffle_ps(t5, t7, 0xee);
    r[0] = _mm256_permute2f128_ps(s0, s4, 0x20); r[1] = _mm256_permute2f128_ps(s1, s5, 0x20);
    r[2] = _mm256_permute2f128_ps(s2, s6, 0x20); r[3] = _mm256_permute2f128_ps(s3, s7, 0x20);
    r[4] = _mm256_permute2f128_ps(s0, s4, 0x31); r[5] = _mm256_permute2f128_ps(s1, s5, 0x31);
    r[6] = _mm256_permute2f128_ps(s2, s6, 0x31); r[7] = _mm256_permute2f128_ps(s3, s7, 0x31);
}

/* W block -> f32 panels out[j/NR][k][j%NR]: 8 rows x 8 k at a time through a register
 * transpose; ragged edges go through the reference. */
static void unpack_avx2(int wtype, const void *w, int64_t ldw, int64_t n0, int64_t nc,
                        int64_t n_valid, int64_t k0, int64_t kc, float *out, int nr) {
    if (nr != NR) {
        gemm_unpack_ref(wtype, w, ldw, n0, nc, n_valid, k0, kc, out, nr);
        return;
    }
    for (int64_t j = 0; j < nc; j += 8) {
        float *o = out + (j / NR) * kc * NR + (j % NR);
        int64_t rows = H3_MIN(8, H3_MIN(nc, n_valid - n0) - j);
        if (rows < 8) { /* ragged: past the weight rows, or the last partial group */
            for (int64_t jj = j; jj < H3_MIN(j + 8, nc); jj++) {
                float *oo = out + (jj / NR) * kc * NR + (jj % NR);
                int64_t n = n0 + jj;
                for (int64_t k = 0; k < kc; k++)
                    oo[k * NR] = n < n_valid ? gemm_w_at(wtype, w, n * ldw + k0 + k) : 0.0f;
            }
            continue;
        }
        const int64_t base = (n0 + j) * ldw + k0;
        int64_t k = 0;
        for (; k + 8 <= kc; k += 8) {
            __m256 r[8];
            for (int t = 0; t < 8; t++) r[t] = load_w8(wtype, w, base + t * ldw + k);
            transpose8(r);
            for (int t = 0; t < 8; t++) _mm256_storeu_ps(o + (k + t) * NR, r[t]);
        }
        for (; k < kc; k++)
            for (int t = 0; t < 8; t++) o[k * NR + t] = gemm_w_at(wtype, w, base + t * ldw + k);
    }
}

/* Small M: 4 weight rows x 2 activation rows per pass over K (W read once per 2 rows). */
static void gemv_avx2(int wtype, int64_t M, int64_t K, const float *x, int64_t ldx, const void *w,
                      int64_t ldw, int64_t n0, int64_t n1, float *y, int64_t ldy) {
    for (int64_t m0 = 0; m0 < M; m0 += 2) {
        int mm = (int)H3_MIN(2, M - m0);
        for (int64_t n = n0; n < n1; n += 4) {
            int nn = (int)H3_MIN(4, n1 - n);
            __m256 acc[2][4];
            for (int i = 0; i < 2; i++)
                for (int j = 0; j < 4; j++) acc[i][j] = _mm256_setzero_ps();
            int64_t k = 0;
            for (; k + 8 <= K; k += 8) {
                __m256 wv[4];
                for (int j = 0; j < 4; j++) wv[j] = j < nn ? load_w8(wtype, w, (n + j) * ldw + k) : _mm256_setzero_ps();
                for (int i = 0; i < mm; i++) {
                    __m256 xv = _mm256_loadu_ps(x + (m0 + i) * ldx + k);
                    for (int j = 0; j < 4; j++) acc[i][j] = _mm256_fmadd_ps(xv, wv[j], acc[i][j]);
                }
            }
            for (int i = 0; i < mm; i++)
                for (int j = 0; j < nn; j++) {
                    float t[8];
                    _mm256_storeu_ps(t, acc[i][j]);
                    float s = ((t[0] + t[4]) + (t[1] + t[5])) + ((t[2] + t[6]) + (t[3] + t[7]));
                    for (int64_t kk = k; kk < K; kk++)
                        s = fmaf(x[(m0 + i) * ldx + kk], gemm_w_at(wtype, w, (n + j) * ldw + kk), s);
                    y[(m0 + i) * ldy + (n + j - n0)] = s;
                }
        }
    }
}

/* ---- integer kernels (bodies in gemm_int_avx2.inc) ------------------------------ */

/* vpmaddubsw: int8 in row blocks of 3 (6 x 2 accumulators + weights and temporaries fill
 * the 16 ymm registers), int4 in blocks of 2 with int16 partial sums (quads2_i4_i16) */
static DEFINE_INT_UKR(ukr_i8_avx2, INT_I8, 0, IRB, gemm_ukr_i8_ref)
static DEFINE_INT_UKR(ukr_i4_avx2, INT_I4, 0, 2, gemm_ukr_i4_ref)

/* gemm_quant_row_ref with 8 lanes; the tail uses the same scalar operations. */
static void quant_row_avx2(const float *x, int64_t K, int64_t Kp, int64_t ag, int8_t *q,
                           float *scales) {
    const __m256 absm = _mm256_castsi256_ps(_mm256_set1_epi32(0x7fffffff));
    const __m256 inf = _mm256_set1_ps(INFINITY);
    const __m256 lo = _mm256_set1_ps(-127.0f), hi = _mm256_set1_ps(127.0f);
    int64_t ng = H3_CEIL_DIV(Kp, ag);
    for (int64_t g = 0; g < ng; g++) {
        int64_t k0 = g * ag, k1 = H3_MIN(k0 + ag, K), kend = H3_MIN(k0 + ag, Kp);
        __m256 vmax = _mm256_setzero_ps(), vbad = _mm256_setzero_ps();
        int64_t k = k0;
        for (; k + 8 <= k1; k += 8) {
            __m256 a = _mm256_and_ps(_mm256_loadu_ps(x + k), absm);
            vbad = _mm256_or_ps(vbad, _mm256_cmp_ps(a, inf, _CMP_NLT_UQ));
            vmax = _mm256_max_ps(vmax, a);
        }
        float t[8];
        _mm256_storeu_ps(t, vmax);
        float amax = 0.0f;
        for (int i = 0; i < 8; i++) amax = fmaxf(amax, t[i]);
        int bad = _mm256_movemask_ps(vbad) != 0;
        for (; k < k1; k++) {
            float a = fabsf(x[k]);
            if (!(a < INFINITY)) bad = 1;
            amax = fmaxf(amax, a);
        }
        if (bad || !(amax > 0.0f)) {
            if (kend > k0) memset(q + k0, 0, (size_t)(kend - k0));
            scales[g] = bad ? NAN : 0.0f;
            continue;
        }
        const float inv = 127.0f / amax;
        const __m256 iv = _mm256_set1_ps(inv);
        k = k0;
        for (; k + 8 <= k1; k += 8) {
            __m256 v = _mm256_round_ps(_mm256_mul_ps(_mm256_loadu_ps(x + k), iv), _MM_FROUND_TO_NEAREST_INT | _MM_FROUND_NO_EXC);
            v = _mm256_min_ps(hi, _mm256_max_ps(lo, v));
            __m256i i32 = _mm256_cvtps_epi32(v);
            __m128i i16 = _mm_packs_epi32(_mm256_castsi256_si128(i32), _mm256_extracti128_si256(i32, 1));
            _mm_storel_epi64((__m128i *)(q + k), _mm_packs_epi16(i16, i16));
        }
        for (; k < kend; k++) {
            float v = k < K ? rintf(x[k] * inv) : 0.0f;
            v = fminf(127.0f, fmaxf(-127.0f, v));
            q[k] = (int8_t)v;
        }
        scales[g] = amax / 127.0f;
    }
}

/* The 256-bit table with a pair of int micro-kernels (every float kernel is AVX2's). */
#define AVX2_TABLE(i8, i4)                                                                       \
    {                                                                                            \
        .mr = MR, .nr = NR, .kc = 256, .mc = MR * 16, .nc = 192, .gemv_max_m = 4,                \
        .ukr_f32 = ukr_f32_avx2, .unpack = unpack_avx2, .gemv = gemv_avx2, .ukr_i8 = (i8),      \
        .ukr_i4 = (i4), .quant_row = quant_row_avx2, .swiglu_row = gemm_swiglu_row_avx2,        \
    }
const gemm_kernels gemm_kernels_avx2 = AVX2_TABLE(ukr_i8_avx2, ukr_i4_avx2);
/* AVX-VNNI CPUs without AVX-512 (Intel Alder Lake and later client cores): the vpdpbusd int
 * kernels of gemm_avxvnni.c (same packed layouts, same bits). */
const gemm_kernels gemm_kernels_avxvnni = AVX2_TABLE(gemm_ukr_i8_avxvnni, gemm_ukr_i4_avxvnni);
