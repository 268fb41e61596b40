/* gemm_ref.c — scalar reference GEMM pieces: the executable spec of every SIMD kernel.
 * Plain loops; fmaf where the SIMD kernels fuse, so float paths agree closely and the
 * integer paths agree bit for bit (same segment order, exact int32 dots). */
#include "gemm_impl.h"

#include <math.h>
#include <string.h>

#define REF_MR 4
#define REF_NR 8

/* The real reference micro-kernel, generic in the panel strides. */
void gemm_ukr_f32_ref(int MR, int NR, int64_t kc, const float *ap, const float *bp, float *c,
                      int64_t ldc, int mr, int nr, int accumulate) {
    for (int i = 0; i < mr; i++) {
        for (int j = 0; j < nr; j++) {
            float acc = 0.0f;
            for (int64_t k = 0; k < kc; k++) acc = fmaf(ap[k * MR + i], bp[k * NR + j], acc);
            c[i * ldc + j] = accumulate ? c[i * ldc + j] + acc : acc;
        }
    }
}

void gemm_unpack_ref(int wtype, const void *w, int64_t ldw, int64_t n0, int64_t nc,
                     int64_t n_valid, int64_t k0, int64_t kc, float *out, int nr) {
    for (int64_t j = 0; j < nc; j++) {
        float *o = out + (j / nr) * kc * nr + (j % nr);
        int64_t n = n0 + j;
        if (n >= n_valid) {
            for (int64_t k = 0; k < kc; k++) o[k * nr] = 0.0f;
            continue;
        }
        for (int64_t k = 0; k < kc; k++) o[k * nr] = gemm_w_at(wtype, w, n * ldw + k0 + k);
    }
}

void gemm_gemv_ref(int wtype, int64_t M, int64_t K, const float *x, int64_t ldx,
                   const void *w, int64_t ldw, int64_t n0, int64_t n1, float *y, int64_t ldy) {
    for (int64_t m = 0; m < M; m++)
        for (int64_t n = n0; n < n1; n++) {
            float acc = 0.0f;
            for (int64_t k = 0; k < K; k++) acc = fmaf(x[m * ldx + k], gemm_w_at(wtype, w, n * ldw + k), acc);
            y[m * ldy + (n - n0)] = acc;
        }
}

/* Integer reference, generic in MR/NR (the packed layout's). */
static void ukr_int_ref(int is_i4, int MR, int NR, int nseg, int seg_q, const int8_t *ap,
                        const uint8_t *bp, const float *sa, const float *sw, int64_t sw_stride,
                        float *c, int64_t ldc, int mr, int nr, int accumulate) {
    for (int i = 0; i < mr; i++) {
        for (int j = 0; j < nr; j++) {
            float acc = 0.0f;
            for (int s = 0; s < nseg; s++) {
                int32_t dot = 0;
                for (int q = s * seg_q; q < (s + 1) * seg_q; q++) {
                    for (int t = 0; t < 4; t++) {
                        int wq;
                        if (is_i4) {
                            uint8_t byte = bp[((int64_t)(q / 2) * NR + j) * 4 + t];
                            wq = (int)((q & 1) ? (byte >> 4) : (byte & 15)) - 8;
                        } else {
                            wq = (int)bp[((int64_t)q * NR + j) * 4 + t] - 128;
                        }
                        dot += wq * (int32_t)ap[((int64_t)q * MR + i) * 4 + t];
                    }
                }
                acc = fmaf((float)dot, sa[s * MR + i] * sw[s * sw_stride + j], acc);
            }
            c[i * ldc + j] = accumulate ? c[i * ldc + j] + acc : acc;
        }
    }
}

void gemm_ukr_i8_ref(int MR, int NR, int nseg, int seg_q, const int8_t *ap, const uint8_t *bp,
                     const float *sa, const int32_t *asum, const float *sw, int64_t sw_stride,
                     float *c, int64_t ldc, int mr, int nr, int accumulate) {
    (void)asum;
    ukr_int_ref(0, MR, NR, nseg, seg_q, ap, bp, sa, sw, sw_stride, c, ldc, mr, nr, accumulate);
}
void gemm_ukr_i4_ref(int MR, int NR, int nseg, int seg_q, const int8_t *ap, const uint8_t *bp,
                     const float *sa, const int32_t *asum, const float *sw, int64_t sw_stride,
                     float *c, int64_t ldc, int mr, int nr, int accumulate) {
    (void)asum;
    ukr_int_ref(1, MR, NR, nseg, seg_q, ap, bp, sa, sw, sw_stride, c, ldc, mr, nr, accumulate);
}

/* The int kernel of `kind` (0 int8, 1 int4), then the tile's LoRA sum added to C: each
 * element one fma chain over lt's ranks from +0, as gemm_ukr_f32_ref runs it, so that C ends
 * as (C (+) base) + up product, the sum of the unfused driver (gemm_lora_add_ref, whose
 * narrower per-column rank range leaves out exact zero products: same values). */
void gemm_ukr_int_lora_ref(int kind, int MR, int NR, int nseg, int seg_q, const int8_t *ap, const uint8_t *bp,
                           const float *sa, const int32_t *asum, const float *sw, int64_t sw_stride, float *c,
                           int64_t ldc, int mr, int nr, int accumulate, const gemm_lora_tile *lt) {
    (void)asum;
    ukr_int_ref(kind != 0, MR, NR, nseg, seg_q, ap, bp, sa, sw, sw_stride, c, ldc, mr, nr, accumulate);
    if (!lt) return;
    const float *u = (const float *)lt->u;
    for (int i = 0; i < mr; i++)
        for (int j = 0; j < nr; j++) {
            float acc = 0.0f;
            for (int64_t k = 0; k < lt->kc; k++) acc = fmaf(u[i * lt->ldu + k], lt->b[k * NR + j], acc);
            c[i * ldc + j] += acc;
        }
}

void gemm_quant_row_ref(const float *x, int64_t K, int64_t Kp, int64_t ag, int8_t *q,
                        float *scales) {
    int64_t ng = H3_CEIL_DIV(Kp, ag);
    for (int64_t g = 0; g < ng; g++) {
        int64_t k0 = g * ag, k1 = H3_MIN(k0 + ag, K);
        float amax = 0.0f;
        int bad = 0;
        for (int64_t k = k0; k < k1; k++) {
            float a = fabsf(x[k]);
            if (!(a < INFINITY)) bad = 1;
            amax = fmaxf(amax, a);
        }
        int64_t kend = H3_MIN(k0 + ag, Kp);
        if (bad || !(amax > 0.0f)) {
            /* all-zero groups quantise to zeros with scale 0; a NaN/Inf input gives scale
             * NaN, so that every output of the row becomes NaN instead of silently
             * dropping the bad value */
            for (int64_t k = k0; k < kend; k++) q[k] = 0;
            scales[g] = bad ? NAN : 0.0f;
            continue;
        }
        float inv = 127.0f / amax;
        for (int64_t k = k0; k < kend; k++) {
            float v = k < K ? rintf(x[k] * inv) : 0.0f;
            v = fminf(127.0f, fmaxf(-127.0f, v));
            q[k] = (int8_t)v;
        }
        scales[g] = amax / 127.0f;
    }
}

/* 2^n for integral-valued n in [-126, 127], built from the exponent bits (as h3v_pow2n). */
static float pow2n_lane(float n) {
    uint32_t u = (uint32_t)((int32_t)n + 127) << 23;
    float f;
    memcpy(&f, &u, 4);
    return f;
}

/* h3v_exp (simd_math.inc) one lane at a time: the same operations in the same order, fmaf
 * where the vector code fuses (this file is built with -ffp-contract=off), so the SwiGLU
 * epilogue below gives the SIMD paths' bits exactly. */
static float exp_lane(float x) {
    float xc = fminf(fmaxf(x, -87.3365479f), 88.7228394f);
    float n = rintf(xc * 1.44269504088896341f);
    float r = fmaf(n, -0.693359375f, xc);
    r = fmaf(n, 2.12194440e-4f, r);
    float p = 1.9875691500e-4f;
    p = fmaf(p, r, 1.3981999507e-3f);
    p = fmaf(p, r, 8.3334519073e-3f);
    p = fmaf(p, r, 4.1665795894e-2f);
    p = fmaf(p, r, 1.6666665459e-1f);
    p = fmaf(p, r, 5.0000001201e-1f);
    float r2 = r * r;
    p = fmaf(p, r2, r + 1.0f);
    float n1 = rintf(n * 0.5f), n2 = n - n1;
    return (p * pow2n_lane(n1)) * pow2n_lane(n2);
}

void gemm_swiglu_row_ref(float *g, const float *v, int64_t n, const float *bg, const float *bv) {
    for (int64_t j = 0; j < n; j++) {
        float gg = bg ? g[j] + bg[j] : g[j];
        float vv = bv ? v[j] + bv[j] : v[j];
        g[j] = gg / (1.0f + exp_lane(0.0f - gg)) * vv;
    }
}

const gemm_kernels gemm_kernels_ref = {
    .mr = REF_MR, .nr = REF_NR, .kc = 256, .mc = 64, .nc = 256, .gemv_max_m = 0,
    .ukr_f32 = gemm_ukr_f32_ref, .unpack = gemm_unpack_ref, .gemv = gemm_gemv_ref,
    .ukr_i8 = gemm_ukr_i8_ref, .ukr_i4 = gemm_ukr_i4_ref, .quant_row = gemm_quant_row_ref,
    .swiglu_row = gemm_swiglu_row_ref,
    /* the fused LoRA store, used only when a LoRA asks for it (h3_lora_set_fused): the
     * executable spec of the AMX one, and the driver's fused path testable on any CPU */
    .ukr_int_lora = gemm_ukr_int_lora_ref,
};
