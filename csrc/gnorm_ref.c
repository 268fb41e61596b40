/* gnorm_ref.c — scalar reference of the per-frame GroupNorm (+ SiLU) (see h3_video.h):
 * the executable spec and the oracle of the SIMD paths.  Sums in double; the apply is
 * float32 in torch's form x * a + b, separately rounded (-ffp-contract=off); libm's expf. */
#include "gnorm_impl.h"

#include <math.h>

static void sum_ref(const float *x, int64_t n, int64_t C, double *s, float *acc) {
    (void)acc;
    for (int64_t c = 0; c < C; c++) s[c] = 0.0;
    for (int64_t p = 0; p < n; p++)
        for (int64_t c = 0; c < C; c++) s[c] += x[p * C + c];
}

static void sqdev_ref(const float *x, int64_t n, int64_t C, const float *m, double *s, float *acc) {
    (void)acc;
    for (int64_t c = 0; c < C; c++) s[c] = 0.0;
    for (int64_t p = 0; p < n; p++)
        for (int64_t c = 0; c < C; c++) {
            double d = (double)x[p * C + c] - (double)m[c];
            s[c] += d * d;
        }
}

static void apply_ref(const float *x, float *y, int64_t n, int64_t C, const float *a, const float *b,
                      int silu) {
    for (int64_t p = 0; p < n; p++)
        for (int64_t c = 0; c < C; c++) {
            float v = x[p * C + c] * a[c] + b[c];
            if (silu) v = v / (1.0f + expf(-v));
            y[p * C + c] = v;
        }
}

const h3_gnorm_kernels h3_gnorm_ref = {H3_ISA_REF, sum_ref, sqdev_ref, apply_ref};
