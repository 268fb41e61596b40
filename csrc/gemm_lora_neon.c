/* gemm_lora_neon.c — the LoRA tile add for NEON (4 floats): gemm_lora_body.inc. */
#include "simd_neon.h"

#include "gemm_lora_body.inc"
