/* gguf_kq_kernel.c — gguf_ukr_amx_kq (csrc/gguf_kq_amx.c: Q4_K / Q5_K on AMX tiles) timed alone,
 * called as the panel driver calls it: 512-input K blocks outer, the pass's 4 panels inner
 * (gemm_gguf.c's group), M rows a call, the activations M x K bytes in place (lda = K), each
 * panel's own u, scales and mins; no decode, no threads.  Then the kernel against
 * gguf_ukr_kq_ref on one K block, bit for bit (exit 1 if they differ).
 *
 *   F="-O3 -std=c11 -D_GNU_SOURCE -ffp-contract=off -fno-math-errno -mavx2 -mfma -mf16c -mavx512f \
 *      -mavx512bw -mavx512vl -mavx512dq -mavx512vnni -mamx-tile -mamx-int8 -Icsrc"
 *   gcc $F bench/gguf_kq_kernel.c csrc/gguf_kq_amx.c csrc/gguf_panel_ref.c csrc/gguf_ref.c \
 *       csrc/convert.c -ffunction-sections -Wl,--gc-sections -lm -o /tmp/gguf_kq_kernel
 *   taskset -c 1 /tmp/gguf_kq_kernel [M=128] [K=5120] [reps=200]
 *
 * Prints, for the activations' rows in place (gguf_ukr_amx_kq) and in the kq route's 32-row tile
 * layout (gguf_ukr_amx_kq_tiles), ns a call (best of reps passes over K), ns a step (32 rows x one
 * 256-input super-block: 16 tile products, 4 tile stores, a 32-row fold) and the useful GOP/s
 * (2 M 16 K per panel); the strides of d and the sums are the driver's.
 * Session 33 timed copies of the kernel with one part taken out or changed against it
 * (bench/results/gguf_kq_ablation_spr2_s33.txt, docs/gguf.md). */
#include "gguf_impl.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/syscall.h>
#include <time.h>
#include <unistd.h>

h3_status h3_fail(h3_err *e, h3_status s, const char *f, ...) { (void)e; (void)f; return s; }
h3_isa h3_isa_vector(h3_isa isa) { return isa; }

static double now(void) {
    struct timespec t;
    clock_gettime(CLOCK_MONOTONIC, &t);
    return t.tv_sec + t.tv_nsec * 1e-9;
}
static uint64_t rng = 88172645463325252ull;
static uint32_t rb(void) { rng ^= rng << 13; rng ^= rng >> 7; rng ^= rng << 17; return (uint32_t)rng; }

enum { G = 4, KB = 512, NSB = KB / 256 };

int main(int argc, char **argv) {
    if (syscall(SYS_arch_prctl, 0x1023, 18)) { fprintf(stderr, "no AMX tile permission\n"); return 2; }
    const int M = argc > 1 ? atoi(argv[1]) : 128, K = argc > 2 ? atoi(argv[2]) : 5120;
    const int reps = argc > 3 ? atoi(argv[3]) : 200;
    if (M < 1 || K < KB || K % KB) { fprintf(stderr, "M >= 1, K a multiple of %d\n", KB); return 2; }
    int8_t *a = aligned_alloc(64, (size_t)M * K);
    /* the driver's strides (gemm_panel.c): d K / 32 floats a row, the sums per 16 then per 32 */
    const int64_t ldd = K / 32, ldas = K / 16 + K / 32;
    float *d = malloc(sizeof(float) * (size_t)M * ldd);
    int32_t *as = malloc(sizeof(int32_t) * (size_t)M * ldas);
    /* the activations also in the kq route's 32-row tile layout (gguf_ukr_amx_kq_tiles) */
    const int64_t ldt = 32 * (int64_t)K;
    int8_t *at = aligned_alloc(64, (size_t)((M + 31) / 32) * (size_t)ldt);
    for (int64_t i = 0; i < (int64_t)M * K; i++) a[i] = (int8_t)(rb() % 255 - 127);
    for (int64_t i = 0; i < (int64_t)M * ldd; i++) d[i] = 1e-3f * (float)(1 + i % 7);
    for (int64_t r = 0; r < M; r++) /* the true sums per 32, as the quantiser writes them */
        for (int s = 0; s < K / 32; s++) {
            int32_t t = 0;
            for (int k = 0; k < 32; k++) t += a[r * K + s * 32 + k];
            as[r * ldas + K / 16 + s] = t;
        }
    memset(at, 0, (size_t)((M + 31) / 32) * (size_t)ldt);
    for (int64_t r = 0; r < M; r++)
        for (int k = 0; k < K; k++) at[(r / 32) * ldt + (k / 64) * 2048 + (r % 32) * 64 + k % 64] = a[r * K + k];
    /* per panel: u (Q5_K's 0..31), 6-bit scales and mins, float d and -dmin */
    uint8_t *u = aligned_alloc(64, (size_t)G * KB * GGUF_NR);
    uint8_t isc[G][KB / 32 * GGUF_NR], imn[G][KB / 32 * GGUF_NR];
    float ds[G][NSB * GGUF_NR], dm[G][NSB * GGUF_NR];
    for (int i = 0; i < G * KB * GGUF_NR; i++) u[i] = rb() & 31;
    for (int p = 0; p < G; p++) {
        for (int i = 0; i < KB / 32 * GGUF_NR; i++) { isc[p][i] = rb() & 63; imn[p][i] = rb() & 63; }
        for (int i = 0; i < NSB * GGUF_NR; i++) { ds[p][i] = 1e-2f * (float)(1 + i % 5); dm[p][i] = -1e-2f; }
    }
    float *cb = aligned_alloc(64, sizeof(float) * (size_t)G * M * GGUF_NR);
    float *cr = malloc(sizeof(float) * (size_t)M * GGUF_NR);
    const int32_t *as32 = as + K / 16; /* the sums per 32 */
    int ok = 1;
    for (int tl = 0; tl < 2; tl++) { /* bits: one K block (the second) of panel 0, both layouts */
        memset(cb, 0, sizeof(float) * (size_t)M * GGUF_NR);
        memset(cr, 0, sizeof(float) * (size_t)M * GGUF_NR);
        if (tl) gguf_ukr_amx_kq_tiles(M, NSB, at + KB / 64 * 2048, ldt, d + KB / 256, ldd, as32 + KB / 32, ldas, u,
                                      isc[0], imn[0], ds[0], dm[0], cb);
        else gguf_ukr_amx_kq(M, NSB, a + KB, K, d + KB / 256, ldd, as32 + KB / 32, ldas, u, isc[0], imn[0], ds[0],
                             dm[0], cb);
        gguf_ukr_kq_ref(M, NSB, a + KB, K, d + KB / 256, ldd, as32 + KB / 32, ldas, u, isc[0], imn[0], ds[0], dm[0], cr);
        ok &= !memcmp(cb, cr, sizeof(float) * (size_t)M * GGUF_NR);
    }
    const double calls = (double)(K / KB) * G, steps = (double)((M + 31) / 32) * NSB;
    for (int tl = 0; tl < 2; tl++) {
        double best = 1e9;
        for (int r = 0; r < reps; r++) {
            const double t0 = now();
            for (int k0 = 0; k0 < K; k0 += KB)
                for (int p = 0; p < G; p++) {
                    float *c = cb + (size_t)p * M * GGUF_NR;
                    const uint8_t *up = u + (size_t)p * KB * GGUF_NR;
                    if (tl) gguf_ukr_amx_kq_tiles(M, NSB, at + k0 / 64 * 2048, ldt, d + k0 / 256, ldd, as32 + k0 / 32,
                                                  ldas, up, isc[p], imn[p], ds[p], dm[p], c);
                    else gguf_ukr_amx_kq(M, NSB, a + k0, K, d + k0 / 256, ldd, as32 + k0 / 32, ldas, up, isc[p],
                                         imn[p], ds[p], dm[p], c);
                }
            const double t = now() - t0;
            if (t < best) best = t;
        }
        printf("M %d K %d %-13s %6.0f ns a call, %5.1f ns a step, %5.0f useful GOP/s\n", M, K,
               tl ? "tile layout" : "rows in place", best / calls * 1e9, best / calls / steps * 1e9,
               2.0 * M * GGUF_NR * G * K / best * 1e-9);
    }
    printf("bits (both layouts against gguf_ukr_kq_ref): %s\n", ok ? "equal" : "DIFFER");
    return !ok;
}
