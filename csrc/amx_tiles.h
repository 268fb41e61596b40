/* amx_tiles.h — what the AMX kernel files (gemm_amx.c, attn_amx.c) share: the tile
 * configuration they both use (palette 1, all eight tiles 16 rows x 64 bytes) and the
 * compiler fence around tile loads and stores.  Included only by *_amx.c files, which are
 * compiled with -mamx-tile. */
#ifndef H3_AMX_TILES_H
#define H3_AMX_TILES_H

#include <immintrin.h>
#include <stdint.h>
#include <string.h>

/* GCC's tile load/store intrinsics are asm statements without a "memory" clobber: the
 * compiler does not know they read or write memory, and may drop or move our stores to
 * a buffer a tile then loads (or our loads of a buffer a tile just stored).  Fence them. */
#define MEMORY_FENCE() __asm__ volatile("" ::: "memory")

typedef struct {
    uint8_t palette_id;
    uint8_t start_row;
    uint8_t reserved[14];
    uint16_t colsb[16];
    uint8_t rows[16];
} __attribute__((packed, aligned(64))) amx_tilecfg;

/* Load the configuration on the calling thread: tmm0..7 all 16 rows x 64 bytes. */
static inline void amx_config_tiles(void) {
    amx_tilecfg cfg;
    memset(&cfg, 0, sizeof cfg);
    cfg.palette_id = 1;
    for (int t = 0; t < 8; t++) {
        cfg.rows[t] = 16;
        cfg.colsb[t] = 64;
    }
    _tile_loadconfig(&cfg);
}

#endif
