/* block_rows.h — per-row passes shared by the block drivers (dit.c, vit.c): bf16 rounding,
 * the bf16 SwiGLU and RoPE as torch rounds them on bf16 tensors, and the QKV split.
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

#endif /* H3_BLOCK_ROWS_H */
