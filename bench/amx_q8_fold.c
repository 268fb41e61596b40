/* amx_q8_fold.c — what one step of an exact Q8_0 kernel on AMX costs when nothing else runs: the
 * tile side, the vector fold, and both together, one thread, every operand in L1.  The floor
 * behind the Q8_0 / int8 lines of docs/gguf.md (session 30).
 *
 * A Q8_0 weight has a float16 scale per 32 inputs, so the exact sum needs, for every 16 x 16
 * block of int32 dots of 32 inputs (one "step": 8192 multiply-adds), the dots out of the tile
 * (a tile store, 1 KB), and per dot a convert and an fma with its row's scale: 16 vector loads,
 * 16 converts, 16 fmas (csrc/gguf_q8d_amx.c).  int8 with a scale per output row keeps C in the
 * tiles for the whole K and needs none of it.
 *
 *   gcc -O2 -mavx512f -mamx-tile -mamx-int8 -mamx-bf16 bench/amx_q8_fold.c -o /tmp/amx_q8_fold
 *   /tmp/amx_q8_fold            (taskset -c N ...; several at once for the all-core rate)
 *   /tmp/amx_q8_fold --no-amx   (the vector fold alone, on any AVX-512 machine)
 *
 * Each line: ns per step (best of 7 timings of 100k steps), and the useful GOP/s (2 x 8192 per
 * step; int8's line counts its own 4 x 16 x 16 x 64 a step):
 *   tile          load A (16 x 32 bytes) and B (8 quads), zero C, TDPBSSD, store the C of 2 steps
 *                 before (gguf_q8d_amx.c's tile side)
 *   fold          the vector side alone: 16 x (load dots, convert, fma with the row's broadcast
 *                 scale) from a stored 1 KB block
 *   tile+fold     both, the fold of the tile stored the step before (gguf_q8d_amx.c's order)
 *   tile+fold/4   both, the fold cut in four groups of 4 rows, one after each tile instruction
 *   tile+fold B L2  the same with the B tiles read in turn from 384 KB (L2), as the driver has them
 *   t+f B L2 pf     and each prefetched 4 steps ahead
 *   bf16          TDPBF16PS on the same values as bf16 (exact: |q| <= 128, activations <= 255,
 *                 the 32-term sums < 2^24): float dots straight from the tile, so the fold loses
 *                 its converts, at the price of bf16 operands (A 16 x 64 bytes, B 16 pairs)
 *   bf16+fold     both, the fold without converts
 *   int8 2x2 K64  h3cy int8's blocking (gemm_amx.c): 2 A, 2 B, 4 products, C kept in the tiles */
#define _GNU_SOURCE
#include <immintrin.h>
#include <stdint.h>
#include <stdio.h>
#include <string.h>
#include <sys/syscall.h>
#include <time.h>
#include <unistd.h>

#include "amx_bench.h"

#define N 100000 /* steps a timing (a multiple of 4) */
#define FENCE() __asm__ volatile("" ::: "memory")

/* the weights as a Q8_0 K block of 512 stores them: 16 rows 544 bytes apart, a segment's 32
 * bytes 2 past its block's start (after the float16 scale), so rows straddle cache lines */
#define LDW 544
static int8_t W[16 * LDW + 64] __attribute__((aligned(64))), B[2][16 * 64] __attribute__((aligned(64)));
#define WSEG(k) (W + 2 + 34 * ((k) & 1))
static int32_t C[4][256] __attribute__((aligned(64)));
static float SC[16] __attribute__((aligned(64)));
/* activations streamed from L2 as a K block of 768 rows is (the driver: 48 row tiles x 8 KB) */
#define BIG_BYTES (768 * 512)
static int8_t BIG[BIG_BYTES] __attribute__((aligned(64)));
static float SINK[16];

#define H16(X) X(0) X(1) X(2) X(3) X(4) X(5) X(6) X(7) X(8) X(9) X(10) X(11) X(12) X(13) X(14) X(15)
#define DECL(r) __m512 h##r = _mm512_setzero_ps();
#define FOLD_I(r) h##r = _mm512_fmadd_ps(_mm512_cvtepi32_ps(_mm512_load_si512(dots + r * 16)), _mm512_set1_ps(SC[r]), h##r);
#define FOLD_F(r) h##r = _mm512_fmadd_ps(_mm512_load_ps((const float *)dots + r * 16), _mm512_set1_ps(SC[r]), h##r);
#define SUM(r) acc = _mm512_add_ps(acc, h##r);
#define FOLD_I4(a, b, c, d) FOLD_I(a) FOLD_I(b) FOLD_I(c) FOLD_I(d)

enum { TILE, FOLD, TILE_FOLD, TILE_FOLD4, TILE_FOLD_L2, TILE_FOLD_L2PF, BF16, BF16_FOLD, INT8_2X2, NMODES };
static const char *names[] = {"tile", "fold", "tile+fold", "tile+fold/4", "tile+fold B L2", "t+f B L2 pf",
                              "bf16", "bf16+fold", "int8 2x2 K64"};

static void config_bf16(void) { /* C tmm0..3; A tmm4, 5 16 x 64 bytes; B tmm6, 7 16 pairs x 64 bytes */
    tilecfg c;
    memset(&c, 0, sizeof c);
    c.palette_id = 1;
    for (int t = 0; t < 8; t++) { c.rows[t] = 16; c.colsb[t] = 64; }
    load_config(&c); /* amx_bench.h */
}

/* one product in slot k (C tile k, A/B tiles by parity), the C tile of slot k + 2 stored */
#define STEP_I(k, ka, kb, ks) _tile_loadd(ka, WSEG(k), LDW); _tile_loadd(kb, B[(k) & 1], 64); \
    _tile_zero(k); _tile_dpbssd(k, ka, kb); _tile_stored(ks, C[ks], 64);
#define STEP_L2(k, ka, kb, ks) _tile_loadd(ka, WSEG(k), LDW); _tile_loadd(kb, BIG + bo, 64); \
    _tile_zero(k); _tile_dpbssd(k, ka, kb); _tile_stored(ks, C[ks], 64); bo = (bo + 512) % BIG_BYTES;
#define PF8(o) for (int l = 0; l < 512; l += 64) _mm_prefetch((const char *)BIG + ((o) + l) % BIG_BYTES, _MM_HINT_T0);
#define STEP_B(k, ka, kb, ks) _tile_loadd(ka, W + 1024 * ((k) & 1), 64); _tile_loadd(kb, B[(k) & 1], 64); \
    _tile_zero(k); _tile_dpbf16ps(k, ka, kb); _tile_stored(ks, C[ks], 64);

/* four steps (slots 0..3), each followed by the fold of the tile its slot stored a step before;
 * PRE before each step (the L2 modes' prefetch, or nothing) */
#define NOTHING
#define FOUR_FOLDED(STEP, FOLD, PRE)                                             \
    {                                                                            \
        const int32_t *dots;                                                     \
        PRE STEP(0, 4, 6, 2) FENCE(); dots = C[1]; H16(FOLD) FENCE();            \
        PRE STEP(1, 5, 7, 3) FENCE(); dots = C[2]; H16(FOLD) FENCE();            \
        PRE STEP(2, 4, 6, 0) FENCE(); dots = C[3]; H16(FOLD) FENCE();            \
        PRE STEP(3, 5, 7, 1) FENCE(); dots = C[0]; H16(FOLD) FENCE();            \
    }

static double run(int mode) {
    H16(DECL)
    const double t0 = now();
    switch (mode) {
    case TILE:
        for (int i = 0; i < N; i += 4) {
            STEP_I(0, 4, 6, 2) STEP_I(1, 5, 7, 3) STEP_I(2, 4, 6, 0) STEP_I(3, 5, 7, 1) FENCE();
        }
        break;
    case FOLD:
        for (int i = 0; i < N; i++) {
            const int32_t *dots = C[i & 3];
            H16(FOLD_I) FENCE();
        }
        break;
    case TILE_FOLD: /* fold the tile stored in the step before: slot k stored at step k + 2 */
        for (int i = 0; i < N; i += 4) FOUR_FOLDED(STEP_I, FOLD_I, NOTHING)
        break;
    case TILE_FOLD4:
        for (int i = 0; i < N; i += 4) {
            for (int k = 0; k < 4; k++) {
                const int32_t *dots = C[(k + 1) & 3];
                const int8_t *a = WSEG(k), *b = B[k & 1];
                switch (k) { /* tile numbers are immediates */
#define SPLIT(kk, ka, kb, ks)                                                              \
    case kk:                                                                              \
        _tile_loadd(ka, a, LDW); FENCE(); FOLD_I4(0, 1, 2, 3) _tile_loadd(kb, b, 64); \
        FENCE(); FOLD_I4(4, 5, 6, 7) _tile_zero(kk); _tile_dpbssd(kk, ka, kb); FENCE();   \
        FOLD_I4(8, 9, 10, 11) _tile_stored(ks, C[ks], 64); FENCE(); FOLD_I4(12, 13, 14, 15) break;
                SPLIT(0, 4, 6, 2) SPLIT(1, 5, 7, 3) SPLIT(2, 4, 6, 0) SPLIT(3, 5, 7, 1)
                }
                FENCE();
            }
        }
        break;
    case TILE_FOLD_L2: /* the B tiles from a 384 KB stretch in turn (L2), as gguf_q8d_amx.c reads them */
    case TILE_FOLD_L2PF: { /* the same, each B prefetched 4 steps ahead */
        int bo = 0;
        const int pf = mode == TILE_FOLD_L2PF;
        for (int i = 0; i < N; i += 4) FOUR_FOLDED(STEP_L2, FOLD_I, if (pf) { PF8(bo + 4 * 512) })
        break;
    }
    case BF16:
        for (int i = 0; i < N; i += 4) {
            STEP_B(0, 4, 6, 2) STEP_B(1, 5, 7, 3) STEP_B(2, 4, 6, 0) STEP_B(3, 5, 7, 1) FENCE();
        }
        break;
    case BF16_FOLD:
        for (int i = 0; i < N; i += 4) FOUR_FOLDED(STEP_B, FOLD_F, NOTHING)
        break;
    default:
        for (int i = 0; i < N; i++) {
            _tile_loadd(4, W, 64); _tile_loadd(5, W + 1024, 64); _tile_loadd(6, B[0], 64); _tile_loadd(7, B[1], 64);
            _tile_dpbssd(0, 4, 6); _tile_dpbssd(1, 4, 7); _tile_dpbssd(2, 5, 6); _tile_dpbssd(3, 5, 7);
            FENCE();
        }
    }
    const double t = (now() - t0) / N;
    __m512 acc = _mm512_setzero_ps();
    H16(SUM)
    _mm512_storeu_ps(SINK, acc); /* keeps the fold's work live */
    return t;
}

int main(int argc, char **argv) {
    const int amx = !(argc > 1 && !strcmp(argv[1], "--no-amx"));
    if (amx && syscall(SYS_arch_prctl, 0x1023, 18)) { fprintf(stderr, "no AMX tile permission\n"); return 2; }
    memset(W, 1, sizeof W);
    memset(B, 1, sizeof B);
    memset(BIG, 1, sizeof BIG);
    for (int i = 0; i < 16; i++) SC[i] = 1e-3f * (float)(i + 1);
    for (int m = 0; m < NMODES; m++) {
        if (!amx && m != FOLD) continue;
        if (amx) {
            if (m == BF16 || m == BF16_FOLD) config_bf16();
            else config(m == INT8_2X2 ? 64 : 32);
        }
        double best = 1e9;
        for (int r = 0; r < 7; r++) { const double t = run(m); if (t < best) best = t; }
        const double ops = m == INT8_2X2 ? 2.0 * 4 * 16 * 16 * 64 : 2.0 * 16 * 16 * 32;
        printf("%-14s %7.2f ns a step  %7.1f useful GOP/s\n", names[m], best * 1e9, ops / best * 1e-9);
    }
    if (amx) _tile_release();
    return SINK[0] == 12345.0f;
}
