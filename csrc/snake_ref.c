/* snake_ref.c — scalar reference of the anti-aliased SnakeBeta (see h3_audio.h): the
 * executable spec and the oracle of the SIMD paths.  float32 in torch's operation order,
 * separately rounded (-ffp-contract=off); libm's sinf. */
#include "snake_impl.h"

#include <math.h>

static inline int64_t clampi(int64_t i, int64_t lo, int64_t hi) {
    return i < lo ? lo : (i > hi ? hi : i);
}

/* u[n] of one channel (x strided by C), n in [0, 2T) */
static float up_ref(const float *x, int64_t C, int64_t T, int64_t n, const h3_snake_consts *k) {
    const int64_t q = n >> 1;
    const int odd = (int)(n & 1);
    const float *f = odd ? k->fo : k->fe;
    const int64_t base = odd ? q - 2 : q - 3;
    float acc = 0.0f;
    for (int s = 0; s < 6; s++) acc += x[clampi(base + s, 0, T - 1) * C] * f[s];
    return acc;
}

static void tile_ref(const float *x, float *y, int64_t T, int64_t C, int64_t c0, int nc,
                     int64_t t0, int64_t t1, const h3_snake_consts *k, float *v) {
    const int64_t nA = 2 * t0 - 5, nv = 2 * (t1 - t0) + 10;
    for (int c = 0; c < nc; c++) {
        const int64_t ch = c0 + c;
        const float a = k->a[ch], ib = k->ib[ch];
        /* v over the window the tile's outputs read, replicate-padded at 0 and 2T-1 */
        for (int64_t i = 0; i < nv; i++) {
            float u = up_ref(x + ch, C, T, clampi(nA + i, 0, 2 * T - 1), k);
            float s = sinf(a * u);
            v[i] = u + ib * (s * s);
        }
        for (int64_t t = t0; t < t1; t++) {
            const float *vw = v + 2 * (t - t0);
            float acc = 0.0f;
            for (int j = 0; j < H3_SNAKE_TAPS; j++) acc += vw[j] * k->fd[j];
            y[t * C + ch] = acc;
        }
    }
}

const h3_snake_kernels h3_snake_ref = {H3_ISA_REF, tile_ref};
