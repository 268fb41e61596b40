/* elem_impl.h — the element-wise/row-op driver's contract with its per-ISA kernels.
 *
 * elem.c validates, splits rows over the pool and picks one immutable table per call;
 * each table's functions work on a contiguous range of rows (or elements) and never
 * fail.  The scalar table (elem_ref.c) is the executable spec; the SIMD tables are one
 * body (elem_body.inc) compiled per ISA (elem_avx512.c, elem_avx2.c, elem_neon.c).
 * Tables carry the ISA whose code they hold, reported back to the caller as `ran`. */
#ifndef H3_ELEM_IMPL_H
#define H3_ELEM_IMPL_H

#include "h3_internal.h"

typedef struct {
    h3_isa isa; /* the code this table holds (AMX runs the AVX-512 table) */
    /* x, out: [rows, n]; w: [n] or NULL.  out may equal x. */
    void (*rmsnorm)(const float *x, const float *w, float *out, int64_t rows, int64_t n,
                    float eps);
    /* One sequence row: x: [heads, head_dim] (heads = the range to do); cos, sin:
     * [rot_dim/2] for this row. */
    void (*rope)(float *x, const float *cos, const float *sin, int heads, int head_dim,
                 int rot_dim);
    /* Flat: out[i] = act(x[i]) for i < n; out may equal x. */
    void (*act)(const float *x, float *out, int64_t n, int act);
    /* x: [rows, 2h] -> out: [rows, h]; out may equal x (rows are walked upward). */
    void (*swiglu)(const float *x, float *out, int64_t rows, int64_t h);
    /* One row: out[j] = x[j] * (1 + scale[j]) + shift[j]; out may equal x. */
    void (*adaln)(const float *x, const float *scale, const float *shift, float *out,
                  int64_t n);
    /* Flat conversion between H3_DT_F32/BF16/F16 (src != dst dtype, no overlap). */
    void (*convert)(const void *src, int src_dtype, void *dst, int dst_dtype, int64_t n);
} h3_elem_kernels;

extern const h3_elem_kernels h3_elem_ref;
#if H3_X86
extern const h3_elem_kernels h3_elem_avx2;
extern const h3_elem_kernels h3_elem_avx512;
#endif
#if H3_ARM64
extern const h3_elem_kernels h3_elem_neon;
#endif

/* torch's gelu(approximate="tanh") constants: sqrt(2/pi) and 0.044715. */
#define H3_GELU_BETA 0.7978845608028654f
#define H3_GELU_KAPPA 0.044715f

#endif /* H3_ELEM_IMPL_H */
