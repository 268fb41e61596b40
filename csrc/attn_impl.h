/* attn_impl.h — the attention driver's contract with its per-ISA kernels.
 *
 * attn.c validates, sizes the workspace and hands out work units (head h, query tile
 * starting at q0) to the pool's threads through an atomic counter.  A unit computes
 * out[q0 .. q0+bq-1, h, :] completely (all key tiles, online softmax, final 1/l), so
 * every output element is written by exactly one thread in a fixed order and results
 * do not depend on the thread count.  A unit reads only q rows it then writes, so out
 * may alias q (same stride); it must not overlap k or v. */
#ifndef H3_ATTN_IMPL_H
#define H3_ATTN_IMPL_H

#include "h3_internal.h"

/* One work unit.  ws: this thread's scratch, attn_ws_floats(kt, D) floats, 64-byte aligned. */
typedef void (*attn_unit_fn)(const h3_attn_args *a, const float *q, const float *k,
                             const float *v, float *out, int h, int64_t q0, float *ws);

typedef struct {
    int bq;            /* queries per unit */
    int bk;            /* keys per online-softmax step */
    attn_unit_fn unit;
} attn_kernels;

/* Scratch floats per thread for a table's tiles: Qt[D][bq], Ot[D][bq], St[bk][bq] and
 * three [bq] row vectors (m, l, alpha), each rounded up to 16 floats (64 bytes). */
static inline size_t attn_ws_floats(const attn_kernels *kt, int D) {
    size_t bq = (size_t)H3_ALIGN_UP(kt->bq, 16);
    return 2 * (size_t)H3_ALIGN_UP((size_t)D * bq, 16) + H3_ALIGN_UP((size_t)kt->bk * bq, 16)
           + 3 * bq;
}

extern const attn_kernels attn_kernels_ref;
#if H3_X86
extern const attn_kernels attn_kernels_avx2;
extern const attn_kernels attn_kernels_avx512;
/* bf16_inputs only (attn_bf16.inc): AMX tiles, or VDPBF16PS on AVX512-BF16 CPUs */
extern const attn_kernels attn_kernels_amx;
extern const attn_kernels attn_kernels_bf16dp;
#endif
#if H3_ARM64
extern const attn_kernels attn_kernels_neon;
#endif

#endif /* H3_ATTN_IMPL_H */
