/* gguf_quant_avx2.c — the GGUF activation quantiser for AVX2: gguf_quant_act_row_ref's
 * steps on 8 lanes (max of |x| over each group of 256 -- NaN-free inputs give fmaxf's
 * result --, one division amax / 127, x / d rounded to nearest even as nearbyintf does,
 * clamped), so the int8 values, scales and sums are the reference's, bit for bit. */
#include "gguf_impl.h"

#include <immintrin.h>

/* max |x| over n (a multiple of 32) values */
static float amax_of(const float *x, int64_t n) {
    const __m256 sign = _mm256_set1_ps(-0.0f);
    __m256 m = _mm256_setzero_ps();
    for (int64_t i = 0; i < n; i += 8) m = _mm256_max_ps(_mm256_andnot_ps(sign, _mm256_loadu_ps(x + i)), m);
    __m128 h = _mm_max_ps(_mm256_castps256_ps128(m), _mm256_extractf128_ps(m, 1));
    h = _mm_max_ps(h, _mm_movehl_ps(h, h));
    h = _mm_max_ss(h, _mm_movehdup_ps(h));
    return _mm_cvtss_f32(h);
}

void gguf_quant_act_row_avx2(const float *x, int64_t K, int8_t *a, float *d, int32_t *as) {
    const __m256 lim = _mm256_set1_ps(127.0f), nlim = _mm256_set1_ps(-127.0f);
    float s = 0.0f;
    for (int64_t b = 0; b < K / 32; b++) {
        if (b % (GGUF_AG / 32) == 0) { /* a group's first 32: its scale */
            const int64_t g0 = b * 32;
            s = amax_of(x + g0, H3_MIN((int64_t)GGUF_AG, K - g0)) / 127.0f;
            d[g0 / GGUF_AG] = s;
        }
        const float *xb = x + b * 32;
        __m256i q[4];
        if (s > 0.0f) {
            const __m256 sv = _mm256_set1_ps(s);
            for (int j = 0; j < 4; j++) {
                __m256 r = _mm256_round_ps(_mm256_div_ps(_mm256_loadu_ps(xb + 8 * j), sv),
                                           _MM_FROUND_TO_NEAREST_INT | _MM_FROUND_NO_EXC);
                q[j] = _mm256_cvtps_epi32(_mm256_max_ps(_mm256_min_ps(r, lim), nlim));
            }
        } else {
            for (int j = 0; j < 4; j++) q[j] = _mm256_setzero_si256();
        }
        /* int32 -> int8 in order: packs work per 128-bit lane, the permute puts them back */
        const __m256i p16a = _mm256_packs_epi32(q[0], q[1]), p16b = _mm256_packs_epi32(q[2], q[3]);
        const __m256i p8 = _mm256_permutevar8x32_epi32(_mm256_packs_epi16(p16a, p16b),
                                                       _mm256_setr_epi32(0, 4, 1, 5, 2, 6, 3, 7));
        _mm256_storeu_si256((__m256i *)(a + b * 32), p8);
        const __m256i s01 = _mm256_add_epi32(q[0], q[1]), s23 = _mm256_add_epi32(q[2], q[3]);
        __m128i t0 = _mm_add_epi32(_mm256_castsi256_si128(s01), _mm256_extracti128_si256(s01, 1));
        __m128i t1 = _mm_add_epi32(_mm256_castsi256_si128(s23), _mm256_extracti128_si256(s23, 1));
        t0 = _mm_hadd_epi32(t0, t1);     /* [a0 a1 b0 b1] */
        t0 = _mm_hadd_epi32(t0, t0);     /* [a b a b] */
        as[2 * b] = _mm_cvtsi128_si32(t0);
        as[2 * b + 1] = _mm_extract_epi32(t0, 1);
        as[K / 16 + b] = as[2 * b] + as[2 * b + 1];
    }
}

/* the VNNI kernels' quantiser (gguf_avx512.c, gguf_avxvnni.c): a stored as a + 128, and the
 * integer sums as float (exact: |sum| <= 32 * 127), which they read for the types with a min --
 * a broadcast load per row and segment instead of a convert and a broadcast (Q4_K 258 -> 314
 * GOP/s on the AVX-512 kernel alone, one Zen 4 core) */
void gguf_quant_act_row_avx2u(const float *x, int64_t K, int8_t *a, float *d, int32_t *as) {
    gguf_quant_act_row_avx2(x, K, a, d, as);
    const __m256i h = _mm256_set1_epi8((char)0x80);
    int64_t k = 0;
    for (; k + 32 <= K; k += 32)
        _mm256_storeu_si256((__m256i *)(a + k), _mm256_xor_si256(_mm256_loadu_si256((const __m256i *)(a + k)), h));
    for (; k < K; k++) a[k] = (int8_t)(a[k] ^ 0x80);
    const int64_t ns = K / 16 + K / 32;
    float *fs = (float *)(void *)as;
    int64_t i = 0;
    for (; i + 8 <= ns; i += 8)
        _mm256_storeu_ps(fs + i, _mm256_cvtepi32_ps(_mm256_loadu_si256((const __m256i *)(as + i))));
    for (; i < ns; i++) fs[i] = (float)as[i];
}
