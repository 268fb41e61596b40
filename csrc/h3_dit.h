/* h3_dit.h — one MiniMax-H3 transformer block (or token-refiner block) in C.
 * Included at the end of h3.h; see dit.c for the op order. */
#ifndef H3_DIT_H
#define H3_DIT_H

#include "h3.h"
#include "h3_block.h"

#ifdef __cplusplus
extern "C" {
#endif

/* The weights of one block (borrowed; the caller keeps them alive): base (h3_block.h:
 * qkv, out, up, down, norm1, norm2) and norm_q, norm_k: [head_dim]. */
typedef struct {
    h3_block_weights base;
    const float *norm_q, *norm_k;
} h3_dit_block;

/* One call's geometry (shape, h3_block.h) and modulation.
 *   h: [S, hidden] residual stream, updated in place.
 *   Modulation tables (transformer blocks; all NULL for refiner blocks): [table_rows,
 *   hidden] each, row r of packed row i = rows[i]; scale tables hold (1 + scale).
 *   cos, sin: [S, rot_dim/2] RoPE tables (NULL: no RoPE, as in the refiner).
 *   round_bf16: reproduce diffusers' bf16 activation roundings (spec 4.6).
 *   attn_bf16: multiply q, k, v (and the softmax numerators) as bf16 in the attention
 *     where the CPU has bf16 dot products (h3_attn_args.bf16_inputs); implied by round_bf16.
 *     The int8/int4 models set it by default (a quantised mode's choice of speed). */
typedef struct {
    h3_block_shape shape;
    float eps, qk_eps;
    int round_bf16;
    const int32_t *rows;
    int64_t table_rows;
    const float *shift_msa, *scale1p_msa, *gate_msa, *shift_mlp, *scale1p_mlp, *gate_mlp;
    const float *cos, *sin;
    /* optional, for profiling (bench/block_profile.py): wall seconds added per stage,
     * H3_DIT_STAGES entries in the order of h3_dit_stage_names; NULL = not timed */
    double *stage_seconds;
    int attn_bf16; /* see above; last, so positional initialisers written before it still hold */
} h3_dit_block_args;

enum { H3_DIT_STAGES = 8 };
/* "norm1", "qkv", "qk_prep" (split, q/k RMSNorm, RoPE), "attention", "out" (+ gated
 * residual), "norm2", "up" (+ SwiGLU), "down" (+ gated residual) */
extern const char *const h3_dit_stage_names[H3_DIT_STAGES];

/* h3_dit_block_workspace_bytes, h3_dit_block_forward */
H3_BLOCK_API(h3_dit_block, h3_dit_block, h3_dit_block_args);

/* x = bf16(x) in place (round to nearest even, kept as float32). */
h3_status h3_round_bf16(float *x, int64_t n, h3_pool *pool, h3_err *err);

#ifdef __cplusplus
}
#endif
#endif
