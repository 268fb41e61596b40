/* block_rows.h — what the model drivers share: dit.c's and vit.c's element-wise passes
 * (block_rows.c: bf16 rounding, AdaLN modulation, gated and scaled residual adds, the QKV
 * split, and the bf16 SwiGLU and RoPE as torch rounds them on bf16 tensors -- those two
 * are the text layer's kernels, qwen_elem_impl.h), each run one row at a time over the
 * pool, and, for all four (qwen_layer.c, qwen_vision.c too), the workspace of a pre-norm
 * transformer block.  Internal header. */
#ifndef H3_BLOCK_ROWS_H
#define H3_BLOCK_ROWS_H

#include <math.h>
#include <stdint.h>
#include <string.h>

#include "h3_internal.h"
#include "qwen_elem_impl.h"

#define rb h3_round_to_bf16   /* a short name for the formulas below */

/* 64-byte aligned size, for workspace plans */
static inline size_t al(size_t b) { return (b + 63) & ~(size_t)63; }

/* One element-wise pass over rows [rows, n] of x (block_ew_run): */
enum {
    EW_ROUND,        /* x = R(x) */
    EW_MODULATE,     /* x = R(R(x * t1[r]) + t2[r]) (round) or x * t1[r] + t2[r]: AdaLN with
                        scale1p, shift tables, r = rt[i] (NULL: 0) */
    EW_GATE_ADD,     /* x = R(x + R(t1[r] * a)) (round, each R only then); t1 NULL: gate 1 */
    EW_SCALE_ADD,    /* x = x + a * s (torch: h + branch * scale, two roundings) */
    EW_SWIGLU_BF16,  /* a: [rows, 2n] = [gate; value] -> x: [rows, n] = R(R(silu(g)) * v) */
    EW_ROPE_BF16,    /* x: [rows, heads*head_dim], tables [rows, rot_dim/2]: rotate-half RoPE
                        over rot_dim channels with torch's bf16 roundings */
    EW_SPLIT_QKV     /* x: [rows, 3*heads*head_dim] -> q, k, v [rows, heads*head_dim] */
};

typedef struct {
    int op, round;
    int64_t rows, n;
    float *x;              /* in/out [rows, n] */
    const float *a;        /* second operand */
    const float *s;        /* scale_add: per-channel scale [n] */
    const float *t1, *t2;  /* modulate: scale1p, shift tables; gate_add: gate table */
    const int32_t *rt;     /* row -> table row */
    int heads, head_dim, rot_dim, interleaved;   /* rope / split */
    const float *cos, *sin;
    float *q, *k, *v;
    /* rope: the bf16 kernels of the block's path (h3_qwen_elem_for), the text layer's */
    const h3_qwen_elem_kernels *bf16;
} block_ew;

/* Run the pass over the pool's threads (small passes stay on the calling thread). */
void block_ew_run(h3_pool *pool, const block_ew *c);

/* Workspace of a pre-norm transformer block (all four model drivers): these pieces in this
 * order, each 64-byte aligned at its byte offset at[piece]; a piece of 0 bytes takes no room.
 * n [S,hidden] (the normed rows) | qkv (a fused projection's output) | q, k, v, o | br [S,hidden]
 * (a branch output) | ff (an up projection's output) | g, u (separate gate and up outputs) |
 * act [S,ffn] | the linears' workspace | the attention's workspace. */
enum { BW_N, BW_QKV, BW_Q, BW_K, BW_V, BW_O, BW_BR, BW_FF, BW_G, BW_U, BW_ACT, BW_LIN, BW_ATTN, BW_PIECES };
typedef struct { size_t at[BW_PIECES], total; } block_ws;

/* The layout of pieces of bytes[piece] bytes each. */
static inline block_ws block_ws_layout(const size_t bytes[BW_PIECES]) {
    block_ws p;
    size_t off = 0;
    for (int i = 0; i < BW_PIECES; i++) {
        p.at[i] = off;
        off += al(bytes[i]);
    }
    p.total = off;
    return p;
}

/* The DiT's and the ViT's layout: n | qkv [S,3I] | q,k,v,o [S,I] | br | ff [S,2*ffn] (with_ff)
 * | act [S,ffn] | the largest linear workspace | the attention workspace (I = heads*head_dim).
 * residual: the epilogue the out/down projections run with (RESID, or NULL for none); the
 * up projection is sized for both the SwiGLU epilogue and none. */
static inline block_ws block_ws_plan(const h3_block_shape *sh, int with_ff, const h3_block_weights *bw,
                                     const h3_epilogue *residual, int nth) {
    const int64_t S_ = sh->S;
    const int heads = sh->heads, head_dim = sh->head_dim;
    const size_t S = (size_t)S_, Hd = (size_t)sh->hidden, I = (size_t)heads * head_dim, F = (size_t)sh->ffn;
    h3_epilogue e_sw = {H3_EPI_SWIGLU, NULL, NULL, NULL, 0};
    size_t lw = 0, t;
    t = h3_linear_workspace_bytes(bw->qkv, S_, nth, NULL); lw = H3_MAX(lw, t);
    t = h3_linear_workspace_bytes(bw->out, S_, nth, residual); lw = H3_MAX(lw, t);
    t = h3_linear_workspace_bytes(bw->up, S_, nth, &e_sw); lw = H3_MAX(lw, t);
    t = h3_linear_workspace_bytes(bw->up, S_, nth, NULL); lw = H3_MAX(lw, t);
    t = h3_linear_workspace_bytes(bw->down, S_, nth, residual); lw = H3_MAX(lw, t);
    h3_attn_args aa = {S_, heads, heads, head_dim, (int64_t)I, (int64_t)I, (int64_t)I, (int64_t)I, 1.0f, 0, 0};  // workspace size only: bf16_inputs does not change it
    const size_t qkvo = S * I * 4;
    const size_t bytes[BW_PIECES] = {
        [BW_N] = S * Hd * 4, [BW_QKV] = 3 * qkvo, [BW_Q] = qkvo, [BW_K] = qkvo, [BW_V] = qkvo, [BW_O] = qkvo,
        [BW_BR] = S * Hd * 4, [BW_FF] = with_ff ? S * 2 * F * 4 : 0, [BW_ACT] = S * F * 4, [BW_LIN] = lw,
        [BW_ATTN] = h3_attn_workspace_bytes(&aa, nth)};
    return block_ws_layout(bytes);
}

/* The checks a DiT and a ViT block share: the weights in bw present, the geometry (S >= 0,
 * every size >= 1), the linears shaped qkv [3I, hidden], out [hidden, I], up [2 ffn,
 * hidden], down [hidden, ffn] (I = heads * head_dim), and, when cos is given, sin with it
 * and rot_dim even in [2, head_dim].  who names the block in the message. */
h3_status block_check(const char *who, const h3_block_shape *sh, const h3_block_weights *bw, const float *cos,
                      const float *sin, h3_err *err);

/* H3_EINVAL naming who and the linear (name) unless l is [n, k]. */
h3_status block_check_linear(const char *who, const h3_linear *l, int64_t n, int64_t k, const char *name,
                             h3_err *err);

/* The workspace plan's pieces at their addresses in ws. */
typedef struct {
    float *n, *qkv, *q, *k, *v, *o, *br, *ff, *g, *u, *act;
    void *lin, *attn;           /* the linears' and the attention's workspaces */
    size_t lin_bytes, attn_bytes;
} block_bufs;
/* The call's workspace for plan p (the caller's ws, or allocated into *own, which the
 * caller frees after the call; h3_workspace), carved into *b. */
h3_status block_workspace(block_ws p, void *ws, size_t ws_bytes, void **own, block_bufs *b, const char *who,
                          h3_err *err);

/* attention(q, k, v) -> o (all [S, I], non-causal, scale 1/sqrt(head_dim)) in the
 * workspace's buffers; bf16 products where the CPU has them with bf16 (h3_attn_args), and
 * o rounded to bf16 in bf16 mode (round). */
h3_status block_attention(const block_bufs *b, int64_t S, int heads, int head_dim, int round, int bf16,
                          h3_pool *pool, h3_isa isa, h3_err *err);

/* From the fused QKV rows to attention-ready q, k, v [S, I]: split (per-head interleaved
 * or stacked), per-head RMSNorm of q and k (norm_q/norm_k: weights, or NULL for none),
 * rounded to bf16 in bf16 mode (round), then RoPE on rot_dim channels when cos is given
 * (bf16 mode: with torch's bf16 roundings). */
h3_status block_qk_prep(const float *qkv, float *q, float *k, float *v, int64_t S, int heads, int head_dim,
                        int interleaved, const float *norm_q, const float *norm_k, float eps, int round,
                        const float *cos, const float *sin, int rot_dim, h3_pool *pool, h3_isa eisa,
                        h3_err *err);

/* act [S, ffn] = SwiGLU of n's up projection (up rows [gate; value]): in bf16 mode the
 * projection into ff [S, 2 ffn] is rounded, then silu and the product are (torch's order);
 * in float32 the GEMM's SwiGLU epilogue computes it. */
h3_status block_swiglu_up(const h3_linear *up, const float *n, int64_t S, int ffn, int round, float *ff,
                          float *act, h3_pool *pool, void *lws, size_t lws_bytes, h3_err *err);

#endif /* H3_BLOCK_ROWS_H */
