/* hadamard_impl.h — the block Hadamard rotation's contract with its per-ISA kernels
 * (hadamard.c: public entry, validation, threads and the scalar reference;
 * hadamard_body.inc: the SIMD loop, compiled per ISA).
 *
 * H_G = kron^p(H4) / sqrt(G), G = 4^p, H4 = [[1,1,1,-1],[1,1,-1,1],[1,-1,1,1],[-1,1,1,1]]
 * (comfy-kitchen's "regular" Hadamard, the int8-convrot rotation).  H_G is symmetric and
 * orthogonal, so it is its own inverse.  It is applied as p levels of H4 butterflies at
 * strides 1, 4, 16, ..., G/4, each halved, so the normalisation is exact:
 *   for a, b, c, d at stride st:  h = 0.5f * ((a + b) + (c + d));
 *                                 a' = h - d, b' = h - c, c' = h - b, d' = h - a
 * (H4 · [a b c d] / 2).  Every path computes exactly these operations per element, so
 * every path gives the reference's bits. */
#ifndef H3_HADAMARD_IMPL_H
#define H3_HADAMARD_IMPL_H

#include "h3_internal.h"

/* x: [n] in place, each run of G consecutive floats rotated; n % G == 0, G = 4^p >= 4. */
typedef void (*hadamard_row_fn)(float *x, int64_t n, int G);

void hadamard_row_ref(float *x, int64_t n, int G);
#if H3_X86
void hadamard_row_avx2(float *x, int64_t n, int G);
void hadamard_row_avx512(float *x, int64_t n, int G);
#endif
#if H3_ARM64
void hadamard_row_neon(float *x, int64_t n, int G);
#endif

/* The kernel that runs for `isa` (its vector path: AMX runs AVX-512's); `isa` must be
 * supported (checked by the caller). */
hadamard_row_fn hadamard_row_for(h3_isa isa);
/* 1 if G is a power of 4 in [4, 4096]. */
int hadamard_group_ok(int64_t G);

/* One level of the reference: the butterflies at stride st of one group x[G]. */
static inline void hadamard_level_ref(float *x, int64_t G, int64_t st) {
    for (int64_t b = 0; b < G; b += 4 * st) {
        for (int64_t j = b; j < b + st; j++) {
            const float a = x[j], bb = x[j + st], c = x[j + 2 * st], d = x[j + 3 * st];
            const float h = 0.5f * ((a + bb) + (c + d));
            x[j] = h - d;
            x[j + st] = h - c;
            x[j + 2 * st] = h - bb;
            x[j + 3 * st] = h - a;
        }
    }
}

#endif /* H3_HADAMARD_IMPL_H */
