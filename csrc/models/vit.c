/* vit.c — one block of the MiniMax-H3 video VAE's ViT decoder, composed from the kernels
 * (spec §6.2, diffusers MiniMaxH3VideoTransformerBlock):
 *
 *   n = RMS(h, norm1)
 *   q,k,v = n Wqkv^T + b ; q,k = RMS per head (no weight) ; RoPE(q, k) on rot_dim channels
 *   h = h + (attention(q,k,v) Wout^T + b) * scale1
 *   n = RMS(h, norm2)
 *   h = h + ((up * silu(gate)) Wdown^T + b) * scale2,   [gate; up] = n Wup^T + b
 *
 * The residual add is a separate pass (x + s*b, two float32 roundings as torch does),
 * not a GEMM epilogue: in bf16 mode the branch is rounded to bf16 before the scale.
 * Also the LayerNorm of the decoder's output head. */
#include "h3_internal.h"
#include "block_rows.h"

#include <math.h>
#include <string.h>

/* ---- LayerNorm --------------------------------------------------------------------- */
typedef struct {
    const float *x, *w, *b;
    float *out;
    int64_t rows, n;
    float eps;
} ln_ctx;

static void ln_task(void *p, int ith, int nth) {
    const ln_ctx *c = (const ln_ctx *)p;
    const int64_t n = c->n;
    for (int64_t r = c->rows * ith / nth; r < c->rows * (ith + 1) / nth; r++) {
        const float *x = c->x + r * n;
        float *y = c->out + r * n;
        double s = 0.0, ss = 0.0;
        for (int64_t j = 0; j < n; j++) s += x[j];
        const double mean = s / (double)n;
        for (int64_t j = 0; j < n; j++) {
            double d = x[j] - mean;
            ss += d * d;
        }
        const float rstd = (float)(1.0 / sqrt(ss / (double)n + (double)c->eps));
        const float m = (float)mean;
        for (int64_t j = 0; j < n; j++) {
            float v = (x[j] - m) * rstd;
            if (c->w) v = v * c->w[j];
            if (c->b) v = v + c->b[j];
            y[j] = v;
        }
    }
}

h3_status h3_layernorm(const float *x, const float *w, const float *b, float *out,
                       int64_t rows, int64_t n, float eps, h3_pool *pool, h3_isa isa,
                       h3_err *err) {
    h3_status st = h3_isa_check(isa, err);
    if (st) return st;
    if (rows < 0 || n < 1 || !(eps >= 0.0f) || (rows > 0 && (!x || !out)))
        return h3_fail(err, H3_EINVAL, "layernorm: bad arguments rows=%lld n=%lld eps=%g",
                       (long long)rows, (long long)n, (double)eps);
    if (out != x && (uintptr_t)out < (uintptr_t)(x + rows * n) && (uintptr_t)x < (uintptr_t)(out + rows * n))
        return h3_fail(err, H3_EINVAL, "layernorm: out overlaps x without being x");
    ln_ctx c = {x, w, b, out, rows, n, eps};
    h3_pool_run(rows * n < 16384 ? NULL : pool, ln_task, &c);
    return H3_OK;
}

/* ---- the block ------------------------------------------------------------------------- */
/* the workspace (block_rows.h's layout) */
static block_ws plan(const h3_vit_block *w, const h3_vit_block_args *a, int nth) {
    /* ff holds the up projection's output only in bf16 mode (rounded before SwiGLU) */
    return block_ws_plan(&a->shape, a->round_bf16, &w->base, NULL, nth);
}

size_t h3_vit_block_workspace_bytes(const h3_vit_block *w, const h3_vit_block_args *a,
                                    int n_threads) {
    if (!w || !a || a->shape.S < 0 || !w->base.qkv || !w->base.out || !w->base.up || !w->base.down) return 0;
    return plan(w, a, n_threads < 1 ? 1 : n_threads).total;
}

#define TRY(call) do { st = (call); if (st) goto fail; } while (0)

/* br = x W^T (+b), rounded in bf16 mode; then h = h + br * scale. */
static h3_status scaled_residual(const h3_linear *lin, const float *x, const float *scale,
                                 const h3_vit_block_args *a, float *h, float *br,
                                 h3_pool *pool, void *lws, size_t lws_b, h3_err *err) {
    h3_status st = h3_linear_forward(lin, pool, x, a->shape.S, br, NULL, lws, lws_b, err);
    if (!st && a->round_bf16) st = h3_round_bf16(br, a->shape.S * a->shape.hidden, pool, err);
    if (!st) {
        block_ew c;
        memset(&c, 0, sizeof c);
        c.op = EW_SCALE_ADD; c.rows = a->shape.S; c.n = a->shape.hidden; c.x = h; c.a = br; c.s = scale;
        block_ew_run(pool, &c);
    }
    return st;
}

h3_status h3_vit_block_forward(const h3_vit_block *w, const h3_vit_block_args *a, float *h,
                               h3_pool *pool, void *ws, size_t ws_bytes, h3_isa isa,
                               h3_err *err) {
    if (!w || !a || !h) return h3_fail(err, H3_EINVAL, "vit_block: NULL argument");
    if (!a->cos) return h3_fail(err, H3_EINVAL, "vit_block: RoPE tables missing");
    h3_status st = block_check("vit_block", &a->shape, &w->base, a->cos, a->sin, err);
    if (st) return st;
    if (!w->scale1 || !w->scale2) return h3_fail(err, H3_EINVAL, "vit_block: scale1 or scale2 is missing");
    st = h3_isa_check(isa, err);
    if (st || a->shape.S == 0) return st;
    void *own;
    block_bufs b;
    st = block_workspace(plan(w, a, h3_pool_threads(pool)), ws, ws_bytes, &own, &b, "vit_block", err);
    if (st) return st;
    const int64_t S = a->shape.S;
    const int Hd = a->shape.hidden, H = a->shape.heads, D = a->shape.head_dim, F = a->shape.ffn;
    const int64_t I = (int64_t)H * D;
    const int R = a->round_bf16;
    const h3_isa eisa = h3_isa_vector(isa);

    /* ---- attention half ---- */
    TRY(h3_rmsnorm(h, w->base.norm1, b.n, S, Hd, a->eps, pool, eisa, NULL, err));
    if (R) TRY(h3_round_bf16(b.n, S * Hd, pool, err));
    TRY(h3_linear_forward(w->base.qkv, pool, b.n, S, b.qkv, NULL, b.lin, b.lin_bytes, err));
    if (R) TRY(h3_round_bf16(b.qkv, S * 3 * I, pool, err));
    /* q/k norms (no weight) in float32 whatever the compute dtype, then cast back */
    TRY(block_qk_prep(b.qkv, b.q, b.k, b.v, S, H, D, w->base.qkv_interleaved, NULL, NULL, a->eps, R, a->cos, a->sin,
                      a->shape.rot_dim, pool, eisa, err));
    TRY(block_attention(&b, S, H, D, R, R || a->attn_bf16, pool, isa, err));
    TRY(scaled_residual(w->base.out, b.o, w->scale1, a, h, b.br, pool, b.lin, b.lin_bytes, err));

    /* ---- feed-forward half ---- */
    TRY(h3_rmsnorm(h, w->base.norm2, b.n, S, Hd, a->eps, pool, eisa, NULL, err));
    if (R) TRY(h3_round_bf16(b.n, S * Hd, pool, err));
    TRY(block_swiglu_up(w->base.up, b.n, S, F, R, b.ff, b.act, pool, b.lin, b.lin_bytes, err));
    TRY(scaled_residual(w->base.down, b.act, w->scale2, a, h, b.br, pool, b.lin, b.lin_bytes, err));
fail:
    h3_free(own);
    return st;
}
