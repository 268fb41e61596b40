/* attn_avx2.c — attention for AVX2+FMA: 6 x 2-vector register tile (12 accumulators of
 * 16 registers), 16 queries per unit. */
#include "simd_avx2.h"
#define ATTN_MR 6
#define ATTN_NV 2
#define ATTN_BK 128
#include "attn_body.inc"
