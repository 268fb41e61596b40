/* gemm_avxvnni.c — the int8/int4 micro-kernels of the avxvnni path: VEX-encoded
 * vpdpbusd on ymm (AVX-VNNI, CPUID.(7,1):EAX[4]), for CPUs that have it without AVX-512
 * (Intel Alder Lake and later client cores).  Four u8 x s8 products go straight into each
 * int32 lane, so the dot needs none of the avx2 path's sign fix-up or vpmaddwd: one
 * instruction per 32 multiply-adds instead of four.  The weights are read as stored
 * (q + 128 for int8, nibbles q + 8 for int4) and the offset is removed exactly through the
 * rows' activation sums; the body is gemm_int_avx2.inc's, the table gemm_avx2.c's.
 * Compiled only with -mavx2 -mfma -mf16c -mavxvnni. */
#include "gemm_impl.h"

#include <immintrin.h>
#include <string.h>

#define NR 16
#define H3_DPBUSD(acc, u, s) _mm256_dpbusd_avx_epi32((acc), (u), (s))
#include "gemm_int_avx2.inc"

/* int8: all 6 rows in one block (12 accumulators + 2 weight vectors + 1 broadcast fit
 * the 16 ymm registers); int4 keeps 3-row blocks (its nibble unpacking needs 4 more). */
DEFINE_INT_UKR(gemm_ukr_i8_avxvnni, INT_I8, 1, 6, gemm_ukr_i8_ref)
DEFINE_INT_UKR(gemm_ukr_i4_avxvnni, INT_I4, 1, 3, gemm_ukr_i4_ref)
