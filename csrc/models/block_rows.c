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
