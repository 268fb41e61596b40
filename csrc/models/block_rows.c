/* block_rows.c — the element-wise passes of the model drivers (block_rows.h), written once
 * for dit.c and vit.c: one row at a time, so the pool splits them by rows and the results
 * do not depend on the thread count.  Plain float32 C in torch's op order (compiled with
 * -ffp-contract=off, like every portable file). */
#include "block_rows.h"

/* one fused QKV row [3*H*D] -> q, k, v rows [H*D]: per-head interleaved ([h: q k v] ...) or
 * stacked ([q; k; v]) */
static void row_split_qkv(const float *x, float *q, float *k, float *v, int heads,
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

static void ew_task(void *p, int ith, int nth) {
    const block_ew *c = (const block_ew *)p;
    const int64_t n = c->n;
    for (int64_t i = c->rows * ith / nth; i < c->rows * (ith + 1) / nth; i++) {
        float *x = c->x + i * n;
        switch (c->op) {
        case EW_ROUND:
            for (int64_t j = 0; j < n; j++) x[j] = rb(x[j]);
            break;
        case EW_MODULATE: { /* x = R(R(x * s1p) + shift) */
            int64_t t = c->rt ? c->rt[i] : 0;
            const float *s1 = c->t1 + t * n, *sh = c->t2 + t * n;
            if (c->round)
                for (int64_t j = 0; j < n; j++) x[j] = rb(rb(x[j] * s1[j]) + sh[j]);
            else
                for (int64_t j = 0; j < n; j++) x[j] = x[j] * s1[j] + sh[j];
            break;
        }
        case EW_GATE_ADD: { /* x = R(x + R(gate * branch)) ; gate NULL = 1 */
            const float *br = c->a + i * n;
            const float *g = c->t1 ? c->t1 + (c->rt ? c->rt[i] : 0) * n : NULL;
            for (int64_t j = 0; j < n; j++) {
                float v = g ? g[j] * br[j] : br[j];
                if (c->round) v = rb(v);
                v = x[j] + v;
                x[j] = c->round ? rb(v) : v;
            }
            break;
        }
        case EW_SCALE_ADD: { /* x = x + a * s (torch: h + branch * scale, two roundings) */
            const float *br = c->a + i * n;
            for (int64_t j = 0; j < n; j++) {
                float t = br[j] * c->s[j];
                x[j] = x[j] + t;
            }
            break;
        }
        case EW_SWIGLU_BF16: { /* a: [rows, 2n] = [gate; value] -> x: [rows, n] */
            /* the scalar kernel on every path: the AVX-512 one's vector exp is ~2 ulp off
             * expf before rounding, which would move the DiT's and ViT's bf16 bits */
            const float *gv = c->a + i * 2 * n;
            h3_qwen_elem_ref.swiglu_bf16(gv, gv + n, x, n);
            break;
        }
        case EW_ROPE_BF16: /* x: [rows, heads*head_dim]; tables [rows, rot_dim/2] */
            c->bf16->rope_bf16(x, c->cos + i * (c->rot_dim / 2), c->sin + i * (c->rot_dim / 2), c->heads,
                               c->head_dim, c->rot_dim);
            break;
        case EW_SPLIT_QKV: { /* x: [rows, 3*inner] -> q, k, v [rows, inner] */
            const int64_t inner = (int64_t)c->heads * c->head_dim;
            row_split_qkv(x, c->q + i * inner, c->k + i * inner, c->v + i * inner, c->heads, c->head_dim,
                          c->interleaved);
            break;
        }
        }
    }
}

void block_ew_run(h3_pool *pool, const block_ew *c) {
    /* small calls stay on the calling thread */
    h3_pool_run(c->rows * c->n < 16384 ? NULL : pool, ew_task, (void *)c);
}

h3_status h3_round_bf16(float *x, int64_t n, h3_pool *pool, h3_err *err) {
    if (n < 0 || (n > 0 && !x)) return h3_fail(err, H3_EINVAL, "round_bf16: bad arguments");
    block_ew c;
    memset(&c, 0, sizeof c);
    c.op = EW_ROUND;
    c.x = x;
    c.n = 1024;
    c.rows = n / 1024;
    block_ew_run(pool, &c);
    for (int64_t i = c.rows * 1024; i < n; i++) x[i] = rb(x[i]);
    return H3_OK;
}

h3_status block_check(const char *who, const h3_block_shape *sh, const h3_block_weights *bw, const float *cos,
                      const float *sin, h3_err *err) {
    const int64_t S = sh->S;
    const int Hd = sh->hidden, H = sh->heads, D = sh->head_dim, F = sh->ffn, rot_dim = sh->rot_dim;
    const h3_linear *qkv = bw->qkv, *out = bw->out, *up = bw->up, *down = bw->down;
    if (!qkv || !out || !up || !down || !bw->norm1 || !bw->norm2)
        return h3_fail(err, H3_EINVAL, "%s: a linear or norm weight is missing", who);
    const int64_t I = (int64_t)H * D;
    if (S < 0 || Hd < 1 || H < 1 || D < 1 || F < 1)
        return h3_fail(err, H3_EINVAL, "%s: bad geometry S=%lld hidden=%d heads=%d head_dim=%d ffn=%d", who,
                       (long long)S, Hd, H, D, F);
    if (h3_linear_n(qkv) != 3 * I || h3_linear_k(qkv) != Hd || h3_linear_n(out) != Hd ||
        h3_linear_k(out) != I || h3_linear_n(up) != 2 * (int64_t)F || h3_linear_k(up) != Hd ||
        h3_linear_n(down) != Hd || h3_linear_k(down) != F)
        return h3_fail(err, H3_EINVAL, "%s: weight shapes do not match hidden=%d inner=%lld ffn=%d", who,
                       Hd, (long long)I, F);
    if (cos && (!sin || rot_dim < 2 || rot_dim > D || rot_dim % 2))
        return h3_fail(err, H3_EINVAL, "%s: RoPE needs sin and rot_dim (%d) even in [2, %d]", who, rot_dim, D);
    return H3_OK;
}

h3_status block_check_linear(const char *who, const h3_linear *l, int64_t n, int64_t k, const char *name,
                             h3_err *err) {
    if (h3_linear_n(l) != n || h3_linear_k(l) != k)
        return h3_fail(err, H3_EINVAL, "%s: %s is [%lld, %lld], expected [%lld, %lld]", who, name,
                       (long long)h3_linear_n(l), (long long)h3_linear_k(l), (long long)n, (long long)k);
    return H3_OK;
}

static block_bufs block_carve(const block_ws *p, void *ws) {
    char *base = (char *)ws;
    float *f[BW_LIN];
    for (int i = 0; i < BW_LIN; i++) f[i] = (float *)(base + p->at[i]);
    block_bufs b = {f[BW_N], f[BW_QKV], f[BW_Q], f[BW_K], f[BW_V], f[BW_O], f[BW_BR], f[BW_FF], f[BW_G], f[BW_U],
                    f[BW_ACT], base + p->at[BW_LIN], base + p->at[BW_ATTN],
                    p->at[BW_ATTN] - p->at[BW_LIN], p->total - p->at[BW_ATTN]};
    return b;
}

h3_status block_workspace(block_ws p, void *ws, size_t ws_bytes, void **own, block_bufs *b, const char *who,
                          h3_err *err) {
    h3_status st = h3_workspace(&ws, &ws_bytes, p.total, own, who, err);
    if (!st) *b = block_carve(&p, ws);
    return st;
}

h3_status block_attention(const block_bufs *b, int64_t S, int H, int D, int round, int bf16, h3_pool *pool,
                          h3_isa isa, h3_err *err) {
    const int64_t I = (int64_t)H * D;
    h3_attn_args aa = {S, H, H, D, I, I, I, I, 1.0f / sqrtf((float)D), 0, bf16};
    h3_status st = h3_attention(&aa, b->q, b->k, b->v, b->o, pool, b->attn, b->attn_bytes, isa, err);
    if (!st && round) st = h3_round_bf16(b->o, S * I, pool, err);
    return st;
}

#define TRY(call) do { h3_status st_ = (call); if (st_) return st_; } while (0)

h3_status block_qk_prep(const float *qkv, float *q, float *k, float *v, int64_t S, int H, int D,
                        int interleaved, const float *norm_q, const float *norm_k, float eps, int R,
                        const float *cos, const float *sin, int rot_dim, h3_pool *pool, h3_isa eisa,
                        h3_err *err) {
    const int64_t I = (int64_t)H * D;
    block_ew c;
    memset(&c, 0, sizeof c);
    c.op = EW_SPLIT_QKV; c.rows = S; c.n = 3 * I; c.x = (float *)qkv; c.heads = H; c.head_dim = D;
    c.interleaved = interleaved; c.q = q; c.k = k; c.v = v;
    block_ew_run(pool, &c);
    TRY(h3_rmsnorm(q, norm_q, q, S * H, D, eps, pool, eisa, NULL, err));
    TRY(h3_rmsnorm(k, norm_k, k, S * H, D, eps, pool, eisa, NULL, err));
    if (R) {
        TRY(h3_round_bf16(q, S * I, pool, err));
        TRY(h3_round_bf16(k, S * I, pool, err));
    }
    if (!cos) return H3_OK;
    if (R) {
        memset(&c, 0, sizeof c);
        c.op = EW_ROPE_BF16; c.rows = S; c.n = I; c.heads = H; c.head_dim = D;
        c.rot_dim = rot_dim; c.cos = cos; c.sin = sin; c.bf16 = h3_qwen_elem_for(eisa);
        c.x = q; block_ew_run(pool, &c);
        c.x = k; block_ew_run(pool, &c);
        return H3_OK;
    }
    TRY(h3_rope(q, cos, sin, S, H, D, rot_dim, pool, eisa, NULL, err));
    TRY(h3_rope(k, cos, sin, S, H, D, rot_dim, pool, eisa, NULL, err));
    return H3_OK;
}

h3_status block_swiglu_up(const h3_linear *up, const float *n, int64_t S, int F, int R, float *ff,
                          float *act, h3_pool *pool, void *lws, size_t lws_b, h3_err *err) {
    if (!R) {
        h3_epilogue e = {H3_EPI_SWIGLU, NULL, NULL, NULL, 0};
        return h3_linear_forward(up, pool, n, S, act, &e, lws, lws_b, err);
    }
    TRY(h3_linear_forward(up, pool, n, S, ff, NULL, lws, lws_b, err));
    TRY(h3_round_bf16(ff, S * 2 * (int64_t)F, pool, err));
    block_ew c;
    memset(&c, 0, sizeof c);
    c.op = EW_SWIGLU_BF16; c.rows = S; c.n = F; c.x = act; c.a = ff;
    block_ew_run(pool, &c);
    return H3_OK;
}
