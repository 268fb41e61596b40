/* gemm_lora_avx2.c — the LoRA tile add for AVX2 (8 floats): gemm_lora_body.inc. */
#include "simd_avx2.h"

#include "gemm_lora_body.inc"
