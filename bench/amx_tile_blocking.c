/* amx_tile_blocking.c — the tile side of AMX GEMM kernels, one thread, operands in L1: how fast
 * each blocking runs its tile loads, products and stores when nothing else runs.  The measured
 * ceilings behind the AMX lines of docs/gguf.md (session 27): a kernel cannot beat its tile
 * side, and an int8 kernel of h3cy's blocking runs near its own.
 *
 *   gcc -O2 -mamx-tile -mamx-int8 bench/amx_tile_blocking.c -o /tmp/amx_tile_blocking
 *   /tmp/amx_tile_blocking            (or taskset -c N ...; several at once for the all-core rate)
 *
 * Each line: ns per step (best of 7 timings of 100k steps) and the useful GOP/s, 2 x the exact
 * multiply-adds a step contributes to the result:
 *   int8 2x2 K64   A0 A1 (16 x 64) B0 B1 (16 quads x 64) loaded, 4 TDPBSSD accumulating
 *                  (h3cy int8 / int4: gemm_amx.c; C stays in tiles for the whole K)
 *   kq 2x2 K64     the same, 2 of the 4 products useful (the K-quants' scales ride in B as
 *                  two bytes, gguf_kq_amx.c); every 4th step the 4 C tiles stored and zeroed
 *   seg 1x1 K32    A (16 x 32), B (8 quads) loaded, zero + TDPBSSD, the C tile of 2 steps
 *                  before stored (the per-segment kernel, gguf_amx.c: Q8_0 and the 32-value types)
 *   seg 2x1 K32    A0 A1, one B, 2 products, the other C pair stored (32 rows a step)
 *   seg 2x2 K32    A0 A1 B0 B1, 4 products into all 4 C tiles, stored before the next step
 *                  (ggml's AMX blocking: 32 rows x 32 columns a step) */
#define _GNU_SOURCE
#include <immintrin.h>
#include <stdint.h>
#include <stdio.h>
#include <string.h>
#include <sys/syscall.h>
#include <time.h>
#include <unistd.h>

#include "amx_bench.h"

static int8_t A[2][16 * 64] __attribute__((aligned(64))), B[2][16 * 64] __attribute__((aligned(64)));
static int32_t C[4][256] __attribute__((aligned(64)));

#define N 100000 /* steps a timing (a multiple of 4) */
#define FENCE() __asm__ volatile("" ::: "memory")
#define LD4() _tile_loadd(4, A[0], 64); _tile_loadd(5, A[1], 64); _tile_loadd(6, B[0], 64); _tile_loadd(7, B[1], 64);
#define DOT4() _tile_dpbssd(0, 4, 6); _tile_dpbssd(1, 4, 7); _tile_dpbssd(2, 5, 6); _tile_dpbssd(3, 5, 7);
#define ST4() _tile_stored(0, C[0], 64); _tile_stored(1, C[1], 64); _tile_stored(2, C[2], 64); _tile_stored(3, C[3], 64);
#define Z4() _tile_zero(0); _tile_zero(1); _tile_zero(2); _tile_zero(3);

enum { INT8_2X2, KQ_2X2, SEG_1X1, SEG_2X1, SEG_2X2, NMODES };
static const char *names[] = {"int8 2x2 K64", "kq 2x2 K64", "seg 1x1 K32", "seg 2x1 K32", "seg 2x2 K32"};
/* useful multiply-adds a step */
static const double macs[] = {4.0 * 16 * 16 * 64, 2.0 * 16 * 16 * 64, 16.0 * 16 * 32, 2.0 * 16 * 16 * 32,
                              4.0 * 16 * 16 * 32};

static double run(int mode) {
    const double t0 = now();
    switch (mode) {
    case INT8_2X2:
        for (int i = 0; i < N; i++) { LD4() DOT4() FENCE(); }
        break;
    case KQ_2X2:
        for (int i = 0; i < N; i += 4) {
            Z4() LD4() DOT4() LD4() DOT4() LD4() DOT4() LD4() DOT4() ST4() FENCE();
        }
        break;
    case SEG_1X1: /* A in tmm4/5, B in tmm6/7 alternately; C rotates, stored 2 steps later */
        for (int i = 0; i < N; i += 4) {
            _tile_loadd(4, A[0], 64); _tile_loadd(6, B[0], 64); _tile_zero(0); _tile_dpbssd(0, 4, 6);
            _tile_stored(2, C[2], 64);
            _tile_loadd(5, A[1], 64); _tile_loadd(7, B[1], 64); _tile_zero(1); _tile_dpbssd(1, 5, 7);
            _tile_stored(3, C[3], 64);
            _tile_loadd(4, A[0], 64); _tile_loadd(6, B[0], 64); _tile_zero(2); _tile_dpbssd(2, 4, 6);
            _tile_stored(0, C[0], 64);
            _tile_loadd(5, A[1], 64); _tile_loadd(7, B[1], 64); _tile_zero(3); _tile_dpbssd(3, 5, 7);
            _tile_stored(1, C[1], 64);
            FENCE();
        }
        break;
    case SEG_2X1: /* one B (tmm6 / tmm7 alternately), C pairs (0,1) and (2,3) alternately */
        for (int i = 0; i < N; i += 2) {
            _tile_loadd(4, A[0], 64); _tile_loadd(5, A[1], 64); _tile_loadd(6, B[0], 64);
            _tile_zero(0); _tile_zero(1); _tile_dpbssd(0, 4, 6); _tile_dpbssd(1, 5, 6);
            _tile_stored(2, C[2], 64); _tile_stored(3, C[3], 64);
            _tile_loadd(4, A[0], 64); _tile_loadd(5, A[1], 64); _tile_loadd(7, B[1], 64);
            _tile_zero(2); _tile_zero(3); _tile_dpbssd(2, 4, 7); _tile_dpbssd(3, 5, 7);
            _tile_stored(0, C[0], 64); _tile_stored(1, C[1], 64);
            FENCE();
        }
        break;
    default:
        for (int i = 0; i < N; i++) { LD4() Z4() DOT4() ST4() FENCE(); }
    }
    return (now() - t0) / N;
}

int main(void) {
    if (syscall(SYS_arch_prctl, 0x1023, 18)) { fprintf(stderr, "no AMX tile permission\n"); return 2; }
    memset(A, 1, sizeof A);
    memset(B, 1, sizeof B);
    for (int m = 0; m < NMODES; m++) {
        config(m <= KQ_2X2 ? 64 : 32);
        Z4()
        double best = 1e9;
        for (int r = 0; r < 7; r++) { const double t = run(m); if (t < best) best = t; }
        printf("%-14s %7.2f ns a step  %7.1f useful GOP/s\n", names[m], best * 1e9, 2.0 * macs[m] / best * 1e-9);
    }
    _tile_release();
    return 0;
}
