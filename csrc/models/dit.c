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
    return block_ws_plan(&a->shape, 1, &w->base, &e_res, nth);
}

size_t h3_dit_block_workspace_bytes(const h3_dit_block *w, const h3_dit_block_args *a,
                                    int n_threads) {
    if (!w || !a || a->shape.S < 0) return 0;
    return plan(w, a, n_threads < 1 ? 1 : n_threads).total;
}

#define TRY(call) do { st = (call); if (st) goto fail; } while (0)

/* n = R(RMS(h, w)), then (modulated blocks) n = R(R(n * s1p[r]) + shift[r]). */
static h3_status norm_modulate(const float *h, const float *w, const float *s1p,
                               const float *shift, const h3_dit_block_args *a, float *n,
                               h3_pool *pool, h3_isa eisa, h3_err *err) {
    const int64_t S = a->shape.S;
    const int Hd = a->shape.hidden;
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
    const int64_t S = a->shape.S;
    const int Hd = a->shape.hidden;
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
    h3_status st = block_check("dit_block", &a->shape, &w->base, a->cos, a->sin, err);
    if (st) return st;
    if (!w->norm_q || !w->norm_k) return h3_fail(err, H3_EINVAL, "dit_block: norm_q or norm_k is missing");
    const int mod = a->scale1p_msa != NULL;
    if (mod && (!a->shift_msa || !a->gate_msa || !a->shift_mlp || !a->scale1p_mlp || !a->gate_mlp || !a->rows))
        return h3_fail(err, H3_EINVAL, "dit_block: modulation tables are incomplete");
    if (mod)
        for (int64_t i = 0; i < a->shape.S; i++)
            if (a->rows[i] < 0 || a->rows[i] >= a->table_rows)
                return h3_fail(err, H3_EINVAL, "dit_block: rows[%lld] = %d outside [0, %lld)",
                               (long long)i, a->rows[i], (long long)a->table_rows);
    if (a->shape.S == 0) return H3_OK;
    void *own;
    block_bufs b;
    st = block_workspace(plan(w, a, h3_pool_threads(pool)), ws, ws_bytes, &own, &b, "dit_block", err);
    if (st) return st;
    const int64_t S = a->shape.S;
    const int H = a->shape.heads, D = a->shape.head_dim, F = a->shape.ffn;
    const int64_t I = (int64_t)H * D;
    const int R = a->round_bf16;
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
    TRY(norm_modulate(h, w->base.norm1, mod ? a->scale1p_msa : NULL, a->shift_msa, a, b.n, pool, eisa, err));
    STAGE(0);
    TRY(h3_linear_forward(w->base.qkv, pool, b.n, S, b.qkv, NULL, b.lin, b.lin_bytes, err));
    if (R) TRY(h3_round_bf16(b.qkv, S * 3 * I, pool, err));
    STAGE(1);
    TRY(block_qk_prep(b.qkv, b.q, b.k, b.v, S, H, D, w->base.qkv_interleaved, w->norm_q, w->norm_k, a->qk_eps, R,
                      a->cos, a->sin, a->shape.rot_dim, pool, eisa, err));
    STAGE(2);
    TRY(block_attention(&b, S, H, D, R, R || a->attn_bf16, pool, isa, err));
    STAGE(3);
    TRY(gated_residual(w->base.out, b.o, mod ? a->gate_msa : NULL, a, h, b.br, pool, b.lin, b.lin_bytes, err));
    STAGE(4);

    /* ---- feed-forward half ---- */
    TRY(norm_modulate(h, w->base.norm2, mod ? a->scale1p_mlp : NULL, a->shift_mlp, a, b.n, pool, eisa, err));
    STAGE(5);
    TRY(block_swiglu_up(w->base.up, b.n, S, F, R, b.ff, b.act, pool, b.lin, b.lin_bytes, err));
    STAGE(6);
    TRY(gated_residual(w->base.down, b.act, mod ? a->gate_mlp : NULL, a, h, b.br, pool, b.lin, b.lin_bytes, err));
    STAGE(7);
#undef STAGE
fail:
    h3_free(own);
    return st;
}
