/* qwen_elem_avx512.c — AVX-512 kernels of the Qwen layer's bf16-rounding ops (also run
 * for AMX).  Same operations in the same order as the scalar reference in qwen_elem.c,
 * so RoPE and SwiGLU give its bits (SwiGLU up to h3v_exp's ~2 ulp before rounding); the
 * RMS sum of squares is summed in float32 lanes, not double. */
#include "simd_avx512.h"
#include "qwen_elem_impl.h"

#include <math.h>

/* round each lane to bf16 (nearest even), kept as float; NaN -> quiet NaN as h3_f32_to_bf16 */
static inline __m512 rbv(__m512 v) {
    __m512i u = _mm512_castps_si512(v);
    __m512i lsb = _mm512_and_si512(_mm512_srli_epi32(u, 16), _mm512_set1_epi32(1));
    __m512i r = _mm512_and_si512(_mm512_add_epi32(_mm512_add_epi32(u, _mm512_set1_epi32(0x7fff)), lsb),
                                 _mm512_set1_epi32((int)0xffff0000u));
    __m512i q = _mm512_or_si512(_mm512_and_si512(u, _mm512_set1_epi32((int)0xffff0000u)),
                                _mm512_set1_epi32(0x00400000));
    __mmask16 nan = _mm512_cmp_ps_mask(v, v, _CMP_UNORD_Q);
    return _mm512_castsi512_ps(_mm512_mask_blend_epi32(nan, r, q));
}

static inline __mmask16 tailmask(int64_t t) { return (__mmask16)((1u << t) - 1u); }

static void rms_bf16_avx512(const float *x, const float *w, float *out, int64_t rows, int64_t n,
                            float eps) {
    for (int64_t r = 0; r < rows; r++) {
        const float *xr = x + r * n;
        float *o = out + r * n;
        __m512 a0 = _mm512_setzero_ps(), a1 = _mm512_setzero_ps();
        int64_t j = 0;
        for (; j + 32 <= n; j += 32) {
            __m512 v0 = _mm512_loadu_ps(xr + j), v1 = _mm512_loadu_ps(xr + j + 16);
            a0 = _mm512_fmadd_ps(v0, v0, a0);
            a1 = _mm512_fmadd_ps(v1, v1, a1);
        }
        for (; j < n; j += 16) {
            __m512 v = _mm512_maskz_loadu_ps(tailmask(H3_MIN(16, n - j)), xr + j);
            a0 = _mm512_fmadd_ps(v, v, a0);
        }
        float ss = _mm512_reduce_add_ps(_mm512_add_ps(a0, a1));
        float inv = 1.0f / sqrtf(ss / (float)n + eps);
        __m512 vi = _mm512_set1_ps(inv);
        for (j = 0; j < n; j += 16) {
            __mmask16 m = tailmask(H3_MIN(16, n - j));
            __m512 v = _mm512_maskz_loadu_ps(m, xr + j), wv = _mm512_maskz_loadu_ps(m, w + j);
            _mm512_mask_storeu_ps(o + j, m, rbv(_mm512_mul_ps(wv, rbv(_mm512_mul_ps(v, vi)))));
        }
    }
}

static void rope_bf16_avx512(float *x, const float *cos, const float *sin, int heads,
                             int head_dim, int rot_dim) {
    const int half = rot_dim / 2;
    for (int h = 0; h < heads; h++) {
        float *y = x + (int64_t)h * head_dim;
        for (int i = 0; i < half; i += 16) {
            __mmask16 m = tailmask(H3_MIN(16, half - i));
            __m512 c = rbv(_mm512_maskz_loadu_ps(m, cos + i)), s = rbv(_mm512_maskz_loadu_ps(m, sin + i));
            __m512 x1 = _mm512_maskz_loadu_ps(m, y + i), x2 = _mm512_maskz_loadu_ps(m, y + i + half);
            __m512 lo = rbv(_mm512_sub_ps(rbv(_mm512_mul_ps(x1, c)), rbv(_mm512_mul_ps(x2, s))));
            __m512 hi = rbv(_mm512_add_ps(rbv(_mm512_mul_ps(x2, c)), rbv(_mm512_mul_ps(x1, s))));
            _mm512_mask_storeu_ps(y + i, m, lo);
            _mm512_mask_storeu_ps(y + i + half, m, hi);
        }
    }
}

static void swiglu_bf16_avx512(const float *g, const float *u, float *out, int64_t n) {
    const __m512 one = _mm512_set1_ps(1.0f);
    for (int64_t i = 0; i < n; i += 16) {
        __mmask16 m = tailmask(H3_MIN(16, n - i));
        __m512 gv = _mm512_maskz_loadu_ps(m, g + i), uv = _mm512_maskz_loadu_ps(m, u + i);
        __m512 s = rbv(_mm512_div_ps(gv, _mm512_add_ps(one, h3v_exp(_mm512_sub_ps(_mm512_setzero_ps(), gv)))));
        _mm512_mask_storeu_ps(out + i, m, rbv(_mm512_mul_ps(s, uv)));
    }
}

static float dot_avx512(const float *a, const float *b, int64_t n) {
    __m512 s0 = _mm512_setzero_ps(), s1 = _mm512_setzero_ps();
    int64_t i = 0;
    for (; i + 32 <= n; i += 32) {
        s0 = _mm512_fmadd_ps(_mm512_loadu_ps(a + i), _mm512_loadu_ps(b + i), s0);
        s1 = _mm512_fmadd_ps(_mm512_loadu_ps(a + i + 16), _mm512_loadu_ps(b + i + 16), s1);
    }
    for (; i < n; i += 16) {
        __mmask16 m = tailmask(H3_MIN(16, n - i));
        s0 = _mm512_fmadd_ps(_mm512_maskz_loadu_ps(m, a + i), _mm512_maskz_loadu_ps(m, b + i), s0);
    }
    return _mm512_reduce_add_ps(_mm512_add_ps(s0, s1));
}

static void scale_axpy_avx512(float *y, float c, float p, const float *x, int64_t n) {
    const __m512 vc = _mm512_set1_ps(c), vp = _mm512_set1_ps(p);
    for (int64_t i = 0; i < n; i += 16) {
        __mmask16 m = tailmask(H3_MIN(16, n - i));
        __m512 yv = _mm512_mul_ps(_mm512_maskz_loadu_ps(m, y + i), vc);
        _mm512_mask_storeu_ps(y + i, m, _mm512_add_ps(yv, _mm512_mul_ps(vp, _mm512_maskz_loadu_ps(m, x + i))));
    }
}

/* h3_fexp_u20 on 16 lanes: the same operations, so the same bits */
static inline __m512 fexp_u20_v(__m512 x) {
    const __m512 lo = _mm512_castsi512_ps(_mm512_set1_epi32((int)H3_FEXP_LO));
    const __m512 hi = _mm512_castsi512_ps(_mm512_set1_epi32((int)H3_FEXP_HI));
    const __mmask16 under = _mm512_cmp_ps_mask(x, lo, _CMP_LT_OS), over = _mm512_cmp_ps_mask(x, hi, _CMP_GT_OS);
    const __m512 t = _mm512_mul_ps(x, _mm512_castsi512_ps(_mm512_set1_epi32((int)H3_FEXP_LOG2E)));
    const __m512 f = _mm512_sub_ps(t, _mm512_roundscale_ps(t, _MM_FROUND_TO_NEG_INF | _MM_FROUND_NO_EXC));
    __m512 p = _mm512_fmadd_ps(f, _mm512_set1_ps(H3_FEXP_C3), _mm512_set1_ps(H3_FEXP_C2));
    p = _mm512_fmadd_ps(f, p, _mm512_set1_ps(H3_FEXP_C1));
    p = _mm512_fmadd_ps(f, p, _mm512_set1_ps(H3_FEXP_C0));
    const __m512 y = _mm512_fmadd_ps(_mm512_set1_ps(8388608.0f), _mm512_sub_ps(t, p), _mm512_set1_ps(1065353216.0f));
    __m512i bits = _mm512_cvttps_epi32(y);
    bits = _mm512_mask_mov_epi32(bits, under, _mm512_setzero_si512());
    bits = _mm512_mask_mov_epi32(bits, over, _mm512_set1_epi32(0x7f800000));
    return _mm512_castsi512_ps(bits);
}

/* the lanes of the scalar reference (qwen_elem.c) are this code's lanes; a masked chunk
 * (fewer than 16 valid keys) adds zeros in its invalid lanes, which leaves the sums as is */
static float exp_sum_bf16p_avx512(float *s, int64_t nv, int64_t nb, float m) {
    const int64_t n32 = nb / 32 * 32, n16 = nb / 16 * 16, nvec = H3_MIN(nv, n16);
    const __m512 vm = _mm512_set1_ps(m);
    __m512 a = _mm512_setzero_ps(), b = _mm512_setzero_ps(), c = _mm512_setzero_ps();
    for (int64_t t = 0; t < nvec; t += 16) {
        const __mmask16 k = tailmask(H3_MIN(16, nvec - t));
        const __m512 e = _mm512_maskz_mov_ps(k, fexp_u20_v(_mm512_sub_ps(_mm512_maskz_loadu_ps(k, s + t), vm)));
        if (t >= n32) c = _mm512_add_ps(c, e);
        else if (t & 16) b = _mm512_add_ps(b, e);
        else a = _mm512_add_ps(a, e);
        _mm512_mask_storeu_ps(s + t, k, rbv(e));
    }
    a = _mm512_add_ps(_mm512_add_ps(a, c), b);
    a = _mm512_add_ps(a, _mm512_shuffle_f32x4(a, a, 0x4E));   /* lanes l, l^8 */
    a = _mm512_add_ps(a, _mm512_shuffle_f32x4(a, a, 0xB1));   /* l, l^4 */
    a = _mm512_add_ps(a, _mm512_shuffle_ps(a, a, 0x4E));      /* l, l^2 */
    a = _mm512_add_ps(a, _mm512_shuffle_ps(a, a, 0xB1));      /* l, l^1 */
    float sum = _mm512_cvtss_f32(a);
    for (int64_t t = n16; t < nv; t++) {
        const float e = expf(s[t] - m);
        sum += e;
        s[t] = h3_round_to_bf16(e);
    }
    return sum;
}

const h3_qwen_elem_kernels h3_qwen_elem_avx512 = {H3_ISA_AVX512, rms_bf16_avx512,
                                                  rope_bf16_avx512, swiglu_bf16_avx512,
                                                  dot_avx512, scale_axpy_avx512,
                                                  exp_sum_bf16p_avx512};
