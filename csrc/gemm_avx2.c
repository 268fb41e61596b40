/* gemm_avx2.c — GEMM micro-kernels for the avx2 path.
 * Not written yet: every member is NULL, so the driver runs the reference kernels with
 * this table's panel layout (correct, slow).  Compiled only with this ISA's flags. */
#include "gemm_impl.h"

const gemm_kernels gemm_kernels_avx2 = {
    .mr = 4, .nr = 8, .kc = 256, .mc = 64, .nc = 256, .mc_int = 64,
    .gemv_max_m = 0,
};
