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
    /* H3_DT_NVFP4 (gemm_nvfp4.c): nparts parts, owned; nv_slots distinct activation
     * variants (parts with the same AWQ pre-scale, or none, share one) */
    struct nvfp4_part *nv;
    int nv_slots;
    /* h3_linear_set_lora: a low-rank addend, borrowed (the caller keeps it alive and
     * detaches it before freeing it); NULL: the plain linear, bit for bit */
    const h3_lora *lora;
};

/* A low-rank addend y += ((x . A^T) * scale) . B^T, applied before the bias and the
 * epilogue (gemm_lora.c builds it, gemm.c runs it). */
struct h3_lora {
    int64_t N, K, R;
    h3_linear *a;          /* [R, K] float32: u = x . A^T, computed by the GEMM driver */
    float *bt;             /* [R, N]: B^T, so that rank r's column run is contiguous */
    float *scale;          /* [R]: strength * alpha / rank of the adapter rank r belongs to */
    int64_t *lo, *hi;      /* [R]: rank r's nonzero output columns lie in [lo[r], hi[r]) */
    /* The same runs as column segments for the SIMD tile adds: segment s is the columns
     * [seg_at[s], seg_at[s+1]), in which exactly the ranks seg_rank[seg_off[s] ..
     * seg_off[s+1]) (ascending) have their nonzero run (nseg >= 1, seg_at[0] = 0,
     * seg_at[nseg] = N). */
    int64_t nseg;
    int64_t *seg_at;       /* [nseg + 1] */
    int64_t *seg_off;      /* [nseg + 1] */
    int64_t *seg_rank;     /* [seg_off[nseg]] */
};

/* Rows of x per u GEMM call: bounds the packed-A workspace of the u product. */
#define H3_LORA_CHUNK 256
/* Workspace bytes the low-rank addend needs on top of the linear's own (0 without one). */
size_t gemm_lora_workspace_bytes(const h3_linear *l, int64_t M, int nth);
/* u[M, R] = (x . A^T) * scale, in ws (gemm_lora_workspace_bytes of it at the front). */
h3_status gemm_lora_u(const h3_linear *l, h3_pool *pool, const float *x, int64_t M, float *u,
                      void *ws, size_t ws_bytes, h3_err *err);
/* The tile add target[m, j] += sum_r u[m, r] * bt[r, c0 + j] is the table's lora_add
 * (gemm_lora_add_fn in gemm_impl.h; the reference in gemm_lora.c, SIMD in
 * gemm_lora_body.inc). */

/* The GGUF linear (gemm_gguf.c), routed to from gemm.c and gemm_weights.c */
size_t gemm_gguf_workspace_bytes(const h3_linear *l, int64_t M, int nth);
h3_status gemm_gguf_forward(const h3_linear *l, h3_pool *pool, const float *x, int64_t M, float *y,
                            const h3_epilogue *epi, void *ws, size_t ws_bytes, h3_err *err);
h3_status gemm_gguf_dequant(const h3_linear *l, float *out, h3_err *err);

/* One part of an NVFP4 linear: the file's codes and blocked scales, borrowed as stored */
typedef struct nvfp4_part {
    const uint8_t *codes;  /* part_rows rows of ld bytes */
    int64_t ld;
    const uint8_t *scales; /* blocked e4m3, ncb column blocks of 4 */
    int64_t ncb;
    float lut[256];        /* e4m3 byte -> e4m3 * scale_2 * 0.5 (the scale of q = 2 e2m1) */
    float *pre;            /* [K] AWQ pre-scale (owned copy) or NULL */
    int slot;              /* the activation variant this part multiplies */
} nvfp4_part;

/* The NVFP4 linear (gemm_nvfp4.c), routed to from gemm.c and gemm_weights.c */
size_t gemm_nvfp4_workspace_bytes(const h3_linear *l, int64_t M, int nth);
h3_status gemm_nvfp4_forward(const h3_linear *l, h3_pool *pool, const float *x, int64_t M, float *y,
                             const h3_epilogue *epi, void *ws, size_t ws_bytes, h3_err *err);
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
