/* loop.c — host-side pieces of the denoising loop (see h3_loop.h).  Plain scalar loops:
 * they move a few MB per step against a transformer evaluation of seconds, and being the
 * reference they round exactly as numpy does (no contraction, -ffp-contract=off). */
#include "h3_loop.h"
#include "h3_internal.h"

#include <string.h>
#include <time.h>

void h3_patchify(const float *lat, int64_t C, int64_t T, int64_t h, int64_t w, float *rows) {
    const int64_t ph = h / 2, pw = w / 2, cols = 4 * C;
    for (int64_t f = 0; f < T; f++)
        for (int64_t py = 0; py < ph; py++)
            for (int64_t px = 0; px < pw; px++) {
                float *r = rows + ((f * ph + py) * pw + px) * cols;
                for (int64_t c = 0; c < C; c++) {
                    const float *src = lat + ((c * T + f) * h + 2 * py) * w + 2 * px;
                    r[c * 4 + 0] = src[0];
                    r[c * 4 + 1] = src[1];
                    r[c * 4 + 2] = src[w];
                    r[c * 4 + 3] = src[w + 1];
                }
            }
}

void h3_unpatchify(const float *rows, int64_t C, int64_t T, int64_t h, int64_t w, float *lat) {
    const int64_t ph = h / 2, pw = w / 2, cols = 4 * C;
    for (int64_t f = 0; f < T; f++)
        for (int64_t py = 0; py < ph; py++)
            for (int64_t px = 0; px < pw; px++) {
                const float *r = rows + ((f * ph + py) * pw + px) * cols;
                for (int64_t c = 0; c < C; c++) {
                    float *dst = lat + ((c * T + f) * h + 2 * py) * w + 2 * px;
                    dst[0] = r[c * 4 + 0];
                    dst[1] = r[c * 4 + 1];
                    dst[w] = r[c * 4 + 2];
                    dst[w + 1] = r[c * 4 + 3];
                }
            }
}

void h3_pack_audio(const float *lat, int64_t ch, int64_t Ca, int64_t A, float *rows) {
    for (int64_t k = 0; k < ch; k++)
        for (int64_t c = 0; c < Ca; c++)
            for (int64_t j = 0; j < A; j++)
                rows[(k * A + j) * Ca + c] = lat[(k * Ca + c) * A + j];
}

void h3_unpack_audio(const float *rows, int64_t ch, int64_t Ca, int64_t A, float *lat) {
    for (int64_t k = 0; k < ch; k++)
        for (int64_t c = 0; c < Ca; c++)
            for (int64_t j = 0; j < A; j++)
                lat[(k * Ca + c) * A + j] = rows[(k * A + j) * Ca + c];
}

void h3_euler_update(float *x, const float *v, float *x0, int64_t outer, int64_t frames,
                     int64_t inner, const float *t, const float *sigma, const float *sigma_next) {
    for (int64_t f = 0; f < frames; f++) {
        const float sft = 1.0f - t[f];
        const float r = sigma_next[f] / sigma[f];
        const float one_r = 1.0f - r;
        for (int64_t o = 0; o < outer; o++) {
            const int64_t base = (o * frames + f) * inner;
            float *xr = x + base, *x0r = x0 + base;
            const float *vr = v + base;
            for (int64_t k = 0; k < inner; k++) {
                const float dv = sft * vr[k];
                const float e = xr[k] + dv;
                const float a = r * xr[k];
                const float b = one_r * e;
                x0r[k] = e;
                xr[k] = a + b;
            }
        }
    }
}

void h3_extrapolate(const float *last, const float *prev, float r, float *out, int64_t n) {
    for (int64_t i = 0; i < n; i++) {
        const float d = last[i] - prev[i];
        const float s = r * d;
        out[i] = last[i] + s;
    }
}

void h3_modulate_rows(float *x, const float *s1p, const float *shift, const int32_t *rows,
                      int64_t n_rows, int64_t n, int round_bf16) {
    for (int64_t i = 0; i < n_rows; i++) {
        float *xr = x + i * n;
        const float *s1 = s1p + (int64_t)rows[i] * n, *sh = shift + (int64_t)rows[i] * n;
        if (round_bf16) {
            for (int64_t j = 0; j < n; j++) {
                const float m = h3_round_to_bf16(xr[j] * s1[j]);
                xr[j] = h3_round_to_bf16(m + sh[j]);
            }
        } else {
            for (int64_t j = 0; j < n; j++) {
                const float m = xr[j] * s1[j];
                xr[j] = m + sh[j];
            }
        }
    }
}

double h3_monotonic(void) {
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec + (double)ts.tv_nsec * 1e-9;
}
