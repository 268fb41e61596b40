/* gemm_linear.h — the h3_linear object, shared by its two halves: gemm_weights.c (the
 * weight storage: conversion and packing at create, attach, export, dequantise) and
 * gemm.c (the run-time driver that multiplies by it).  Internal header. */
#ifndef H3_GEMM_LINEAR_H
#define H3_GEMM_LINEAR_H

#include "gemm_impl.h"

struct h3_linear {
    int64_t N, K;          /* logical shape */
    int64_t Kp;            /* int modes: padded K */
    int64_t H, Hp;         /* pair: half height, padded half; else H = N, Hp = align(N, nr) */
    int wtype, group_size, act_group, pair;
    int f32_exact;         /* float32 inputs multiplied exactly (no bf16 x bf16 kernel) */
    int small_pages;       /* W and forward's own workspace in 4 KB pages (h3_linear_opts) */
    int ext_off;           /* H3_EXT_* bits the caller turned off (h3_linear_opts) */
    int rot_group;         /* I8: x rotated by the block Hadamard of this group before it is
                              quantised (W is stored rotated); 0 = none */
    int64_t seg;           /* int modes: K-length of constant (act, weight) scales */
    int64_t kci;           /* int modes: K block */
    h3_isa isa;
    const gemm_kernels *kt;
    void *w;               /* float: [N,K]; int: packed panels */
    float *wscale;         /* I8: [Np]; I4: [Np/nr][Kp/gs][nr] */
    float *bias;           /* [N] or NULL */
    size_t wbytes;         /* w + wscale bytes */
    size_t sbytes;         /* wscale bytes */
    int owns_w;            /* 0: w/wscale borrowed (h3_linear_attach), not freed */
    /* h3_linear_attach_parts: float rows in nparts equal blocks at separate addresses
     * (part[i] holds logical rows [i*part_rows, (i+1)*part_rows)); nparts 0: w only */
    const void *part[H3_LINEAR_MAX_PARTS];
    int nparts;
    int64_t part_rows;
    /* H3_DT_GGUF (gemm_gguf.c): part i holds GGUF blocks of type gtype[i], a row every
     * grow_bytes[i] bytes */
    int gtype[H3_LINEAR_MAX_PARTS];
    int64_t grow_bytes[H3_LINEAR_MAX_PARTS];
    /* run-time choices (h3_linear_set_gguf_opts; attach sets the defaults): Q4_K / Q5_K on the
     * amx path in gguf_kq_amx.c's order (1: the rows in place; 2, the default: all-Q4_K/Q5_K
     * linears with the activations in its tile layout, 3 that on every path) or the common
     * order (0); column panels per pass (0: the path's default); where all-Q8_0 linears run
     * gguf_q8d_amx.c's route (weights in place): 1 (default) on amx, 2 on every path, 0 none */
    int gguf_kq, gguf_group, gguf_q8d;
    /* each K block's call prefetches the panel's next K block of weights: 1 off the amx path,
     * 2 on every path, 0 never (h3_linear_set_gguf_prefetch; attach sets 1) */
    int gguf_pf;
    /* H3_DT_NVFP4 (gemm_nvfp4.c): nparts parts, owned; nv_slots distinct activation
     * variants (parts with the same AWQ pre-scale, or none, share one) */
    struct nvfp4_part *nv;
    int nv_slots;
    int nv_route;          /* H3_NVFP4_ROUTE_* (h3_linear_nvfp4_route; attach: AUTO) */
    int64_t nv_min_rows;   /* AUTO: the bf16 route on AMX for calls of at least this many rows */
    /* h3_linear_set_lora: a low-rank addend, borrowed (the caller keeps it alive and
     * detaches it before freeing it); NULL: the plain linear, bit for bit */
    const h3_lora *lora;
    /* its down product's A quantised to int8 in this linear's activation layout (owned;
     * made by h3_linear_set_lora where the LoRA's int_down is on and this linear is int8
     * or int4): u = x . A^T then runs on the int kernel from the activations this
     * linear's own product quantises, instead of rereading x in float; NULL: the LoRA's
     * float down product (gemm_lora_u) */
    h3_linear *lora_a8;
};

/* A low-rank addend y += ((x . A^T) * scale) . B^T, applied before the bias and the
 * epilogue (gemm_lora.c builds and runs it; gemm.c calls it).  Ranks are held in "rank
 * order" (gemm_lora.c: sorted by their first nonzero output column). */
struct h3_lora {
    int64_t N, K, R;
    h3_linear *a;          /* [R, K] float32 A, rank order: u = x . A^T by the GEMM driver */
    float *scale;          /* [R]: strength * alpha / rank of the adapter each rank belongs to */
    int64_t *perm;         /* [R]: rank-order rank i is the caller's rank perm[i] */
    const gemm_kernels *kt; /* the table whose micro-kernel runs the up product */
    int bf16;              /* AMX: both products on bf16 tiles (u, x, A, B rounded to bf16,
                              float32 sums); elsewhere 0: float32 FMA */
    int int_down;          /* on an int8/int4 linear, the down product from that linear's
                              int8-quantised x on its int kernel (h3_lora_set_int_down);
                              default on for AMX only */
    int fused;             /* the up product in an int base's final store where the table has
                              ukr_int_lora (gemm_lora_fuses); default on for AMX only
                              (h3_lora_set_fused) */
    int32_t *col_lo, *col_hi; /* [N]: the ranks nonzero on column n lie in [col_lo, col_hi) */
    /* B in NR-column panels (NR = kt->nr): panel p covers the ranks [pan_lo, pan_hi), the
     * union of its columns' ranges, as [pan_hi - pan_lo][NR] floats at bp + pan_off[p]
     * (zero past column N; bf16: the AMX table's pairs [kc32/2][NR][2]) */
    int64_t npanel, max_kc;
    int64_t *pan_lo, *pan_hi, *pan_off;
    float *bp;
};

/* Rows of x per down-product GEMM call: fixed chunks, so the bits do not depend on the
 * thread count, and enough of them (1872 rows: 15) to keep 16 threads busy. */
#define H3_LORA_CHUNK 128
/* Workspace bytes the low-rank addend needs on top of the linear's own (0 without one):
 * u [M, R] and nth thread areas (down-product workspace, then up-product scratch). */
size_t gemm_lora_workspace_bytes(const h3_linear *l, int64_t M, int nth);
/* u[M, R] = (x . A^T) * scale into ws (which holds gemm_lora_workspace_bytes), all threads. */
h3_status gemm_lora_u(const h3_linear *l, h3_pool *pool, const float *x, int64_t M, float *u,
                      void *ws, h3_err *err);
/* l->lora_a8's way: u[M, R] holds x . A^T (gemm.c computed it); scale it and pack it as
 * gemm_lora_u does, all threads. */
void gemm_lora_u_finish(const h3_linear *l, h3_pool *pool, int64_t M, float *u, void *ws);
/* The fused up product (gemm_lora.c): 1 when l's int micro-kernel adds its LoRA as it
 * stores each tile of the last K block (gemm_ukr_int_lora) instead of gemm_lora_add's
 * second pass over the output. */
int gemm_lora_fuses(const h3_linear *l);
/* Its u operand in the workspace after gemm_lora_u (the table's packed rows, or u itself)
 * and that operand's row stride in elements. */
const void *gemm_lora_u_operand(const h3_linear *l, void *ws, int64_t M, int64_t *ldu);
/* The operands of the output tile at rows ir.. (ir a multiple of MR) and logical column n0 (a
 * multiple of NR); 0 when no rank touches its columns (nothing to add). */
static inline int gemm_lora_tile_at(const h3_lora *lo, const void *uop, int64_t ldu, int64_t ir, int64_t n0,
                                    gemm_lora_tile *t) {
    const int64_t p = n0 / lo->kt->nr, a = lo->pan_lo[p], z = lo->pan_hi[p];
    if (a >= z) return 0;
    const int64_t elem = lo->kt->lora_pack_u ? lo->kt->lora_u_elem : 4;
    t->u = (const char *)uop + (ir * ldu + a) * elem;
    t->ldu = ldu;
    t->b = lo->bp + lo->pan_off[p];
    t->kc = z - a;
    return 1;
}
/* Floats of scratch one gemm_lora_add call needs (64-byte aligned). */
size_t gemm_lora_scratch_floats(const h3_lora *lo);
/* Thread ith's up-product scratch inside that workspace. */
float *gemm_lora_scratch(const h3_linear *l, void *ws, int64_t M, int ith);
/* The up product on one output tile: target[m*ld + j] += sum_r u[m*R + r] * B[c0 + j, r]
 * for rows [m0, m1), columns j < w (gemm_lora.c has the exact definition).
 * gemm_lora_add: the lora's ISA (its micro-kernel); gemm_lora_add_ref: element by element. */
void gemm_lora_add(const h3_lora *lo, const float *u, float *target, int64_t ld, int64_t m0, int64_t m1,
                   int64_t c0, int64_t w, float *scratch);
void gemm_lora_add_ref(const h3_lora *lo, const float *u, float *target, int64_t ld, int64_t m0, int64_t m1,
                       int64_t c0, int64_t w, float *scratch);

/* The block-format linears (wtype H3_DT_GGUF or H3_DT_NVFP4) on the panel driver
 * (gemm_panel.c, the format from gemm_gguf.c / gemm_nvfp4.c), routed to from gemm.c */
size_t gemm_panel_workspace_bytes(const h3_linear *l, int64_t M, int nth);
h3_status gemm_panel_forward(const h3_linear *l, h3_pool *pool, const float *x, int64_t M, float *y,
                             const h3_epilogue *epi, void *ws, size_t ws_bytes, h3_err *err);

/* The GGUF linear (gemm_gguf.c), routed to from gemm_weights.c */
h3_status gemm_gguf_dequant(const h3_linear *l, float *out, h3_err *err);
/* A GGUF linear with a LoRA (gemm_lora.c): the GGUF product without epilogue, then the
 * up product, then the epilogue */
size_t gemm_lora_gguf_workspace_bytes(const h3_linear *l, int64_t M, int nth, const h3_epilogue *epi);
h3_status gemm_lora_gguf_forward(const h3_linear *l, h3_pool *pool, const float *x, int64_t M, float *y,
                                 const h3_epilogue *epi, void *ws, size_t ws_bytes, h3_err *err);

/* One part of an NVFP4 linear: the file's codes and blocked scales, borrowed as stored */
typedef struct nvfp4_part {
    const uint8_t *codes;  /* part_rows rows of ld bytes */
    int64_t ld;
    const uint8_t *scales; /* blocked e4m3, ncb column blocks of 4 */
    int64_t ncb;
    float lut[256];        /* e4m3 byte -> e4m3 * scale_2 * 0.5 (the scale of q = 2 e2m1) */
    float scale_2;         /* the per-tensor scale (the bf16 route applies it per K block) */
    float *pre;            /* [K] AWQ pre-scale (owned copy) or NULL */
    int slot;              /* the activation variant this part multiplies */
} nvfp4_part;

/* The NVFP4 linear (gemm_nvfp4.c), routed to from gemm_weights.c */
h3_status gemm_nvfp4_dequant(const h3_linear *l, float *out, h3_err *err);
void gemm_nvfp4_free(h3_linear *l);

/* The base of the float rows holding logical row r, and r's index there. */
static inline const void *rows_at(const h3_linear *l, int64_t r, int64_t *local) {
    if (!l->nparts) { *local = r; return l->w; }
    *local = r % l->part_rows;
    return l->part[r / l->part_rows];
}

static inline int is_int(int wtype) { return wtype == H3_DT_I8 || wtype == H3_DT_I4; }

/* Weights and large workspaces: huge pages unless the linear was made with small_pages. */
static inline void *alloc_streamed(const h3_linear *l, size_t bytes) {
    return l->small_pages ? h3_alloc(bytes) : h3_alloc_large(bytes);
}

/* packed row index of logical row n (pair layouts pad each half to a panel boundary) */
static inline int64_t prow_of(const h3_linear *l, int64_t n) {
    return (l->pair && n >= l->H) ? l->Hp + (n - l->H) : n;
}
static inline int64_t np_of(const h3_linear *l) { return l->pair ? 2 * l->Hp : l->Hp; }

#endif
