/* gguf_avx512.c — the GGUF micro-kernel for AVX-512 with VNNI: a decoded quad of 16
 * columns is one zmm ([16][4] bytes), so vpdpbusd of the panel's unsigned u and the row's
 * broadcast signed a adds each column's four products straight into int32 (no saturation:
 * 4 * 255 * 127 a step), every type alike; the sums start at -off * asum (the offset
 * removed exactly).  Eight rows at a time; the float steps are the reference's (the same
 * bits).  Compiled for every x86 build, run only where the CPU has AVX512-VNNI
 * (gguf_ukr_for); the amx path runs gguf_amx.c, which hands it the rows past the last 16. */
#include "gguf_impl.h"

#include <immintrin.h>
#include <string.h>

static inline __m512i bcast4(const int8_t *p) {
    int32_t v;
    memcpy(&v, p, 4);
    return _mm512_set1_epi32(v);
}

static inline __attribute__((always_inline)) void rows(const int RB, const int SEG, const int MIN, int nseg,
                                                       const int8_t *a, int64_t lda, const float *d, int64_t ldd,
                                                       const int32_t *as, int64_t ldas, int off, const uint8_t *u,
                                                       const float *sc, const float *mn, float *cb) {
    __m512 f[8];
    for (int i = 0; i < RB; i++) f[i] = _mm512_loadu_ps(cb + i * GGUF_NR);
    for (int s = 0; s < nseg; s++) {
        const uint8_t *us = u + (int64_t)s * SEG * GGUF_NR;
        int32_t sum[8];
        __m512i acc[8];
        for (int i = 0; i < RB; i++) {
            sum[i] = as[i * ldas + s];
            acc[i] = _mm512_set1_epi32(-off * sum[i]);
        }
        for (int j = 0; j < SEG / 4; j++) {
            const __m512i w = _mm512_loadu_si512((const void *)(us + j * 64));
            for (int i = 0; i < RB; i++) acc[i] = _mm512_dpbusd_epi32(acc[i], w, bcast4(a + i * lda + s * SEG + j * 4));
        }
        const __m512 sv = _mm512_loadu_ps(sc + s * GGUF_NR);
        const __m512 mv = MIN ? _mm512_loadu_ps(mn + s * GGUF_NR) : _mm512_setzero_ps();
        for (int i = 0; i < RB; i++) {
            __m512 p = _mm512_mul_ps(_mm512_cvtepi32_ps(acc[i]), sv);
            if (MIN) p = _mm512_fmadd_ps(mv, _mm512_set1_ps((float)sum[i]), p);
            f[i] = _mm512_fmadd_ps(_mm512_set1_ps(d[i * ldd + s * SEG / GGUF_ACT]), p, f[i]);
        }
    }
    for (int i = 0; i < RB; i++) _mm512_storeu_ps(cb + i * GGUF_NR, f[i]);
}

#define UKR_VARIANT(name, SEG, MIN)                                                                                \
    static void name(int mr, int nseg, const int8_t *a, int64_t lda, const float *d, int64_t ldd,                \
                     const int32_t *as, int64_t ldas, int off, const uint8_t *u, const float *sc, const float *mn,  \
                     float *cb) {                                                                                 \
        int i = 0;                                                                                                \
        for (; i + 8 <= mr; i += 8)                                                                               \
            rows(8, SEG, MIN, nseg, a + i * lda, lda, d + i * ldd, ldd, as + i * ldas, ldas, off, u, sc, mn,      \
                 cb + i * GGUF_NR);                                                                               \
        for (; i + 4 <= mr; i += 4)                                                                               \
            rows(4, SEG, MIN, nseg, a + i * lda, lda, d + i * ldd, ldd, as + i * ldas, ldas, off, u, sc, mn,      \
                 cb + i * GGUF_NR);                                                                               \
        for (; i < mr; i++)                                                                                       \
            rows(1, SEG, MIN, nseg, a + i * lda, lda, d + i * ldd, ldd, as + i * ldas, ldas, off, u, sc, mn,      \
                 cb + i * GGUF_NR);                                                                               \
    }
UKR_VARIANT(v32_0, 32, 0)
UKR_VARIANT(v32_1, 32, 1)
UKR_VARIANT(v16_0, 16, 0)
UKR_VARIANT(v16_1, 16, 1)

void gguf_ukr_avx512(int mr, const gguf_kind *t, int nseg, const int8_t *a, int64_t lda, const float *d,
                     int64_t ldd, const int32_t *as, int64_t ldas, const uint8_t *u, const float *sc,
                     const float *mn, float *cb) {
    if (t->seg == 32) (t->has_min ? v32_1 : v32_0)(mr, nseg, a, lda, d, ldd, as, ldas, t->off, u, sc, mn, cb);
    else (t->has_min ? v16_1 : v16_0)(mr, nseg, a, lda, d, ldd, as, ldas, t->off, u, sc, mn, cb);
}
