/* qwen_layer.c — one Qwen3-VL text decoder layer composed from the kernels (spec §3.2,
 * op order in h3_qwen.h).  float32 mode: plain float32 ops, the residual adds fused into
 * the o_proj / down_proj GEMM epilogues and SwiGLU into the gate_up epilogue.  bf16 mode
 * (round_bf16): every activation is rounded to bf16 where transformers' bf16 model rounds
 * it (linear outputs, both Qwen RMSNorm roundings, RoPE's three, SDPA's output, silu and
 * the SwiGLU product, each residual add), and attention rounds its softmax numerators to
 * bf16 as torch's CPU flash attention does for bf16 inputs (h3_attention_bf16p); the
 * layer then matches that model up to GEMM summation order (bit for bit on the tiny test
 * model over 50 layers). */
#include "h3_internal.h"
#include "block_rows.h"   /* the workspace layout */

#include <math.h>
#include <string.h>

/* workspace (block_rows.h's layout): n [S,hidden] | q [S,Hq*D] | k, v [S,Hkv*D] | o [S,Hq*D] |
 * br [S,hidden] | g, u [S,ffn] (separate gate/up linears only) | act [S,ffn] | linear
 * workspace | attention workspace (float32 or bf16 products, the larger) */
static block_ws plan(const h3_qwen_layer *w, const h3_qwen_layer_args *a, int nth) {
    const size_t S = (size_t)a->S, Hd = (size_t)a->hidden, Iq = (size_t)a->heads * a->head_dim,
                 Ik = (size_t)a->kv_heads * a->head_dim, F = (size_t)a->ffn;
    const size_t gu = w->gate_up ? 0 : S * F * 4;
    h3_epilogue e_res = {H3_EPI_RESID, NULL, NULL, NULL, 0};
    h3_epilogue e_sw = {H3_EPI_SWIGLU, NULL, NULL, NULL, 0};
    size_t lw = 0, t;
    const h3_linear *plain[] = {w->q, w->k, w->v, w->o, w->gate, w->up, w->down};
    for (size_t i = 0; i < sizeof plain / sizeof plain[0]; i++)
        if (plain[i]) { t = h3_linear_workspace_bytes(plain[i], a->S, nth, NULL); lw = H3_MAX(lw, t); }
    t = h3_linear_workspace_bytes(w->o, a->S, nth, &e_res); lw = H3_MAX(lw, t);
    t = h3_linear_workspace_bytes(w->down, a->S, nth, &e_res); lw = H3_MAX(lw, t);
    if (w->gate_up) { t = h3_linear_workspace_bytes(w->gate_up, a->S, nth, &e_sw); lw = H3_MAX(lw, t); }
    h3_attn_args aa = {a->S, a->heads, a->kv_heads, a->head_dim, (int64_t)Iq, (int64_t)Ik,
                       (int64_t)Ik, (int64_t)Iq, 1.0f, 1, 0};
    size_t aw = h3_attn_workspace_bytes(&aa, nth), aw2 = h3_attention_bf16p_workspace_bytes(&aa, nth);
    const size_t bytes[BW_PIECES] = {
        [BW_N] = S * Hd * 4, [BW_Q] = S * Iq * 4, [BW_K] = S * Ik * 4, [BW_V] = S * Ik * 4, [BW_O] = S * Iq * 4,
        [BW_BR] = S * Hd * 4, [BW_G] = gu, [BW_U] = gu, [BW_ACT] = S * F * 4, [BW_LIN] = lw,
        [BW_ATTN] = H3_MAX(aw, aw2)};
    return block_ws_layout(bytes);
}

static int complete(const h3_qwen_layer *w) {
    return w->q && w->k && w->v && w->o && w->down && (w->gate_up || (w->gate && w->up)) &&
           w->input_norm && w->post_norm && w->q_norm && w->k_norm;
}

size_t h3_qwen_layer_workspace_bytes(const h3_qwen_layer *w, const h3_qwen_layer_args *a,
                                     int n_threads) {
    if (!w || !a || a->S < 0 || !complete(w)) return 0;
    return plan(w, a, n_threads < 1 ? 1 : n_threads).total;
}

#define TRY(call) do { st = (call); if (st) goto fail; } while (0)

/* H3_EINVAL naming what is wrong unless forward can run this call: the geometry, the
 * tables, and every linear's shape. */
static h3_status check_call(const h3_qwen_layer *w, const h3_qwen_layer_args *a, const float *h, h3_err *err) {
    if (!w || !a || !h) return h3_fail(err, H3_EINVAL, "qwen_layer: NULL argument");
    if (!complete(w)) return h3_fail(err, H3_EINVAL, "qwen_layer: a weight is missing");
    const int64_t S = a->S;
    const int H = a->heads, Hk = a->kv_heads, D = a->head_dim;
    const int64_t Hd = a->hidden, Iq = (int64_t)H * D, Ik = (int64_t)Hk * D, F = a->ffn;
    if (S < 0 || Hd < 1 || H < 1 || Hk < 1 || H % Hk || D < 2 || D % 2 || D > 256 || F < 1)
        return h3_fail(err, H3_EINVAL,
                       "qwen_layer: bad geometry S=%lld hidden=%d heads=%d kv_heads=%d head_dim=%d ffn=%d",
                       (long long)S, a->hidden, H, Hk, D, a->ffn);
    if (a->round_bf16 && !(w->gate && w->up))
        return h3_fail(err, H3_EINVAL, "qwen_layer: bf16 rounding needs separate gate and up linears");
    if (S > 0 && (!a->cos || !a->sin)) return h3_fail(err, H3_EINVAL, "qwen_layer: cos/sin tables missing");
    struct { const h3_linear *l; int64_t n, k; const char *name; } want[] = {
        {w->q, Iq, Hd, "q_proj"}, {w->k, Ik, Hd, "k_proj"}, {w->v, Ik, Hd, "v_proj"},
        {w->o, Hd, Iq, "o_proj"}, {w->down, Hd, F, "down_proj"}, {w->gate_up, 2 * F, Hd, "gate_up"},
        {w->gate, F, Hd, "gate_proj"}, {w->up, F, Hd, "up_proj"}};
    for (size_t i = 0; i < sizeof want / sizeof want[0]; i++) {
        h3_status st = want[i].l ? block_check_linear("qwen_layer", want[i].l, want[i].n, want[i].k,
                                                      want[i].name, err) : H3_OK;
        if (st) return st;
    }
    return H3_OK;
}

h3_status h3_qwen_layer_forward(const h3_qwen_layer *w, const h3_qwen_layer_args *a, float *h,
                                h3_pool *pool, void *ws, size_t ws_bytes, h3_isa isa,
                                h3_err *err) {
    h3_status st = check_call(w, a, h, err);
    if (st || a->S == 0) return st;
    const int64_t S = a->S;
    const int Hd = a->hidden, H = a->heads, Hk = a->kv_heads, D = a->head_dim, F = a->ffn;
    void *own;
    block_bufs b;
    st = block_workspace(plan(w, a, h3_pool_threads(pool)), ws, ws_bytes, &own, &b, "qwen_layer", err);
    if (st) return st;
    float *y = b.n, *q = b.q, *k = b.k, *v = b.v, *o = b.o, *br = b.br, *g = b.g, *u = b.u, *act = b.act;
    void *lws = b.lin, *aws = b.attn;
    const size_t lws_b = b.lin_bytes, aws_b = b.attn_bytes;
    const int R = a->round_bf16;
    const int64_t Iq = (int64_t)H * D, Ik = (int64_t)Hk * D;
    const h3_isa eisa = h3_isa_vector(isa); /* element-wise kernels */
    h3_epilogue resid = {H3_EPI_RESID, h, NULL, NULL, 0};

    /* ---- attention half ---- */
    if (R) TRY(h3_qwen_rmsnorm_bf16(h, w->input_norm, y, S, Hd, a->eps, pool, eisa, NULL, err));
    else TRY(h3_rmsnorm(h, w->input_norm, y, S, Hd, a->eps, pool, eisa, NULL, err));
    TRY(h3_linear_forward(w->q, pool, y, S, q, NULL, lws, lws_b, err));
    TRY(h3_linear_forward(w->k, pool, y, S, k, NULL, lws, lws_b, err));
    TRY(h3_linear_forward(w->v, pool, y, S, v, NULL, lws, lws_b, err));
    if (R) {
        /* the q/k linear outputs' rounding is folded into the head norm: it reads float32,
         * so round them first; v is rounded as the linear output it is */
        TRY(h3_round_bf16(q, S * Iq, pool, err));
        TRY(h3_round_bf16(k, S * Ik, pool, err));
        TRY(h3_round_bf16(v, S * Ik, pool, err));
        TRY(h3_qwen_rmsnorm_bf16(q, w->q_norm, q, S * H, D, a->eps, pool, eisa, NULL, err));
        TRY(h3_qwen_rmsnorm_bf16(k, w->k_norm, k, S * Hk, D, a->eps, pool, eisa, NULL, err));
        TRY(h3_rope_bf16(q, a->cos, a->sin, S, H, D, pool, eisa, NULL, err));
        TRY(h3_rope_bf16(k, a->cos, a->sin, S, Hk, D, pool, eisa, NULL, err));
    } else {
        TRY(h3_rmsnorm(q, w->q_norm, q, S * H, D, a->eps, pool, eisa, NULL, err));
        TRY(h3_rmsnorm(k, w->k_norm, k, S * Hk, D, a->eps, pool, eisa, NULL, err));
        TRY(h3_rope(q, a->cos, a->sin, S, H, D, D, pool, eisa, NULL, err));
        TRY(h3_rope(k, a->cos, a->sin, S, Hk, D, D, pool, eisa, NULL, err));
    }
    h3_attn_args aa = {S, H, Hk, D, Iq, Ik, Ik, Iq, 1.0f / sqrtf((float)D), 1, 0};
    if (R) TRY(h3_attention_bf16p(&aa, q, k, v, o, pool, aws, aws_b, eisa, err));
    else TRY(h3_attention(&aa, q, k, v, o, pool, aws, aws_b, isa, err));
    if (R) {
        TRY(h3_round_bf16(o, S * Iq, pool, err));
        TRY(h3_linear_forward(w->o, pool, o, S, br, NULL, lws, lws_b, err));
        TRY(h3_round_bf16(br, S * Hd, pool, err));
        for (int64_t i = 0; i < S * Hd; i++) br[i] += h[i];      /* h = bf16(h + br) */
        TRY(h3_round_bf16(br, S * Hd, pool, err));
        memcpy(h, br, (size_t)(S * Hd) * sizeof(float));
    } else {
        TRY(h3_linear_forward(w->o, pool, o, S, h, &resid, lws, lws_b, err));
    }

    /* ---- MLP half ---- */
    if (R) {
        TRY(h3_qwen_rmsnorm_bf16(h, w->post_norm, y, S, Hd, a->eps, pool, eisa, NULL, err));
        TRY(h3_linear_forward(w->gate, pool, y, S, g, NULL, lws, lws_b, err));
        TRY(h3_linear_forward(w->up, pool, y, S, u, NULL, lws, lws_b, err));
        TRY(h3_round_bf16(g, S * (int64_t)F, pool, err));
        TRY(h3_round_bf16(u, S * (int64_t)F, pool, err));
        TRY(h3_swiglu_bf16(g, u, act, S * (int64_t)F, pool, eisa, NULL, err));
        TRY(h3_linear_forward(w->down, pool, act, S, br, NULL, lws, lws_b, err));
        TRY(h3_round_bf16(br, S * Hd, pool, err));
        for (int64_t i = 0; i < S * Hd; i++) br[i] += h[i];
        TRY(h3_round_bf16(br, S * Hd, pool, err));
        memcpy(h, br, (size_t)(S * Hd) * sizeof(float));
    } else {
        TRY(h3_rmsnorm(h, w->post_norm, y, S, Hd, a->eps, pool, eisa, NULL, err));
        if (w->gate_up) {
            h3_epilogue sw = {H3_EPI_SWIGLU, NULL, NULL, NULL, 0};
            TRY(h3_linear_forward(w->gate_up, pool, y, S, act, &sw, lws, lws_b, err));
        } else {
            TRY(h3_linear_forward(w->gate, pool, y, S, g, NULL, lws, lws_b, err));
            TRY(h3_linear_forward(w->up, pool, y, S, u, NULL, lws, lws_b, err));
            for (int64_t i = 0; i < S * (int64_t)F; i++) act[i] = g[i] / (1.0f + expf(-g[i])) * u[i];
        }
        TRY(h3_linear_forward(w->down, pool, act, S, h, &resid, lws, lws_b, err));
    }
fail:
    h3_free(own);
    return st;
}
