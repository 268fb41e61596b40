/* gguf_impl.h — GGUF block formats shared by the reference pieces (gguf_ref.c: formats and
 * dequantisation; gguf_panel_ref.c: the GEMM's panel decoder, quantiser and scalar
 * micro-kernel), the SIMD micro-kernels (gguf_avx2.c, gguf_avxvnni.c, gguf_avx512.c,
 * gguf_amx.c, gguf_neon.c) and the GGUF linear's driver (gemm_gguf.c on gemm_panel.c).  Internal.
 *
 * Every quantised type, decoded, is small integers q with a float scale and offset per
 * sub-block of 16 or 32 values: w[k] = sc * q[k] + mn (mn = 0 for Q8_0, Q4_0, Q5_0, Q3_K,
 * Q6_K, IQ4_NL, IQ4_XS; for the IQ4s q is the code's int8 level).  The GEMM's panel holds
 * them unsigned, u = q + off (off: 128, 8, 16, 4, 32, 128, 128 for those seven, 0 for the
 * types with an offset, whose q are unsigned already), so that one
 * x86 instruction (vpmaddubsw, vpdpbusd) multiplies u by the signed int8 activations a.
 * Each row of x is quantised per group of GGUF_AG = 256 inputs (one float scale d per group;
 * a row's last group may be shorter).  Per segment (the type's sub-block: 32 values where
 * the scales are per 32, else 16; a group holds 256 / seg of them) the exact int32 dot and
 * the activations' integer sum asum give, in one float order on every path (groups and
 * their segments in ascending k):
 *   dot = sum u a - off * asum
 *   h   = 0                                               (at each group's start)
 *   h   = fmaf((float)dot, sc, h)
 *   h   = fmaf(mn, (float)asum, h)                        (types with an offset)
 *   f   = fmaf(d, h, f)                                   (at each group's end)
 * so every ISA's result is the reference's, bit for bit.  Why groups of 256 and not 32 (the
 * format's finest scale): d then multiplies once per group instead of once per segment, one
 * vector instruction fewer beside every 8 (seg 32) or 4 (seg 16) dot instructions -- the
 * AVX-512 VNNI kernel ran 10% (Q8_0) to 20% (Q6_K, Q3_K) faster on Zen 4 (docs/gguf.md);
 * 256 is the K-quants' super-block, the granularity ggml quantises activations to for them
 * (q8_K), and finer than the per-row scale of h3cy's int8 mode. */
#ifndef H3_GGUF_IMPL_H
#define H3_GGUF_IMPL_H

#include "h3_internal.h"

/* the finest sub-block any format has (h3_gguf_dequant's decode) */
#define GGUF_SUB 16
/* inputs per activation scale (a group; K blocks and kernel calls start on a group) */
#define GGUF_AG 256
/* the GEMM's panel: weight rows, inputs per decoded K block */
#define GGUF_NR 16
#define GGUF_KB 512

int gguf_is_quant(int type);
int gguf_has_min(int type);

/* How the GEMM runs a type: its segment (16 or 32), the offset added to q to make it
 * unsigned, the largest u, and how many k-quads of vpmaddubsw pair sums (<= 2 * umax *
 * 127 each) add up exactly in int16 (0 for Q8_0, whose u - 128 are full int8). */
typedef struct {
    int seg, off, umax, g16, has_min;
} gguf_kind;
/* NULL for a type the GEMM does not run */
const gguf_kind *gguf_kind_of(int type);

/* Q4_K / Q5_K: the six-bit scale and min of sub-block j (of 32 values) */
static inline void gguf_k4_scale_min(const uint8_t *b, int j, int *sc, int *m) {
    if (j < 4) {
        *sc = b[j] & 63;
        *m = b[j + 4] & 63;
    } else {
        *sc = (b[j + 4] & 15) | (b[j - 4] >> 6) << 4;
        *m = (b[j + 4] >> 4) | (b[j] >> 6) << 4;
    }
}

/* IQ4_NL / IQ4_XS: the int8 level of each 4-bit code; IQ4_XS: the six-bit (biased by 32)
 * scale of sub-block j (of 32 values) */
extern const int8_t gguf_iq4_levels[16];
static inline int gguf_iq4xs_scale(const uint8_t *b, int j) {
    const int sh = b[2] | b[3] << 8;
    return ((b[4 + j / 2] >> (4 * (j % 2))) & 15) | ((sh >> (2 * j)) & 3) << 4;
}

/* Q3_K: the six-bit scale of sub-block j (of 16 values), unbiased */
static inline int gguf_k3_scale(const uint8_t *b, int j) {
    int lo = j < 8 ? (b[j] & 15) : (b[j - 8] >> 4);
    int hi = (b[8 + j % 4] >> (2 * (j / 4))) & 3;
    return (lo | hi << 4) - 32;
}

/* one block -> q[blk], sc/mn[blk/16] (w = sc * q + mn); the scales alone */
void gguf_decode_block(int type, const uint8_t *p, int8_t *q, float *sc, float *mn);
void gguf_decode_scales(int type, const uint8_t *p, float *sc, float *mn);

/* row x[K] (K % 32 == 0) -> a[K] int8 (|a| <= 127), d[ceil(K / 256)] (d = max|x| / 127 per
 * group of 256, the last one the rest of the row; a = rint(x / d)), as[K/16 + K/32]: the sums
 * of each 16 a, then of each 32 */
typedef void (*gguf_quant_fn)(const float *x, int64_t K, int8_t *a, float *d, int32_t *as);
void gguf_quant_act_row_ref(const float *x, int64_t K, int8_t *a, float *d, int32_t *as);
#if H3_X86
void gguf_quant_act_row_avx2(const float *x, int64_t K, int8_t *a, float *d, int32_t *as);
/* the same, a stored as a + 128 (a ^ 0x80) and the sums as float (in as's int32 slots): what
 * gguf_ukr_avx512 and gguf_ukr_avxvnni read */
void gguf_quant_act_row_avx2u(const float *x, int64_t K, int8_t *a, float *d, int32_t *as);
#endif

/* Decode inputs [0, nk) of rows[0..nr) (each pointing at the K block's first block of a
 * row of type `type`; nk a multiple of the block, <= GGUF_KB; nr <= 16, the rest of the
 * panel zero) into the panel:
 *   u  [nk / 4][16][4] uint8: quad j (4 inputs), column c at (j * 16 + c) * 4
 *   sc [nk / seg][16], mn [nk / seg][16] (mn only for types with an offset) */
typedef void (*gguf_decode_fn)(int type, const uint8_t *const *rows, int nr, int nk, uint8_t *u, float *sc, float *mn);
void gguf_decode_panel_ref(int type, const uint8_t *const *rows, int nr, int nk, uint8_t *u, float *sc, float *mn);
/* the SIMD decoders' column past nr of one block (the reference's zero column): its blk values
 * in v zero, its nseg scales (a segment GGUF_NR floats on from sc; none when sc is NULL) and,
 * where the type has them, mins zero */
static inline void gguf_panel_zero_column(uint8_t *v, int blk, int nseg, int has_min, float *sc, float *mn) {
    memset(v, 0, (size_t)blk);
    for (int s = 0; sc && s < nseg; s++) {
        sc[s * GGUF_NR] = 0.0f;
        if (has_min) mn[s * GGUF_NR] = 0.0f;
    }
}
#if H3_X86
/* the same panel (byte for byte): Q8_0, the K-quants Q3_K..Q6_K and the IQ4s unpacked 32 values at
 * a time in AVX2, the other types by the reference; for Q3_K..Q6_K and the IQ4s, sc NULL decodes u
 * alone (the amx path's Q4_K / Q5_K take their scales from gguf_kq_scales_avx512) */
void gguf_decode_panel_avx2(int type, const uint8_t *const *rows, int nr, int nk, uint8_t *u, float *sc, float *mn);
/* the avx512 and amx paths' (gguf_decode_avx512.c): Q4_K / Q5_K's u alone (sc NULL) 16 columns at a
 * time in AVX-512, everything else gguf_decode_panel_avx2; the same panel */
void gguf_decode_panel_avx512(int type, const uint8_t *const *rows, int nr, int nk, uint8_t *u, float *sc, float *mn);
#endif
#if H3_ARM64
/* the same in AArch64 Advanced SIMD (gguf_decode_neon.c), for the same types */
void gguf_decode_panel_neon(int type, const uint8_t *const *rows, int nr, int nk, uint8_t *u, float *sc, float *mn);
#endif

#if H3_X86
/* Once per kernel call, for the kernels that take the panel signed (the VNNI ones on unsigned
 * activations, the AMX tiles): w = u - off (wrapping to q for Q8_0's 128; 32-byte aligned)
 * and, unless start is NULL, each segment's start -128 * the sum of its w per column,
 * start[s * 16 + c] (32-byte aligned): sum (a + 128) w + start = sum a w, exactly. */
void gguf_panel_signed_avx2(const gguf_kind *t, int nseg, const uint8_t *u, int8_t *w, int32_t *start);
#endif

/* The micro-kernel: cb[i][c] (i < mr, c < 16) += the nseg segments of row i of the
 * activations (a + i * lda, starting on a group; d + i * ldd per group of 256; as + i * ldas
 * per segment) by the panel's column c, in the order above (as: the sums of the type's
 * segments).  mn NULL for types without an offset. */
typedef void (*gguf_ukr_fn)(int mr, const gguf_kind *t, int nseg, const int8_t *a, int64_t lda, const float *d,
                            int64_t ldd, const int32_t *as, int64_t ldas, const uint8_t *u, const float *sc,
                            const float *mn, float *cb);
void gguf_ukr_ref(int mr, const gguf_kind *t, int nseg, const int8_t *a, int64_t lda, const float *d, int64_t ldd,
                  const int32_t *as, int64_t ldas, const uint8_t *u, const float *sc, const float *mn, float *cb);
#if H3_X86
void gguf_ukr_avx2(int mr, const gguf_kind *t, int nseg, const int8_t *a, int64_t lda, const float *d, int64_t ldd,
                   const int32_t *as, int64_t ldas, const uint8_t *u, const float *sc, const float *mn, float *cb);
void gguf_ukr_avxvnni(int mr, const gguf_kind *t, int nseg, const int8_t *a, int64_t lda, const float *d,
                      int64_t ldd, const int32_t *as, int64_t ldas, const uint8_t *u, const float *sc,
                      const float *mn, float *cb);
/* on activations stored unsigned, a + 128, with float sums (gguf_quant_act_row_avx2u's);
 * _signed: on the signed quantiser's a and int sums (the AMX tile kernel's rows past the last 16) */
void gguf_ukr_avx512(int mr, const gguf_kind *t, int nseg, const int8_t *a, int64_t lda, const float *d,
                     int64_t ldd, const int32_t *as, int64_t ldas, const uint8_t *u, const float *sc,
                     const float *mn, float *cb);
/* two panels (u0 | u1, their scales) at once, cb rows of 32 floats (the same bits per column) */
void gguf_ukr_avx512_x2(int mr, const gguf_kind *t, int nseg, const int8_t *a, int64_t lda, const float *d,
                        int64_t ldd, const int32_t *as, int64_t ldas, const uint8_t *u0, const float *sc0,
                        const float *mn0, const uint8_t *u1, const float *sc1, const float *mn1, float *cb);
void gguf_ukr_avx512_signed(int mr, const gguf_kind *t, int nseg, const int8_t *a, int64_t lda, const float *d,
                            int64_t ldd, const int32_t *as, int64_t ldas, const uint8_t *u, const float *sc,
                            const float *mn, float *cb);
/* AMX tiles (gguf_amx.c; needs AVX512-VNNI too: rows past the last 16 run gguf_ukr_avx512_signed) */
void gguf_ukr_amx(int mr, const gguf_kind *t, int nseg, const int8_t *a, int64_t lda, const float *d, int64_t ldd,
                  const int32_t *as, int64_t ldas, const uint8_t *u, const float *sc, const float *mn, float *cb);
#endif
/* The K-quants whose sub-block scales are 6-bit integers (Q4_K, Q5_K) have a second order,
 * the AMX path's (gguf_kq_amx.c): per super-block of 256 inputs (one group), with the
 * integer scales sc_j and mins m_j of its 8 sub-blocks and the block's d and dmin,
 *   S   = sum_j sc_j * dot_j,  Mi = sum_j m_j * asum_j          (int32, exact)
 *   h   = fmaf((float)Mi, -dmin, (float)S * d)
 *   f   = fmaf(dact, h, f)
 * Exact integer sums where the order above rounds after every sub-block: it agrees with it to
 * ~1e-7 relative, not bit for bit.  Why a second order: on tiles it lets the scales ride in
 * the weights (B = u * (sc & 7) and u * (sc >> 3), both unsigned bytes), so one tile store and
 * fold serves 256 inputs instead of 32 (docs/gguf.md, session 27).
 * gguf_kq_scales: the raw blocks of the K block (as gguf_decode_fn's rows) -> isc, imn
 * [nk / 32][16] and ds, dm [nk / 256][16] (dm = -dmin; columns past nr zero).
 * gguf_ukr_kq_*: cb[i][c] (i < mr) += the nsb super-blocks of row i (as: the sums per 32) by
 * the panel's column c (u as gguf_decode_fn writes it) in that order. */
void gguf_kq_scales(int type, const uint8_t *const *rows, int nr, int nk, uint8_t *isc, uint8_t *imn, float *ds,
                    float *dm);
/* the panel decoder's float segment scales (and, for the types with them, offsets) alone, as
 * gguf_decode_panel_ref writes them (sc, mn: [segment][GGUF_NR], the columns past nr 0.0; mn
 * untouched for the types without); the reference of gguf_float_scales_avx512 */
void gguf_float_scales_ref(int type, const uint8_t *const *rows, int nr, int nk, float *sc, float *mn);
#if H3_X86
/* the same floats for Q4_K, Q5_K and Q6_K, 16 columns a vector (gguf_kq_scales_avx512.c; AVX-512F) */
void gguf_float_scales_avx512(int type, const uint8_t *const *rows, int nr, int nk, float *sc, float *mn);
/* the same bytes and floats, 16 columns a vector (gguf_kq_scales_avx512.c; AVX-512F) */
void gguf_kq_scales_avx512(int type, const uint8_t *const *rows, int nr, int nk, uint8_t *isc, uint8_t *imn,
                           float *ds, float *dm);
#endif
void gguf_ukr_kq_ref(int mr, int nsb, const int8_t *a, int64_t lda, const float *d, int64_t ldd, const int32_t *as,
                     int64_t ldas, const uint8_t *u, const uint8_t *isc, const uint8_t *imn, const float *ds,
                     const float *dm, float *cb);
/* the K-quants' activation tile layout (the kq route, gemm_gguf.c): rows a tile holds (two
 * 16-row A tiles) and the bytes of one 64-input chunk of a tile's rows */
#define GGUF_KQ_TILE 32
#define GGUF_KQ_CHUNK (GGUF_KQ_TILE * 64)
/* the same from the activations in the 32-row tile layout (gguf_ukr_amx_kq_tiles, below) */
void gguf_ukr_kq_tiles_ref(int mr, int nsb, const int8_t *a, int64_t ldt, const float *d, int64_t ldd,
                           const int32_t *as, int64_t ldas, const uint8_t *u, const uint8_t *isc, const uint8_t *imn,
                           const float *ds, const float *dm, float *cb);
#if H3_X86
void gguf_ukr_amx_kq(int mr, int nsb, const int8_t *a, int64_t lda, const float *d, int64_t ldd, const int32_t *as,
                     int64_t ldas, const uint8_t *u, const uint8_t *isc, const uint8_t *imn, const float *ds,
                     const float *dm, float *cb);
/* the same sums (the same bits) from the activations in the 32-row tile layout: row i's input k
 * at a + (i / 32) * ldt + (k / 64) * GGUF_KQ_CHUNK + (i % 32) * 64 + k % 64 (ldt = 32 K for the whole
 * row; a points at the K block's first chunk), every row of the last 32 past mr present and
 * zero (the driver's kq route, gemm_gguf.c) */
void gguf_ukr_amx_kq_tiles(int mr, int nsb, const int8_t *a, int64_t ldt, const float *d, int64_t ldd,
                           const int32_t *as, int64_t ldas, const uint8_t *u, const uint8_t *isc, const uint8_t *imn,
                           const float *ds, const float *dm, float *cb);
#endif
/* gguf_ukr_amx_q8d's scalar definition (gguf_panel_ref.c), below */
typedef void (*gguf_ukr_q8d_fn)(int mr, int nseg, const uint8_t *w, int64_t ldw, const int8_t *a, int64_t ldg,
                                const float *d, int64_t ldd, float *cbt, int64_t ldc);
void gguf_ukr_q8d_ref(int mr, int nseg, const uint8_t *w, int64_t ldw, const int8_t *a, int64_t ldg, const float *d,
                      int64_t ldd, float *cbt, int64_t ldc);
#if H3_X86
/* Q8_0 on AMX tiles from the blocks as stored (gguf_q8d_amx.c): the weights are the A tiles,
 * the activations B in the 16-row tile layout ([K / 4][16 rows][4] per 16 rows: the driver's
 * a_tile 16, a_chunk 4).  cbt[c * ldc + i] (c < 16, i < mr: cb transposed) += row i's nseg
 * segments by weight row c, in the order above (the reference's bits).  w: the K block's
 * first block of 16 weight rows ldw bytes apart; a: row tile 0's K block, tile j at a + j * ldg
 * (rows past mr up to the tile's end are read, zero); d + i * ldd: row i's group scales. */
void gguf_ukr_amx_q8d(int mr, int nseg, const uint8_t *w, int64_t ldw, const int8_t *a, int64_t ldg, const float *d,
                      int64_t ldd, float *cbt, int64_t ldc);
#endif
#if H3_ARM64
void gguf_ukr_neon(int mr, const gguf_kind *t, int nseg, const int8_t *a, int64_t lda, const float *d, int64_t ldd,
                   const int32_t *as, int64_t ldas, const uint8_t *u, const float *sc, const float *mn, float *cb);
#endif
/* the quantiser, the micro-kernel and the panel decoder a linear on path `isa` runs */
gguf_quant_fn gguf_quant_for(h3_isa isa);
gguf_ukr_fn gguf_ukr_for(h3_isa isa);
gguf_decode_fn gguf_decode_for(h3_isa isa);

#endif
