/* snake_avx512.c — anti-aliased SnakeBeta for AVX-512 (also run for AMX): snake_body.inc. */
#include "simd_avx512.h"

#define SNAKE_ISA H3_ISA_AVX512

#include "snake_body.inc"
