/* gemm_lora_avx512.c — the LoRA tile add for AVX-512 (16 floats; the AMX and VDPBF16PS tables use it too): gemm_lora_body.inc. */
#include "simd_avx512.h"

#include "gemm_lora_body.inc"
