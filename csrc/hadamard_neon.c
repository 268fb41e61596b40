/* hadamard_neon.c — the block Hadamard rotation for the neon path (4 floats): stride 1
 * inside one vector, the rest as whole-vector butterflies (hadamard_body.inc). */
#include "hadamard_impl.h"
#include "simd_neon.h"

#define HADAMARD_SMALL_MAX 1

#include "hadamard_body.inc"

/* Stride 1 of one group (G % 4 == 0): each vector is one quarter [a b c d]. */
static inline void hadamard_small(float *g, int64_t G) {
    for (int64_t j = 0; j < G; j += 4) vst1q_f32(g + j, hadamard_quarters(vld1q_f32(g + j)));
}
