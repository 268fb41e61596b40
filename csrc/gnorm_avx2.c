/* gnorm_avx2.c — per-frame GroupNorm (+ SiLU) for AVX2 + FMA: gnorm_body.inc. */
#include "simd_avx2.h"

#define GNORM_ISA H3_ISA_AVX2

#include "gnorm_body.inc"
