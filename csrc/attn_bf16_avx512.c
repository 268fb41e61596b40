/* attn_bf16_avx512.c — attention for bf16 models (h3_attn_args.bf16_inputs) on CPUs with
 * AVX512-BF16 but no AMX (Zen 4, Cooper Lake): attn_bf16.inc's unit with Q K^T and P V as
 * VDPBF16PS, which multiplies bf16 pairs exactly and sums them in fp32 at twice the rate of
 * the fp32 FMA kernels on Zen 4.  Register tile: 8 rows x 2 vectors of 16 columns. */
#include "attn_impl.h"

#include <immintrin.h>
#include <math.h>
#include <string.h>

#include "simd_avx512.h"

#define BQ 128 /* queries per unit: four 32-row quarters, which share each packed key block */
#define BK 32

/* Sc[32][32] = Qq . Kb^T (see attn_bf16.inc for the layouts) */
static void dp_scores(const uint16_t *Qq, const uint16_t *Kb, int nch, float *Sc) {
    const uint32_t *qw = (const uint32_t *)Qq;
    for (int i0 = 0; i0 < 32; i0 += 8) {
        __m512 acc[8][2];
        for (int ii = 0; ii < 8; ii++) acc[ii][0] = acc[ii][1] = _mm512_setzero_ps();
        for (int c = 0; c < nch; c++)
            for (int r = 0; r < 16; r++) {
                const __m512bh k0 = (__m512bh)_mm512_loadu_si512(Kb + (((size_t)c * 2 + 0) * 16 + r) * 32);
                const __m512bh k1 = (__m512bh)_mm512_loadu_si512(Kb + (((size_t)c * 2 + 1) * 16 + r) * 32);
                for (int ii = 0; ii < 8; ii++) {
                    const __m512bh qa = (__m512bh)_mm512_set1_epi32((int)qw[((size_t)c * 32 + i0 + ii) * 16 + r]);
                    acc[ii][0] = _mm512_dpbf16_ps(acc[ii][0], qa, k0);
                    acc[ii][1] = _mm512_dpbf16_ps(acc[ii][1], qa, k1);
                }
            }
        for (int ii = 0; ii < 8; ii++) {
            _mm512_storeu_ps(Sc + (i0 + ii) * 32, acc[ii][0]);
            _mm512_storeu_ps(Sc + (i0 + ii) * 32 + 16, acc[ii][1]);
        }
    }
}

/* Oq[32][D] += Pb . Vb */
static void dp_pv(const uint16_t *Pb, const uint16_t *Vb, float *Oq, int D) {
    const uint32_t *pw = (const uint32_t *)Pb;
    for (int i0 = 0; i0 < 32; i0 += 8)
        for (int t = 0; t < D / 16; t += 2) {
            __m512 acc[8][2];
            for (int ii = 0; ii < 8; ii++) {
                acc[ii][0] = _mm512_loadu_ps(Oq + (size_t)(i0 + ii) * D + 16 * t);
                acc[ii][1] = _mm512_loadu_ps(Oq + (size_t)(i0 + ii) * D + 16 * t + 16);
            }
            for (int r = 0; r < 16; r++) {
                const __m512bh v0 = (__m512bh)_mm512_loadu_si512(Vb + ((size_t)t * 16 + r) * 32);
                const __m512bh v1 = (__m512bh)_mm512_loadu_si512(Vb + ((size_t)(t + 1) * 16 + r) * 32);
                for (int ii = 0; ii < 8; ii++) {
                    const __m512bh pa = (__m512bh)_mm512_set1_epi32((int)pw[(i0 + ii) * 16 + r]);
                    acc[ii][0] = _mm512_dpbf16_ps(acc[ii][0], pa, v0);
                    acc[ii][1] = _mm512_dpbf16_ps(acc[ii][1], pa, v1);
                }
            }
            for (int ii = 0; ii < 8; ii++) {
                _mm512_storeu_ps(Oq + (size_t)(i0 + ii) * D + 16 * t, acc[ii][0]);
                _mm512_storeu_ps(Oq + (size_t)(i0 + ii) * D + 16 * t + 16, acc[ii][1]);
            }
        }
}

static inline void dp_nothing(void) {}

#define BF16_UNIT attn_unit_bf16dp
#define BF16_SCORES dp_scores
#define BF16_PV dp_pv
#define BF16_BEGIN dp_nothing
#define BF16_END dp_nothing
#include "attn_bf16.inc"

const attn_kernels attn_kernels_bf16dp = {BQ, BK, attn_unit_bf16dp};
