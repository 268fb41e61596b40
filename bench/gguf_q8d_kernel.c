/* gguf_q8d_kernel.c — gguf_ukr_amx_q8d (csrc/gguf_q8d_amx.c) timed alone, called as the panel
 * driver calls it (gemm_panel.c: per row block of mc rows and group of 4 panels, K blocks outer),
 * against bench/amx_q8_fold.c's floor for one 16 x 16 x 32 step, beside the same file built
 * with -DQ8D_ANY_ONLY (the run-time walk for every K block, as before session 31's unrolled
 * units of 8 segments) under another name.  (Session 30 built it with the activations' tile
 * prefetched 2, 4 or 8 steps ahead: no change beyond the host's noise,
 * bench/results/amx_q8_fold_spr16_s30.txt; the switch is not kept.)
 *
 *   F="-O3 -std=c11 -D_GNU_SOURCE -ffp-contract=off -fno-math-errno -mavx2 -mfma -mf16c -mavx512f \
 *      -mavx512bw -mavx512vl -mavx512dq -mamx-tile -mamx-int8 -Icsrc"
 *   gcc $F -DQ8D_ANY_ONLY -Dgguf_ukr_amx_q8d=gguf_ukr_amx_q8d_any -c csrc/gguf_q8d_amx.c -o /tmp/q8d_any.o
 *   gcc $F bench/gguf_q8d_kernel.c csrc/gguf_q8d_amx.c /tmp/q8d_any.o csrc/gguf_panel_ref.c \
 *       csrc/gguf_ref.c csrc/convert.c -ffunction-sections -Wl,--gc-sections -lm -o /tmp/gguf_q8d_kernel
 *   taskset -c 3 /tmp/gguf_q8d_kernel [M=768] [K=5376] [groups=16] [rounds=3]
 *
 * Lines: ns per step (best of 5 timings, each round in turn) for
 *   hot    one panel group's K blocks in turn, the same 4 panels every pass (weights in L1/L2)
 *   cold   a new panel group every pass (weights from memory, as the driver walks its share)
 * for the run-time walk ("any", before session 31) and the unrolled units ("units"), and each
 * walk's results against gguf_ukr_q8d_ref (bits) once.  (Session 31 also ran a form that took
 * the driver's 4 panels of a pass in one call, row tile outer, so that each row tile's
 * activations came from L1 for 3 of them: 0.94-1.0x in the driver on 16 cores, not kept.) */
#include "gguf_impl.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/syscall.h>
#include <time.h>
#include <unistd.h>

h3_status h3_fail(h3_err *e, h3_status s, const char *f, ...) { (void)e; (void)f; return s; }
h3_isa h3_isa_vector(h3_isa isa) { return isa; }
void gguf_ukr_amx_q8d_any(int mr, int nseg, const uint8_t *w, int64_t ldw, const int8_t *a, int64_t ldg,
                          const float *d, int64_t ldd, float *cbt, int64_t ldc);

static double now(void) {
    struct timespec t;
    clock_gettime(CLOCK_MONOTONIC, &t);
    return t.tv_sec + t.tv_nsec * 1e-9;
}
static uint64_t rng = 88172645463325252ull;
static uint8_t rb(void) { rng ^= rng << 13; rng ^= rng >> 7; rng ^= rng << 17; return (uint8_t)rng; }

int main(int argc, char **argv) {
    if (syscall(SYS_arch_prctl, 0x1023, 18)) { fprintf(stderr, "no AMX tile permission\n"); return 2; }
    const int M = argc > 1 ? atoi(argv[1]) : 768, K = argc > 2 ? atoi(argv[2]) : 5376;
    const int ngroups = argc > 3 ? atoi(argv[3]) : 16, rounds = argc > 4 ? atoi(argv[4]) : 3, G = 4,
              tiles = (M + 15) / 16;
    const int64_t ldw = K / 32 * 34, ldg = 16 * (int64_t)K;
    const int64_t wbytes = (int64_t)ngroups * G * 16 * ldw;
    uint8_t *w = aligned_alloc(64, (size_t)(wbytes + 64));
    int8_t *a = aligned_alloc(64, (size_t)(tiles * ldg));
    float *d = malloc(sizeof(float) * (size_t)tiles * 16 * (K / GGUF_AG));
    float *cb = aligned_alloc(64, sizeof(float) * (size_t)G * 16 * tiles * 16), *cr = malloc(sizeof(float) * (size_t)G * 16 * tiles * 16);
    for (int64_t i = 0; i < wbytes; i++) w[i] = rb();
    for (int64_t r = 0; r < wbytes / ldw; r++) /* finite float16 scales */
        for (int b = 0; b < K / 32; b++) w[r * ldw + b * 34 + 1] &= 0x1b;
    for (int64_t i = 0; i < tiles * ldg; i++) a[i] = (int8_t)(rb() & 0x7f) - 64;
    for (int64_t i = 0; i < (int64_t)tiles * 16 * (K / GGUF_AG); i++) d[i] = 1e-3f * (float)(1 + i % 7);
    const int ldd = K / GGUF_AG, ldc = tiles * 16;
    static const struct { const char *name; gguf_ukr_q8d_fn k; } ks[] = {{"any", gguf_ukr_amx_q8d_any},
                                                                          {"units", gguf_ukr_amx_q8d}};
    int bits = 1;
    for (int v = 0; v < 2; v++) { /* bits: one K block of panel 0 */
        memset(cb, 0, sizeof(float) * 16 * ldc);
        memset(cr, 0, sizeof(float) * 16 * ldc);
        ks[v].k(M, GGUF_KB / 32, w, ldw, a, ldg, d, ldd, cb, ldc);
        gguf_ukr_q8d_ref(M, GGUF_KB / 32, w, ldw, a, ldg, d, ldd, cr, ldc);
        const int ok = !memcmp(cb, cr, sizeof(float) * 16 * ldc);
        printf("# M %d, K %d: %s bits %s\n", M, K, ks[v].name, ok ? "ok" : "DIFFER");
        bits &= ok;
    }
    const double steps = (double)tiles * (K / 32) * G;
    for (int round = 0; round < rounds; round++)
        for (int mode = 0; mode < 4; mode++) { /* each walk hot and cold */
            const int kv = mode / 2;
            double best = 1e9;
            for (int r = 0; r < 5; r++) {
                const int passes = 8;
                const double t0 = now();
                for (int pass = 0; pass < passes; pass++) {
                    const uint8_t *wg = w + (mode % 2 ? pass % ngroups : 0) * G * 16 * ldw;
                    for (int k0 = 0; k0 < K; k0 += GGUF_KB) {
                        const int nk = K - k0 < GGUF_KB ? K - k0 : GGUF_KB;
                        for (int p = 0; p < G; p++)
                            ks[kv].k(M, nk / 32, wg + p * 16 * ldw + k0 / 32 * 34, ldw, a + k0 * 16, ldg,
                                     d + k0 / GGUF_AG, ldd, cb + (int64_t)p * 16 * ldc, ldc);
                    }
                }
                const double t = (now() - t0) / passes / steps;
                if (t < best) best = t;
            }
            printf("round %d %-5s %-4s %6.2f ns a step  %7.1f GOP/s\n", round, ks[kv].name, mode % 2 ? "cold" : "hot",
                   best * 1e9, 2.0 * 8192 / best * 1e-9);
        }
    return !bits;
}
