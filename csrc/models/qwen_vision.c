/* qwen_vision.c — the Qwen3-VL vision tower's block, patch merger and small ops (API and
 * op order in h3_qwen_vision.h), composed from the GEMM (h3_linear_forward: bias and
 * residual in its epilogue), attention (h3_attention / h3_attention_bf16p per image),
 * RoPE, LayerNorm and activation kernels.  float32 mode runs them as they are; bf16 mode
 * rounds every activation where transformers' bf16 model rounds it (h3_qwen_vision.h). */
#include "h3_internal.h"
#include "block_rows.h"   /* al(), the workspace layout */

#include <math.h>
#include <string.h>

#define TRY(call) do { st = (call); if (st) goto fail; } while (0)

/* ---- small ops ----------------------------------------------------------------- */

typedef struct { const float *x; float *out; int64_t n; } gelu_ctx;

static void gelu_erf_task(void *p, int ith, int nth) {
    const gelu_ctx *c = (const gelu_ctx *)p;
    const int64_t per = H3_CEIL_DIV(c->n, nth), lo = per * ith, hi = H3_MIN(c->n, lo + per);
    for (int64_t i = lo; i < hi; i++) {
        const double v = c->x[i];
        c->out[i] = (float)(0.5 * v * (1.0 + erf(v * 0.70710678118654752440)));
    }
}

h3_status h3_gelu_erf(const float *x, float *out, int64_t n, h3_pool *pool, h3_err *err) {
    if (n < 0 || (n > 0 && (!x || !out))) return h3_fail(err, H3_EINVAL, "gelu_erf: bad arguments");
    gelu_ctx c = {x, out, n};
    h3_pool_run(n >= 16384 ? pool : NULL, gelu_erf_task, &c);
    return H3_OK;
}

h3_status h3_qvis_pos_add(float *h, const float *table, int64_t P, const int64_t *idx,
                          const float *w, int taps, int64_t S, int C, int round_bf16,
                          h3_err *err) {
    if (S < 0 || C < 1 || taps < 1 || P < 1 || (S > 0 && (!h || !table || !idx || !w)))
        return h3_fail(err, H3_EINVAL, "qvis_pos_add: bad arguments");
    for (int64_t r = 0; r < S * taps; r++)
        if (idx[r] < 0 || idx[r] >= P)
            return h3_fail(err, H3_EINVAL, "qvis_pos_add: index %lld out of [0, %lld)",
                           (long long)idx[r], (long long)P);
    for (int64_t r = 0; r < S; r++) {
        float *hr = h + r * C;
        for (int c = 0; c < C; c++) {
            float acc = 0.0f;
            for (int t = 0; t < taps; t++) {
                const float prod = table[idx[r * taps + t] * C + c] * w[r * taps + t];
                acc = t == 0 ? prod : acc + prod;
            }
            if (round_bf16) hr[c] = h3_round_to_bf16(hr[c] + h3_round_to_bf16(acc));
            else hr[c] += acc;
        }
    }
    return H3_OK;
}

h3_status h3_rows_add(float *h, int64_t L, const int64_t *rows, const float *src, int64_t n,
                      int C, int round_bf16, h3_err *err) {
    if (L < 0 || n < 0 || C < 1 || (n > 0 && (!h || !rows || !src)))
        return h3_fail(err, H3_EINVAL, "rows_add: bad arguments");
    for (int64_t i = 0; i < n; i++)
        if (rows[i] < 0 || rows[i] >= L)
            return h3_fail(err, H3_EINVAL, "rows_add: row %lld out of [0, %lld)", (long long)rows[i], (long long)L);
    for (int64_t i = 0; i < n; i++) {
        float *hr = h + rows[i] * C;
        const float *s = src + i * C;
        for (int c = 0; c < C; c++) hr[c] = round_bf16 ? h3_round_to_bf16(hr[c] + s[c]) : hr[c] + s[c];
    }
    return H3_OK;
}

/* ---- the block ----------------------------------------------------------------- */

/* workspace (block_rows.h's layout): n [S,C] | q, k, v, o [S,C] | br [S,C] | act [S,F] |
 * linear workspace | attention workspace (float32 or bf16 products, the larger) */
static block_ws block_plan(const h3_qvis_block *w, const h3_qvis_block_args *a, int nth) {
    const size_t S = (size_t)a->S, C = (size_t)a->hidden, F = (size_t)a->ffn;
    h3_epilogue e_res = {H3_EPI_RESID, NULL, NULL, NULL, 0};
    size_t lw = 0, t;
    const h3_linear *all[] = {w->q, w->k, w->v, w->proj, w->fc1, w->fc2};
    for (size_t i = 0; i < sizeof all / sizeof all[0]; i++) {
        t = h3_linear_workspace_bytes(all[i], a->S, nth, NULL); lw = H3_MAX(lw, t);
    }
    t = h3_linear_workspace_bytes(w->proj, a->S, nth, &e_res); lw = H3_MAX(lw, t);
    t = h3_linear_workspace_bytes(w->fc2, a->S, nth, &e_res); lw = H3_MAX(lw, t);
    const int D = a->heads > 0 ? a->hidden / a->heads : 1;
    h3_attn_args aa = {a->S, a->heads, a->heads, D, (int64_t)C, (int64_t)C, (int64_t)C, (int64_t)C, 1.0f, 0, 0};
    size_t aw = h3_attn_workspace_bytes(&aa, nth), aw2 = h3_attention_bf16p_workspace_bytes(&aa, nth);
    const size_t SC4 = S * C * 4;
    const size_t bytes[BW_PIECES] = {[BW_N] = SC4, [BW_Q] = SC4, [BW_K] = SC4, [BW_V] = SC4, [BW_O] = SC4,
                                     [BW_BR] = SC4, [BW_ACT] = S * F * 4, [BW_LIN] = lw,
                                     [BW_ATTN] = H3_MAX(aw, aw2)};
    return block_ws_layout(bytes);
}

static int block_complete(const h3_qvis_block *w) {
    return w->q && w->k && w->v && w->proj && w->fc1 && w->fc2 && w->norm1_w && w->norm1_b &&
           w->norm2_w && w->norm2_b;
}

size_t h3_qvis_block_workspace_bytes(const h3_qvis_block *w, const h3_qvis_block_args *a,
                                     int n_threads) {
    if (!w || !a || a->S < 0 || a->hidden < 1 || a->heads < 1 || !block_complete(w)) return 0;
    return block_plan(w, a, n_threads < 1 ? 1 : n_threads).total;
}

static h3_status check_linear(const h3_linear *l, int64_t n, int64_t k, const char *name, h3_err *err) {
    return block_check_linear("qvis", l, n, k, name, err);
}

/* H3_EINVAL naming what is wrong unless forward can run this call. */
static h3_status check_call(const h3_qvis_block *w, const h3_qvis_block_args *a, const float *h, h3_err *err) {
    if (!w || !a || !h) return h3_fail(err, H3_EINVAL, "qvis_block: NULL argument");
    if (!block_complete(w)) return h3_fail(err, H3_EINVAL, "qvis_block: a weight is missing");
    const int64_t S = a->S;
    const int C = a->hidden, H = a->heads, F = a->ffn;
    const int D = H > 0 ? C / H : 0;
    if (S < 0 || C < 1 || H < 1 || C % H || D % 2 || D > 256 || F < 1 || a->nseg < 1 || !a->seg)
        return h3_fail(err, H3_EINVAL, "qvis_block: bad geometry S=%lld hidden=%d heads=%d ffn=%d segments=%d",
                       (long long)S, C, H, F, a->nseg);
    if (a->seg[0] != 0 || a->seg[a->nseg] != S)
        return h3_fail(err, H3_EINVAL, "qvis_block: segments must run from 0 to S=%lld", (long long)S);
    for (int i = 0; i < a->nseg; i++)
        if (a->seg[i + 1] <= a->seg[i]) return h3_fail(err, H3_EINVAL, "qvis_block: segment %d is empty", i);
    if (!a->cos || !a->sin) return h3_fail(err, H3_EINVAL, "qvis_block: cos/sin tables missing");
    h3_status st;
    if ((st = check_linear(w->q, C, C, "q", err)) || (st = check_linear(w->k, C, C, "k", err)) ||
        (st = check_linear(w->v, C, C, "v", err)) || (st = check_linear(w->proj, C, C, "proj", err)) ||
        (st = check_linear(w->fc1, F, C, "fc1", err)) || (st = check_linear(w->fc2, C, F, "fc2", err)))
        return st;
    return H3_OK;
}

h3_status h3_qvis_block_forward(const h3_qvis_block *w, const h3_qvis_block_args *a, float *h,
                                h3_pool *pool, void *ws, size_t ws_bytes, h3_isa isa,
                                h3_err *err) {
    h3_status st = check_call(w, a, h, err);
    if (st) return st;
    const int64_t S = a->S;
    const int C = a->hidden, H = a->heads, F = a->ffn, D = C / H;
    void *own;
    block_bufs b;
    st = block_workspace(block_plan(w, a, h3_pool_threads(pool)), ws, ws_bytes, &own, &b, "qvis_block", err);
    if (st) return st;
    float *y = b.n, *q = b.q, *k = b.k, *v = b.v, *o = b.o, *br = b.br, *act = b.act;
    void *lws = b.lin, *aws = b.attn;
    const size_t lws_b = b.lin_bytes, aws_b = b.attn_bytes;
    const int R = a->round_bf16;
    const int64_t SC = S * C;
    const h3_isa eisa = h3_isa_vector(isa);
    h3_epilogue resid = {H3_EPI_RESID, h, NULL, NULL, 0};

    /* ---- attention half: norm1, q/k/v (+bias), 2-D RoPE, attention per image, proj ---- */
    TRY(h3_layernorm(h, w->norm1_w, w->norm1_b, y, S, C, a->eps, pool, eisa, err));
    if (R) TRY(h3_round_bf16(y, SC, pool, err));
    TRY(h3_linear_forward(w->q, pool, y, S, q, NULL, lws, lws_b, err));
    TRY(h3_linear_forward(w->k, pool, y, S, k, NULL, lws, lws_b, err));
    TRY(h3_linear_forward(w->v, pool, y, S, v, NULL, lws, lws_b, err));
    if (R) { TRY(h3_round_bf16(q, SC, pool, err)); TRY(h3_round_bf16(k, SC, pool, err)); TRY(h3_round_bf16(v, SC, pool, err)); }
    /* transformers rotates in float32 and casts back once (apply_rotary_pos_emb_vision) */
    TRY(h3_rope(q, a->cos, a->sin, S, H, D, D, pool, eisa, NULL, err));
    TRY(h3_rope(k, a->cos, a->sin, S, H, D, D, pool, eisa, NULL, err));
    if (R) { TRY(h3_round_bf16(q, SC, pool, err)); TRY(h3_round_bf16(k, SC, pool, err)); }
    const float scale = 1.0f / sqrtf((float)D);
    for (int s = 0; s < a->nseg; s++) {
        const int64_t r0 = a->seg[s], n = a->seg[s + 1] - r0;
        h3_attn_args aa = {n, H, H, D, C, C, C, C, scale, 0, 0};
        /* bf16: torch's bf16 flash attention, emulated (h3_attention_bf16p), on ref only;
         * every SIMD path runs the float32 attention on the bf16 q/k/v instead (the
         * numerators unrounded: ~1e-3 relative, inside the bf16 bounds).  The emulation
         * is scalar on AVX2/NEON (5x the float32 block at one 1344x768 image, 4032
         * patches) and, vectorised on AVX-512/AMX, still 5.5x it there (1.12 s a block
         * against 0.205 s on 16 SPR cores: bench/results/vision_tower_spr16.txt) */
        if (R && eisa == H3_ISA_REF)
            TRY(h3_attention_bf16p(&aa, q + r0 * C, k + r0 * C, v + r0 * C, o + r0 * C, pool, aws, aws_b, eisa, err));
        else TRY(h3_attention(&aa, q + r0 * C, k + r0 * C, v + r0 * C, o + r0 * C, pool, aws, aws_b, isa, err));
    }
    if (R) {
        TRY(h3_round_bf16(o, SC, pool, err));
        TRY(h3_linear_forward(w->proj, pool, o, S, br, NULL, lws, lws_b, err));
        TRY(h3_round_bf16(br, SC, pool, err));
        for (int64_t i = 0; i < SC; i++) h[i] = h3_round_to_bf16(h[i] + br[i]);
    } else {
        TRY(h3_linear_forward(w->proj, pool, o, S, h, &resid, lws, lws_b, err));
    }

    /* ---- MLP half: norm2, fc1 (+bias), GELU (tanh), fc2 (+bias) ---- */
    TRY(h3_layernorm(h, w->norm2_w, w->norm2_b, y, S, C, a->eps, pool, eisa, err));
    if (R) TRY(h3_round_bf16(y, SC, pool, err));
    TRY(h3_linear_forward(w->fc1, pool, y, S, act, NULL, lws, lws_b, err));
    if (R) TRY(h3_round_bf16(act, S * (int64_t)F, pool, err));
    TRY(h3_activation(act, act, S * (int64_t)F, H3_ACT_GELU_TANH, pool, eisa, NULL, err));
    if (R) {
        TRY(h3_round_bf16(act, S * (int64_t)F, pool, err));
        TRY(h3_linear_forward(w->fc2, pool, act, S, br, NULL, lws, lws_b, err));
        TRY(h3_round_bf16(br, SC, pool, err));
        for (int64_t i = 0; i < SC; i++) h[i] = h3_round_to_bf16(h[i] + br[i]);
    } else {
        TRY(h3_linear_forward(w->fc2, pool, act, S, h, &resid, lws, lws_b, err));
    }
fail:
    h3_free(own);
    return st;
}

/* ---- the patch merger ---------------------------------------------------------- */

/* workspace: y [S,C] (the normed rows, = [S/unit, unit*C]) | a [S/unit, unit*C] |
 * linear workspace */
size_t h3_qvis_merger_workspace_bytes(const h3_qvis_merger *w, int64_t S, int C, int unit,
                                      int n_threads) {
    if (!w || !w->fc1 || !w->fc2 || S < 0 || C < 1 || unit < 1) return 0;
    const int nth = n_threads < 1 ? 1 : n_threads;
    const int64_t M = S / unit;
    size_t lw = h3_linear_workspace_bytes(w->fc1, M, nth, NULL), t = h3_linear_workspace_bytes(w->fc2, M, nth, NULL);
    return al((size_t)S * C * 4) + al((size_t)S * C * 4) + al(H3_MAX(lw, t));
}

h3_status h3_qvis_merger_forward(const h3_qvis_merger *w, const float *x, int64_t S, int C,
                                 int unit, float eps, int round_bf16, float *out,
                                 h3_pool *pool, void *ws, size_t ws_bytes, h3_isa isa,
                                 h3_err *err) {
    if (!w || !w->fc1 || !w->fc2 || !w->norm_w || !w->norm_b || (S > 0 && (!x || !out)))
        return h3_fail(err, H3_EINVAL, "qvis_merger: NULL argument");
    if (S < 0 || C < 1 || unit < 1 || S % unit)
        return h3_fail(err, H3_EINVAL, "qvis_merger: %lld rows are not whole groups of %d", (long long)S, unit);
    const int64_t M = S / unit, K = (int64_t)unit * C, N = h3_linear_n(w->fc2);
    h3_status st;
    if ((st = check_linear(w->fc1, K, K, "merger fc1", err)) || (st = check_linear(w->fc2, N, K, "merger fc2", err)))
        return st;
    if (S == 0) return H3_OK;
    const size_t need = h3_qvis_merger_workspace_bytes(w, S, C, unit, h3_pool_threads(pool));
    void *own;
    st = h3_workspace(&ws, &ws_bytes, need, &own, "qvis_merger", err);
    if (st) return st;
    float *y = (float *)ws, *mid = (float *)((char *)ws + al((size_t)S * C * 4));
    void *lws = (char *)ws + 2 * al((size_t)S * C * 4);
    const size_t lws_b = need - 2 * al((size_t)S * C * 4);
    const h3_isa eisa = h3_isa_vector(isa);
    /* postshuffle (deepstack mergers): one norm over each merged row of unit*C; else
     * (the final merger) over each patch's C before the rows are merged */
    if (w->postshuffle) TRY(h3_layernorm(x, w->norm_w, w->norm_b, y, M, K, eps, pool, eisa, err));
    else TRY(h3_layernorm(x, w->norm_w, w->norm_b, y, S, C, eps, pool, eisa, err));
    if (round_bf16) TRY(h3_round_bf16(y, S * C, pool, err));
    TRY(h3_linear_forward(w->fc1, pool, y, M, mid, NULL, lws, lws_b, err));
    if (round_bf16) TRY(h3_round_bf16(mid, M * K, pool, err));
    TRY(h3_gelu_erf(mid, mid, M * K, pool, err));
    if (round_bf16) TRY(h3_round_bf16(mid, M * K, pool, err));
    TRY(h3_linear_forward(w->fc2, pool, mid, M, out, NULL, lws, lws_b, err));
    if (round_bf16) TRY(h3_round_bf16(out, M * N, pool, err));
fail:
    h3_free(own);
    return st;
}
