/* gnorm_avx512.c — per-frame GroupNorm (+ SiLU) for AVX-512 F (also run for AMX): gnorm_body.inc. */
#include "simd_avx512.h"

#define GNORM_ISA H3_ISA_AVX512

#include "gnorm_body.inc"
