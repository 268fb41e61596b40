/* attn_ref.c — the scalar reference attention: the executable specification.
 *
 * For each query row i of head h (kv head h / (Hq/Hkv)), keys j in 0..S-1 (0..i when
 * causal), in blocks of bk keys:
 *   s_j   = (q_i . k_j) * scale                     (float32, sequential sum over d)
 *   m'    = max(m, max_j s_j);  c = exp(m - m')     (c = 0 on the first block)
 *   l     = l*c + sum_j exp(s_j - m')
 *   o     = o*c + sum_j exp(s_j - m') v_j
 *   out_i = o / l                                    after the last block
 * Plain loops in float32 with libm expf: slow, obvious, and the oracle for every SIMD
 * path.  Scratch per thread: o[D] and s[bk]. */
#include "attn_impl.h"

#include <math.h>

#define REF_BQ 16
#define REF_BK 64

static void attn_unit_ref(const h3_attn_args *a, const float *q, const float *k,
                          const float *v, float *out, int h, int64_t q0, float *ws) {
    const int D = a->D;
    const int kvh = h / (a->Hq / a->Hkv);
    float *o = ws;           /* [D] */
    float *s = ws + D;       /* [REF_BK] */
    int64_t q1 = H3_MIN(q0 + REF_BQ, a->S);
    for (int64_t i = q0; i < q1; i++) {
        const float *qi = q + i * a->ldq + (int64_t)h * D;
        int64_t kend = a->causal ? i + 1 : a->S;
        float m = -INFINITY, l = 0.0f;
        for (int d = 0; d < D; d++) o[d] = 0.0f;
        for (int64_t k0 = 0; k0 < kend; k0 += REF_BK) {
            int kn = (int)H3_MIN((int64_t)REF_BK, kend - k0);
            float mx = m;
            for (int j = 0; j < kn; j++) {
                const float *kj = k + (k0 + j) * a->ldk + (int64_t)kvh * D;
                float dot = 0.0f;
                for (int d = 0; d < D; d++) dot += qi[d] * kj[d];
                s[j] = dot * a->scale;
                mx = fmaxf(mx, s[j]);
            }
            float c = expf(m - mx); /* m = -inf on the first block: c = 0 */
            l *= c;
            for (int d = 0; d < D; d++) o[d] *= c;
            for (int j = 0; j < kn; j++) {
                const float *vj = v + (k0 + j) * a->ldv + (int64_t)kvh * D;
                float p = expf(s[j] - mx);
                l += p;
                for (int d = 0; d < D; d++) o[d] += p * vj[d];
            }
            m = mx;
        }
        float *oi = out + i * a->ldo + (int64_t)h * D;
        for (int d = 0; d < D; d++) oi[d] = o[d] / l;
    }
}

const attn_kernels attn_kernels_ref = {REF_BQ, REF_BK, attn_unit_ref};
