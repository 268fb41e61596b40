/* dit.c — one MiniMax-H3 transformer block, composed from the kernels (spec §4.3):
 *
 *   n = RMS(h, norm1) ; n = n * (1+scale_msa)[r] + shift_msa[r]
 *   q,k,v = n Wqkv^T ; q,k = RMS per head ; RoPE(q, k) on the first rot_dim channels
 *   h = h + gate_msa[r] * (attention(q,k,v) Wout^T)
 *   n = RMS(h, norm2) ; n = n * (1+scale_mlp)[r] + shift_mlp[r]
 *   h = h + gate_mlp[r] * (silu(n Wg^T) * (n Wv^T)) Wdown^T
 *
 * Refiner blocks: no modulation, gates = 1, no RoPE.  In float32 the residual adds are
 * fused into the GEMM epilogues; with round_bf16 every step is a separate op rounded to
 * bf16 in torch's order (spec §4.6), so the result matches diffusers run in bf16. */
#include "h3_internal.h"
#include "block_rows.h"
#include "h3_loop.h"   /* h3_monotonic (stage timing) */

#include <math.h>
#include <string.h>

/* the workspace (block_rows.h's layout; ff always: bf16 mode rounds the up projection's
 * output, and the out/down projections run the residual epilogue) */
static block_ws plan(const h3_dit_block *w, const h3_dit_block_args *a, int nth) {
    h3_epilogue e_res = {H3_EPI_RESID, NULL, NULL, NULL, 0};
    return block_ws_plan(a->S, a->hidden, a->heads, a->head_dim, a->ffn, 1, w->qkv, w->out, w->up, w->down,
                         &e_res, nth);
}

size_t h3_dit_block_workspace_bytes(const h3_dit_block *w, const h3_dit_block_args *a,
                                    int n_threads) {
    if (!w || !a || a->S < 0) return 0;
    return plan(w, a, n_threads < 1 ? 1 : n_threads).total;
}

#define TRY(call) do { st = (call); if (st) goto fail; } while (0)

/* n = R(RMS(h, w)), then (modulated blocks) n = R(R(n * s1p[r]) + shift[r]). */
static h3_status norm_modulate(const float *h, const float *w, const float *s1p,
                               const float *shift, const h3_dit_block_args *a, float *n,
                               h3_pool *pool, h3_isa eisa, h3_err *err) {
    const int64_t S = a->S;
    const int Hd = a->hidden;
    h3_status st = h3_rmsnorm(h, w, n, S, Hd, a->eps, pool, eisa, NULL, err);
    if (!st && a->round_bf16) st = h3_round_bf16(n, S * Hd, pool, err);
    if (!st && s1p) {
        block_ew c;
        memset(&c, 0, sizeof c);
        c.op = EW_MODULATE; c.round = a->round_bf16; c.rows = S; c.n = Hd; c.x = n;
        c.t1 = s1p; c.t2 = shift; c.rt = a->rows;
        block_ew_run(pool, &c);
    }
    return st;
}

/* h = h + gate[r] * (x W^T).  Float32 with a gate table: fused into the GEMM epilogue.
 * bf16 mode or no gate (refiner, gate = 1): br = R(x W^T), then h = R(h + R(gate * br)),
 * each op rounded as torch rounds it. */
static h3_status gated_residual(const h3_linear *lin, const float *x, const float *gate,
                                const h3_dit_block_args *a, float *h, float *br, h3_pool *pool,
                                void *lws, size_t lws_b, h3_err *err) {
    const int64_t S = a->S;
    const int Hd = a->hidden;
    h3_status st;
    if (a->round_bf16 || !gate) {
        st = h3_linear_forward(lin, pool, x, S, br, NULL, lws, lws_b, err);
        if (!st && a->round_bf16) st = h3_round_bf16(br, S * Hd, pool, err);
        if (!st) {
            block_ew c;
            memset(&c, 0, sizeof c);
            c.op = EW_GATE_ADD; c.round = a->round_bf16; c.rows = S; c.n = Hd; c.x = h; c.a = br;
            c.t1 = gate; c.rt = a->rows;
            block_ew_run(pool, &c);
        }
        return st;
    }
    h3_epilogue e = {H3_EPI_RESID, h, gate, a->rows, a->table_rows};
    return h3_linear_forward(lin, pool, x, S, h, &e, lws, lws_b, err);
}

const char *const h3_dit_stage_names[H3_DIT_STAGES] = {
    "norm1", "qkv", "qk_prep", "attention", "out", "norm2", "up", "down"};

h3_status h3_dit_block_forward(const h3_dit_block *w, const h3_dit_block_args *a, float *h,
                               h3_pool *pool, void *ws, size_t ws_bytes, h3_isa isa,
                               h3_err *err) {
    if (!w || !a || !h) return h3_fail(err, H3_EINVAL, "dit_block: NULL argument");
    if (!w->qkv || !w->out || !w->up || !w->down || !w->norm1 || !w->norm2 || !w->norm_q || !w->norm_k)
        return h3_fail(err, H3_EINVAL, "dit_block: a weight is missing");
    const int64_t S = a->S;
    const int Hd = a->hidden, H = a->heads, D = a->head_dim, F = a->ffn;
    const int64_t I = (int64_t)H * D;
    if (S < 0 || Hd < 1 || H < 1 || D < 1 || F < 1)
        return h3_fail(err, H3_EINVAL, "dit_block: bad geometry S=%lld hidden=%d heads=%d head_dim=%d ffn=%d",
                       (long long)S, Hd, H, D, F);
    if (h3_linear_n(w->qkv) != 3 * I || h3_linear_k(w->qkv) != Hd || h3_linear_n(w->out) != Hd ||
        h3_linear_k(w->out) != I || h3_linear_n(w->up) != 2 * (int64_t)F || h3_linear_k(w->up) != Hd ||
        h3_linear_n(w->down) != Hd || h3_linear_k(w->down) != F)
        return h3_fail(err, H3_EINVAL, "dit_block: weight shapes do not match hidden=%d inner=%lld ffn=%d",
                       Hd, (long long)I, F);
    const int mod = a->scale1p_msa != NULL;
    if (mod && (!a->shift_msa || !a->gate_msa || !a->shift_mlp || !a->scale1p_mlp || !a->gate_mlp || !a->rows))
        return h3_fail(err, H3_EINVAL, "dit_block: modulation tables are incomplete");
    if (mod)
        for (int64_t i = 0; i < S; i++)
            if (a->rows[i] < 0 || a->rows[i] >= a->table_rows)
                return h3_fail(err, H3_EINVAL, "dit_block: rows[%lld] = %d outside [0, %lld)",
                               (long long)i, a->rows[i], (long long)a->table_rows);
    if (a->cos && (a->rot_dim < 2 || a->rot_dim > D || a->rot_dim % 2 || !a->sin))
        return h3_fail(err, H3_EINVAL, "dit_block: rot_dim %d must be even and in [2, %d]", a->rot_dim, D);
    if (S == 0) return H3_OK;
    const int nth = h3_pool_threads(pool);
    block_ws p = plan(w, a, nth);
    void *own = NULL;
    h3_status st = H3_OK;
    if (!ws) {
        own = ws = h3_alloc(p.total);
        if (!ws) return h3_fail(err, H3_ENOMEM, "dit_block: cannot allocate %zu bytes of workspace", p.total);
    } else if (ws_bytes < p.total || ((uintptr_t)ws & 63)) {
        return h3_fail(err, H3_EINVAL, "dit_block: workspace too small or misaligned (%zu < %zu)", ws_bytes, p.total);
    }
    char *base = (char *)ws;
    float *n = (float *)(base + p.n), *qkv = (float *)(base + p.qkv), *q = (float *)(base + p.q),
          *k = (float *)(base + p.k), *v = (float *)(base + p.v), *o = (float *)(base + p.o),
          *br = (float *)(base + p.br), *ff = (float *)(base + p.ff), *act = (float *)(base + p.act);
    void *lws = base + p.lin, *aws = base + p.attn;
    const size_t lws_b = p.attn - p.lin, aws_b = p.total - p.attn;
    const int R = a->round_bf16;
    block_ew c;
    /* stage timing (profiling only): STAGE(i) adds the time since the last mark to stage i */
    double mark = a->stage_seconds ? h3_monotonic() : 0.0;
#define STAGE(i)                                                        \
    do {                                                                \
        if (a->stage_seconds) {                                         \
            double now_ = h3_monotonic();                               \
            a->stage_seconds[i] += now_ - mark;                         \
            mark = now_;                                                \
        }                                                               \
    } while (0)

    /* ---- attention half ---- */
    h3_isa eisa = h3_isa_vector(isa);
    TRY(norm_modulate(h, w->norm1, mod ? a->scale1p_msa : NULL, a->shift_msa, a, n, pool, eisa, err));
    STAGE(0);
    TRY(h3_linear_forward(w->qkv, pool, n, S, qkv, NULL, lws, lws_b, err));
    if (R) TRY(h3_round_bf16(qkv, S * 3 * I, pool, err));
    memset(&c, 0, sizeof c);
    c.op = EW_SPLIT_QKV; c.rows = S; c.n = 3 * I; c.x = qkv; c.heads = H; c.head_dim = D;
    c.interleaved = w->qkv_interleaved; c.q = q; c.k = k; c.v = v;
    STAGE(1);
    block_ew_run(pool, &c);
    TRY(h3_rmsnorm(q, w->norm_q, q, S * H, D, a->qk_eps, pool, eisa, NULL, err));
    TRY(h3_rmsnorm(k, w->norm_k, k, S * H, D, a->qk_eps, pool, eisa, NULL, err));
    if (R) {
        TRY(h3_round_bf16(q, S * I, pool, err));
        TRY(h3_round_bf16(k, S * I, pool, err));
    }
    if (a->cos) {
        if (R) {
            memset(&c, 0, sizeof c);
            c.op = EW_ROPE_BF16; c.rows = S; c.n = I; c.heads = H; c.head_dim = D;
            c.rot_dim = a->rot_dim; c.cos = a->cos; c.sin = a->sin; c.bf16 = h3_qwen_elem_for(eisa);
            c.x = q; block_ew_run(pool, &c);
            c.x = k; block_ew_run(pool, &c);
        } else {
            TRY(h3_rope(q, a->cos, a->sin, S, H, D, a->rot_dim, pool, eisa, NULL, err));
            TRY(h3_rope(k, a->cos, a->sin, S, H, D, a->rot_dim, pool, eisa, NULL, err));
        }
    }
    STAGE(2);
    h3_attn_args aa = {S, H, H, D, I, I, I, I, 1.0f / sqrtf((float)D), 0, R || a->attn_bf16};
    TRY(h3_attention(&aa, q, k, v, o, pool, aws, aws_b, isa, err));
    if (R) TRY(h3_round_bf16(o, S * I, pool, err));
    STAGE(3);
    TRY(gated_residual(w->out, o, mod ? a->gate_msa : NULL, a, h, br, pool, lws, lws_b, err));
    STAGE(4);

    /* ---- feed-forward half ---- */
    TRY(norm_modulate(h, w->norm2, mod ? a->scale1p_mlp : NULL, a->shift_mlp, a, n, pool, eisa, err));
    STAGE(5);
    if (R) {
        TRY(h3_linear_forward(w->up, pool, n, S, ff, NULL, lws, lws_b, err));
        TRY(h3_round_bf16(ff, S * 2 * (int64_t)F, pool, err));
        memset(&c, 0, sizeof c);
        c.op = EW_SWIGLU_BF16; c.rows = S; c.n = F; c.x = act; c.a = ff;
        block_ew_run(pool, &c);
    } else {
        h3_epilogue e = {H3_EPI_SWIGLU, NULL, NULL, NULL, 0};
        TRY(h3_linear_forward(w->up, pool, n, S, act, &e, lws, lws_b, err));
    }
    STAGE(6);
    TRY(gated_residual(w->down, act, mod ? a->gate_mlp : NULL, a, h, br, pool, lws, lws_b, err));
    STAGE(7);
#undef STAGE
fail:
    h3_free(own);
    return st;
}
