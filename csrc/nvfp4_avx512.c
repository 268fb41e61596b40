/* nvfp4_avx512.c — the NVFP4 micro-kernel for AVX-512 with VNNI: a decoded quad of 16
 * columns is one zmm ([16][4] bytes), so vpdpbusd of the row's broadcast a + 128 (unsigned)
 * and the weights (signed) adds each column's four products straight into int32 (no
 * saturation: 4 * 255 * 12 per step), the sums starting at -corr (the +128 removed
 * exactly).  Eight rows at a time (18 of the 32 registers);
 * the float steps are the reference's (the same bits).  Compiled for every x86 build,
 * run only where the CPU has AVX512-VNNI (nvfp4_ukr_for). */
#include "nvfp4_impl.h"

#include <immintrin.h>
#include <string.h>

static inline __m512i bcast4(const uint8_t *p) {
    int32_t v;
    memcpy(&v, p, 4);
    return _mm512_set1_epi32(v);
}

static inline __attribute__((always_inline)) void rows(const int RB, int nseg, const uint8_t *a, int64_t lda,
                                                       const float *d, int64_t ldd, const int8_t *q,
                                                       const float *sw, const int32_t *corr, float *cb) {
    __m512 f[8];
    for (int i = 0; i < RB; i++) f[i] = _mm512_loadu_ps(cb + i * NV_NR);
    for (int s = 0; s < nseg; s++) {
        const int8_t *qs = q + (int64_t)s * 4 * NV_NR * 4;
        /* the sums start at -corr: the +128 removed for free (integer, exact) */
        const __m512i negc = _mm512_sub_epi32(_mm512_setzero_si512(), _mm512_loadu_si512((const void *)(corr + s * NV_NR)));
        __m512i acc[8];
        for (int i = 0; i < RB; i++) acc[i] = negc;
        for (int j = 0; j < 4; j++) {
            const __m512i w = _mm512_loadu_si512((const void *)(qs + j * 64));
            for (int i = 0; i < RB; i++)
                acc[i] = _mm512_dpbusd_epi32(acc[i], bcast4(a + i * lda + s * NV_SEG + j * 4), w);
        }
        const __m512 sv = _mm512_loadu_ps(sw + s * NV_NR);
        for (int i = 0; i < RB; i++) {
            const __m512 p = _mm512_mul_ps(_mm512_cvtepi32_ps(acc[i]), sv);
            f[i] = _mm512_fmadd_ps(_mm512_set1_ps(d[i * ldd + s / 2]), p, f[i]);
        }
    }
    for (int i = 0; i < RB; i++) _mm512_storeu_ps(cb + i * NV_NR, f[i]);
}

void nvfp4_ukr_avx512(int mr, int nseg, const uint8_t *a, int64_t lda, const float *d, int64_t ldd,
                      const int8_t *q, const float *sw, const int32_t *corr, float *cb) {
    int i = 0;
    for (; i + 8 <= mr; i += 8) rows(8, nseg, a + i * lda, lda, d + i * ldd, ldd, q, sw, corr, cb + i * NV_NR);
    for (; i + 4 <= mr; i += 4) rows(4, nseg, a + i * lda, lda, d + i * ldd, ldd, q, sw, corr, cb + i * NV_NR);
    for (; i < mr; i++) rows(1, nseg, a + i * lda, lda, d + i * ldd, ldd, q, sw, corr, cb + i * NV_NR);
}
