/* nvfp4_avx2.c — the NVFP4 micro-kernel for AVX2 (+FMA), also run on AVX-512 machines
 * without VNNI.  Two activation rows by 16 columns at a time: per quad of inputs the row's
 * four a + 128 bytes are broadcast and vpmaddubsw multiplies them (unsigned) by the decoded
 * weights (signed, |q| <= 12): a pair sums to at most 2 * 255 * 12 = 6120, so the four
 * quads of a segment (8 products a lane) add up exactly in int16 (<= 24480 < 32767) before
 * one vpmaddwd widens them; corr removes the +128 exactly.  The float steps are the
 * reference's (per activation block: cvt, * sw0, fma with sw1, fma with d): the same bits. */
#include "nvfp4_impl.h"

#include <immintrin.h>
#include <string.h>

static inline __m256i bcast4(const uint8_t *p) {
    int32_t v;
    memcpy(&v, p, 4);
    return _mm256_set1_epi32(v);
}

/* The panel decoder (the reference's bytes): a row's 8 code bytes of a segment become its
 * 16 nibbles in input order (high first: unpack of high and low halves), vpshufb maps them
 * to q; four rows' 4-byte quads are transposed like a 4 x 4 int32 matrix into the
 * [quad][column][4] layout, and vpmaddubsw/vpmaddwd by ones sum each column's q for corr. */
void nvfp4_decode_avx2(const nvfp4_row *rs, int nr, int64_t s0, int nseg, int8_t *q, float *sw, int32_t *corr) {
    const __m128i lut = _mm_loadu_si128((const __m128i *)nvfp4_q_of_code), m4 = _mm_set1_epi8(0x0f);
    const __m128i one8 = _mm_set1_epi8(1), one16 = _mm_set1_epi16(1);
    for (int s = 0; s < nseg; s++) {
        const int64_t b = s0 + s;
        int8_t *qs = q + (int64_t)s * 4 * NV_NR * 4;
        for (int g = 0; g < NV_NR; g += 4) {
            __m128i v[4];
            for (int c = 0; c < 4; c++) {
                if (g + c >= nr) { v[c] = _mm_setzero_si128(); continue; }
                const __m128i x = _mm_loadl_epi64((const __m128i *)(rs[g + c].codes + b * (NV_SEG / 2)));
                const __m128i nib = _mm_unpacklo_epi8(_mm_and_si128(_mm_srli_epi16(x, 4), m4), _mm_and_si128(x, m4));
                v[c] = _mm_shuffle_epi8(lut, nib);
            }
            const __m128i t0 = _mm_unpacklo_epi32(v[0], v[1]), t1 = _mm_unpacklo_epi32(v[2], v[3]);
            const __m128i t2 = _mm_unpackhi_epi32(v[0], v[1]), t3 = _mm_unpackhi_epi32(v[2], v[3]);
            const __m128i o[4] = {_mm_unpacklo_epi64(t0, t1), _mm_unpackhi_epi64(t0, t1),
                                  _mm_unpacklo_epi64(t2, t3), _mm_unpackhi_epi64(t2, t3)};
            __m128i sum = _mm_setzero_si128();
            for (int j = 0; j < 4; j++) {
                _mm_storeu_si128((__m128i *)(qs + (j * NV_NR + g) * 4), o[j]);
                sum = _mm_add_epi16(sum, _mm_maddubs_epi16(one8, o[j]));
            }
            _mm_storeu_si128((__m128i *)(corr + s * NV_NR + g), _mm_slli_epi32(_mm_madd_epi16(sum, one16), 7));
            for (int c = 0; c < 4; c++)
                sw[s * NV_NR + g + c] = g + c < nr ? rs[g + c].lut[rs[g + c].scales[(b / 4) * 512 + b % 4]] : 0.0f;
        }
    }
}

/* e[i][h] = the exact int32 dots of segment t, rows i < RB, columns 8h .. 8h + 7 */
static inline __attribute__((always_inline)) void dots(const int RB, int t, const uint8_t *a, int64_t lda,
                                                       const int8_t *q, const int32_t *corr, __m256i e[2][2]) {
    const __m256i ones = _mm256_set1_epi16(1);
    const int8_t *qs = q + (int64_t)t * 4 * NV_NR * 4;
    __m256i acc[2][2];
    for (int i = 0; i < RB; i++) acc[i][0] = acc[i][1] = _mm256_setzero_si256();
    for (int j = 0; j < 4; j++) {
        const __m256i w0 = _mm256_loadu_si256((const __m256i *)(qs + j * 64));
        const __m256i w1 = _mm256_loadu_si256((const __m256i *)(qs + j * 64 + 32));
        for (int i = 0; i < RB; i++) {
            const __m256i av = bcast4(a + i * lda + t * NV_SEG + j * 4);
            acc[i][0] = _mm256_add_epi16(acc[i][0], _mm256_maddubs_epi16(av, w0));
            acc[i][1] = _mm256_add_epi16(acc[i][1], _mm256_maddubs_epi16(av, w1));
        }
    }
    const __m256i c0 = _mm256_loadu_si256((const __m256i *)(corr + t * NV_NR));
    const __m256i c1 = _mm256_loadu_si256((const __m256i *)(corr + t * NV_NR + 8));
    for (int i = 0; i < RB; i++) {
        e[i][0] = _mm256_sub_epi32(_mm256_madd_epi16(acc[i][0], ones), c0);
        e[i][1] = _mm256_sub_epi32(_mm256_madd_epi16(acc[i][1], ones), c1);
    }
}

/* RB (1 or 2) rows */
static inline __attribute__((always_inline)) void rows(const int RB, int nseg, const uint8_t *a, int64_t lda,
                                                       const float *d, int64_t ldd, const int8_t *q,
                                                       const float *sw, const int32_t *corr, float *cb) {
    __m256 f[2][2];
    for (int i = 0; i < RB; i++) {
        f[i][0] = _mm256_loadu_ps(cb + i * NV_NR);
        f[i][1] = _mm256_loadu_ps(cb + i * NV_NR + 8);
    }
    for (int s = 0; s < nseg; s += 2) { /* an activation block: two segments, one d */
        __m256i e[2][2];
        __m256 g[2][2];
        dots(RB, s, a, lda, q, corr, e);
        const __m256 s00 = _mm256_loadu_ps(sw + s * NV_NR), s01 = _mm256_loadu_ps(sw + s * NV_NR + 8);
        for (int i = 0; i < RB; i++) {
            g[i][0] = _mm256_mul_ps(_mm256_cvtepi32_ps(e[i][0]), s00);
            g[i][1] = _mm256_mul_ps(_mm256_cvtepi32_ps(e[i][1]), s01);
        }
        dots(RB, s + 1, a, lda, q, corr, e);
        const __m256 s10 = _mm256_loadu_ps(sw + (s + 1) * NV_NR), s11 = _mm256_loadu_ps(sw + (s + 1) * NV_NR + 8);
        for (int i = 0; i < RB; i++) {
            const __m256 dv = _mm256_set1_ps(d[i * ldd + s / 2]);
            g[i][0] = _mm256_fmadd_ps(_mm256_cvtepi32_ps(e[i][0]), s10, g[i][0]);
            g[i][1] = _mm256_fmadd_ps(_mm256_cvtepi32_ps(e[i][1]), s11, g[i][1]);
            f[i][0] = _mm256_fmadd_ps(dv, g[i][0], f[i][0]);
            f[i][1] = _mm256_fmadd_ps(dv, g[i][1], f[i][1]);
        }
    }
    for (int i = 0; i < RB; i++) {
        _mm256_storeu_ps(cb + i * NV_NR, f[i][0]);
        _mm256_storeu_ps(cb + i * NV_NR + 8, f[i][1]);
    }
}

void nvfp4_ukr_avx2(int mr, int nseg, const uint8_t *a, int64_t lda, const float *d, int64_t ldd,
                    const int8_t *q, const float *sw, const int32_t *corr, float *cb) {
    int i = 0;
    for (; i + 2 <= mr; i += 2) rows(2, nseg, a + i * lda, lda, d + i * ldd, ldd, q, sw, corr, cb + i * NV_NR);
    if (i < mr) rows(1, nseg, a + i * lda, lda, d + i * ldd, ldd, q, sw, corr, cb + i * NV_NR);
}
