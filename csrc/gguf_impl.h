/* gguf_impl.h — GGUF block formats shared by the reference decoder (gguf_ref.c) and the
 * GGUF linear's driver (gemm_gguf.c).  Internal header. */
#ifndef H3_GGUF_IMPL_H
#define H3_GGUF_IMPL_H

#include "h3_internal.h"

/* Every quantised type, decoded, is int8 values q with a float scale and offset per run of
 * 16 values (the finest sub-block any format has): w[k] = sc[k/16] * q[k] + mn[k/16].
 * (Q4_0/Q5_0/Q8_0/Q3_K/Q6_K have no offset: mn = 0 and has_min = 0.)  The GEMM multiplies
 * q by int8 activations in integers per 16 and applies sc, mn and the activation scale
 * after; a SIMD kernel does the same decode in registers. */
#define GGUF_SUB 16
/* an activation block: 32 int8 values with their scale and the integer sums of each half
 * (for the formats' offsets: sum_k mn * d_a * qa_k = mn * d_a * sum_k qa_k) */
#define GGUF_ACT 32
typedef struct {
    float d;
    int32_t s[2];
    int8_t q[GGUF_ACT];
} gguf_act_blk;
_Static_assert(sizeof(gguf_act_blk) == 44, "gguf_act_blk is 4 + 8 + 32 bytes");

int gguf_is_quant(int type);
int gguf_has_min(int type);
/* one row of K values (K a multiple of the type's block) -> q [K], sc/mn [K/16] */
void gguf_decode_row_ref(int type, const uint8_t *row, int64_t K, int8_t *q, float *sc, float *mn);
/* one row of K values (K % 32 == 0) -> K/32 activation blocks */
void gguf_quant_act_row_ref(const float *x, int64_t K, gguf_act_blk *a);
/* sum_k w[k] x[k] of a decoded row and a quantised activation row */
typedef float (*gguf_dot_fn)(const int8_t *q, const float *sc, const float *mn, int has_min,
                             const gguf_act_blk *a, int64_t K);
float gguf_dot_ref(const int8_t *q, const float *sc, const float *mn, int has_min,
                   const gguf_act_blk *a, int64_t K);
#if H3_X86
float gguf_dot_avx2(const int8_t *q, const float *sc, const float *mn, int has_min,
                    const gguf_act_blk *a, int64_t K);
#endif
/* the dot product a linear on path `isa` runs (the reference for ref and where no SIMD
 * version exists: NEON for now) */
gguf_dot_fn gguf_dot_for(h3_isa isa);

#endif
