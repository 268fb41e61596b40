/* amx_tiles.h — what the AMX kernel files (gemm_amx.c, attn_amx.c, the GGUF ones) share: the tile
 * configurations (palette 1: all eight tiles 16 rows x 64 bytes; the GGUF kernels' rotating C
 * tiles), the bf16 product loop and the compiler fence around tile loads and stores.  Included only by *_amx.c files, which are
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

/* LDTILECFG of *c.  Every configuration load goes through here, never _tile_loadconfig
 * alone: GCC 12's intrinsic (amxtileintrin.h) is an asm whose memory operand is the first 8
 * bytes of the 64-byte configuration, so GCC removed the stores of rows[] and colsb[] as dead
 * and loaded palette 1 with every tile 0 x 0 -- the next tile instruction raised #UD (SIGILL
 * in ukr_i8_amx on a 2-core Xeon with AMX, session 32; the device's compiler kept the stores).
 * The empty asm takes the whole struct as its input, so the stores happen before it. */
static inline void amx_load_config(const amx_tilecfg *c) {
    __asm__ volatile("" ::"m"(*c));
    _tile_loadconfig(c);
}

/* Load the configuration on the calling thread: tmm0..7 all 16 rows x 64 bytes. */
static inline void amx_config_tiles(void) {
    amx_tilecfg cfg;
    memset(&cfg, 0, sizeof cfg);
    cfg.palette_id = 1;
    for (int t = 0; t < 8; t++) {
        cfg.rows[t] = 16;
        cfg.colsb[t] = 64;
    }
    amx_load_config(&cfg);
}

/* The per-segment GGUF kernels' tiles (gguf_amx.c, gguf_q8d_amx.c): C tmm0..3 16 x 16 int32, one
 * per step in rotation; A tmm4 / tmm5 16 rows x acolsb bytes; B tmm6 / tmm7 acolsb / 4 quads x 64
 * bytes.  Product k (of the rotation) loads A from a (rows lda bytes apart) and B from b (ldb
 * apart), zeroes C tile k mod 4 and adds the signed dots; amx_rot_store stores that tile.  The
 * tile numbers must be immediates, hence one case per slot. */
static inline amx_tilecfg amx_rot_cfg(int acolsb) {
    amx_tilecfg c;
    memset(&c, 0, sizeof c);
    c.palette_id = 1;
    for (int t = 0; t < 4; t++) { c.rows[t] = 16; c.colsb[t] = 64; }
    for (int t = 4; t < 6; t++) { c.rows[t] = 16; c.colsb[t] = (uint16_t)acolsb; }
    for (int t = 6; t < 8; t++) { c.rows[t] = (uint8_t)(acolsb / 4); c.colsb[t] = 64; }
    return c;
}
#define AMX_ROT_PRODUCT(C, A, B)  \
    do {                          \
        _tile_loadd(A, a, lda);   \
        _tile_loadd(B, b, ldb);   \
        _tile_zero(C);            \
        _tile_dpbssd(C, A, B);    \
    } while (0)
static inline __attribute__((always_inline)) void amx_rot_product(int k, const void *a, int64_t lda, const void *b,
                                                                  int64_t ldb) {
    switch (k) {
    case 0: AMX_ROT_PRODUCT(0, 4, 6); break;
    case 1: AMX_ROT_PRODUCT(1, 5, 7); break;
    case 2: AMX_ROT_PRODUCT(2, 4, 6); break;
    default: AMX_ROT_PRODUCT(3, 5, 7); break;
    }
}
static inline __attribute__((always_inline)) void amx_rot_store(int k, int32_t *buf) {
    switch (k) {
    case 0: _tile_stored(0, buf, 64); break;
    case 1: _tile_stored(1, buf, 64); break;
    case 2: _tile_stored(2, buf, 64); break;
    default: _tile_stored(3, buf, 64); break;
    }
}

/* C tiles 0..3 (a 32x32 block of 4-byte elements, int32 or float, as tiles 0 1 / 2 3) ->
 * dst, row stride 32 elements */
static inline void amx_store_c32(void *dst) {
    char *d = (char *)dst;
    _tile_stored(0, d, 32 * 4);
    _tile_stored(1, d + 16 * 4, 32 * 4);
    _tile_stored(2, d + 16 * 32 * 4, 32 * 4);
    _tile_stored(3, d + (16 * 32 + 16) * 4, 32 * 4);
    MEMORY_FENCE();
}

/* C tiles 0..3 = a 32x32 block of float32 sums of bf16 products over kp inputs (a multiple
 * of 32), 32 at a time: A's rows 0-15 at a + k * ak and rows 16-31 at a + k * ak + a16
 * (bf16 elements; tile rows lda bytes apart), B the bf16 pairs [kp/2][32 columns][2].  The
 * one tile loop of the AMX bf16 GEMM, the fused LoRA's up product and NVFP4's bf16 route. */
static inline void amx_bf16_dots32(const uint16_t *a, int64_t ak, int64_t a16, int64_t lda, const uint16_t *b,
                                   int64_t kp) {
    _tile_zero(0); _tile_zero(1); _tile_zero(2); _tile_zero(3);
    for (int64_t k = 0; k < kp; k += 32) {
        _tile_loadd(4, a + k * ak, lda);
        _tile_loadd(5, a + k * ak + a16, lda);
        _tile_loadd(6, b + (k / 2) * 64, 32 * 4);
        _tile_loadd(7, b + (k / 2) * 64 + 32, 32 * 4);
        _tile_dpbf16ps(0, 4, 6);
        _tile_dpbf16ps(1, 4, 7);
        _tile_dpbf16ps(2, 5, 6);
        _tile_dpbf16ps(3, 5, 7);
    }
}

#endif
