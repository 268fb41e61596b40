/* qwen_elem_impl.h — the bf16-rounding element-wise ops of the Qwen text layer: the
 * driver's (qwen_elem.c) contract with its per-ISA kernels.  Each function works on a
 * contiguous range of rows (or elements) and never fails.  The scalar table lives in
 * qwen_elem.c; AVX-512 in qwen_elem_avx512.c; ISAs without a table run the scalar one.
 * The bf16 RoPE and SwiGLU rows are also the DiT's and the ViT's (models/block_rows.c). */
#ifndef H3_QWEN_ELEM_IMPL_H
#define H3_QWEN_ELEM_IMPL_H

#include "h3_internal.h"

typedef struct {
    h3_isa isa; /* the code this table holds */
    /* x, out: [rows, n]; out may equal x */
    void (*rms_bf16)(const float *x, const float *w, float *out, int64_t rows, int64_t n,
                     float eps);
    /* one sequence row: x: [heads, head_dim]; cos, sin: [rot_dim/2]; rotate-half over the
     * first rot_dim channels of each head (rot_dim even, <= head_dim), the rest left as is */
    void (*rope_bf16)(float *x, const float *cos, const float *sin, int heads, int head_dim,
                      int rot_dim);
    /* flat, n elements */
    void (*swiglu_bf16)(const float *g, const float *u, float *out, int64_t n);
    /* sum_i a[i] * b[i] over n floats (any summation order) */
    float (*dot)(const float *a, const float *b, int64_t n);
    /* y[i] = y[i] * c + p * x[i] over n floats (c = 1: plain axpy) */
    void (*scale_axpy)(float *y, float c, float p, const float *x, int64_t n);
    /* torch's bf16 flash-attention softmax numerators for one row of one key block of
     * nb keys, of which the first nv are valid (the rest are masked: they hold nothing
     * and are neither read nor written): s[t] <- bf16(E(s[t] - m)) for t < nv, returns
     * the float32 sum of the unrounded E in torch's order.  E is the fexp_u20 polynomial
     * (h3_fexp_u20) for t < 16 floor(nb/16) and expf beyond; the vector part is summed
     * in two 16-lane accumulators over 32-key chunks (keys c..c+15 and c+16..c+31), a
     * third for a final 16-key chunk, added lane-wise (first + third) + second, then
     * pairwise lanes (l, l^8), (l, l^4), (l, l^2), (l, l^1); the expf tail is added
     * sequentially after.  Bit-identical on every ISA. */
    float (*exp_sum_bf16p)(float *s, int64_t nv, int64_t nb, float m);
} h3_qwen_elem_kernels;

/* torch's Vectorized<float>::fexp_u20 (Malossi et al.): t = x log2(e); f = t - floor(t);
 * p = ((c3 f + c2) f + c1) f + c0 (fused); bits = trunc(2^23 (t - p) + 127 2^23) (fused);
 * 0 below ln(FLT_MIN), +inf above ln(FLT_MAX).  Scalar reference, explicit fmaf. */
float h3_fexp_u20(float x);
#define H3_FEXP_LO 0xc2aeac50u  /* bits of the float ln(FLT_MIN) */
#define H3_FEXP_HI 0x42b17218u  /* bits of the float ln(FLT_MAX) */
#define H3_FEXP_LOG2E 0x3fb8aa3bu
#define H3_FEXP_C0 0.00010703434948458272f
#define H3_FEXP_C1 0.30354260500649682f
#define H3_FEXP_C2 ((float)-0.22433836478672356)  /* double literals rounded to float, */
#define H3_FEXP_C3 ((float)-0.079204240219773236) /* as torch's _mm512_set1_ps does */

extern const h3_qwen_elem_kernels h3_qwen_elem_ref;
#if H3_X86
extern const h3_qwen_elem_kernels h3_qwen_elem_avx512;
#endif
/* The table whose kernels run for a supported isa: its vector path's (AVX2 and NEON have
 * no table of their own and run the scalar one). */
const h3_qwen_elem_kernels *h3_qwen_elem_for(h3_isa isa);

#endif
