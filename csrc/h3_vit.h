/* h3_vit.h — the MiniMax-H3 video VAE's ViT decoder in C: one transformer block per
 * call, and the LayerNorm its output head needs.  Included at the end of h3.h; see
 * vit.c for the op order (spec §6.2). */
#ifndef H3_VIT_H
#define H3_VIT_H

#include "h3.h"
#include "h3_block.h"

#ifdef __cplusplus
extern "C" {
#endif

/* LayerNorm over the last axis (torch.nn.LayerNorm, float32):
 *   out[r, :] = (x[r, :] - mean_r) / sqrt(var_r + eps) * w + b,  var the biased variance.
 * x, out: [rows, n] (out may alias x); w, b: [n] (either may be NULL: 1 / 0).
 * mean and variance are accumulated in double (two passes), so the result is within
 * float32 rounding of the exact value; one scalar code path serves every isa (the op
 * runs once per decoded tile, next to 36 blocks of GEMMs). */
h3_status h3_layernorm(const float *x, const float *w, const float *b, float *out,
                       int64_t rows, int64_t n, float eps, h3_pool *pool, h3_isa isa,
                       h3_err *err);

/* The weights of one ViT decoder block (borrowed; the caller keeps them alive): base
 * (h3_block.h: qkv, out, up rows [gate; up], down, norm1, norm2) and scale1, scale2:
 * [hidden] float32. */
typedef struct {
    h3_block_weights base;
    const float *scale1, *scale2;
} h3_vit_block;

/* shape: the call's geometry (h3_block.h); h: [S, hidden] residual stream (float32),
 * updated in place.
 * cos, sin: [S, rot_dim/2] RoPE tables (channel i and i + rot_dim/2 share angle i).
 * eps: RMSNorm eps of norm1/norm2 and of the weightless per-head q/k norms.
 * round_bf16: reproduce diffusers' decoder loaded in bfloat16 (spec §6.2 "Dtypes"):
 * every projection input and output, the q/k norms, RoPE, attention and SwiGLU are
 * rounded to bf16 as torch rounds them; the residual stream and scale1/scale2 products
 * stay float32 (bf16 * fp32 parameter promotes).
 * attn_bf16: bf16 products in the attention where the CPU has them (as h3_dit_block_args). */
typedef struct {
    h3_block_shape shape;
    float eps;
    int round_bf16;
    const float *cos, *sin;
    int attn_bf16; /* last, so positional initialisers written before it still mean the same */
} h3_vit_block_args;

/* h3_vit_block_workspace_bytes, h3_vit_block_forward */
H3_BLOCK_API(h3_vit_block, h3_vit_block, h3_vit_block_args);

#ifdef __cplusplus
}
#endif
#endif
