/* attn_avx512.c — attention for AVX-512 (also the AMX path): 6 x 4-vector register tile
 * (24 accumulators of 32), 64 queries per unit. */
#include "simd_avx512.h"
#define ATTN_MR 6
#define ATTN_NV 4
#define ATTN_BK 128
#include "attn_body.inc"
