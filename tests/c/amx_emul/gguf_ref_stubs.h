/* tests/c/amx_emul/gguf_ref_stubs.h — what csrc/gguf_panel_ref.c links against beyond the
 * emulated kernels' scope, for tests/c/test_gguf_amx_emul.c: stubs that abort (never reached
 * there), a scalar gguf_panel_signed_avx2 and f16 -> f32. */
#ifndef GGUF_REF_STUBS_H
#define GGUF_REF_STUBS_H

#include <math.h>
#include <stdlib.h>

void gguf_decode_block(int type, const uint8_t *p, int8_t *q, float *sc, float *mn) { abort(); }
void gguf_decode_scales(int type, const uint8_t *p, float *sc, float *mn) { abort(); }
int h3_gguf_type_size(int type, int *blk, int *bytes) { abort(); }
h3_isa h3_isa_vector(h3_isa isa) { return isa; }
int h3_cpu_has_avx512_vnni(void) { return 1; }
void gguf_quant_act_row_avx2(const float *x, int64_t K, int8_t *a, float *d, int32_t *as) { abort(); }
void gguf_quant_act_row_avx2u(const float *x, int64_t K, int8_t *a, float *d, int32_t *as) { abort(); }
void gguf_ukr_avx512(int mr, const gguf_kind *t, int nseg, const int8_t *a, int64_t lda, const float *d,
                     int64_t ldd, const int32_t *as, int64_t ldas, const uint8_t *u, const float *sc,
                     const float *mn, float *cb) {
    abort();
}
/* gguf_panel_signed_avx2 (gguf_decode_avx2.c, AVX2) in scalar C: the emulated kernel calls it */
void gguf_panel_signed_avx2(const gguf_kind *t, int nseg, const uint8_t *u, int8_t *w, int32_t *start) {
    for (int s = 0; s < nseg; s++)
        for (int c = 0; c < 16; c++) {
            int32_t sum = 0;
            for (int k = 0; k < t->seg; k++) {
                const int64_t i = ((int64_t)(s * t->seg + k) / 4 * 16 + c) * 4 + k % 4;
                w[i] = (int8_t)(uint8_t)(u[i] - t->off);
                sum += w[i];
            }
            if (start) start[s * 16 + c] = -128 * sum;
        }
}
void gguf_decode_panel_avx2(int type, const uint8_t *const *rows, int nr, int nk, uint8_t *u, float *sc, float *mn) {
    abort();
}
void gguf_decode_panel_avx512(int type, const uint8_t *const *rows, int nr, int nk, uint8_t *u, float *sc, float *mn) {
    abort();
}
void gguf_ukr_avx2(int mr, const gguf_kind *t, int nseg, const int8_t *a, int64_t lda, const float *d, int64_t ldd,
                   const int32_t *as, int64_t ldas, const uint8_t *u, const float *sc, const float *mn, float *cb) {
    abort();
}
void gguf_ukr_avxvnni(int mr, const gguf_kind *t, int nseg, const int8_t *a, int64_t lda, const float *d,
                      int64_t ldd, const int32_t *as, int64_t ldas, const uint8_t *u, const float *sc,
                      const float *mn, float *cb) {
    abort();
}
/* binary16 -> float (subnormals, inf and NaN included) */
float h3_f16_to_f32(uint16_t h) {
    const int e = h >> 10 & 31, m = h & 1023;
    const float v = e == 0 ? ldexpf((float)m, -24) : e == 31 ? (m ? NAN : INFINITY) : ldexpf((float)(m | 1024), e - 25);
    return h >> 15 ? -v : v;
}

#endif
