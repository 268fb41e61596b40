/* snake.c — public entry of the anti-aliased SnakeBeta (h3_audio.h): validation, the
 * per-call constants, and splitting (channel group, time tile) units over the pool.
 * Each unit reads TILE + 16 rows of its channels and writes its tile once, so units are
 * independent and the result does not depend on the thread count; threads take units
 * from an atomic counter. */
#include "snake_impl.h"

#include <math.h>
#include <stdatomic.h>
#include <stdlib.h>

static const h3_snake_kernels *snake_table(h3_isa isa) {
    return h3_isa_table(isa, &h3_snake_ref, H3_ON_X86(&h3_snake_avx2), H3_ON_X86(&h3_snake_avx512),
                        H3_ON_ARM64(&h3_snake_neon));
}

typedef struct {
    const h3_snake_kernels *kt;
    const h3_snake_consts *k;
    const float *x;
    float *y;
    int64_t T, C, ngroups, ntiles;
    _Atomic int64_t next; /* next free unit: a thread slowed by other work takes fewer */
} snake_job;

static void snake_task(void *ctx, int ith, int nth) {
    snake_job *j = (snake_job *)ctx;
    _Alignas(64) float scratch[H3_SNAKE_SCRATCH];
    const int64_t units = j->ngroups * j->ntiles;
    (void)ith; (void)nth;
    for (int64_t u; (u = atomic_fetch_add(&j->next, 1)) < units;) {
        const int64_t g = u / j->ntiles, tt = u % j->ntiles;
        const int64_t c0 = g * H3_SNAKE_GROUP, t0 = tt * H3_SNAKE_TILE;
        j->kt->tile(j->x, j->y, j->T, j->C, c0, (int)H3_MIN((int64_t)H3_SNAKE_GROUP, j->C - c0), t0,
                    H3_MIN(j->T, t0 + H3_SNAKE_TILE), j->k, scratch);
    }
}

h3_status h3_snake_aa(const float *x, float *y, int64_t T, int64_t C, const float *alpha,
                      const float *beta, const float *fu, const float *fd, h3_pool *pool,
                      h3_isa isa, h3_isa *ran, h3_err *err) {
    h3_status st = h3_isa_check(isa, err);
    if (st) return st;
    const h3_snake_kernels *kt = snake_table(isa);
    if (!kt)
        return h3_fail(err, H3_EUNSUPPORTED, "snake_aa: no kernels for ISA '%s' in this build", h3_isa_name(isa));
    if (T < 1 || C < 1 || T > ((int64_t)1 << 40) / C)
        return h3_fail(err, H3_EINVAL, "snake_aa: bad shape [T=%lld, C=%lld]", (long long)T, (long long)C);
    if (!x || !y || !alpha || !beta || !fu || !fd)
        return h3_fail(err, H3_EINVAL, "snake_aa: NULL argument");
    const size_t bytes = (size_t)(T * C) * 4;
    if ((uintptr_t)y < (uintptr_t)x + bytes && (uintptr_t)x < (uintptr_t)y + bytes)
        return h3_fail(err, H3_EINVAL, "snake_aa: y overlaps x");
    float *ab = h3_alloc((size_t)C * 2 * sizeof(float));
    if (!ab) return h3_fail(err, H3_ENOMEM, "snake_aa: out of memory");
    h3_snake_consts k;
    /* torch: exp(alpha), (exp(beta) + 1e-9).reciprocal(), in float32 */
    for (int64_t c = 0; c < C; c++) {
        ab[c] = expf(alpha[c]);
        ab[C + c] = 1.0f / (expf(beta[c]) + 1e-9f);
    }
    k.a = ab;
    k.ib = ab + C;
    /* x2 is exact, so folding the upsampler's gain into its taps changes no bit */
    for (int s = 0; s < 6; s++) {
        k.fe[s] = 2.0f * fu[11 - 2 * s];
        k.fo[s] = 2.0f * fu[10 - 2 * s];
    }
    for (int i = 0; i < H3_SNAKE_TAPS; i++) k.fd[i] = fd[i];
    snake_job j = {kt, &k, x, y, T, C, H3_CEIL_DIV(C, H3_SNAKE_GROUP), H3_CEIL_DIV(T, H3_SNAKE_TILE), 0};
    atomic_init(&j.next, 0);
    const int64_t units = j.ngroups * j.ntiles;
    if (units < 2 || T * C < 16384) snake_task(&j, 0, 1);
    else h3_pool_run(pool, snake_task, &j);
    h3_free(ab);
    if (ran) *ran = h3_isa_vector(isa);
    return H3_OK;
}
