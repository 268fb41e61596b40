/* qwen_elem_impl.h — the bf16-rounding element-wise ops of the Qwen text layer: the
 * driver's (qwen_elem.c) contract with its per-ISA kernels.  Each function works on a
 * contiguous range of rows (or elements) and never fails.  The scalar table lives in
 * qwen_elem.c; AVX-512 in qwen_elem_avx512.c; ISAs without a table run the scalar one. */
#ifndef H3_QWEN_ELEM_IMPL_H
#define H3_QWEN_ELEM_IMPL_H

#include "h3_internal.h"

typedef struct {
    h3_isa isa; /* the code this table holds */
    /* x, out: [rows, n]; out may equal x */
    void (*rms_bf16)(const float *x, const float *w, float *out, int64_t rows, int64_t n,
                     float eps);
    /* one sequence row: x: [heads, D]; cos, sin: [D/2] */
    void (*rope_bf16)(float *x, const float *cos, const float *sin, int heads, int head_dim);
    /* flat, n elements */
    void (*swiglu_bf16)(const float *g, const float *u, float *out, int64_t n);
    /* sum_i a[i] * b[i] over n floats (any summation order) */
    float (*dot)(const float *a, const float *b, int64_t n);
    /* y[i] = y[i] * c + p * x[i] over n floats (c = 1: plain axpy) */
    void (*scale_axpy)(float *y, float c, float p, const float *x, int64_t n);
} h3_qwen_elem_kernels;

extern const h3_qwen_elem_kernels h3_qwen_elem_ref;
#if H3_X86
extern const h3_qwen_elem_kernels h3_qwen_elem_avx512;
#endif

#endif
