/* h3_qwen.h — the Qwen3-VL text decoder layer (the prompt encoder of MiniMax-H3, spec
 * §3.2) and the bf16-rounding element-wise ops it needs.  Included at the end of h3.h.
 *
 * bf16 ops keep activations as float32 arrays holding bf16-representable values; each
 * op rounds (round to nearest even, h3_f32_to_bf16) exactly where torch's bf16 tensors
 * round, so the layer reproduces transformers run in bf16 up to GEMM summation order.
 * Every op has a scalar reference (H3_ISA_REF); AVX-512 (and AMX, which runs it) has
 * vector kernels that give the same bits except the RMS sum of squares and attention's
 * q.k dot products, which are summed in another order (this said only the RMS sum; the C
 * test driver saw AVX-512 attention_bf16p differ from ref by an ulp at S=530); AVX2 and
 * NEON run the scalar reference (these ops are a few passes over [L, hidden] against the
 * layer's ~2*L*hidden*(q+kv+o+3*ffn) GEMM flops). */
#ifndef H3_QWEN_H
#define H3_QWEN_H

#include "h3.h"

#ifdef __cplusplus
extern "C" {
#endif

/* Qwen3-VL RMSNorm in bf16 (transformers Qwen3VLTextRMSNorm, two roundings):
 *   inv = 1 / sqrt(mean(x^2) + eps)   (float32; the sum of squares in any order)
 *   out = bf16(w * bf16(x * inv))
 * x, out: [rows, n] (out may alias x); w: [n] (bf16-representable); n >= 1. */
h3_status h3_qwen_rmsnorm_bf16(const float *x, const float *w, float *out, int64_t rows,
                               int64_t n, float eps, h3_pool *pool, h3_isa isa, h3_isa *ran,
                               h3_err *err);

/* Rotate-half RoPE over whole heads with torch's bf16 roundings, in place:
 *   c = bf16(cos[i]), s = bf16(sin[i]), x1 = x[i], x2 = x[i + D/2]  (i < D/2)
 *   x[i] = bf16(bf16(x1 c) - bf16(x2 s)) ; x[i + D/2] = bf16(bf16(x2 c) + bf16(x1 s))
 * x: [rows, heads, D]; cos, sin: [rows, D/2]; D even, 2 <= D. */
h3_status h3_rope_bf16(float *x, const float *cos, const float *sin, int64_t rows, int heads,
                       int head_dim, h3_pool *pool, h3_isa isa, h3_isa *ran, h3_err *err);

/* SwiGLU of separate gate/up rows with torch's bf16 roundings:
 *   out[i] = bf16(bf16(g[i] / (1 + exp(-g[i]))) * u[i])
 * g, u, out: [n] (out may alias g or u). */
h3_status h3_swiglu_bf16(const float *g, const float *u, float *out, int64_t n, h3_pool *pool,
                         h3_isa isa, h3_isa *ran, h3_err *err);

/* Attention as torch's CPU flash attention computes it for bf16 inputs (transformers'
 * sdpa path in bf16; torch 2.13, AVX-512 build): as h3_attention (same args, GQA,
 * causal), but with torch's query blocks (32/64/256 rows by length) and key blocks of
 * 512, the softmax numerators E(s_j - m') rounded to bf16 before they weight v:
 *   m' = max(m, max_j s_j), s_j = scale q.k_j;  l = sum_j E(s_j - m') + e^(m-m') l
 *   acc = e^(m-m') acc + sum_j bf16(E(s_j - m')) v_j (key order);  out = acc * (1/l)
 * E is torch's vector fexp_u20 for the keys in whole 16-key chunks of a block (the
 * block width, masked keys included, decides) and expf for the rest; l sums them in
 * torch's lane order (qwen_elem_impl.h: exp_sum_bf16p).  out is not rounded.
 * ws: >= h3_attention_bf16p_workspace_bytes (NULL: allocated inside). */
size_t h3_attention_bf16p_workspace_bytes(const h3_attn_args *a, int n_threads);
h3_status h3_attention_bf16p(const h3_attn_args *a, const float *q, const float *k,
                             const float *v, float *out, h3_pool *pool, void *ws,
                             size_t ws_bytes, h3_isa isa, h3_err *err);

/* One decoder layer's weights (borrowed for the call).
 *   q: [Hq*D, hidden], k, v: [Hkv*D, hidden], o: [hidden, Hq*D], down: [hidden, ffn];
 *   the MLP input side is either gate_up (pair linear, rows [gate; up] of [2*ffn, hidden])
 *   or gate and up separately ([ffn, hidden] each; required with round_bf16);
 *   input_norm, post_norm: [hidden]; q_norm, k_norm: [D]. */
typedef struct {
    const h3_linear *q, *k, *v, *o, *gate_up, *gate, *up, *down;
    const float *input_norm, *post_norm, *q_norm, *k_norm;
} h3_qwen_layer;

/* One call's geometry.  h: [S, hidden] residual stream, updated in place.
 *   cos, sin: [S, D/2] RoPE tables of the rows' positions (angle i for channels i, i+D/2).
 *   round_bf16: round every activation as transformers' bf16 model does (h must then hold
 *   bf16 values and the norm weights must be bf16-representable); else float32 throughout. */
typedef struct {
    int64_t S;
    int hidden, heads, kv_heads, head_dim, ffn;
    float eps;
    int round_bf16;
    const float *cos, *sin;
} h3_qwen_layer_args;

/* The layer (spec §3.2), causal grouped-query attention, scale 1/sqrt(D):
 *   r = h; y = RMS(h, input_norm); q,k,v = y W^T; q,k = RMS per head; RoPE(q, k)
 *   h = r + attention(q, k, v) Wo^T
 *   r = h; y = RMS(h, post_norm); h = r + (silu(y Wg^T) * (y Wu^T)) Wd^T
 * ws: 64-byte aligned, >= workspace_bytes (NULL: allocated inside). */
/* h3_qwen_layer_workspace_bytes, h3_qwen_layer_forward */
H3_BLOCK_API(h3_qwen_layer, h3_qwen_layer, h3_qwen_layer_args);

#ifdef __cplusplus
}
#endif
#endif
