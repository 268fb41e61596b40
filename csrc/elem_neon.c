/* elem_neon.c — element-wise/row ops for AArch64 Advanced SIMD.
 * Everything is elem_body.inc, over simd_neon.h's vocabulary.
 * Self-contained apart from the scalar helpers of h3_internal.h / convert.c. */
#include "simd_neon.h"

#define ELEM_ISA H3_ISA_NEON

#include "elem_body.inc"
