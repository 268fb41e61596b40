/* gnorm_neon.c — per-frame GroupNorm (+ SiLU) for AArch64 Advanced SIMD: gnorm_body.inc. */
#include "simd_neon.h"

#define GNORM_ISA H3_ISA_NEON

#include "gnorm_body.inc"
