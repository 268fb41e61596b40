/* amx_tile_rates.c — what AMX tile instructions cost on this CPU, one thread: the measured side
 * of the bound on an exact GGUF GEMM on AMX (docs/gguf.md, "The AMX tile kernel").
 *
 *   gcc -O2 -mamx-tile -mamx-int8 bench/amx_tile_rates.c -o /tmp/amx_tile_rates && /tmp/amx_tile_rates
 *
 * A GGUF weight's scale changes every 32 (or 16) inputs, and the reference's float order folds
 * each segment's exact int32 dot into the float sums on its own, so a tile kernel must take each
 * 16 x 16 dot tile out (TILESTORED, 1 KB) once per 16 x 16 x SEG multiply-adds.  h3cy's int8
 * mode keeps its C tiles for the whole K.  Each line times (CLOCK_MONOTONIC, best of 5) a loop of
 * steps over 4 C tiles in rotation, A and B tiles from L1, and prints ns a step and GOP/s
 * (2 x 16 x 16 x K a step):
 *   dots K         zero + tdpbssd (K = 64: int8's regime; 32, 16: a GGUF segment)
 *   + store        ... and the C tile of 2 steps before stored (what any exact kernel adds)
 *   + loads        ... and A, B loaded per step (tileloadd from L1)
 *   store only     tilestored of a C tile, nothing else
 * "+ loads" at K = SEG bounds an exact GGUF kernel with one store per segment (before its float
 * fold, which runs on the vector ports). */
#define _GNU_SOURCE
#include <immintrin.h>
#include <stdint.h>
#include <stdio.h>
#include <string.h>
#include <sys/syscall.h>
#include <time.h>
#include <unistd.h>

#include "amx_bench.h"

static int8_t A[16 * 64] __attribute__((aligned(64))), B[16 * 64] __attribute__((aligned(64)));
static int32_t C[4][256] __attribute__((aligned(64)));

#define STEP_DOT(k, a, b) _tile_zero(k); _tile_dpbssd(k, a, b);
#define STEP_LD(a, b) _tile_loadd(a, A, 64); _tile_loadd(b, B, 64);
#define STORE(k) _tile_stored(k, C[k], 64);
#define N 200000 /* steps a timing (multiple of 4) */

enum { DOTS, STORE_, LOADS, STORE_ONLY };

static double run(int mode) {
    const double t0 = now();
    for (int i = 0; i < N; i += 4) {
        switch (mode) {
        case DOTS:
            STEP_DOT(0, 4, 6) STEP_DOT(1, 5, 7) STEP_DOT(2, 4, 6) STEP_DOT(3, 5, 7)
            break;
        case STORE_:
            STEP_DOT(0, 4, 6) STORE(2) STEP_DOT(1, 5, 7) STORE(3) STEP_DOT(2, 4, 6) STORE(0) STEP_DOT(3, 5, 7) STORE(1)
            break;
        case LOADS:
            STEP_LD(4, 6) STEP_DOT(0, 4, 6) STORE(2) STEP_LD(5, 7) STEP_DOT(1, 5, 7) STORE(3)
            STEP_LD(4, 6) STEP_DOT(2, 4, 6) STORE(0) STEP_LD(5, 7) STEP_DOT(3, 5, 7) STORE(1)
            break;
        default:
            STORE(0) STORE(1) STORE(2) STORE(3)
        }
        __asm__ volatile("" ::: "memory");
    }
    return (now() - t0) / N;
}

int main(void) {
    if (syscall(SYS_arch_prctl, 0x1023, 18)) { fprintf(stderr, "no AMX tile permission\n"); return 2; }
    memset(A, 1, sizeof A); memset(B, 1, sizeof B);
    static const char *names[] = {"dots", "+ store", "+ loads", "store only"};
    for (int k = 64; k >= 16; k /= 2) {
        config(k);
        _tile_loadd(4, A, 64); _tile_loadd(5, A, 64); _tile_loadd(6, B, 64); _tile_loadd(7, B, 64);
        for (int m = 0; m < 4; m++) {
            if (m == STORE_ONLY && k != 64) continue;
            double best = 1e9;
            for (int r = 0; r < 5; r++) { const double t = run(m); if (t < best) best = t; }
            printf("K %2d  %-10s  %6.2f ns a step  %7.1f GOP/s\n", k, names[m], best * 1e9,
                   m == STORE_ONLY ? 0.0 : 2.0 * 16 * 16 * k / best * 1e-9);
        }
    }
    _tile_release();
    return 0;
}
