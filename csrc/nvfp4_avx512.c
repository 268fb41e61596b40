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

/* ---- the bf16 route's panel decoder (nvfp4_impl.h; the reference's bits) ----------------
 * 16 columns at a time: each column's 16 code bytes of 32 inputs are loaded and transposed
 * (4 x 4 dwords in each 128-bit lane) so that lane c of U[j] holds column c's codes of
 * inputs 8j .. 8j + 7; byte i of it is the pair (8j + 2i, 8j + 2i + 1) (high nibble
 * first), one row of the B layout: vpermps looks the nibbles up in the e2m1 table (it reads
 * an index's low 4 bits, so no mask), times the column's e4m3 scale in float32 (exact), and
 * the two products' high halves (their exact bf16) are interleaved into the pair. */

/* e4m3 bytes (the low 8 bits of each lane) -> float32, exactly (no table, no denormal input) */
static inline __m512 e4m3_ps(__m512i b) {
    const __m512i mag = _mm512_and_si512(b, _mm512_set1_epi32(0x7f));
    const __m512i sign = _mm512_slli_epi32(_mm512_and_si512(b, _mm512_set1_epi32(0x80)), 24);
    /* normal (e > 0): exponent e - 7 + 127 and the three mantissa bits; subnormal: m * 2^-9 */
    const __m512i nbits = _mm512_add_epi32(_mm512_slli_epi32(mag, 20), _mm512_set1_epi32(120 << 23));
    const __m512 sub = _mm512_mul_ps(_mm512_cvtepi32_ps(mag), _mm512_set1_ps(1.0f / 512.0f));
    const __mmask16 normal = _mm512_cmpge_epu32_mask(mag, _mm512_set1_epi32(8));
    const __m512 v = _mm512_mask_blend_ps(normal, sub, _mm512_castsi512_ps(nbits));
    return _mm512_castsi512_ps(_mm512_or_si512(_mm512_castps_si512(v), sign));
}

static inline void bdecode16(const nvfp4_row *rs, int nh, int64_t k0, int nk, uint16_t *b) {
    if (nh == 0) { /* no rows here (rs past nr is not set) */
        for (int p = 0; p < nk / 2; p++) _mm512_storeu_si512((void *)(b + (int64_t)p * (NV_BNR * 2)), _mm512_setzero_si512());
        return;
    }
    float tabf[16];
    for (int i = 0; i < 16; i++) tabf[i] = 0.5f * (float)nvfp4_q_of_code[i]; /* the reference's values */
    const __m512 tab = _mm512_loadu_ps(tabf);
    const __mmask16 live = (__mmask16)((1u << nh) - 1u);
    int32_t sidx[16] = {0};
    for (int c = 1; c < nh; c++) sidx[c] = (int32_t)(rs[c].scales - rs[0].scales);
    const __m512i vidx = _mm512_loadu_si512((const void *)sidx);
    for (int k = 0; k < nk; k += 64) {
        const int64_t s0 = (k0 + k) / NV_SEG; /* a multiple of 4: one dword holds 4 segments' scales */
        const __m512i sc4 = _mm512_mask_i32gather_epi32(_mm512_setzero_si512(), live, vidx,
                                                        (const void *)(rs[0].scales + (s0 / 4) * 512), 1);
        for (int kk = k; kk < k + 64 && kk < nk; kk += 32) {
            __m128i v[16];
            for (int c = 0; c < 16; c++)
                v[c] = c < nh ? _mm_loadu_si128((const __m128i *)(rs[c].codes + (k0 + kk) / 2)) : _mm_setzero_si128();
            __m512i Z[4];
            for (int q = 0; q < 4; q++) {
                __m512i z = _mm512_castsi128_si512(v[q]);
                z = _mm512_inserti32x4(z, v[4 + q], 1);
                z = _mm512_inserti32x4(z, v[8 + q], 2);
                Z[q] = _mm512_inserti32x4(z, v[12 + q], 3);
            }
            const __m512i t0 = _mm512_unpacklo_epi32(Z[0], Z[1]), t1 = _mm512_unpackhi_epi32(Z[0], Z[1]);
            const __m512i t2 = _mm512_unpacklo_epi32(Z[2], Z[3]), t3 = _mm512_unpackhi_epi32(Z[2], Z[3]);
            /* lane 4l + q of U[j]: dword j of column 4l + q */
            const __m512i U[4] = {_mm512_unpacklo_epi64(t0, t2), _mm512_unpackhi_epi64(t0, t2),
                                  _mm512_unpacklo_epi64(t1, t3), _mm512_unpackhi_epi64(t1, t3)};
            for (int j = 0; j < 4; j++) {
                const int seg = (kk - k) / NV_SEG + j / 2; /* 0..3 within the gathered dword */
                const __m512 sc = e4m3_ps(_mm512_srli_epi32(sc4, 8 * seg));
                for (int i = 0; i < 4; i++) {
                    const __m512 fh = _mm512_mul_ps(_mm512_permutexvar_ps(_mm512_srli_epi32(U[j], 8 * i + 4), tab), sc);
                    const __m512 fl = _mm512_mul_ps(_mm512_permutexvar_ps(_mm512_srli_epi32(U[j], 8 * i), tab), sc);
                    const __m512i pair = _mm512_mask_blend_epi16(0xAAAAAAAAu, _mm512_srli_epi32(_mm512_castps_si512(fh), 16),
                                                                 _mm512_castps_si512(fl));
                    const int p = (kk + 8 * j + 2 * i) / 2;
                    _mm512_storeu_si512((void *)(b + (int64_t)p * (NV_BNR * 2)), pair);
                }
            }
        }
    }
}

void nvfp4_bdecode_avx512(const nvfp4_row *rs, int nr, int64_t k0, int nk, uint16_t *b) {
    for (int h = 0; h < NV_BNR / 16; h++) {
        const int nh = nr - 16 * h < 0 ? 0 : (nr - 16 * h > 16 ? 16 : nr - 16 * h);
        bdecode16(rs + 16 * h, nh, k0, nk, b + 16 * h * 2);
    }
}
