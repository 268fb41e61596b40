/* nvfp4_amx.c — the NVFP4 linear's bf16 route on AMX (nvfp4_impl.h): the activation rows
 * rounded to bf16 into the tile layout (VCVTNEPS2BF16: nearest even, as the reference),
 * and the micro-kernel: per group of 32 rows, a 32 x 32 block of four float32 tiles,
 * TDPBF16PS over the K block 32 inputs at a time (two A tiles from the group's chunk, two B
 * tiles from the decoded panel, as gemm_amx.c's bf16 kernel), then the block times scale_2
 * added to the panel's float rows.  Compiled for every x86 build, run only on H3_ISA_AMX. */
#include "nvfp4_impl.h"

#include <immintrin.h>

#include "amx_tiles.h"

_Static_assert(NV_BNR == 32, "amx_bf16_dots32 multiplies 32-column panels");

void nvfp4_bquant_row_amx(const float *x, const float *pre, int64_t K, uint16_t *dst) {
    for (int64_t k = 0; k < K; k += 32) {
        uint16_t *d = dst + (k / 32) * 32 * 32;
        if (!x) { _mm512_storeu_si512((void *)d, _mm512_setzero_si512()); continue; }
        __m512 v0 = _mm512_loadu_ps(x + k), v1 = _mm512_loadu_ps(x + k + 16);
        if (pre) { /* rounded to float first, as the reference */
            v0 = _mm512_mul_ps(v0, _mm512_loadu_ps(pre + k));
            v1 = _mm512_mul_ps(v1, _mm512_loadu_ps(pre + k + 16));
        }
        _mm256_storeu_si256((__m256i *)d, (__m256i)_mm512_cvtneps_pbh(v0));
        _mm256_storeu_si256((__m256i *)(d + 16), (__m256i)_mm512_cvtneps_pbh(v1));
    }
}

void nvfp4_bukr_amx(int mr, int nk, const uint16_t *a, int64_t gs, const uint16_t *b, float s2, float *cb) {
    float acc[32 * NV_BNR] __attribute__((aligned(64)));
    const __m512 sv = _mm512_set1_ps(s2);
    amx_config_tiles(); /* per call: the pool's threads may have run other tile code */
    for (int g = 0; g * 32 < mr; g++) {
        const uint16_t *ag = a + g * gs;
        amx_bf16_dots32(ag, 32, 16 * 32, 64, b, nk);
        amx_store_c32(acc);
        const int rows = mr - g * 32 < 32 ? mr - g * 32 : 32;
        for (int i = 0; i < rows; i++) {
            float *c = cb + (int64_t)(g * 32 + i) * NV_BNR;
            _mm512_storeu_ps(c, _mm512_fmadd_ps(sv, _mm512_load_ps(acc + i * NV_BNR), _mm512_loadu_ps(c)));
            _mm512_storeu_ps(c + 16, _mm512_fmadd_ps(sv, _mm512_load_ps(acc + i * NV_BNR + 16), _mm512_loadu_ps(c + 16)));
        }
    }
    _tile_release();
}
