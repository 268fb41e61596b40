/* nvfp4_ref.c — the NVFP4 linear's reference pieces (see nvfp4_impl.h for the format and
 * the arithmetic every path shares): the e4m3 and e2m1 decodes, the panel decoder (run by
 * every path: once per 16 weight rows, K block and block of activation rows, it costs
 * about 1/MC of the dots), the activation quantiser and the scalar micro-kernel. */
#include "nvfp4_impl.h"

#include <math.h>
#include <string.h>

const int8_t nvfp4_q_of_code[16] = {0, 1, 2, 3, 4, 6, 8, 12, 0, -1, -2, -3, -4, -6, -8, -12};

float nvfp4_e4m3(uint8_t b) {
    const int e = (b >> 3) & 15, m = b & 7;
    if ((b & 0x7f) == 0x7f) return NAN;
    /* subnormal: m/8 * 2^-6; normal: (1 + m/8) * 2^(e-7); exact in float */
    const float v = e ? ldexpf(1.0f + (float)m / 8.0f, e - 7) : ldexpf((float)m / 8.0f, -6);
    return (b & 0x80) ? -v : v;
}

void nvfp4_decode_ref(const nvfp4_row *rs, int nr, int64_t s0, int nseg, int8_t *q, float *sw, int32_t *corr) {
    for (int c = 0; c < NV_NR; c++) {
        for (int s = 0; s < nseg; s++) {
            int8_t *qs = q + (int64_t)s * 4 * NV_NR * 4 + c * 4;
            if (c >= nr) {
                for (int j = 0; j < 4; j++) memset(qs + j * NV_NR * 4, 0, 4);
                sw[s * NV_NR + c] = 0.0f;
                corr[s * NV_NR + c] = 0;
                continue;
            }
            const int64_t b = s0 + s;
            const uint8_t *p = rs[c].codes + b * (NV_SEG / 2);
            int32_t sum = 0;
            for (int i = 0; i < NV_SEG / 2; i++) { /* byte i: inputs 2i (high nibble), 2i + 1 */
                const int8_t hi = nvfp4_q_of_code[p[i] >> 4], lo = nvfp4_q_of_code[p[i] & 15];
                qs[(2 * i) / 4 * NV_NR * 4 + (2 * i) % 4] = hi;
                qs[(2 * i + 1) / 4 * NV_NR * 4 + (2 * i + 1) % 4] = lo;
                sum += hi + lo;
            }
            sw[s * NV_NR + c] = rs[c].lut[rs[c].scales[(b / 4) * 512 + b % 4]];
            corr[s * NV_NR + c] = 128 * sum;
        }
    }
}

void nvfp4_quant_act_row_ref(const float *x, const float *pre, int64_t K, uint8_t *a, float *d) {
    for (int64_t b = 0; b < K / NV_ACT; b++) {
        const float *xb = x + b * NV_ACT;
        const float *pb = pre ? pre + b * NV_ACT : NULL;
        float amax = 0.0f;
        for (int i = 0; i < NV_ACT; i++) amax = fmaxf(amax, fabsf(pb ? xb[i] * pb[i] : xb[i]));
        const float s = amax / 127.0f;
        d[b] = s;
        for (int i = 0; i < NV_ACT; i++) {
            const float v = pb ? xb[i] * pb[i] : xb[i];
            int r = s > 0.0f ? (int)nearbyintf(v / s) : 0;
            r = r > 127 ? 127 : (r < -127 ? -127 : r);
            a[b * NV_ACT + i] = (uint8_t)(r + 128);
        }
    }
}

void nvfp4_ukr_ref(int mr, int nseg, const uint8_t *a, int64_t lda, const float *d, int64_t ldd,
                   const int8_t *q, const float *sw, const int32_t *corr, float *cb) {
    for (int i = 0; i < mr; i++)
        for (int c = 0; c < NV_NR; c++) {
            float f = cb[i * NV_NR + c];
            for (int s = 0; s < nseg; s += 2) { /* the two segments of an activation block */
                float g = 0.0f;
                for (int t = s; t < s + 2; t++) {
                    int32_t dot = 0;
                    for (int k = 0; k < NV_SEG; k++)
                        dot += (int32_t)q[((t * 4 + k / 4) * NV_NR + c) * 4 + k % 4] * (int32_t)a[i * lda + t * NV_SEG + k];
                    dot -= corr[t * NV_NR + c];
                    g = t == s ? (float)dot * sw[t * NV_NR + c] : fmaf((float)dot, sw[t * NV_NR + c], g);
                }
                f = fmaf(d[i * ldd + s / 2], g, f);
            }
            cb[i * NV_NR + c] = f;
        }
}

nvfp4_decode_fn nvfp4_decode_for(h3_isa isa) {
    return h3_isa_x86_simd(isa) ? H3_ON_X86(nvfp4_decode_avx2) : nvfp4_decode_ref;
}

nvfp4_ukr_fn nvfp4_ukr_for(h3_isa isa) {
#if H3_X86
    const h3_isa v = h3_isa_vector(isa);
    if (v == H3_ISA_AVX512 && h3_cpu_has_avx512_vnni()) return nvfp4_ukr_avx512;
    if (h3_isa_x86_simd(isa)) return nvfp4_ukr_avx2;
#endif
#if H3_ARM64
    if (h3_isa_vector(isa) == H3_ISA_NEON) return nvfp4_ukr_neon;
#endif
    (void)isa;
    return nvfp4_ukr_ref;
}
