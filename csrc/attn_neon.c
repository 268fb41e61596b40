/* attn_neon.c — attention for AArch64 NEON: 6 x 4-vector register tile (24 accumulators
 * of 32), 16 queries per unit.  Self-contained: needs only h3_internal.h and libm. */
#include "simd_neon.h"
#define ATTN_MR 6
#define ATTN_NV 4
#define ATTN_BK 128
#include "attn_body.inc"
