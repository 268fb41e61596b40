/* h3_block.h — what the DiT block (h3_dit.h) and the video decoder's ViT block (h3_vit.h)
 * have in common: a pre-norm transformer block's linears and norms, and one call's
 * geometry.  Each block's own weights and arguments embed these as .base and .shape. */
#ifndef H3_BLOCK_H
#define H3_BLOCK_H

#include "h3.h"

#ifdef __cplusplus
extern "C" {
#endif

/* The weights both blocks have (borrowed; the caller keeps them alive).
 *   qkv  : [3*inner, hidden]; rows stacked [q; k; v] or, with qkv_interleaved, per head
 *          [q_h; k_h; v_h] (the original release's fused layout)
 *   out  : [hidden, inner];  up: pair=1 linear, rows [gate; value] of [2*ffn, hidden]
 *   down : [hidden, ffn];    norm1, norm2: [hidden] float32 (RMSNorm weights) */
typedef struct {
    const h3_linear *qkv, *out, *up, *down;
    int qkv_interleaved;
    const float *norm1, *norm2;
} h3_block_weights;

/* One call's geometry: h is [S, hidden], inner = heads * head_dim, the MLP is ffn wide,
 * and RoPE turns the first rot_dim channels of each head. */
typedef struct {
    int64_t S;
    int hidden, heads, head_dim, ffn, rot_dim;
} h3_block_shape;

#ifdef __cplusplus
}
#endif
#endif
