/* snake_avx2.c — anti-aliased SnakeBeta for AVX2 + FMA: snake_body.inc. */
#include "simd_avx2.h"

#define SNAKE_ISA H3_ISA_AVX2

#include "snake_body.inc"
