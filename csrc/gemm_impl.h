/* gemm_impl.h — the GEMM driver's contract with its per-ISA micro-kernels.
 *
 * The driver (gemm.c) splits y[M,N] = x[M,K].W[N,K]^T into BLIS-style blocks:
 *   phase 1 (all threads, by MR-row panels): pack A once for the whole call —
 *     float modes: Ap[M/MR][K][MR] f32 (or the table's pack_a layout in that room);
 *     int modes: quantise each row, then [M/MR] panels of [kb/4][MR][4] int8 per K
 *     block (or 64-k chunks [kb/64][MR][64] with int_a_tiles), plus per-segment scales and row sums;
 *   phase 2, for each thread's column range, jc over NC columns, pc over KC of K,
 *     (float modes) unpack the W block to f32 panels Bp[nc/NR][kc][NR],
 *     ic over MC rows, then the micro-kernel on every MR x NR tile (int modes with
 *     small M walk each weight panel's K contiguously instead).
 * A micro-kernel owns MR x NR accumulators in registers; it writes (first K block) or
 * adds (later blocks) its tile of C, storing only the valid mr x nr corner.
 * Every ISA provides the same functions; a NULL member falls back to the _ref version
 * (which is generic in MR/NR: every micro-kernel receives its table's MR and NR). */
#ifndef H3_GEMM_IMPL_H
#define H3_GEMM_IMPL_H

#include "h3_internal.h"

/* Float micro-kernel: C[mr,nr] (+)= Ap[kc][MR] . Bp[kc][NR] (Ap, Bp zero-padded). */
typedef void (*gemm_ukr_f32_fn)(int MR, int NR, int64_t kc, const float *ap, const float *bp, float *c,
                                int64_t ldc, int mr, int nr, int accumulate);

/* Unpack a block of W (row-major [N,K], storage wtype) to f32 panels:
 * rows n0..n0+nc-1 (rows >= n_valid read as zero), columns k0..k0+kc-1,
 * out[(j/NR)][k][j%NR].  NR is the ISA's. */
typedef void (*gemm_unpack_fn)(int wtype, const void *w, int64_t ldw, int64_t n0, int64_t nc,
                               int64_t n_valid, int64_t k0, int64_t kc, float *out, int nr);

/* Row-major dot kernel for small M (memory-bound): y[m, n] = sum_k x[m,k] W[n,k]
 * for m < M, n in [n0, n1), written to y[m*ldy + (n - n0)].  Storage wtype as above. */
typedef void (*gemm_gemv_fn)(int wtype, int64_t M, int64_t K, const float *x, int64_t ldx,
                             const void *w, int64_t ldw, int64_t n0, int64_t n1, float *y,
                             int64_t ldy);

/* Integer micro-kernel (I8 and I4 weights, int8 activations).
 * The K block is nseg segments of seg_q k-quads (4 k each); within a segment one
 * activation scale per row and one weight scale per column apply:
 *   C[m,n] (+)= sum_s sa[s*MR + m] * sw[s*sw_stride + n] * dot_s(m, n)
 * where dot_s is the exact int32 dot product of the signed weights and activations.
 *   ap: [nseg*seg_q][MR][4] int8 activations (zero-padded rows)
 *   bp (I8): [nseg*seg_q][NR][4] uint8 = q_w + 128
 *   bp (I4): [nseg*seg_q/2][NR][4] bytes: low nibble = quad 2j, high = quad 2j+1, q_w + 8
 *   asum: [nseg][MR] int32 sum of the row's activations over the segment (lets kernels
 *         that multiply unsigned weights remove the +128 / +8 offset exactly). */
typedef void gemm_ukr_int(int MR, int NR, int nseg, int seg_q, const int8_t *ap, const uint8_t *bp,
                          const float *sa, const int32_t *asum, const float *sw, int64_t sw_stride,
                          float *c, int64_t ldc, int mr, int nr, int accumulate);
typedef gemm_ukr_int *gemm_ukr_int_fn;

/* A LoRA's up product for one output tile, fused into an int micro-kernel's final store
 * (gemm_lora.c, "fused"): rows i < MR of u from its first rank (u + i*ldu), times the LoRA's
 * packed B panel of the tile's NR columns over kc ranks (the layouts of the table's own
 * float path: f32 u and [kc][NR] f32 B for the reference; bf16 u rows and bf16 pairs
 * [kc32/2][NR][2] for AMX, u's rows readable to a multiple of 32 ranks). */
typedef struct {
    const void *u;
    int64_t ldu;
    const float *b;
    int64_t kc;
} gemm_lora_tile;

/* The int micro-kernel of `kind` (0: ukr_i8, 1: ukr_i4, 2: ukr_i4w) whose store also adds
 * lt's product: C = (C (+) the kernel's K block) + lt's sum, the operations of the kernel
 * followed by the table's float kernel on the LoRA, added to C once (lt NULL: the plain
 * kernel).  Optional: a table without one runs the LoRA in a second pass (gemm_lora_add). */
typedef void gemm_ukr_int_lora(int kind, int MR, int NR, int nseg, int seg_q, const int8_t *ap,
                               const uint8_t *bp, const float *sa, const int32_t *asum, const float *sw,
                               int64_t sw_stride, float *c, int64_t ldc, int mr, int nr, int accumulate,
                               const gemm_lora_tile *lt);

/* Row quantiser: x[K] -> q[Kp] int8 (zero past K), one scale per group of ag channels:
 * scale = amax/127 (0 -> all zeros, scale 0); q = round-half-even(x/scale) in [-127,127]. */
typedef void (*gemm_quant_row_fn)(const float *x, int64_t K, int64_t Kp, int64_t ag,
                                  int8_t *q, float *scales);

/* Optional float A packing (NULL -> f32 [kc][MR]): rows (<= MR) rows of x from column
 * k0, kc wide, into one MR-row panel at dst (which has room for MR*kc floats). */
typedef void (*gemm_pack_a_fn)(const float *x, int64_t ldx, int64_t rows, int64_t kc, int MR,
                               void *dst);

typedef struct {
    int mr, nr;           /* micro-tile */
    int kc, mc, nc;       /* cache blocking (float modes) */
    int kc_int;           /* int K block target in k (0 -> 1024).  Changes the float summation
                             order of int results: keep it equal across tables (bit-identity) */
    int gemv_max_m;       /* use gemv for M <= this (float modes) */
    gemm_ukr_f32_fn ukr_f32;
    gemm_unpack_fn unpack;
    gemm_gemv_fn gemv;
    gemm_ukr_int_fn ukr_i8, ukr_i4;
    gemm_quant_row_fn quant_row;
    gemm_pack_a_fn pack_a;  /* NULL -> f32 [kc][MR] */
    int int_a_tiles;        /* 1: int A panels in 64-k chunks of MR rows, [kb/64][MR][64] (a
                               narrower last chunk keeps its width as row stride; see
                               gemm_int_a_offset), for AMX tile loads; 0: [kq][MR][4] */
    /* SwiGLU epilogue of one output row: g[j] = silu(g[j] + bg[j]) * (v[j] + bv[j]) (bg, bv
     * may be NULL).  Every path computes the same bits (gemm_swiglu.inc). */
    void (*swiglu_row)(float *g, const float *v, int64_t n, const float *bg, const float *bv);
    /* NULL, or ukr_i4 reading widened weights: the driver turns each K block of a column
     * block's nibbles into the I8 layout [kq][NR][4] (values q_w + 8, gemm_widen_i4) once,
     * instead of every micro-kernel call widening its panel again for every MR rows.
     * Same dots and epilogue as ukr_i4 (same bits); used for large M only. */
    gemm_ukr_int_fn ukr_i4w;
    void (*begin)(void);    /* NULL, or called on the running thread before a block's micro-kernel
                               calls (AMX: load the tile configuration once, not per call) */
    /* NULL, or the fused LoRA kernel (above) and, when its u is not the f32 u itself, the
     * packing of u's rows for it: rows rows of R floats (row stride R) -> dst rows of ldd
     * elements, zero past R, and rows_out - rows zero rows after them.  Neither is
     * filled from the reference table (gemm_kernels_for): a table opts in. */
    gemm_ukr_int_lora *ukr_int_lora;
    void (*lora_pack_u)(const float *u, int64_t rows, int64_t R, void *dst, int64_t ldd, int64_t rows_out);
    int lora_u_elem;        /* bytes per element of the packed u (lora_pack_u) */
} gemm_kernels;

/* The per-ISA tables (NULL members fall back to ref).  Packed int layouts depend on nr,
 * so a linear keeps the table it was packed for. */
extern const gemm_kernels gemm_kernels_ref;
#if H3_X86
extern const gemm_kernels gemm_kernels_avx2;
extern const gemm_kernels gemm_kernels_avxvnni;     /* avx2 with VEX vpdpbusd int kernels */
extern const gemm_kernels gemm_kernels_avx512;
extern const gemm_kernels gemm_kernels_avx512_novnni; /* AVX-512 without VNNI (Skylake-X) */
extern const gemm_kernels gemm_kernels_amx;
extern const gemm_kernels gemm_kernels_avx512_bf16dp; /* bf16 weights x bf16-valued inputs */
#endif
#if H3_ARM64
extern const gemm_kernels gemm_kernels_neon;
/* The same tile and packed int layout with the int micro-kernels on SMMLA (i8mm); and
 * bf16 weights x bf16-valued inputs on BFMMLA (bf16).  Complete tables (no NULL member):
 * a linear points at them directly (set_geometry), as at gemm_kernels_avx512_bf16dp. */
extern const gemm_kernels gemm_kernels_neon_i8mm;
extern const gemm_kernels gemm_kernels_neon_bf16;
#endif

/* Reference pieces, reusable by SIMD files for their tails. */
void gemm_ukr_f32_ref(int MR, int NR, int64_t kc, const float *ap, const float *bp, float *c,
                      int64_t ldc, int mr, int nr, int accumulate);
void gemm_unpack_ref(int wtype, const void *w, int64_t ldw, int64_t n0, int64_t nc,
                     int64_t n_valid, int64_t k0, int64_t kc, float *out, int nr);
void gemm_gemv_ref(int wtype, int64_t M, int64_t K, const float *x, int64_t ldx,
                   const void *w, int64_t ldw, int64_t n0, int64_t n1, float *y, int64_t ldy);
gemm_ukr_int gemm_ukr_i8_ref, gemm_ukr_i4_ref; /* (the int micro-kernel type above) */
gemm_ukr_int_lora gemm_ukr_int_lora_ref;
void gemm_quant_row_ref(const float *x, int64_t K, int64_t Kp, int64_t ag, int8_t *q,
                        float *scales);
void gemm_swiglu_row_ref(float *g, const float *v, int64_t n, const float *bg, const float *bv);
#if H3_X86
/* x86 integer pieces shared by tables (gemm_int_avx512.c, gemm_avx2.c). */
gemm_ukr_int gemm_ukr_i8_avx512vnni, gemm_ukr_i4_avx512vnni, gemm_ukr_i8_avx512bw, gemm_ukr_i4_avx512bw,
    gemm_ukr_i4w_avx512vnni, gemm_ukr_i4w_avx512bw;
gemm_ukr_int gemm_ukr_i8_avxvnni, gemm_ukr_i4_avxvnni; /* gemm_avxvnni.c */
void gemm_quant_row_avx512(const float *x, int64_t K, int64_t Kp, int64_t ag, int8_t *q,
                           float *scales);
void gemm_swiglu_row_avx512(float *g, const float *v, int64_t n, const float *bg, const float *bv);
#endif
/* int4 panel K block [kq/2][nr][4] nibbles -> [kq][nr][4] bytes 0..15 (kq even). */
void gemm_widen_i4(const uint8_t *src, int64_t kq, int nr, uint8_t *dst);
/* The table of `isa` with every NULL member replaced by the reference one (ukr_i4w stays
 * NULL where the ISA has none: the driver then calls ukr_i4). */
const gemm_kernels *gemm_kernels_for(h3_isa isa);

/* int_a_tiles layout: the byte of row i, k-offset k (0 <= k < kb) in a K block of length kb. */
static inline int64_t gemm_int_a_offset(int64_t k, int i, int64_t kb, int MR) {
    const int64_t c = k / 64, w = H3_MIN(64, kb - c * 64);
    return c * MR * 64 + i * w + (k - c * 64);
}

static inline float gemm_w_at(int wtype, const void *w, int64_t idx) {
    if (wtype == H3_DT_F32) return ((const float *)w)[idx];
    if (wtype == H3_DT_BF16) return h3_bf16_to_f32(((const uint16_t *)w)[idx]);
    return h3_f16_to_f32(((const uint16_t *)w)[idx]);
}

#endif
