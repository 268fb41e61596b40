/* snake_impl.h — the anti-aliased SnakeBeta driver's contract with its per-ISA kernels.
 *
 * snake.c validates, precomputes the per-channel constants and the polyphase taps, and
 * splits (channel group, time tile) units over the pool; a table's `tile` computes one
 * unit and never fails.  snake_ref.c is the executable spec; snake_avx512.c,
 * snake_avx2.c and snake_neon.c compile snake_body.inc against their simd_<isa>.h. */
#ifndef H3_SNAKE_IMPL_H
#define H3_SNAKE_IMPL_H

#include "h3_internal.h"

#define H3_SNAKE_TAPS 12   /* BigVGAN's Kaiser-sinc filters (ratio 2) */
#define H3_SNAKE_TILE 256  /* output time steps per unit */
#define H3_SNAKE_GROUP 16  /* channels per unit (>= every table's lanes) */

/* Per-call constants, all float32:
 *   a[c] = exp(alpha[c]), ib[c] = 1 / (exp(beta[c]) + 1e-9)              ([C] each)
 *   fe[s] = 2 fu[11 - 2s], fo[s] = 2 fu[10 - 2s]  (s < 6): the polyphase taps of the
 *     x2 upsampler, so that with q = n / 2
 *       u[2q]   = sum_s x[clamp(q - 3 + s)] fe[s],  u[2q+1] = sum_s x[clamp(q - 2 + s)] fo[s]
 *   fd[j] = the downsampler's taps (j < 12). */
typedef struct {
    const float *a, *ib;
    float fe[6], fo[6], fd[H3_SNAKE_TAPS];
} h3_snake_consts;

/* Scratch for one unit, in floats (64-byte aligned), for any table. */
#define H3_SNAKE_SCRATCH ((H3_SNAKE_TILE + 16 + 2 * H3_SNAKE_TILE + 16) * H3_SNAKE_GROUP)

typedef struct {
    h3_isa isa;
    /* channels [c0, c0 + nc) (nc <= H3_SNAKE_GROUP), output rows [t0, t1) (t1 - t0 <= TILE) of
     * x: [T, C] -> y: [T, C] */
    void (*tile)(const float *x, float *y, int64_t T, int64_t C, int64_t c0, int nc,
                 int64_t t0, int64_t t1, const h3_snake_consts *k, float *scratch);
} h3_snake_kernels;

extern const h3_snake_kernels h3_snake_ref;
#if H3_X86
extern const h3_snake_kernels h3_snake_avx2;
extern const h3_snake_kernels h3_snake_avx512;
#endif
#if H3_ARM64
extern const h3_snake_kernels h3_snake_neon;
#endif

#endif /* H3_SNAKE_IMPL_H */
