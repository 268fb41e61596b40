/* elem_avx2.c — element-wise/row ops for AVX2 + FMA + F16C.
 * Everything is elem_body.inc, over simd_avx2.h's vocabulary. */
#include "simd_avx2.h"

#define ELEM_ISA H3_ISA_AVX2

#include "elem_body.inc"
