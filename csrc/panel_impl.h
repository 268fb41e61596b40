/* panel_impl.h — the panel driver shared by the linears whose weights stay in a file's
 * block format (NVFP4: gemm_nvfp4.c; GGUF: gemm_gguf.c), run by gemm_panel.c.  Internal.
 *
 *   y[M,N] = x[M,K] . W[N,K]^T (+ bias) (+ epilogue)
 *
 * Phase 1 (split by rows of x): the format quantises each row of x to int8 per 32 inputs
 * (one float scale each; with integer sums per 16 where its weights have an offset), once
 * per activation "slot" (NVFP4 parts with different AWQ pre-scales need their own).
 * Phase 2 (split by panels of PN_NR output columns, fixed per thread, so results do not
 * depend on the thread count): for a block of PN_MC rows of x, each panel's 16 weight rows
 * are decoded a K block (PN_KB inputs) at a time to int8 in the [quad][16 columns][4]
 * layout with a float scale per segment (16 or 32 inputs) -- a few KB that stay in L1
 * while the block's rows pass -- and the format's micro-kernel accumulates the block's
 * float sums; the driver's epilogue (bias, SwiGLU pairs, gated residual) writes the panel.
 * The decode costs ~1/PN_MC of the dots.
 *
 * A format may change the panel's geometry (pn_fmt nr, mc, kb: NVFP4's bf16 route on AMX
 * tiles runs 32 columns, 1024-input K blocks), hold its activations in a tile layout (a_tile
 * rows a group, a_chunk inputs a chunk: [K / a_chunk][a_tile rows][a_chunk inputs] per group,
 * the rows of x past M zero; NVFP4's bf16 route: 32 x 32 of 2-byte values, the GGUF Q8_0 tile
 * route: 16 x 4, AMX's B layout), which the driver addresses, and keep its float sums
 * transposed (cb_t: [nr][mc], the epilogue reads them so); the defaults are the PN_* above. */
#ifndef H3_PANEL_IMPL_H
#define H3_PANEL_IMPL_H

#include "gemm_linear.h"

#define PN_NR 16  /* weight rows per decoded panel (output columns per micro-kernel) */
#define PN_MC 256 /* rows of x per block: the decoded panel is reused by all of them */
#define PN_KB 512 /* inputs per decoded K block */
#define PN_NR_MAX 32 /* the widest panel a format may ask for */
#define PN_TILE 32   /* rows (and inputs per chunk) of NVFP4's bf16 activation layout; the most
                        rows a tile group may have (a format's mc is a multiple of it) */
#define PN_GROUP_MAX 16 /* column panels per pass over the K blocks, at most (pn_fmt.group) */
_Static_assert(PN_MC % PN_TILE == 0, "blocks of whole tile groups");
#define PN_ACT 32 /* inputs per activation scale */

/* the quantised activations of the block's first row (row i at a + i * lda, ...) */
typedef struct {
    const uint8_t *a; /* [K] values of a_esize bytes (the format says how to read them) */
    int64_t lda;      /* bytes from one row to the next (a tile layout: from one group to the
                         next is a_tile * lda) */
    const float *d; /* [K / 32] scales */
    int64_t ldd;
    const int32_t *as; /* [K / 32 * sums] integer sums (NULL where the format needs none) */
    int64_t ldas;
} pn_act;

typedef struct pn_fmt pn_fmt;
struct pn_fmt {
    int nslots;       /* activation slots (distinct quantisations of x) */
    int sums;         /* int32 sums the quantiser writes per 32 inputs (0: none) */
    size_t buf_bytes; /* per thread: the decoded K block */
    int nr, mc, kb;   /* panel width (<= PN_NR_MAX), rows of x per block (a multiple of
                         PN_TILE), inputs per K block (a multiple of 32) */
    int a_esize;      /* bytes a quantised input takes (1, or 2: bf16) */
    int a_tile, a_chunk; /* 0: rows of a one after the other; else the tile layout (see above:
                            a_tile rows a group, a divisor of PN_TILE, a_chunk inputs a chunk) */
    int cb_t;         /* 1: the kernel keeps cb transposed, [nr][mc] (see kblock) */
    int group;        /* column panels per pass over the K blocks (gemm_panel.c says why;
                         0: the build's default, H3_PN_GROUP) */
    /* row x[K] of slot `slot` -> a [K], d [K/32], as [K/32 * sums] (as NULL unless sums);
     * a tile layout: a is the row's first chunk (the next is a_tile * a_chunk values on), and
     * x is NULL (d, as too) for the zero rows past M */
    void (*quant)(const pn_fmt *f, const h3_linear *l, int slot, const float *x, uint8_t *a, float *d, int32_t *as);
    /* the slot logical weight row r multiplies */
    int (*slot_of)(const h3_linear *l, int64_t r);
    /* cb[mc][f->nr] (cb_t: cb[f->nr][mc]) += the sums of inputs [k0, k0 + nk) of the block's
     * mc rows by logical weight rows [r0, r0 + nr) (nr <= f->nr, one part; columns past nr
     * come out 0) */
    void (*kblock)(const pn_fmt *f, const h3_linear *l, int64_t r0, int nr, int64_t k0, int nk, int mc,
                   const pn_act *act, char *buf, float *cb);
    const void *ukr; /* the format's micro-kernel for the linear's path */
    const void *decode; /* and its panel decoder */
};

size_t pn_workspace_bytes(const pn_fmt *f, const h3_linear *l, int64_t M, int nth);
/* Attaching a block-format linear: begin checks what every format needs (the path, the
 * parts' split of N, K a multiple of 32) and allocates *l (nparts set); the format then
 * checks and records its parts, and end (whatever st says) copies the bias, sets the
 * fields every linear has and returns it in *out, or frees it and returns st. */
h3_status pn_attach_begin(const char *who, int nparts, int64_t N, int64_t K, int pair, h3_isa isa,
                          h3_linear **l, h3_err *err);
h3_status pn_attach_end(const char *who, h3_status st, h3_linear *l, int wtype, int64_t N, int64_t K,
                        const float *bias, int pair, h3_isa isa, const void *w, size_t wbytes,
                        h3_linear **out, h3_err *err);
/* the formats (gemm_gguf.c, gemm_nvfp4.c): their descriptor for a linear's parts and path */
pn_fmt gguf_panel_fmt(const h3_linear *l);
pn_fmt nvfp4_panel_fmt(const h3_linear *l, int64_t M); /* M: the call's rows (picks the route) */
h3_status pn_forward(const pn_fmt *f, const h3_linear *l, h3_pool *pool, const float *x, int64_t M, float *y,
                     const h3_epilogue *epi, void *ws, size_t ws_bytes, h3_err *err);

#endif
