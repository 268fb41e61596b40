/* attn_amx.c — attention on Intel AMX bf16 tiles, for bf16 models (h3_attn_args.bf16_inputs:
 * q, k and v hold bf16-representable values, as a bf16 DiT or ViT block gives them).
 *
 * The unit, its packing and softmax are attn_bf16.inc's; here Q K^T and P V run on tiles
 * (TDPBF16PS, 2 x 2 C tiles per 32 rows).  Only non-causal attention with D a multiple of
 * 32 runs here (attn_bf16_usable in attn.c); everything else takes the AVX-512 kernels.  The summation order inside a TDPBF16PS is the hardware's, so results
 * are close to the float32 kernels' (the P rounding dominates: ~2^-9 relative), not equal.
 *
 * Tiles (palette 1, all 16 rows x 64 bytes): C = tmm0..3, A = tmm4, tmm5, B = tmm6, tmm7. */
#include "attn_impl.h"

#include <immintrin.h>
#include <math.h>
#include <string.h>

#include "amx_tiles.h"
#include "simd_avx512.h"

#define BQ 128 /* queries per unit: four 32-row quarters, which share each packed key block */
#define BK 32 /* keys per step */

/* Sc[32][32] = Qq . Kb^T: C tiles (query half i, key half j) */
static inline void amx_scores(const uint16_t *Qq, const uint16_t *Kb, int nch, float *Sc) {
    MEMORY_FENCE();
    _tile_zero(0);
    _tile_zero(1);
    _tile_zero(2);
    _tile_zero(3);
    for (int c = 0; c < nch; c++) {
        const uint16_t *qa = Qq + (size_t)c * 32 * 32;
        _tile_loadd(4, qa, 64);
        _tile_loadd(5, qa + 16 * 32, 64);
        _tile_loadd(6, Kb + ((size_t)c * 2 + 0) * 512, 64);
        _tile_loadd(7, Kb + ((size_t)c * 2 + 1) * 512, 64);
        _tile_dpbf16ps(0, 4, 6);
        _tile_dpbf16ps(1, 4, 7);
        _tile_dpbf16ps(2, 5, 6);
        _tile_dpbf16ps(3, 5, 7);
    }
    _tile_stored(0, Sc, 128);
    _tile_stored(1, Sc + 16, 128);
    _tile_stored(2, Sc + 16 * 32, 128);
    _tile_stored(3, Sc + 16 * 32 + 16, 128);
    MEMORY_FENCE();
}

/* Oq[32][D] += Pb . Vb, 32 columns (two 16-column tiles) at a time */
static inline void amx_pv(const uint16_t *Pb, const uint16_t *Vb, float *ob, int D) {
    MEMORY_FENCE();
    _tile_loadd(4, Pb, 64);
    _tile_loadd(5, Pb + 16 * 32, 64);
    for (int dc = 0; dc < D / 32; dc++) {
        float *o = ob + 32 * dc;
        _tile_loadd(0, o, D * 4);
        _tile_loadd(1, o + 16, D * 4);
        _tile_loadd(2, o + 16 * D, D * 4);
        _tile_loadd(3, o + 16 * D + 16, D * 4);
        _tile_loadd(6, Vb + (size_t)(2 * dc) * 512, 64);
        _tile_loadd(7, Vb + (size_t)(2 * dc + 1) * 512, 64);
        _tile_dpbf16ps(0, 4, 6);
        _tile_dpbf16ps(1, 4, 7);
        _tile_dpbf16ps(2, 5, 6);
        _tile_dpbf16ps(3, 5, 7);
        _tile_stored(0, o, D * 4);
        _tile_stored(1, o + 16, D * 4);
        _tile_stored(2, o + 16 * D, D * 4);
        _tile_stored(3, o + 16 * D + 16, D * 4);
    }
    MEMORY_FENCE();
}

#define BF16_UNIT attn_unit_amx
#define BF16_SCORES amx_scores
#define BF16_PV amx_pv
#define BF16_BEGIN amx_config_tiles
#define BF16_END _tile_release
#include "attn_bf16.inc"

const attn_kernels attn_kernels_amx = {BQ, BK, attn_unit_amx};
