/* gnorm_impl.h — the per-frame GroupNorm driver's contract with its per-ISA kernels.
 *
 * gnorm.c validates, cuts every frame's pixels into H3_GN_CHUNKS fixed chunks (the same
 * for any thread count, so the sums' order never depends on it), hands (frame, chunk)
 * units to the pool and reduces the per-chunk sums in chunk order.  A table's kernels
 * work on one chunk and never fail.  gnorm_ref.c is the executable spec; gnorm_avx2.c,
 * gnorm_avx512.c and gnorm_neon.c compile gnorm_body.inc against their simd_<isa>.h. */
#ifndef H3_GNORM_IMPL_H
#define H3_GNORM_IMPL_H

#include "h3_internal.h"

#define H3_GN_CHUNKS 16

typedef struct {
    h3_isa isa;
    /* s[c] = sum over pixels p < n of x[p*C + c]  (x: [n, C]; s: [C] double, overwritten) */
    void (*sum)(const float *x, int64_t n, int64_t C, double *s, float *acc);
    /* s[c] = sum over p < n of (x[p*C + c] - m[c])^2  (m: [C] float, the group means).
     * acc: scratch of C floats, 64-byte aligned (the SIMD paths' run sums) */
    void (*sqdev)(const float *x, int64_t n, int64_t C, const float *m, double *s, float *acc);
    /* y[p*C + c] = x[p*C + c] * a[c] + b[c], then SiLU if silu (y may alias x) */
    void (*apply)(const float *x, float *y, int64_t n, int64_t C, const float *a, const float *b,
                  int silu);
} h3_gnorm_kernels;

extern const h3_gnorm_kernels h3_gnorm_ref;
#if H3_X86
extern const h3_gnorm_kernels h3_gnorm_avx2;
extern const h3_gnorm_kernels h3_gnorm_avx512;
#endif
#if H3_ARM64
extern const h3_gnorm_kernels h3_gnorm_neon;
#endif

#endif /* H3_GNORM_IMPL_H */
