/* nvfp4_bf16_ref.c — the reference of the NVFP4 linear's bf16 route (nvfp4_impl.h): the
 * panel decoder to bf16 pairs, the activation rounding to the tile layout and the scalar
 * micro-kernel (float32 sums in k order), with the choice of each per path.  The AMX
 * route (nvfp4_amx.c) sums the same exact products in the tiles' order. */
#include "nvfp4_impl.h"

#include <math.h>
#include <string.h>

void nvfp4_bdecode_ref(const nvfp4_row *rs, int nr, int64_t k0, int nk, uint16_t *b) {
    for (int c = 0; c < NV_BNR; c++)
        for (int k = 0; k < nk; k++) {
            float v = 0.0f;
            if (c < nr) {
                const int64_t kk = k0 + k, s = kk / NV_SEG;
                const uint8_t byte = rs[c].codes[kk / 2];
                const float e2m1 = 0.5f * (float)nvfp4_q_of_code[kk % 2 ? byte & 15 : byte >> 4];
                v = e2m1 * nvfp4_e4m3(rs[c].scales[(s / 4) * 512 + s % 4]); /* exact */
            }
            b[(k / 2) * (NV_BNR * 2) + c * 2 + k % 2] = h3_f32_to_bf16(v);
        }
}

void nvfp4_bquant_row_ref(const float *x, const float *pre, int64_t K, uint16_t *dst) {
    for (int64_t k = 0; k < K; k++) {
        const float v = !x ? 0.0f : pre ? x[k] * pre[k] : x[k];
        dst[(k / 32) * 32 * 32 + k % 32] = h3_f32_to_bf16(v);
    }
}

void nvfp4_bukr_ref(int mr, int nk, const uint16_t *a, int64_t gs, const uint16_t *b, float s2, float *cb) {
    for (int i = 0; i < mr; i++) {
        const uint16_t *ar = a + (i / 32) * gs + (i % 32) * 32;
        for (int c = 0; c < NV_BNR; c++) {
            float s = 0.0f;
            for (int k = 0; k < nk; k++) /* bf16 x bf16: exact in float32 */
                s += h3_bf16_to_f32(ar[(k / 32) * 32 * 32 + k % 32]) *
                     h3_bf16_to_f32(b[(k / 2) * (NV_BNR * 2) + c * 2 + k % 2]);
            cb[i * NV_BNR + c] = fmaf(s2, s, cb[i * NV_BNR + c]);
        }
    }
}

nvfp4_bdecode_fn nvfp4_bdecode_for(h3_isa isa) {
    return H3_X86 && h3_isa_vector(isa) == H3_ISA_AVX512 ? H3_ON_X86(nvfp4_bdecode_avx512) : nvfp4_bdecode_ref;
}

/* VCVTNEPS2BF16 (AVX512-BF16): every AMX CPU has it, not every AVX-512 one */
nvfp4_bquant_fn nvfp4_bquant_for(h3_isa isa) {
    return H3_X86 && isa == H3_ISA_AMX ? H3_ON_X86(nvfp4_bquant_row_amx) : nvfp4_bquant_row_ref;
}

nvfp4_bukr_fn nvfp4_bukr_for(h3_isa isa) {
    return H3_X86 && isa == H3_ISA_AMX ? H3_ON_X86(nvfp4_bukr_amx) : nvfp4_bukr_ref;
}
