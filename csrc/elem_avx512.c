/* elem_avx512.c — element-wise/row ops for AVX-512 F/BW/VL/DQ (also run for AMX).
 * Everything is elem_body.inc, over simd_avx512.h's vocabulary. */
#include "simd_avx512.h"

#define ELEM_ISA H3_ISA_AVX512

#include "elem_body.inc"
