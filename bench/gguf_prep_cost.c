/* gguf_prep_cost.c — what the amx path prepares per 16-row K block and kernel call, timed alone
 * on this CPU (CPU time, best of reps): the Q4_K/Q5_K kq route's old preparation (the panel
 * decoded with its float scales, then gguf_kq_scales in scalar C) against the new one (u alone,
 * gguf_kq_scales_avx512), and Q8_0's 16 x 16 float16 scales read by a scalar call each against
 * one gather + vcvtph2ps a segment (gguf_q8d_amx.c).  Per K block of 512 inputs; compare with the
 * kernel's own time per call (16 rows x 512 inputs x mc rows of x).  Needs AVX-512F.
 *
 *   gcc -O3 -std=c11 -D_GNU_SOURCE -ffp-contract=off -fno-math-errno -mavx2 -mfma -mf16c -mavx512f \
 *       -mavx512bw -mavx512vl -mavx512dq -Icsrc bench/gguf_prep_cost.c csrc/gguf_ref.c csrc/gguf_panel_ref.c \
 *       csrc/gguf_decode_avx2.c csrc/gguf_kq_scales_avx512.c csrc/convert.c -ffunction-sections -Wl,--gc-sections \
 *       -lm -o /tmp/gguf_prep_cost
 *   /tmp/gguf_prep_cost [reps=2000] */
#include "gguf_impl.h"

#include <immintrin.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

static double cpu_now(void) {
    struct timespec t;
    clock_gettime(CLOCK_PROCESS_CPUTIME_ID, &t);
    return t.tv_sec + t.tv_nsec * 1e-9;
}
static uint64_t rng = 88172645463325252ull;
static uint8_t rb(void) { rng ^= rng << 13; rng ^= rng >> 7; rng ^= rng << 17; return (uint8_t)rng; }
static volatile float sink;
/* what the linked library files call outside this measurement (never reached here) */
h3_status h3_fail(h3_err *e, h3_status s, const char *f, ...) { (void)e; (void)f; return s; }
h3_isa h3_isa_vector(h3_isa isa) { return isa; }

int main(int argc, char **argv) {
    const int reps = argc > 1 ? atoi(argv[1]) : 2000;
    static uint8_t u[GGUF_KB * GGUF_NR] __attribute__((aligned(64)));
    static float sc[2 * (GGUF_KB / GGUF_SUB) * GGUF_NR];
    uint8_t isc[16 * 16], imn[16 * 16];
    float ds[2 * 16], dm[2 * 16], s16[16 * 16] __attribute__((aligned(64)));
    for (int ti = 0; ti < 3; ti++) {
        const int t = ti == 0 ? H3_GGUF_Q4_K : ti == 1 ? H3_GGUF_Q5_K : H3_GGUF_Q8_0;
        int blk, bytes;
        h3_gguf_type_size(t, &blk, &bytes);
        const int64_t K = 5376, rowb = K / blk * bytes;
        uint8_t *w = malloc((size_t)(16 * rowb));
        for (int64_t i = 0; i < 16 * rowb; i++) w[i] = rb();
        for (int r = 0; r < 16; r++) /* finite float16 scales */
            for (int64_t b = 0; b < K / blk; b++) { w[r * rowb + b * bytes + 1] &= 0x3b; if (t != H3_GGUF_Q8_0) w[r * rowb + b * bytes + 3] &= 0x3b; }
        const uint8_t *rows[16];
        for (int r = 0; r < 16; r++) rows[r] = w + r * rowb;
        double best[2] = {1e9, 1e9};
        for (int pass = 0; pass < 5; pass++)
            for (int v = 0; v < 2; v++) {
                const double t0 = cpu_now();
                for (int i = 0; i < reps; i++) {
                    if (t == H3_GGUF_Q8_0) { /* 16 segments x 16 rows of scales */
                        if (v == 0) {
                            for (int s = 0; s < 16; s++)
                                for (int r = 0; r < 16; r++) {
                                    const uint8_t *p = w + r * rowb + s * 34;
                                    s16[s * 16 + r] = h3_f16_to_f32((uint16_t)(p[0] | p[1] << 8));
                                }
                        } else {
                            const __m512i ro = _mm512_mullo_epi32(_mm512_setr_epi32(0, 1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11, 12, 13, 14, 15),
                                                                  _mm512_set1_epi32((int)rowb));
                            for (int s = 0; s < 16; s++)
                                _mm512_store_ps(s16 + s * 16, _mm512_cvtph_ps(_mm512_cvtepi32_epi16(
                                                                  _mm512_i32gather_epi32(ro, (const void *)(w + s * 34), 1))));
                        }
                        sink = s16[i % 256];
                    } else if (v == 0) {
                        gguf_decode_panel_avx2(t, rows, 16, GGUF_KB, u, sc, sc + (GGUF_KB / GGUF_SUB) * GGUF_NR);
                        gguf_kq_scales(t, rows, 16, GGUF_KB, isc, imn, ds, dm);
                        sink = ds[i % 32] + u[i % 4096];
                    } else {
                        gguf_decode_panel_avx2(t, rows, 16, GGUF_KB, u, NULL, NULL);
                        gguf_kq_scales_avx512(t, rows, 16, GGUF_KB, isc, imn, ds, dm);
                        sink = ds[i % 32] + u[i % 4096];
                    }
                }
                const double dt = (cpu_now() - t0) / reps;
                if (dt < best[v]) best[v] = dt;
            }
        printf("%-5s per 16-row K block of 512: old %7.0f ns, new %7.0f ns (%.2fx)\n",
               t == H3_GGUF_Q8_0 ? "Q8_0" : t == H3_GGUF_Q4_K ? "Q4_K" : "Q5_K", best[0] * 1e9, best[1] * 1e9,
               best[0] / best[1]);
        free(w);
    }
    return 0;
}
