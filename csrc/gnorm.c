/* gnorm.c — public entry of the per-frame GroupNorm (+ SiLU) (h3_video.h): validation,
 * the (frame, chunk) units, the statistics' reduction and the per-channel affine.
 *
 * Three passes over x, each a pool run over T * H3_GN_CHUNKS units taken from an atomic
 * counter: the per-channel sums, the per-channel squared deviations from the group mean,
 * and the apply.  Between passes the calling thread reduces the units' double sums in
 * unit order, so the result does not depend on the thread count. */
#include "gnorm_impl.h"

#include <math.h>
#include <stdatomic.h>
#include <string.h>

static const h3_gnorm_kernels *gnorm_table(h3_isa isa) {
    return h3_isa_table(isa, &h3_gnorm_ref, H3_ON_X86(&h3_gnorm_avx2), H3_ON_X86(&h3_gnorm_avx512),
                        H3_ON_ARM64(&h3_gnorm_neon));
}

enum { PASS_SUM = 0, PASS_SQDEV = 1, PASS_APPLY = 2 };

typedef struct {
    const h3_gnorm_kernels *kt;
    const float *x;
    float *y;
    int64_t T, P, C;
    int pass, silu;
    double *part;      /* [T * CHUNKS, C] */
    float *m, *a, *b;  /* [T, C]: the group mean per channel; the affine */
    float *acc;        /* [nth, C] */
    _Atomic int64_t next;
} gn_job;

static void gn_task(void *ctx, int ith, int nth) {
    gn_job *j = (gn_job *)ctx;
    (void)nth;
    float *acc = j->acc + (size_t)ith * (size_t)H3_ALIGN_UP(j->C, 16);
    const int64_t units = j->T * H3_GN_CHUNKS, C = j->C;
    for (int64_t u; (u = atomic_fetch_add(&j->next, 1)) < units;) {
        const int64_t t = u / H3_GN_CHUNKS, q = u % H3_GN_CHUNKS;
        const int64_t p0 = j->P * q / H3_GN_CHUNKS, p1 = j->P * (q + 1) / H3_GN_CHUNKS;
        const size_t off = (size_t)((t * j->P + p0) * C);
        double *s = j->part + u * C;
        if (j->pass == PASS_SUM) j->kt->sum(j->x + off, p1 - p0, C, s, acc);
        else if (j->pass == PASS_SQDEV) j->kt->sqdev(j->x + off, p1 - p0, C, j->m + t * C, s, acc);
        else if (p1 > p0) j->kt->apply(j->x + off, j->y + off, p1 - p0, C, j->a + t * C, j->b + t * C, j->silu);
    }
}

static void gn_run(gn_job *j, h3_pool *pool, int pass) {
    j->pass = pass;
    atomic_store(&j->next, 0);
    if (j->T * j->P * j->C < 32768) gn_task(j, 0, 1);
    else h3_pool_run(pool, gn_task, j);
}

/* per (frame, group): the sum over chunks (in order) and over the group's channels */
static double group_total(const gn_job *j, int64_t t, int64_t c0, int64_t cg) {
    double tot = 0.0;
    for (int64_t q = 0; q < H3_GN_CHUNKS; q++) {
        const double *s = j->part + (t * H3_GN_CHUNKS + q) * j->C;
        for (int64_t c = c0; c < c0 + cg; c++) tot += s[c];
    }
    return tot;
}

h3_status h3_group_norm(const float *x, float *y, int64_t T, int64_t P, int64_t C, int G,
                        const float *gamma, const float *beta, float eps, int silu,
                        h3_pool *pool, h3_isa isa, h3_isa *ran, h3_err *err) {
    h3_status st = h3_isa_check(isa, err);
    if (st) return st;
    const h3_gnorm_kernels *kt = gnorm_table(isa);
    if (!kt)
        return h3_fail(err, H3_EUNSUPPORTED, "group_norm: no kernels for ISA '%s' in this build", h3_isa_name(isa));
    if (!x || !y) return h3_fail(err, H3_EINVAL, "group_norm: NULL argument");
    if (T < 1 || P < 1 || C < 1 || T > ((int64_t)1 << 40) / P / C)
        return h3_fail(err, H3_EINVAL, "group_norm: bad shape [T=%lld, P=%lld, C=%lld]", (long long)T,
                       (long long)P, (long long)C);
    if (G < 1 || C % G)
        return h3_fail(err, H3_EINVAL, "group_norm: %d groups do not divide %lld channels", G, (long long)C);
    if (!(eps >= 0.0f) || !isfinite(eps)) return h3_fail(err, H3_EINVAL, "group_norm: eps must be finite and >= 0");
    const size_t bytes = (size_t)(T * P * C) * 4;
    if (x != y && (uintptr_t)y < (uintptr_t)x + bytes && (uintptr_t)x < (uintptr_t)y + bytes)
        return h3_fail(err, H3_EINVAL, "group_norm: y overlaps x without being x");
    const int nth = h3_pool_threads(pool);
    const size_t cpad = (size_t)H3_ALIGN_UP(C, 16);
    const size_t part_b = (size_t)(T * H3_GN_CHUNKS * C) * sizeof(double);
    const size_t tc_b = H3_ALIGN_UP((size_t)(T * C) * 4, 64);
    char *mem = h3_alloc(part_b + 3 * tc_b + (size_t)nth * cpad * 4);
    if (!mem) return h3_fail(err, H3_ENOMEM, "group_norm: out of memory");
    gn_job j;
    memset(&j, 0, sizeof j);
    j.kt = kt; j.x = x; j.y = y; j.T = T; j.P = P; j.C = C; j.silu = silu != 0;
    j.part = (double *)mem;
    j.m = (float *)(mem + part_b);
    j.a = (float *)(mem + part_b + tc_b);
    j.b = (float *)(mem + part_b + 2 * tc_b);
    j.acc = (float *)(mem + part_b + 3 * tc_b);
    atomic_init(&j.next, 0);
    const int64_t cg = C / G;
    const double n = (double)P * (double)cg;
    float *mean = h3_alloc((size_t)(T * G) * 4);
    if (!mean) { h3_free(mem); return h3_fail(err, H3_ENOMEM, "group_norm: out of memory"); }
    gn_run(&j, pool, PASS_SUM);
    for (int64_t t = 0; t < T; t++)
        for (int64_t g = 0; g < G; g++) {
            const float mu = (float)(group_total(&j, t, g * cg, cg) / n);
            mean[t * G + g] = mu;
            for (int64_t c = g * cg; c < (g + 1) * cg; c++) j.m[t * C + c] = mu;
        }
    gn_run(&j, pool, PASS_SQDEV);
    for (int64_t t = 0; t < T; t++)
        for (int64_t g = 0; g < G; g++) {
            const double var = group_total(&j, t, g * cg, cg) / n;
            const float rstd = (float)(1.0 / sqrt(var + (double)eps));
            const float mu = mean[t * G + g];
            for (int64_t c = g * cg; c < (g + 1) * cg; c++) {
                const float s = gamma ? rstd * gamma[c] : rstd;
                j.a[t * C + c] = s;
                j.b[t * C + c] = (beta ? beta[c] : 0.0f) - mu * s;
            }
        }
    gn_run(&j, pool, PASS_APPLY);
    h3_free(mean);
    h3_free(mem);
    if (ran) *ran = h3_isa_vector(isa);
    return H3_OK;
}
