/* gemm_amx.c — Intel AMX GEMM micro-kernels (Sapphire Rapids and later).
 *
 * Tile use (palette 1, 8 tiles): C = tmm0..tmm3 (a 32x32 block of 2x2 16x16 tiles),
 * A = tmm4, tmm5 (rows 0-15, 16-31), B = tmm6, tmm7 (columns 0-15, 16-31).
 *
 * int8:  A = int8 activations in 64-k chunks [kc/64][32][64] (the driver packs them so:
 *        int_a_tiles; each tile load is 1 KB contiguous), B = the weights' packed
 *        [kq][32][4] uint8 (q+128), which is
 *        exactly AMX's VNNI B layout at a row stride of 128 bytes.  TDPBSUD (signed A x
 *        unsigned B) gives sum a*(q+128); the +128 is removed with the row sums (asum).
 *        Per segment the 32x32 int32 block goes through memory once to apply the scales
 *        in the same order as the reference (bit-identical results).
 * int4:  the nibbles are widened to the int8 VNNI layout (by the driver once per K block
 *        for large M, else here 64 k at a time), then as int8.
 * bf16:  only for bf16-stored weights (fp32/fp16 weights use the AVX-512 table, see
 *        gemm_kernels_for_mode): A = x rounded to bf16 in 32-k chunks [kc32/32][32][32]
 *        (pack_a_bf16_tiles),
 *        B = bf16 pairs [kc/2][32][2] (unpack), TDPBF16PS accumulates in fp32.  Rounding
 *        the activations to bf16 is what torch's bf16 linear does too.
 * K that is not a multiple of 64 (int) or 32 (bf16) is handled by zero padding (bf16)
 * or a scalar tail (int), which is correct but slow: use int4 groups of 64 or 128. */
#include "gemm_impl.h"

#include <immintrin.h>

#include "amx_tiles.h"
#include "gemm_store_avx512.h"
#include <string.h>

#define MR 32
#define NR 32

#include "gemm_bf16_pack.inc"  /* unpack_bf16 (W -> pairs), kc32 */

/* acc[32][32] (+)= scales applied to the int32 block blk (minus off*asum). */
static inline void apply_segment(float *acc, const int32_t *blk, int32_t off,
                                 const int32_t *asum, const float *sa, const float *sw) {
    __m512 w0 = _mm512_loadu_ps(sw), w1 = _mm512_loadu_ps(sw + 16);
    for (int i = 0; i < MR; i++) {
        __m512i comp = _mm512_set1_epi32(off * asum[i]);
        __m512 s = _mm512_set1_ps(sa[i]);
        __m512i d0 = _mm512_sub_epi32(_mm512_loadu_si512(blk + i * 32), comp);
        __m512i d1 = _mm512_sub_epi32(_mm512_loadu_si512(blk + i * 32 + 16), comp);
        __m512 a0 = _mm512_loadu_ps(acc + i * 32), a1 = _mm512_loadu_ps(acc + i * 32 + 16);
        a0 = _mm512_fmadd_ps(_mm512_cvtepi32_ps(d0), _mm512_mul_ps(s, w0), a0);
        a1 = _mm512_fmadd_ps(_mm512_cvtepi32_ps(d1), _mm512_mul_ps(s, w1), a1);
        _mm512_storeu_ps(acc + i * 32, a0);
        _mm512_storeu_ps(acc + i * 32 + 16, a1);
    }
}

/* store_row, then (lora not NULL) + the row's LoRA sum: c = (v (+) c) + lora, the value
 * the unfused driver's second pass (store_block of the LoRA tile onto C) leaves, in one
 * write of C. */
static inline void store_row_lora(float *c, __m512 v0, __m512 v1, const float *lora, int nr, int accumulate) {
    if (!lora) {
        store_row(c, v0, v1, nr, accumulate);
        return;
    }
    __mmask16 m0 = nr >= 16 ? 0xffff : (__mmask16)((1u << nr) - 1u);
    __mmask16 m1 = nr >= 32 ? 0xffff : (nr <= 16 ? 0 : (__mmask16)((1u << (nr - 16)) - 1u));
    if (accumulate) {
        v0 = _mm512_add_ps(v0, _mm512_maskz_loadu_ps(m0, c));
        v1 = _mm512_add_ps(v1, _mm512_maskz_loadu_ps(m1, c + 16));
    }
    _mm512_mask_storeu_ps(c, m0, _mm512_add_ps(_mm512_loadu_ps(lora), v0));
    _mm512_mask_storeu_ps(c + 16, m1, _mm512_add_ps(_mm512_loadu_ps(lora + 16), v1));
}

/* The one-segment case of apply_segment + store_block, without the acc round trip:
 * C (+)= fma(dot, sa * sw, +0) for rows < mr (the same operations, so the same bits);
 * lora (a 32x32 float block, or NULL) then added row by row (store_row_lora). */
static inline __attribute__((always_inline)) void apply_store_single(const int32_t *blk, int32_t off,
                                                                     const int32_t *asum, const float *sa,
                                                                     const float *sw, float *c, int64_t ldc,
                                                                     int mr, int nr, int accumulate,
                                                                     const float *lora) {
    __m512 w0 = _mm512_loadu_ps(sw), w1 = _mm512_loadu_ps(sw + 16);
    const __m512 zero = _mm512_setzero_ps();
    for (int i = 0; i < mr; i++) {
        __m512i comp = _mm512_set1_epi32(off * asum[i]);
        __m512 s = _mm512_set1_ps(sa[i]);
        __m512i d0 = _mm512_sub_epi32(_mm512_loadu_si512(blk + i * 32), comp);
        __m512i d1 = _mm512_sub_epi32(_mm512_loadu_si512(blk + i * 32 + 16), comp);
        store_row_lora(c + i * ldc, _mm512_fmadd_ps(_mm512_cvtepi32_ps(d0), _mm512_mul_ps(s, w0), zero),
                       _mm512_fmadd_ps(_mm512_cvtepi32_ps(d1), _mm512_mul_ps(s, w1), zero),
                       lora ? lora + i * 32 : NULL, nr, accumulate);
    }
}

static inline __attribute__((always_inline)) void store_block(const float *acc, float *c, int64_t ldc,
                                                              int mr, int nr, int accumulate,
                                                              const float *lora) {
    for (int i = 0; i < mr; i++)
        store_row_lora(c + i * ldc, _mm512_loadu_ps(acc + i * 32), _mm512_loadu_ps(acc + i * 32 + 16),
                       lora ? lora + i * 32 : NULL, nr, accumulate);
}

/* C tiles 0..3 (a 32x32 block of 4-byte elements, int32 or float) -> dst, row stride NR */
static inline void store_c_tiles(void *dst) { amx_store_c32(dst); }

/* A LoRA's up product for the tile (gemm_lora_tile: bf16 u rows from the panel's first
 * rank, row stride ldu, readable to the next multiple of 32 ranks; B the bf16 pairs panel)
 * on tiles 0-3 (free again once the int block is stored), into lacc [32][32]: the tile
 * dots of ukr_bf16_amx over the same 32-rank chunks, so the same sums. */
static inline void lora_tiles(const gemm_lora_tile *lt, float *lacc) {
    amx_bf16_dots32((const uint16_t *)lt->u, 1, 16 * lt->ldu, lt->ldu * 2, (const uint16_t *)lt->b,
                    kc32(lt->kc));
    store_c_tiles(lacc);
}

/* Integer kernel.  is_i4: 0 int8 weights, 1 int4 nibbles as packed (widened here 16
 * quads at a time), 2 int4 already widened by the driver (ukr_i4w: the int8 layout with
 * values q_w + 8).  lt (NULL: none): a LoRA's up product added as C is stored (the fused
 * path; gemm_impl.h gemm_ukr_int_lora).  Inlined into each entry, so the plain kernels keep
 * their code (lt a constant NULL there). */
static inline __attribute__((always_inline)) void ukr_int_amx(int is_i4, int nseg, int seg_q, const int8_t *ap,
                                                              const uint8_t *bp, const float *sa,
                                                              const int32_t *asum, const float *sw,
                                                              int64_t sw_stride, float *c, int64_t ldc, int mr,
                                                              int nr, int accumulate, const gemm_lora_tile *lt) {
    const int64_t kc = (int64_t)nseg * seg_q * 4; /* the K block's length (A layout) */
    const int32_t off = is_i4 ? 8 : 128;
    float acc[MR * NR] __attribute__((aligned(64)));
    int32_t blk[MR * NR] __attribute__((aligned(64)));
    float lacc[MR * NR] __attribute__((aligned(64)));     /* the LoRA's tile (lt) */
    uint8_t b4[16 * NR * 4] __attribute__((aligned(64))); /* 16 quads widened (int4) */
    if (nseg > 1) memset(acc, 0, sizeof acc);
    /* the tile configuration is loaded once per output block (gemm_kernels.begin) */
    for (int s = 0; s < nseg; s++) {
        /* tile loads take whole 64-k chunks of A: a segment that starts inside a chunk
         * (activation groups that are no multiple of 64) goes the scalar way */
        const int q0 = s * seg_q, qfull = q0 % 16 ? 0 : (seg_q / 16) * 16;
        _tile_zero(0); _tile_zero(1); _tile_zero(2); _tile_zero(3);
        for (int q = q0; q < q0 + qfull; q += 16) {
            const uint8_t *brow;
            if (is_i4 == 1) {
                /* packed rows q/2 .. q/2+7, each 128 bytes: low nibble quad 2j, high 2j+1 */
                const __m512i lo = _mm512_set1_epi8(0x0f);
                for (int j = 0; j < 8; j++) {
                    const uint8_t *src = bp + (int64_t)(q / 2 + j) * NR * 4;
                    for (int h = 0; h < 2; h++) {
                        __m512i v = _mm512_loadu_si512(src + h * 64);
                        _mm512_store_si512(b4 + (2 * j) * 128 + h * 64, _mm512_and_si512(v, lo));
                        _mm512_store_si512(b4 + (2 * j + 1) * 128 + h * 64,
                                           _mm512_and_si512(_mm512_srli_epi16(v, 4), lo));
                    }
                }
                brow = b4;
                MEMORY_FENCE();
            } else {
                brow = bp + (int64_t)q * NR * 4;
            }
            const int8_t *achunk = ap + (int64_t)(q / 16) * MR * 64;
            _tile_loadd(4, achunk, 64);
            _tile_loadd(5, achunk + 16 * 64, 64);
            _tile_loadd(6, brow, NR * 4);
            _tile_loadd(7, brow + 64, NR * 4);
            _tile_dpbsud(0, 4, 6);
            _tile_dpbsud(1, 4, 7);
            _tile_dpbsud(2, 5, 6);
            _tile_dpbsud(3, 5, 7);
        }
        store_c_tiles(blk);
        /* scalar tail for quads past the last multiple of 16 (small groups only) */
        for (int q = q0 + qfull; q < q0 + seg_q; q++) {
            for (int i = 0; i < MR; i++)
                for (int j = 0; j < NR; j++) {
                    int32_t d = 0;
                    for (int t = 0; t < 4; t++) {
                        int u;
                        if (is_i4 == 1) {
                            uint8_t byte = bp[((int64_t)(q / 2) * NR + j) * 4 + t];
                            u = (q & 1) ? (byte >> 4) : (byte & 15);
                        } else {
                            u = bp[((int64_t)q * NR + j) * 4 + t];
                        }
                        d += u * (int32_t)ap[gemm_int_a_offset((int64_t)q * 4 + t, i, kc, MR)];
                    }
                    blk[i * NR + j] += d;
                }
        }
        if (nseg == 1) {
            /* the LoRA's tile dots go to the tile unit before the int block's AVX-512 fold,
             * which runs while they do (only the adds of lacc wait for them) */
            if (lt) lora_tiles(lt, lacc);
            apply_store_single(blk, off, asum, sa, sw, c, ldc, mr, nr, accumulate, lt ? lacc : NULL);
            return;
        }
        if (lt && s == nseg - 1) lora_tiles(lt, lacc);
        apply_segment(acc, blk, off, asum + s * MR, sa + s * MR, sw + s * sw_stride);
    }
    store_block(acc, c, ldc, mr, nr, accumulate, lt ? lacc : NULL);
}

/* The table's entries: ukr_int_amx with is_i4 = 0 (ukr_i8), 1 (ukr_i4), 2 (ukr_i4w). */
#define DEFINE_INT_AMX(name, is_i4)                                                          \
    static void name(int MR_, int NR_, int nseg, int seg_q, const int8_t *ap, const uint8_t *bp, \
                     const float *sa, const int32_t *asum, const float *sw, int64_t sw_stride,  \
                     float *c, int64_t ldc, int mr, int nr, int accumulate) {                   \
        (void)MR_; (void)NR_;                                                                   \
        ukr_int_amx(is_i4, nseg, seg_q, ap, bp, sa, asum, sw, sw_stride, c, ldc, mr, nr, accumulate, NULL); \
    }
DEFINE_INT_AMX(ukr_i8_amx, 0)
DEFINE_INT_AMX(ukr_i4_amx, 1)
DEFINE_INT_AMX(ukr_i4w_amx, 2)

/* The fused LoRA store (gemm_ukr_int_lora): kind 0/1/2 as is_i4 above. */
static void ukr_int_lora_amx(int kind, int MR_, int NR_, int nseg, int seg_q, const int8_t *ap, const uint8_t *bp,
                             const float *sa, const int32_t *asum, const float *sw, int64_t sw_stride, float *c,
                             int64_t ldc, int mr, int nr, int accumulate, const gemm_lora_tile *lt) {
    (void)MR_; (void)NR_;
    if (kind == 0) ukr_int_amx(0, nseg, seg_q, ap, bp, sa, asum, sw, sw_stride, c, ldc, mr, nr, accumulate, lt);
    else if (kind == 1) ukr_int_amx(1, nseg, seg_q, ap, bp, sa, asum, sw, sw_stride, c, ldc, mr, nr, accumulate, lt);
    else ukr_int_amx(2, nseg, seg_q, ap, bp, sa, asum, sw, sw_stride, c, ldc, mr, nr, accumulate, lt);
}

/* ---- bf16 ---------------------------------------------------------------------- */


/* x rows -> bf16 in 32-k chunks [kc32/32][MR][32] (round to nearest even, zero padded), so
 * that each A tile load reads 1 KB contiguously (row-major rows kc apart put a tile's 16
 * rows in few L1 sets when kc is a multiple of 1024). */
static void pack_a_bf16_tiles(const float *x, int64_t ldx, int64_t rows, int64_t kc, int MR_,
                              void *dst) {
    (void)MR_;
    uint16_t *d = (uint16_t *)dst;
    const int64_t kp = kc32(kc);
    for (int64_t k0 = 0; k0 < kp; k0 += 32) {
        uint16_t *chunk = d + k0 * MR;
        const int64_t kk = H3_MIN(32, kc - k0); /* valid k in this chunk (<= 0: padding) */
        const __mmask16 m0 = kk >= 16 ? 0xffff : kk <= 0 ? 0 : (__mmask16)((1u << kk) - 1u);
        const __mmask16 m1 = kk >= 32 ? 0xffff : kk <= 16 ? 0 : (__mmask16)((1u << (kk - 16)) - 1u);
        for (int64_t i = 0; i < MR; i++) {
            uint16_t *row = chunk + i * 32;
            if (i >= rows || kk <= 0) { memset(row, 0, 64); continue; }
            const float *src = x + i * ldx + k0;
            __m512 v0 = _mm512_maskz_loadu_ps(m0, src), v1 = _mm512_maskz_loadu_ps(m1, src + 16);
            _mm256_storeu_si256((__m256i *)row, (__m256i)_mm512_cvtneps_pbh(v0));
            _mm256_storeu_si256((__m256i *)(row + 16), (__m256i)_mm512_cvtneps_pbh(v1));
        }
    }
}

static void ukr_bf16_amx(int MR_, int NR_, int64_t kc, const float *ap, const float *bp,
                         float *c, int64_t ldc, int mr, int nr, int accumulate) {
    (void)MR_; (void)NR_;
    float acc[MR * NR] __attribute__((aligned(64)));
    amx_bf16_dots32((const uint16_t *)ap, MR, 16 * 32, 64, (const uint16_t *)bp, kc32(kc));
    store_c_tiles(acc);
    store_block(acc, c, ldc, mr, nr, accumulate, NULL);
}

/* u rows -> bf16 rows of ldd elements (round to nearest even, as pack_a_bf16_tiles rounds
 * them for the unfused path: the same values), zero past R, then rows_out - rows zero rows:
 * the fused LoRA's u operand (lora_tiles loads 16 rows x 32 ranks from any rank). */
static void lora_pack_u_amx(const float *u, int64_t rows, int64_t R, void *dst, int64_t ldd, int64_t rows_out) {
    uint16_t *d = (uint16_t *)dst;
    for (int64_t i = 0; i < rows_out; i++, d += ldd) {
        if (i >= rows) { memset(d, 0, (size_t)ldd * 2); continue; }
        const float *src = u + i * R;
        for (int64_t k = 0; k < ldd; k += 16) {
            const int64_t kk = H3_MIN(16, R - k), kd = H3_MIN(16, ldd - k);
            const __mmask16 m = kk >= 16 ? 0xffff : kk <= 0 ? 0 : (__mmask16)((1u << kk) - 1u);
            const __mmask16 md = kd >= 16 ? 0xffff : (__mmask16)((1u << kd) - 1u);
            _mm256_mask_storeu_epi16(d + k, md, (__m256i)_mm512_cvtneps_pbh(_mm512_maskz_loadu_ps(m, src + k)));
        }
    }
}

/* The int K block stays the common 1024 (kc_int 0): a longer block would cut the per-tile
 * scale/store overhead (~1.3x estimated) but change the float summation of the per-block
 * partial results, and integer modes are bit-identical across every path by contract.
 * For bf16-stored weights.  The driver's panel buffers are sized for f32, so the bf16
 * panels (half the bytes) always fit; kc is a multiple of 32 except the last block. */
const gemm_kernels gemm_kernels_amx = {
    .mr = MR, .nr = NR, .kc = 2048, .mc = MR * 8, .nc = 256,
    .gemv_max_m = 0,
    .ukr_f32 = ukr_bf16_amx, .unpack = unpack_bf16, .pack_a = pack_a_bf16_tiles,
    .ukr_i8 = ukr_i8_amx, .ukr_i4 = ukr_i4_amx, .ukr_i4w = ukr_i4w_amx, .int_a_tiles = 1,
    /* the activation quantiser is AVX-512's (a NULL member would be the scalar reference:
     * ~100 ms of a 650 ms single-thread int8 call at M = 2048, K = 5376) */
    .quant_row = gemm_quant_row_avx512, .swiglu_row = gemm_swiglu_row_avx512,
    /* LDTILECFG once per output block, not per micro-kernel call: -22% of a single
     * thread's int8 time at M = 2048, K = 5376 (bench/results/amx_gemm_overheads.txt) */
    .begin = amx_config_tiles,
    /* a LoRA's up product in the int kernels' final store (gemm_lora.c, "fused") */
    .ukr_int_lora = ukr_int_lora_amx, .lora_pack_u = lora_pack_u_amx, .lora_u_elem = 2,
};
