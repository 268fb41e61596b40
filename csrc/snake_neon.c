/* snake_neon.c — anti-aliased SnakeBeta for AArch64 Advanced SIMD: snake_body.inc. */
#include "simd_neon.h"

#define SNAKE_ISA H3_ISA_NEON

#include "snake_body.inc"
