/* amx_bench.h — what the standalone AMX timing tools (amx_tile_rates.c, amx_tile_blocking.c)
 * share: the tile configuration for a K depth and a monotonic clock.  They do not link the
 * library, so this is theirs, not csrc/amx_tiles.h. */
#ifndef H3_BENCH_AMX_BENCH_H
#define H3_BENCH_AMX_BENCH_H

#include <immintrin.h>
#include <stdint.h>
#include <string.h>
#include <time.h>

typedef struct {
    uint8_t palette_id, start_row, reserved[14];
    uint16_t colsb[16];
    uint8_t rows[16];
} tilecfg;

static double now(void) {
    struct timespec t;
    clock_gettime(CLOCK_MONOTONIC, &t);
    return t.tv_sec + t.tv_nsec * 1e-9;
}

/* LDTILECFG of *c, the whole struct declared read: GCC 12's _tile_loadconfig claims 8 bytes of it,
 * so the stores of rows[] / colsb[] were dropped as dead (csrc/amx_tiles.h, amx_load_config) */
static inline void load_config(const tilecfg *c) {
    __asm__ volatile("" ::"m"(*c));
    _tile_loadconfig(c);
}

/* C tmm0..3 16 x 64 bytes; A tmm4, tmm5 16 rows x k bytes; B tmm6, tmm7 k/4 quads x 64 bytes */
static void config(int k) {
    tilecfg c;
    memset(&c, 0, sizeof c);
    c.palette_id = 1;
    for (int t = 0; t < 4; t++) { c.rows[t] = 16; c.colsb[t] = 64; }
    for (int t = 4; t < 6; t++) { c.rows[t] = 16; c.colsb[t] = (uint16_t)k; }
    for (int t = 6; t < 8; t++) { c.rows[t] = (uint8_t)(k / 4); c.colsb[t] = 64; }
    load_config(&c);
}

#endif
