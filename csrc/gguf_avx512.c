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

/* the signed panel w = u - off and each segment's start -128 * sum w per column (the avx512 kernels' prologue) */
static void signed_panel(const gguf_kind *t, int nseg, const uint8_t *u, uint8_t *w, int32_t *start) {
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
}

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
    signed_panel(t, nseg, u, w, start);
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

/* Two panels (32 columns) at once: each broadcast activation quad feeds both panels' dots, so
 * per dot half the broadcasts of the 16-column kernel.  RB rows by w0 | w1 (signed panels with
 * their starts, as gguf_ukr_avx512 makes them), cb rows of 32 floats; the same float steps per
 * column as the 16-column kernel (the same bits). */
static inline __attribute__((always_inline)) void rows32(const int RB, const int SEG, const int MIN, int nseg,
                                                         const int8_t *a, int64_t lda, const float *d, int64_t ldd,
                                                         const float *fas, int64_t ldas, const uint8_t *w0,
                                                         const uint8_t *w1, const int32_t *st0, const int32_t *st1,
                                                         const float *sc0, const float *sc1, const float *mn0,
                                                         const float *mn1, float *cb) {
    const int gs = GGUF_AG / SEG;
    for (int s0 = 0; s0 < nseg; s0 += gs) {
        __m512 h0[6], h1[6];
        for (int i = 0; i < RB; i++) h0[i] = h1[i] = _mm512_setzero_ps();
        for (int s = s0; s < H3_MIN(s0 + gs, nseg); s++) {
            const int64_t o = (int64_t)s * SEG * GGUF_NR;
            __m512i acc0[6], acc1[6];
            for (int i = 0; i < RB; i++) {
                acc0[i] = _mm512_load_si512((const void *)(st0 + s * GGUF_NR));
                acc1[i] = _mm512_load_si512((const void *)(st1 + s * GGUF_NR));
            }
            for (int j = 0; j < SEG / 4; j++) {
                const __m512i wa = _mm512_load_si512((const void *)(w0 + o + j * 64));
                const __m512i wb = _mm512_load_si512((const void *)(w1 + o + j * 64));
                for (int i = 0; i < RB; i++) {
                    const __m512i av = bcast4(a + i * lda + s * SEG + j * 4);
                    acc0[i] = _mm512_dpbusd_epi32(acc0[i], av, wa);
                    acc1[i] = _mm512_dpbusd_epi32(acc1[i], av, wb);
                }
            }
            const __m512 sv0 = _mm512_loadu_ps(sc0 + s * GGUF_NR), sv1 = _mm512_loadu_ps(sc1 + s * GGUF_NR);
            for (int i = 0; i < RB; i++) {
                h0[i] = _mm512_fmadd_ps(_mm512_cvtepi32_ps(acc0[i]), sv0, h0[i]);
                h1[i] = _mm512_fmadd_ps(_mm512_cvtepi32_ps(acc1[i]), sv1, h1[i]);
                if (MIN) {
                    const __m512 f = _mm512_set1_ps(fas[i * ldas + s]);
                    h0[i] = _mm512_fmadd_ps(_mm512_loadu_ps(mn0 + s * GGUF_NR), f, h0[i]);
                    h1[i] = _mm512_fmadd_ps(_mm512_loadu_ps(mn1 + s * GGUF_NR), f, h1[i]);
                }
            }
        }
        for (int i = 0; i < RB; i++) {
            const __m512 dv = _mm512_set1_ps(d[i * ldd + s0 / gs]);
            _mm512_storeu_ps(cb + i * 32, _mm512_fmadd_ps(dv, h0[i], _mm512_loadu_ps(cb + i * 32)));
            _mm512_storeu_ps(cb + i * 32 + 16, _mm512_fmadd_ps(dv, h1[i], _mm512_loadu_ps(cb + i * 32 + 16)));
        }
    }
}

#define X2_VARIANT(name, SEG, MIN)                                                                                 \
    static void name(int mr, int nseg, const int8_t *a, int64_t lda, const float *d, int64_t ldd, const float *fas, \
                     int64_t ldas, const uint8_t *w0, const uint8_t *w1, const int32_t *st0, const int32_t *st1,  \
                     const float *sc0, const float *sc1, const float *mn0, const float *mn1, float *cb) {         \
        int i = 0;                                                                                                 \
        for (; i + 6 <= mr; i += 6)                                                                                \
            rows32(6, SEG, MIN, nseg, a + i * lda, lda, d + i * ldd, ldd, fas + i * ldas, ldas, w0, w1, st0, st1,  \
                   sc0, sc1, mn0, mn1, cb + i * 32);                                                               \
        for (; i + 2 <= mr; i += 2)                                                                                \
            rows32(2, SEG, MIN, nseg, a + i * lda, lda, d + i * ldd, ldd, fas + i * ldas, ldas, w0, w1, st0, st1,  \
                   sc0, sc1, mn0, mn1, cb + i * 32);                                                               \
        for (; i < mr; i++)                                                                                        \
            rows32(1, SEG, MIN, nseg, a + i * lda, lda, d + i * ldd, ldd, fas + i * ldas, ldas, w0, w1, st0, st1,  \
                   sc0, sc1, mn0, mn1, cb + i * 32);                                                               \
    }
X2_VARIANT(x32_0, 32, 0)
X2_VARIANT(x32_1, 32, 1)
X2_VARIANT(x16_0, 16, 0)
X2_VARIANT(x16_1, 16, 1)

void gguf_ukr_avx512_x2(int mr, const gguf_kind *t, int nseg, const int8_t *a, int64_t lda, const float *d,
                        int64_t ldd, const int32_t *as, int64_t ldas, const uint8_t *u0, const float *sc0,
                        const float *mn0, const uint8_t *u1, const float *sc1, const float *mn1, float *cb) {
    _Alignas(64) uint8_t w[2][GGUF_KB * GGUF_NR];
    _Alignas(64) int32_t start[2][(GGUF_KB / GGUF_SUB) * GGUF_NR];
    signed_panel(t, nseg, u0, w[0], start[0]);
    const int one = u1 == u0; /* the driver's last panel of <= 16 rows passes the first twice */
    if (!one) signed_panel(t, nseg, u1, w[1], start[1]);
    const uint8_t *w1 = w[one ? 0 : 1];
    const int32_t *st1 = start[one ? 0 : 1];
    const float *fas = (const float *)as;
    if (t->seg == 32)
        (t->has_min ? x32_1 : x32_0)(mr, nseg, a, lda, d, ldd, fas, ldas, w[0], w1, start[0], st1, sc0, sc1, mn0, mn1, cb);
    else
        (t->has_min ? x16_1 : x16_0)(mr, nseg, a, lda, d, ldd, fas, ldas, w[0], w1, start[0], st1, sc0, sc1, mn0, mn1, cb);
}
