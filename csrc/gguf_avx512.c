/* gguf_avx512.c — the GGUF micro-kernel for AVX-512 with VNNI: a decoded quad of 16
 * columns is one zmm ([16][4] bytes), so vpdpbusd of an unsigned and a signed operand adds
 * each column's four products straight into int32 (no saturation: 4 * 255 * 127 a step),
 * every type alike: the row's broadcast activations stored unsigned (a + 128) times the
 * signed panel (u - off), the sums starting at -128 * the column sums of the panel; or (the
 * AMX tail) the unsigned panel times the signed activations, starting at -off * asum.  Eight rows at a time; the float steps are the reference's (the same
 * bits): per segment a convert and an fma into the group's sum h, per group of 256 inputs
 * one fma of h by the row's scale into cb.  Compiled for every x86 build, run only where the CPU has AVX512-VNNI
 * (gguf_ukr_for); the amx path runs gguf_amx.c, which hands it the rows past the last 16. */
#include "gguf_impl.h"

#include <immintrin.h>
#include <string.h>

static inline __m512i bcast4(const int8_t *p) {
    int32_t v;
    memcpy(&v, p, 4);
    return _mm512_set1_epi32(v);
}

/* RB rows by the panel.  UA: the activations are stored unsigned (a + 128, the avx512 path's
 * quantiser: gguf_quant_act_row_avx2u) and w is the signed panel (u - off, made by the
 * caller with its per-segment start, -128 * the column sums of w); else a is signed, u the
 * unsigned panel, and each row's sum starts at -off * asum.  Both give the exact sum q a. */
static inline __attribute__((always_inline)) void rows(const int RB, const int SEG, const int MIN, const int UA,
                                                       int nseg, const int8_t *a, int64_t lda, const float *d,
                                                       int64_t ldd, const int32_t *as, int64_t ldas, int off,
                                                       const uint8_t *u, const int32_t *start, const float *sc,
                                                       const float *mn, float *cb) {
    const int gs = GGUF_AG / SEG;
    for (int s0 = 0; s0 < nseg; s0 += gs) {
        __m512 h[8];
        for (int i = 0; i < RB; i++) h[i] = _mm512_setzero_ps();
        for (int s = s0; s < H3_MIN(s0 + gs, nseg); s++) {
            const uint8_t *us = u + (int64_t)s * SEG * GGUF_NR;
            __m512i acc[8];
            for (int i = 0; i < RB; i++)
                acc[i] = UA ? _mm512_load_si512((const void *)(start + s * GGUF_NR)) : _mm512_set1_epi32(-off * as[i * ldas + s]);
            for (int j = 0; j < SEG / 4; j++) {
                const __m512i w = _mm512_loadu_si512((const void *)(us + j * 64));
                for (int i = 0; i < RB; i++) {
                    const __m512i av = bcast4(a + i * lda + s * SEG + j * 4);
                    acc[i] = UA ? _mm512_dpbusd_epi32(acc[i], av, w) : _mm512_dpbusd_epi32(acc[i], w, av);
                }
            }
            const __m512 sv = _mm512_loadu_ps(sc + s * GGUF_NR);
            const __m512 mv = MIN ? _mm512_loadu_ps(mn + s * GGUF_NR) : _mm512_setzero_ps();
            for (int i = 0; i < RB; i++) {
                h[i] = _mm512_fmadd_ps(_mm512_cvtepi32_ps(acc[i]), sv, h[i]);
                if (MIN) /* UA: the quantiser stored the sums as float (a broadcast load, no convert) */
                    h[i] = _mm512_fmadd_ps(mv, _mm512_set1_ps(UA ? ((const float *)as)[i * ldas + s] : (float)as[i * ldas + s]),
                                           h[i]);
            }
        }
        for (int i = 0; i < RB; i++)
            _mm512_storeu_ps(cb + i * GGUF_NR, _mm512_fmadd_ps(_mm512_set1_ps(d[i * ldd + s0 / gs]), h[i],
                                                               _mm512_loadu_ps(cb + i * GGUF_NR)));
    }
}

#define UKR_VARIANT(name, SEG, MIN, UA)                                                                            \
    static void name(int mr, int nseg, const int8_t *a, int64_t lda, const float *d, int64_t ldd,                \
                     const int32_t *as, int64_t ldas, int off, const uint8_t *u, const int32_t *start,            \
                     const float *sc, const float *mn, float *cb) {                                               \
        int i = 0;                                                                                                \
        for (; i + 8 <= mr; i += 8)                                                                               \
            rows(8, SEG, MIN, UA, nseg, a + i * lda, lda, d + i * ldd, ldd, as + i * ldas, ldas, off, u, start,   \
                 sc, mn, cb + i * GGUF_NR);                                                                       \
        for (; i + 4 <= mr; i += 4)                                                                               \
            rows(4, SEG, MIN, UA, nseg, a + i * lda, lda, d + i * ldd, ldd, as + i * ldas, ldas, off, u, start,   \
                 sc, mn, cb + i * GGUF_NR);                                                                       \
        for (; i < mr; i++)                                                                                       \
            rows(1, SEG, MIN, UA, nseg, a + i * lda, lda, d + i * ldd, ldd, as + i * ldas, ldas, off, u, start,   \
                 sc, mn, cb + i * GGUF_NR);                                                                       \
    }
UKR_VARIANT(v32_0, 32, 0, 1)
UKR_VARIANT(v32_1, 32, 1, 1)
UKR_VARIANT(v16_0, 16, 0, 1)
UKR_VARIANT(v16_1, 16, 1, 1)
UKR_VARIANT(s32_0, 32, 0, 0)
UKR_VARIANT(s32_1, 32, 1, 0)
UKR_VARIANT(s16_0, 16, 0, 0)
UKR_VARIANT(s16_1, 16, 1, 0)

/* The avx512 path's kernel, on unsigned activations.  Once per call (a panel's K block, for
 * all its rows): the signed panel w = u - off and each segment's start -128 * sum w per
 * column -- gguf_panel_signed_avx2's job, done here in zmm with vpdpbusd of 128s, as that
 * AVX2 one (4 instructions more a quad) made this kernel 2-5% slower at 128-256 rows (one
 * Zen 4 core).  Loaded per row and segment, the start costs no vector instruction, where
 * -off * asum took a multiply and a GPR -> zmm broadcast: 307 -> 328 GOP/s on Q8_0, 3-7% on
 * the other types (bench/gguf_ukr_avx2.c). */
void gguf_ukr_avx512(int mr, const gguf_kind *t, int nseg, const int8_t *a, int64_t lda, const float *d,
                     int64_t ldd, const int32_t *as, int64_t ldas, const uint8_t *u, const float *sc,
                     const float *mn, float *cb) {
    _Alignas(64) uint8_t w[GGUF_KB * GGUF_NR];
    _Alignas(64) int32_t start[(GGUF_KB / GGUF_SUB) * GGUF_NR];
    const __m512i off = _mm512_set1_epi8((char)t->off), h = _mm512_set1_epi8((char)0x80);
    for (int s = 0; s < nseg; s++) {
        __m512i acc = _mm512_setzero_si512();
        for (int j = 0; j < t->seg / 4; j++) {
            const int64_t q = (int64_t)s * t->seg / 4 + j;
            const __m512i v = _mm512_sub_epi8(_mm512_loadu_si512((const void *)(u + q * 64)), off);
            _mm512_store_si512((void *)(w + q * 64), v);
            acc = _mm512_dpbusd_epi32(acc, h, v);
        }
        _mm512_store_si512((void *)(start + s * GGUF_NR), _mm512_sub_epi32(_mm512_setzero_si512(), acc));
    }
    if (t->seg == 32) (t->has_min ? v32_1 : v32_0)(mr, nseg, a, lda, d, ldd, as, ldas, 0, w, start, sc, mn, cb);
    else (t->has_min ? v16_1 : v16_0)(mr, nseg, a, lda, d, ldd, as, ldas, 0, w, start, sc, mn, cb);
}

/* the same on signed activations (the AMX tile kernel's rows past the last 16: its tiles
 * read the signed quantiser's a in place) */
void gguf_ukr_avx512_signed(int mr, const gguf_kind *t, int nseg, const int8_t *a, int64_t lda, const float *d,
                            int64_t ldd, const int32_t *as, int64_t ldas, const uint8_t *u, const float *sc,
                            const float *mn, float *cb) {
    if (t->seg == 32) (t->has_min ? s32_1 : s32_0)(mr, nseg, a, lda, d, ldd, as, ldas, t->off, u, NULL, sc, mn, cb);
    else (t->has_min ? s16_1 : s16_0)(mr, nseg, a, lda, d, ldd, as, ldas, t->off, u, NULL, sc, mn, cb);
}
