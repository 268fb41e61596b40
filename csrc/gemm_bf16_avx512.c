/* gemm_bf16_avx512.c — bf16 x bf16 micro-kernel with AVX512-BF16 VDPBF16PS, for bf16
 * weights whose caller promises bf16-representable inputs (h3_linear_opts.bf16_inputs,
 * as in the DiT's bf16 mode, where every GEMM input is already rounded to bf16).
 *
 * Each VDPBF16PS adds two exact bf16 x bf16 products per lane (an FMA-rate pair), so on
 * CPUs that run it at the fp32 FMA rate (Zen 4 measured ~2x torch's fp32 rate) the bf16
 * GEMM runs ~2x the widening-FMA kernel.  Products are exact; only the summation order
 * (pairs) and flushed subnormal inputs differ from the f32 path.
 * Tile: 14 x 32 (28 zmm accumulators), A from bf16 rows, B from bf16 pair panels. */
#include "gemm_impl.h"

#include <immintrin.h>

#include "gemm_store_avx512.h"
#include <string.h>

#define MR 14
#define NR 32

#include "gemm_bf16_pack.inc"

/* x rows -> bf16 k pairs interleaved by row, [kc32/2][MR][2] (round to nearest even, zero
 * padded), so that the kernel finds row i's pair kk at a fixed offset from one pointer
 * (one GPR for all 14 rows: row pointers had spilled). */
static void pack_a_bf16(const float *x, int64_t ldx, int64_t rows, int64_t kc, int MR_,
                            void *dst) {
    (void)MR_;
    uint32_t *d = (uint32_t *)dst;
    const int64_t kp = kc32(kc);
    uint16_t row[16] __attribute__((aligned(64)));
    for (int64_t i = 0; i < MR; i++) {
        if (i >= rows) {
            for (int64_t kk = 0; kk < kp / 2; kk++) d[kk * MR + i] = 0;
            continue;
        }
        int64_t k = 0;
        for (; k + 16 <= kc; k += 16) {
            __m512 v = _mm512_loadu_ps(x + i * ldx + k);
            _mm256_store_si256((__m256i *)row, (__m256i)_mm512_cvtneps_pbh(v));
            for (int t = 0; t < 8; t++) d[(k / 2 + t) * MR + i] = (uint32_t)row[2 * t] | (uint32_t)row[2 * t + 1] << 16;
        }
        for (; k < kp; k += 2) {
            uint16_t lo = k < kc ? h3_f32_to_bf16(x[i * ldx + k]) : 0;
            uint16_t hi = k + 1 < kc ? h3_f32_to_bf16(x[i * ldx + k + 1]) : 0;
            d[(k / 2) * MR + i] = (uint32_t)lo | (uint32_t)hi << 16;
        }
    }
}

/* R rows (R >= mr) x 32 columns over kp/2 k pairs; each row's sum runs over the pairs in
 * order whatever R is, so every R gives the same bits. */
static inline __attribute__((always_inline)) void bf16dp_rows(const int R, int64_t kp, const uint32_t *a,
                                                             const uint32_t *b, float *c, int64_t ldc, int mr,
                                                             int nr, int accumulate) {
    __m512 acc[R][2];
#pragma GCC unroll 14
    for (int i = 0; i < R; i++) acc[i][0] = acc[i][1] = _mm512_setzero_ps();
    for (int64_t kk = 0; kk < kp / 2; kk++) {
        __m512bh b0 = (__m512bh)_mm512_loadu_si512(b + kk * NR);
        __m512bh b1 = (__m512bh)_mm512_loadu_si512(b + kk * NR + 16);
#pragma GCC unroll 14
        for (int i = 0; i < R; i++) {
            __m512bh av = (__m512bh)_mm512_set1_epi32((int)a[kk * MR + i]);
            acc[i][0] = _mm512_dpbf16_ps(acc[i][0], av, b0);
            acc[i][1] = _mm512_dpbf16_ps(acc[i][1], av, b1);
        }
    }
#pragma GCC unroll 14
    for (int i = 0; i < R; i++)
        if (i < mr) store_row(c + i * ldc, acc[i][0], acc[i][1], nr, accumulate);
}

/* A last tile of few rows (M = 16 is 14 + 2) runs the smallest of 2/4/7/14 rows that
 * covers it instead of all 14: at small M, where the weights' packing is shared by few
 * tiles, the 14-row tile for 2 rows had cost as much as a full one (C harness, M = 16, K =
 * 5120, N = 25600, 2 threads: 38-47 ms against 29 ms at M = 14). */
static void ukr_bf16dp(int MR_, int NR_, int64_t kc, const float *ap, const float *bp, float *c,
                       int64_t ldc, int mr, int nr, int accumulate) {
    (void)MR_; (void)NR_;
    const int64_t kp = kc32(kc);
    const uint32_t *a = (const uint32_t *)ap;
    const uint32_t *b = (const uint32_t *)bp;
    prefetch_c_tile(c, ldc, mr);
    GEMM_ROWS_DISPATCH(mr, MR, bf16dp_rows, kp, a, b, c, ldc, mr, nr, accumulate);
}

/* kc 1024 x nc 512 (a 1 MB bf16 weight block per thread) and the C prefetch above: this
 * kernel does twice the f32 kernel's FLOPs per cycle, so C's passes (one per K block) and
 * A's reloads weigh twice as much.  M = 2048, K = 5376, N = 7168 on Zen 4 through
 * h3_linear_forward (C harness, preallocated workspace): kc 512 x nc 256 178-188 GFLOP/s on
 * one thread and 373 on two; this 207-210 and 414-422 (torch's bf16 GEMM: ~420). */
const gemm_kernels gemm_kernels_avx512_bf16dp = {
    .mr = MR, .nr = NR, .kc = 1024, .mc = MR * 24, .nc = 512,
    .gemv_max_m = 0,
    .ukr_f32 = ukr_bf16dp, .unpack = unpack_bf16, .pack_a = pack_a_bf16,
    .swiglu_row = gemm_swiglu_row_avx512,
};
