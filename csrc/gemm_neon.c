/* gemm_neon.c — GEMM micro-kernels for AArch64 Advanced SIMD.
 * Not written yet: every member is NULL, so the driver runs the reference kernels with
 * this table's panel layout (correct, slow). */
#include "gemm_impl.h"

#if H3_ARM64
const gemm_kernels gemm_kernels_neon = {
    .mr = 4, .nr = 8, .kc = 256, .mc = 64, .nc = 256, .mc_int = 64,
    .gemv_max_m = 0,
};
#endif
