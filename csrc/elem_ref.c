/* elem_ref.c — scalar reference for the element-wise/row ops: the executable spec and
 * the oracle of every SIMD path.  Plain loops, float32 maths in torch's operation order
 * (compiled with -ffp-contract=off, so every * and + rounds on its own).  Never
 * "optimise" these. */
#include "elem_impl.h"

#include <math.h>

/* torch: v = x.pow(2).mean(-1); x * rsqrt(v + eps) * w, all float32 (h3_internal.h). */
static void rmsnorm_ref(const float *x, const float *w, float *out, int64_t rows, int64_t n,
                        float eps) {
    h3_rmsnorm_rows_ref(x, w, out, rows, n, eps, 0);
}

/* torch: x * cos + rotate_half(x) * sin, rotate_half(x) = cat(-x2, x1); the negation is
 * exact, so x1*cos - x2*sin rounds the same. */
static void rope_ref(float *x, const float *cos, const float *sin, int heads, int head_dim,
                     int rot_dim) {
    int half = rot_dim / 2;
    for (int h = 0; h < heads; h++) {
        float *xh = x + (int64_t)h * head_dim;
        for (int i = 0; i < half; i++) {
            float x1 = xh[i], x2 = xh[i + half];
            float a = x1 * cos[i], b = x2 * sin[i];
            float c = x2 * cos[i], d = x1 * sin[i];
            xh[i] = a - b;
            xh[i + half] = c + d;
        }
    }
}

/* torch silu: x / (1 + exp(-x)). */
static inline float silu_ref(float x) { return x / (1.0f + expf(-x)); }

/* torch gelu(approximate="tanh"): 0.5*x * (1 + tanh(beta * (x + kappa * x^3))). */
static inline float gelu_tanh_ref(float x) {
    float x3 = x * x * x;
    float inner = H3_GELU_BETA * (x + H3_GELU_KAPPA * x3);
    return 0.5f * x * (1.0f + tanhf(inner));
}

static void act_ref(const float *x, float *out, int64_t n, int act) {
    if (act == H3_ACT_SILU)
        for (int64_t i = 0; i < n; i++) out[i] = silu_ref(x[i]);
    else
        for (int64_t i = 0; i < n; i++) out[i] = gelu_tanh_ref(x[i]);
}

static void swiglu_ref(const float *x, float *out, int64_t rows, int64_t h) {
    for (int64_t r = 0; r < rows; r++) {
        const float *g = x + r * 2 * h, *v = g + h;
        float *o = out + r * h;
        for (int64_t j = 0; j < h; j++) o[j] = silu_ref(g[j]) * v[j];
    }
}

/* diffusers: x * (1 + scale) + shift. */
static void adaln_ref(const float *x, const float *scale, const float *shift, float *out,
                      int64_t n) {
    for (int64_t j = 0; j < n; j++) {
        float s = 1.0f + scale[j];
        float m = x[j] * s;
        out[j] = m + shift[j];
    }
}

static void convert_ref(const void *src, int src_dtype, void *dst, int dst_dtype, int64_t n) {
    const float *sf = (const float *)src;
    const uint16_t *sh = (const uint16_t *)src;
    float *df = (float *)dst;
    uint16_t *dh = (uint16_t *)dst;
    if (src_dtype == H3_DT_F32 && dst_dtype == H3_DT_BF16) {
        for (int64_t i = 0; i < n; i++) dh[i] = h3_f32_to_bf16(sf[i]);
    } else if (src_dtype == H3_DT_F32 && dst_dtype == H3_DT_F16) {
        for (int64_t i = 0; i < n; i++) dh[i] = h3_f32_to_f16(sf[i]);
    } else if (src_dtype == H3_DT_BF16 && dst_dtype == H3_DT_F32) {
        for (int64_t i = 0; i < n; i++) df[i] = h3_bf16_to_f32(sh[i]);
    } else if (src_dtype == H3_DT_F16 && dst_dtype == H3_DT_F32) {
        for (int64_t i = 0; i < n; i++) df[i] = h3_f16_to_f32(sh[i]);
    } else if (src_dtype == H3_DT_BF16 && dst_dtype == H3_DT_F16) {
        for (int64_t i = 0; i < n; i++) dh[i] = h3_f32_to_f16(h3_bf16_to_f32(sh[i]));
    } else { /* f16 -> bf16 */
        for (int64_t i = 0; i < n; i++) dh[i] = h3_f32_to_bf16(h3_f16_to_f32(sh[i]));
    }
}

const h3_elem_kernels h3_elem_ref = {
    H3_ISA_REF, rmsnorm_ref, rope_ref, act_ref, swiglu_ref, adaln_ref, convert_ref,
};
