/* h3_qwen_vision.h — the Qwen3-VL vision tower (the image half of MiniMax-H3's prompt
 * encoder, issue 25): one transformer block per call, the patch merger (final and
 * deepstack), the learned position grid's bilinear resampling, exact GELU, and the
 * deepstack row add of the text stack.  Included at the end of h3.h; the op order is
 * transformers 5.17's Qwen3VLVisionModel (models/qwen_vision.c says where each op is).
 *
 * round_bf16 everywhere: reproduce the model loaded in bfloat16 — every activation is
 * rounded to bf16 (round to nearest even) where torch's bf16 tensors round: each linear
 * output (bias included), each LayerNorm, RoPE (computed in float32, rounded once), the
 * attention output, each activation and each residual add.  Elementwise ops here have one
 * scalar code path for every isa: they are a few passes over [S, hidden] next to the
 * block's GEMMs; the GEMMs and the attention run on the isa the linears were made for. */
#ifndef H3_QWEN_VISION_H
#define H3_QWEN_VISION_H

#include "h3.h"

#ifdef __cplusplus
extern "C" {
#endif

/* Exact GELU (torch nn.GELU(), approximate="none"): out = 0.5 x (1 + erf(x / sqrt 2)),
 * evaluated in double and rounded once.  x, out: [n] (out may alias x). */
h3_status h3_gelu_erf(const float *x, float *out, int64_t n, h3_pool *pool, h3_err *err);

/* h[r, :] += sum_t w[r, t] * table[idx[r, t], :]  for t = 0..taps-1 in that order (torch's
 * (pos_embed(idx) * w[..., None]).sum(1): products and their sum in float32), then
 * round_bf16: the sum is rounded to bf16 before the add and the add after it.
 * h: [S, C]; table: [P, C]; idx, w: [S, taps]; every idx in [0, P). */
h3_status h3_qvis_pos_add(float *h, const float *table, int64_t P, const int64_t *idx,
                          const float *w, int taps, int64_t S, int C, int round_bf16,
                          h3_err *err);

/* Deepstack: h[rows[i], :] += src[i, :] for i < n (then rounded when round_bf16).
 * h: [L, C]; rows: n distinct row indices in [0, L); src: [n, C]. */
h3_status h3_rows_add(float *h, int64_t L, const int64_t *rows, const float *src, int64_t n,
                      int C, int round_bf16, h3_err *err);

/* One vision block's weights (borrowed).  q, k, v, proj: [C, C] (the checkpoint's fused
 * qkv split by rows), fc1: [F, C], fc2: [C, F], all with their biases; norm*_w/_b: [C]. */
typedef struct {
    const h3_linear *q, *k, *v, *proj, *fc1, *fc2;
    const float *norm1_w, *norm1_b, *norm2_w, *norm2_b;
} h3_qvis_block;

/* One call: h [S, C] (every image's patches, in the processor's merge-block order).
 * seg: nseg + 1 offsets (cu_seqlens: 0 = seg[0] < ... < seg[nseg] = S); attention runs
 * within each segment (one per image), full (not causal), scale 1/sqrt(D).
 * cos, sin: [S, D/2] RoPE tables (angle i for channels i and i + D/2).
 * eps: the LayerNorms' eps. */
typedef struct {
    int64_t S;
    int hidden, heads, ffn;
    int nseg;
    const int64_t *seg;
    const float *cos, *sin;
    float eps;
    int round_bf16;
} h3_qvis_block_args;

/* h = h + proj(attn(rope(q(LN1 h)), rope(k(LN1 h)), v(LN1 h)))
 * h = h + fc2(gelu_tanh(fc1(LN2 h)))
 * ws: 64-byte aligned, >= workspace_bytes (NULL: allocated inside). */
/* h3_qvis_block_workspace_bytes, h3_qvis_block_forward */
H3_BLOCK_API(h3_qvis_block, h3_qvis_block, h3_qvis_block_args);

/* The patch merger (weights borrowed): norm over [C] per row (postshuffle = 0, the final
 * merger) or over the merged [unit * C] rows (postshuffle = 1, the deepstack mergers);
 * fc1: [unit*C, unit*C], fc2: [out, unit*C] with biases. */
typedef struct {
    const h3_linear *fc1, *fc2;
    const float *norm_w, *norm_b;
    int postshuffle;
} h3_qvis_merger;

/* x: [S, C] (S a multiple of unit, unit = spatial_merge_size^2, consecutive rows merged);
 * out: [S / unit, fc2 rows] = fc2(gelu_erf(fc1(LN(x) viewed as [S/unit, unit*C]))).
 * x is not changed. */
size_t h3_qvis_merger_workspace_bytes(const h3_qvis_merger *w, int64_t S, int C, int unit,
                                      int n_threads);
h3_status h3_qvis_merger_forward(const h3_qvis_merger *w, const float *x, int64_t S, int C,
                                 int unit, float eps, int round_bf16, float *out,
                                 h3_pool *pool, void *ws, size_t ws_bytes, h3_isa isa,
                                 h3_err *err);

#ifdef __cplusplus
}
#endif
#endif
