/* hadamard_neon.c — the block Hadamard rotation for the neon path (4 floats): stride 1
 * inside one vector, the rest as whole-vector butterflies (hadamard_body.inc). */
#include "hadamard_impl.h"
#include "simd_neon.h"

#define HADAMARD_SMALL_MAX 1

/* Stride 1 of one group (G % 4 == 0): each vector is [a b c d]. */
static inline void hadamard_small(float *g, int64_t G) {
    const float32x4_t half = vdupq_n_f32(0.5f);
    for (int64_t j = 0; j < G; j += 4) {
        float32x4_t v = vld1q_f32(g + j);
        float32x4_t sw = vrev64q_f32(v);                       /* b a d c */
        float32x4_t p = vaddq_f32(v, sw);                      /* a+b b+a c+d d+c */
        float32x4_t s = vaddq_f32(p, vextq_f32(p, p, 2));
        vst1q_f32(g + j, vsubq_f32(vmulq_f32(half, s), vextq_f32(sw, sw, 2))); /* - d c b a */
    }
}

#include "hadamard_body.inc"
