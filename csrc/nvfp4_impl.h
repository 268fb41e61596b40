/* nvfp4_impl.h — the NVFP4 linear's pieces shared by its driver (gemm_nvfp4.c), the
 * reference (nvfp4_ref.c) and the SIMD micro-kernels (nvfp4_avx2.c, nvfp4_avx512.c,
 * nvfp4_neon.c).  Internal header.
 *
 * The format (ComfyUI "nvfp4", comfy-kitchen's TensorCoreNVFP4Layout) stores a weight
 * W[n, k] = e2m1(code[n, k]) * e4m3(scale[n, k / 16]) * scale_2: codes two per byte, the
 * even k in the high nibble; one float8 e4m3 scale per 16 inputs in cuBLAS's blocked
 * layout; one float32 per tensor.  Twice an E2M1 value is an integer in [-12, 12], so the
 * GEMM widens the nibbles to int8 q = 2 e2m1 in registers' reach (a decoded panel of 16
 * weight rows, a K block at a time) and folds the halving into the block scale:
 *   W[n, k] = q[n, k] * sw[n, k / 16],   sw = e4m3 * scale_2 * 0.5 (exact halving).
 * Activations (times AWQ's pre_quant_scale where the layer has one) are quantised per 32
 * to int8 a with a float scale d, stored as a + 128 (unsigned, what vpmaddubsw and
 * vpdpbusd multiply by the signed weights).  Per 16 inputs the exact int32 dot
 *   dot = sum q (a + 128) - 128 sum q          (128 sum q: corr, computed at decode)
 * is turned to float in one order on every path, per activation block (two segments,
 * dot0 and dot1 with their weight scales sw0, sw1, one activation scale d):
 *   g = fmaf((float)dot1, sw1, (float)dot0 * sw0);   f = fmaf(d, g, f)   (blocks in ascending k)
 * so every ISA's result is the reference's, bit for bit.  (One fma by d per 32 inputs, not
 * per 16: AVX2 at M = 128 went from 0.75-0.78 to ~0.87 of h3cy int4, one Zen 1 core.) */
#ifndef H3_NVFP4_IMPL_H
#define H3_NVFP4_IMPL_H

#include "h3_internal.h"

#define NV_SEG 16   /* inputs per block scale (a "segment") */
#define NV_ACT 32   /* inputs per activation scale */
#define NV_NR 16    /* weight rows per decoded panel (output columns per micro-kernel) */

/* one weight row's source: its codes and the blocked-layout base of its scales (segment b
 * at base + (b / 4) * 512 + b % 4) with the part's scale table (e4m3 byte -> sw) */
typedef struct {
    const uint8_t *codes;
    const uint8_t *scales;
    const float *lut;
} nvfp4_row;

/* the blocked layout: byte offset of (row r, scale column b) with ncb column blocks of 4 */
static inline int64_t nvfp4_scale_offset(int64_t r, int64_t b, int64_t ncb) {
    return (((r / 128) * ncb + b / 4) * 32 + r % 32) * 16 + ((r % 128) / 32) * 4 + b % 4;
}

/* float8 e4m3 (fn: no infinities, 0x7f/0xff NaN) -> float */
float nvfp4_e4m3(uint8_t b);
/* 2 * e2m1 of a code (bit 3 the sign) */
extern const int8_t nvfp4_q_of_code[16];

/* Decode segments [s0, s0 + nseg) of rows rs[0..nr) (nr <= 16; the rest of the panel zero):
 *   q    [nseg * 4][16][4] int8: quad (4 inputs) j of segment s, column c at
 *        ((s * 4 + j) * 16 + c) * 4
 *   sw   [nseg][16] float, corr [nseg][16] int32 (128 * sum of the segment's q) */
typedef void (*nvfp4_decode_fn)(const nvfp4_row *rs, int nr, int64_t s0, int nseg, int8_t *q, float *sw,
                                int32_t *corr);
void nvfp4_decode_ref(const nvfp4_row *rs, int nr, int64_t s0, int nseg, int8_t *q, float *sw, int32_t *corr);
#if H3_X86
void nvfp4_decode_avx2(const nvfp4_row *rs, int nr, int64_t s0, int nseg, int8_t *q, float *sw, int32_t *corr);
#endif
/* the decoder a linear on path `isa` runs (every one writes the reference's bytes) */
nvfp4_decode_fn nvfp4_decode_for(h3_isa isa);

/* One activation row: x[K] (times pre[K] when pre is not NULL, rounded to float first) ->
 * a[K] = int8 + 128, d[K / 32]: d = amax / 127, a = rint(x / d) clamped to +-127 (0 when
 * d is 0).  K % 32 == 0. */
void nvfp4_quant_act_row_ref(const float *x, const float *pre, int64_t K, uint8_t *a, float *d);

/* The micro-kernel: rows i < mr (mr <= any), columns 0..15 of a decoded panel, nseg
 * segments (even; the first starts an activation block):
 *   cb[i * 16 + c] = the chain f = fmaf(d, g, f) above continued over the blocks
 * a: row i's activations at a + i * lda; d: its scales at d + i * ldd (segment s: d[s / 2]). */
typedef void (*nvfp4_ukr_fn)(int mr, int nseg, const uint8_t *a, int64_t lda, const float *d, int64_t ldd,
                             const int8_t *q, const float *sw, const int32_t *corr, float *cb);
void nvfp4_ukr_ref(int mr, int nseg, const uint8_t *a, int64_t lda, const float *d, int64_t ldd,
                   const int8_t *q, const float *sw, const int32_t *corr, float *cb);
#if H3_X86
void nvfp4_ukr_avx2(int mr, int nseg, const uint8_t *a, int64_t lda, const float *d, int64_t ldd,
                    const int8_t *q, const float *sw, const int32_t *corr, float *cb);
void nvfp4_ukr_avx512(int mr, int nseg, const uint8_t *a, int64_t lda, const float *d, int64_t ldd,
                      const int8_t *q, const float *sw, const int32_t *corr, float *cb);
#endif
#if H3_ARM64
void nvfp4_ukr_neon(int mr, int nseg, const uint8_t *a, int64_t lda, const float *d, int64_t ldd,
                    const int8_t *q, const float *sw, const int32_t *corr, float *cb);
#endif
/* the micro-kernel a linear on path `isa` runs */
nvfp4_ukr_fn nvfp4_ukr_for(h3_isa isa);

/* ---- the bf16 route (H3_NVFP4_ROUTE_BF16; AMX bf16 tiles: nvfp4_amx.c) -------------
 * W[n, k] = e2m1 * e4m3 is exact in bf16 (at most 2 x 4 significant bits, exponents
 * 2^-10 .. 2^12), so a weight panel of 32 rows is decoded, a K block of 1024 inputs at a
 * time, to the B layout of AMX's TDPBF16PS (pairs of inputs, [nk / 2][32 columns][2]); the
 * activations are x (* pre) rounded to bf16 in the tile layout (per 32 rows,
 * [K / 32][32 rows][32 inputs]); the float sums of a K block are multiplied by scale_2 into
 * the panel's float rows. */
#define NV_BNR 32   /* weight rows per bf16 panel (two B tiles of 16 columns) */
#define NV_BKB 1024 /* inputs per decoded K block: 64 KB of bf16 pairs */
#define NV_BMC 256  /* rows of x per block (8 tile groups of 32).  512 (session 22, halving the
                       decode per row) measured no faster on the 16-core SPR in session 23:
                       NVFP4/int4 at M = 2048 0.74/0.65/0.71/0.52 for te_q/te_o/qkv/down
                       against 0.70/0.66/0.72/0.63 with 256 (bench/results/
                       nvfp4_amx_spr16_s23_512rows.md, nvfp4_amx_spr16_s22.md) */

/* Decode inputs [k0, k0 + nk) (k0 % 64 == 0, nk % 32 == 0) of rows rs[0..nr) (nr <= 32)
 * to b[(k / 2) * 64 + c * 2 + k % 2] = bf16(e2m1 * e4m3) (columns >= nr: 0). */
typedef void (*nvfp4_bdecode_fn)(const nvfp4_row *rs, int nr, int64_t k0, int nk, uint16_t *b);
void nvfp4_bdecode_ref(const nvfp4_row *rs, int nr, int64_t k0, int nk, uint16_t *b);
#if H3_X86
void nvfp4_bdecode_avx512(const nvfp4_row *rs, int nr, int64_t k0, int nk, uint16_t *b);
#endif
nvfp4_bdecode_fn nvfp4_bdecode_for(h3_isa isa);

/* One activation row to the tile layout: dst[(k / 32) * 1024 + k % 32] = bf16(x[k] (* pre[k]))
 * (x NULL: zeros; dst is the row's place in its 32-row group). */
typedef void (*nvfp4_bquant_fn)(const float *x, const float *pre, int64_t K, uint16_t *dst);
void nvfp4_bquant_row_ref(const float *x, const float *pre, int64_t K, uint16_t *dst);
#if H3_X86
void nvfp4_bquant_row_amx(const float *x, const float *pre, int64_t K, uint16_t *dst);
#endif
nvfp4_bquant_fn nvfp4_bquant_for(h3_isa isa);

/* The bf16 micro-kernel: rows i < mr of the tile-layout activations (group g = i / 32 at
 * a + g * gs, the block's first input at each group's start), nk inputs (nk % 32 == 0):
 *   cb[i * 32 + c] = fmaf(s2, s, cb[i * 32 + c]),  s = the float32 sum over k of
 *   a[i][k] * b[k][c] (each product exact in float32; the reference adds in k order) */
typedef void (*nvfp4_bukr_fn)(int mr, int nk, const uint16_t *a, int64_t gs, const uint16_t *b, float s2, float *cb);
void nvfp4_bukr_ref(int mr, int nk, const uint16_t *a, int64_t gs, const uint16_t *b, float s2, float *cb);
#if H3_X86
void nvfp4_bukr_amx(int mr, int nk, const uint16_t *a, int64_t gs, const uint16_t *b, float s2, float *cb);
#endif
nvfp4_bukr_fn nvfp4_bukr_for(h3_isa isa);

#endif
