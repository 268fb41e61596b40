/* hadamard.c — the block Hadamard rotation of int8-convrot linears (see hadamard_impl.h
 * for the matrix and the operation order every path follows): public entry, dispatch,
 * row split over the pool, and the scalar reference. */
#include "hadamard_impl.h"

#define MIN_PER_THREAD 16384 /* floats: a few us of L1 work, worth a pool hand-off */

int hadamard_group_ok(int64_t G) {
    for (int64_t g = 4; g <= 4096; g *= 4)
        if (G == g) return 1;
    return 0;
}

void hadamard_row_ref(float *x, int64_t n, int G) {
    for (int64_t g0 = 0; g0 < n; g0 += G)
        for (int64_t st = 1; st < G; st *= 4) hadamard_level_ref(x + g0, G, st);
}

hadamard_row_fn hadamard_row_for(h3_isa isa) {
    switch (h3_isa_vector(isa)) {
#if H3_X86
    case H3_ISA_AVX2: return hadamard_row_avx2;
    case H3_ISA_AVX512: return hadamard_row_avx512;
#endif
#if H3_ARM64
    case H3_ISA_NEON: return hadamard_row_neon;
#endif
    default: return hadamard_row_ref;
    }
}

typedef struct {
    hadamard_row_fn fn;
    float *x;
    int64_t rows, n;
    int G, parts;
} hadamard_job;

static void hadamard_task(void *p, int ith, int nth) {
    const hadamard_job *j = (const hadamard_job *)p;
    (void)nth;
    if (ith >= j->parts) return;
    int64_t r0 = j->rows * ith / j->parts, r1 = j->rows * (ith + 1) / j->parts;
    for (int64_t r = r0; r < r1; r++) j->fn(j->x + r * j->n, j->n, j->G);
}

h3_status h3_hadamard(float *x, int64_t rows, int64_t n, int group, h3_pool *pool, h3_isa isa,
                      h3_isa *ran, h3_err *err) {
    h3_status st = h3_isa_check(isa, err);
    if (st) return st;
    if (!hadamard_group_ok(group))
        return h3_fail(err, H3_EINVAL, "hadamard: group must be a power of 4 from 4 to 4096, got %d", group);
    if (rows < 0 || n < 1 || n % group)
        return h3_fail(err, H3_EINVAL, "hadamard: [%lld, %lld] rows do not split into groups of %d",
                       (long long)rows, (long long)n, group);
    if (n > 0 && rows > (INT64_MAX / 8) / n)
        return h3_fail(err, H3_EINVAL, "hadamard: rows x n = %lld x %lld is too large", (long long)rows, (long long)n);
    if (rows > 0 && !x) return h3_fail(err, H3_EINVAL, "hadamard: x is NULL");
    hadamard_job j = {hadamard_row_for(isa), x, rows, n, group, 1};
    const int64_t want = H3_MAX((int64_t)1, rows * n / MIN_PER_THREAD);
    j.parts = (int)H3_MIN((int64_t)h3_pool_threads(pool), H3_MIN(want, H3_MAX(rows, (int64_t)1)));
    if (rows > 0) {
        if (j.parts <= 1) {
            j.parts = 1;
            hadamard_task(&j, 0, 1);
        } else {
            h3_pool_run(pool, hadamard_task, &j);
        }
    }
    if (ran) *ran = h3_isa_vector(isa);
    return H3_OK;
}
