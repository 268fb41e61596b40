/* block_rows.h — what the block drivers (dit.c, vit.c) share: per-row passes (bf16
 * rounding, the bf16 SwiGLU and RoPE as torch rounds them on bf16 tensors, the QKV split)
 * and the workspace layout of a pre-norm transformer block.
 * Internal header; every function works on one row so drivers can thread over rows. */
#ifndef H3_BLOCK_ROWS_H
#define H3_BLOCK_ROWS_H

#include <math.h>
#include <stdint.h>
#include <string.h>

#include "h3_internal.h"

/* round a float to the nearest bfloat16 (ties to even), returned widened */
static inline float rb(float x) { return h3_bf16_to_f32(h3_f32_to_bf16(x)); }

/* 64-byte aligned size, for workspace plans */
static inline size_t al(size_t b) { return (b + 63) & ~(size_t)63; }

/* out[j] = R(R(silu(gv[j])) * gv[n + j]) for j < n: gv is one row [gate | value] */
static inline void row_swiglu_bf16(float *out, const float *gv, int64_t n) {
    for (int64_t j = 0; j < n; j++) {
        float g = gv[j];
        float s = rb(g / (1.0f + expf(-g)));
        out[j] = rb(s * gv[n + j]);
    }
}

/* rotate-half RoPE over the first rot_dim channels of each head of one row, with torch's bf16
 * roundings: y' = R(R(y * cos) + R(rot(y) * sin)), cos/sin rounded to bf16 first.
 * cs, sn: the row's rot_dim/2 angles' cos and sin. */
static inline void row_rope_bf16(float *x, const float *cs, const float *sn, int heads,
                                 int head_dim, int rot_dim) {
    const int half = rot_dim / 2;
    for (int h = 0; h < heads; h++) {
        float *y = x + (int64_t)h * head_dim;
        for (int j = 0; j < half; j++) {
            float co = rb(cs[j]), si = rb(sn[j]);
            float x1 = y[j], x2 = y[j + half];
            y[j] = rb(rb(x1 * co) + rb(-x2 * si));
            y[j + half] = rb(rb(x2 * co) + rb(x1 * si));
        }
    }
}

/* one fused QKV row [3*H*D] -> q, k, v rows [H*D]: per-head interleaved ([h: q k v] ...) or
 * stacked ([q; k; v]) */
static inline void row_split_qkv(const float *x, float *q, float *k, float *v, int heads,
                                 int head_dim, int interleaved) {
    const int D = head_dim;
    const int64_t inner = (int64_t)heads * D;
    for (int h = 0; h < heads; h++)
        for (int part = 0; part < 3; part++) {
            const float *src = interleaved ? x + ((int64_t)h * 3 + part) * D : x + part * inner + (int64_t)h * D;
            float *dst = (part == 0 ? q : part == 1 ? k : v) + (int64_t)h * D;
            memcpy(dst, src, (size_t)D * sizeof(float));
        }
}

/* Workspace of a pre-norm transformer block, 64-byte aligned pieces (byte offsets):
 * n [S,hidden] | qkv [S,3I] | q,k,v,o [S,I] | br [S,hidden] | ff [S,2*ffn] (with_ff) |
 * act [S,ffn] | the largest linear workspace | the attention workspace (I = heads*head_dim).
 * residual: the epilogue the out/down projections run with (RESID, or NULL for none); the
 * up projection is sized for both the SwiGLU epilogue and none. */
typedef struct { size_t n, qkv, q, k, v, o, br, ff, act, lin, attn, total; } block_ws;

static inline block_ws block_ws_plan(int64_t S_, int hidden, int heads, int head_dim, int ffn,
                                     int with_ff, const h3_linear *qkv, const h3_linear *out,
                                     const h3_linear *up, const h3_linear *down,
                                     const h3_epilogue *residual, int nth) {
    block_ws p;
    const size_t S = (size_t)S_, Hd = (size_t)hidden, I = (size_t)heads * head_dim, F = (size_t)ffn;
    size_t off = 0;
    p.n = off; off += al(S * Hd * 4);
    p.qkv = off; off += al(S * 3 * I * 4);
    p.q = off; off += al(S * I * 4);
    p.k = off; off += al(S * I * 4);
    p.v = off; off += al(S * I * 4);
    p.o = off; off += al(S * I * 4);
    p.br = off; off += al(S * Hd * 4);
    p.ff = off; off += with_ff ? al(S * 2 * F * 4) : 0;
    p.act = off; off += al(S * F * 4);
    h3_epilogue e_sw = {H3_EPI_SWIGLU, NULL, NULL, NULL, 0};
    size_t lw = 0, t;
    t = h3_linear_workspace_bytes(qkv, S_, nth, NULL); lw = H3_MAX(lw, t);
    t = h3_linear_workspace_bytes(out, S_, nth, residual); lw = H3_MAX(lw, t);
    t = h3_linear_workspace_bytes(up, S_, nth, &e_sw); lw = H3_MAX(lw, t);
    t = h3_linear_workspace_bytes(up, S_, nth, NULL); lw = H3_MAX(lw, t);
    t = h3_linear_workspace_bytes(down, S_, nth, residual); lw = H3_MAX(lw, t);
    p.lin = off; off += al(lw);
    h3_attn_args aa = {S_, heads, heads, head_dim, (int64_t)I, (int64_t)I, (int64_t)I, (int64_t)I, 1.0f, 0};
    p.attn = off; off += al(h3_attn_workspace_bytes(&aa, nth));
    p.total = off;
    return p;
}

#endif /* H3_BLOCK_ROWS_H */
