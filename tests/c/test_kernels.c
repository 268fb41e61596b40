/* test_kernels.c — C-level tests of the public kernel API (h3.h), run by
 * tests/test_c_sanitizers.py (ASan+UBSan, host ISAs) and tests/test_c_neon_qemu.py
 * (aarch64 under qemu-user).
 *
 * Every ISA path this CPU supports is compared with H3_ISA_REF, and ref itself with a
 * double-precision computation done here:
 *   - GEMM in every weights mode and epilogue, on shapes that are not multiples of any
 *     vector width; integer modes bit-exact against ref, float modes within a bound
 *     derived from the dot product's absolute sum (see gemm_tol);
 *   - number conversions bit-exact (exhaustive over 16-bit codes, ties, subnormals);
 *   - thread pool with 1 and 2 threads (results must not depend on the thread count);
 *   - element-wise, RoPE, norm and attention kernels when their files are built in;
 *   - the LoRA up product of every path against ref, bit-exact but for the sign of zeros (test_kernels_lora.inc);
 *   - on AArch64, the SMMLA/BFMMLA tables and their dispatch (test_kernels_neon.inc);
 *   - error paths: the documented h3_status, a non-empty message, outputs untouched.
 * Output buffers carry guard elements that must come back unchanged.
 *
 * Usage: test_kernels [--quick] [--only PART]   (--quick: fewer shapes, for slow emulators;
 *        --only: run one part of the table below, while editing)
 * Prints "isas tested: ..." and closes with "ok: N checks" (exit 0) or
 * "FAILED: F of N checks" (exit 1). */
#include "gemm_impl.h" /* the per-path kernel tables (test_gemm_tables) */
#include "gguf_impl.h" /* the GGUF panel pieces (test_gguf) */
#include "h3.h"
#include "h3_loop.h"

#include <float.h>
#include <math.h>
#include <stdarg.h>
#include <stdatomic.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#if defined(__aarch64__) && defined(__linux__)
#include <sys/auxv.h>
#endif

/* ------------------------------------------------------------------ checking */

static long n_checks, n_failed;
static const char *ctx_name = ""; /* what the current case is, printed on failure */

static void check_fail(const char *file, int line, const char *fmt, ...) {
    n_failed++;
    if (n_failed > 60) return; /* enough to diagnose; keep the log readable */
    printf("FAIL %s:%d [%s] ", file, line, ctx_name);
    va_list ap;
    va_start(ap, fmt);
    vprintf(fmt, ap);
    va_end(ap);
    printf("\n");
    fflush(stdout);
}
#define CHECK(cond, ...)                                                   \
    do {                                                                   \
        n_checks++;                                                        \
        if (!(cond)) check_fail(__FILE__, __LINE__, __VA_ARGS__);          \
    } while (0)

static int quick;
static char case_buf[256];
static void set_ctx(const char *fmt, ...) {
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(case_buf, sizeof case_buf, fmt, ap);
    va_end(ap);
    ctx_name = case_buf;
}

/* ------------------------------------------------------------------ helpers */

static uint64_t rng_state = 0x9e3779b97f4a7c15ull;
static uint64_t rng_u64(void) { /* splitmix64 */
    uint64_t z = (rng_state += 0x9e3779b97f4a7c15ull);
    z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ull;
    z = (z ^ (z >> 27)) * 0x94d049bb133111ebull;
    return z ^ (z >> 31);
}
static float rng_unif(void) { return (float)((rng_u64() >> 40) * (1.0 / 16777216.0)) * 2.0f - 1.0f; }

static uint32_t f2u(float f) { uint32_t u; memcpy(&u, &f, 4); return u; }
static float u2f(uint32_t u) { float f; memcpy(&f, &u, 4); return f; }

/* Guarded float buffers: GUARD sentinel floats before and after the body, and the body
 * itself pre-filled with a NaN pattern so that an element the kernel forgot to write
 * shows up as NaN in the comparison. */
#define GUARD 16
#define GUARD_BITS 0x7fa5a5a5u /* a NaN no kernel produces */
#define UNSET_BITS 0x7fc0deadu /* body fill: "never written" */
static float *galloc(size_t n) {
    float *b = malloc((n + 2 * GUARD) * sizeof(float));
    if (!b) { printf("out of memory\n"); exit(2); }
    for (size_t i = 0; i < n + 2 * GUARD; i++) b[i] = u2f(GUARD_BITS);
    for (size_t i = 0; i < n; i++) b[GUARD + i] = u2f(UNSET_BITS);
    return b + GUARD;
}
static void gfree(float *p) { if (p) free(p - GUARD); }
static int guards_ok(const float *p, size_t n) {
    for (int i = 1; i <= GUARD; i++) if (f2u(p[-i]) != GUARD_BITS) return 0;
    for (size_t i = 0; i < GUARD; i++) if (f2u(p[n + i]) != GUARD_BITS) return 0;
    return 1;
}
/* 16-bit guarded buffers (bf16/f16 codes). */
#define GUARD16 0xa5a5u
static uint16_t *galloc16(size_t n) {
    uint16_t *b = malloc((n + 2 * GUARD) * sizeof(uint16_t));
    if (!b) { printf("out of memory\n"); exit(2); }
    for (size_t i = 0; i < n + 2 * GUARD; i++) b[i] = GUARD16;
    return b + GUARD;
}
static void gfree16(uint16_t *p) { if (p) free(p - GUARD); }
static int guards16_ok(const uint16_t *p, size_t n) {
    for (int i = 1; i <= GUARD; i++) if (p[-i] != GUARD16) return 0;
    for (size_t i = 0; i < GUARD; i++) if (p[n + i] != GUARD16) return 0;
    return 1;
}

static h3_isa isas[H3_ISA_COUNT]; /* supported SIMD paths (ref excluded) */
static int n_isas;
static h3_isa unsupported_isa = H3_ISA_COUNT; /* one valid id this machine cannot run */

static h3_pool *pool1, *pool2;

/* Error-path helper: status, non-empty message. */
#define CHECK_ERR(expr, want)                                                              \
    do {                                                                                   \
        h3_err e_;                                                                         \
        memset(&e_, 0, sizeof e_);                                                         \
        h3_status st_ = (expr);                                                            \
        CHECK(st_ == (want), "%s returned %d, want %d (%s)", #expr, (int)st_, (int)(want), \
              e_.msg);                                                                     \
        CHECK(e_.msg[0] != 0, "%s: empty error message", #expr);                          \
    } while (0)
#define ERR (&e_)

/* Worst observed error / bound, per group, printed at the end (how much room is left). */
typedef struct { char name[48]; double worst; long n; } tolrec;
static tolrec tolrecs[64];
static int n_tolrecs;
static void note_ratio(const char *name, double r) {
    int i;
    for (i = 0; i < n_tolrecs; i++) if (!strcmp(tolrecs[i].name, name)) break;
    if (i == n_tolrecs) {
        if (n_tolrecs == 64) return;
        snprintf(tolrecs[n_tolrecs++].name, sizeof tolrecs[0].name, "%s", name);
        tolrecs[i].worst = 0; tolrecs[i].n = 0;
    }
    if (r > tolrecs[i].worst || isnan(r)) { tolrecs[i].worst = r; if (getenv("H3T_VERBOSE")) printf("  new worst %s %.3g at %s\n", name, r, ctx_name); }
    tolrecs[i].n++;
}

/* ------------------------------------------------------------------ GEMM */

typedef struct { const char *name; int wtype, src, gs, ag; } gmode;
static const gmode MODES[] = {
    {"f32", H3_DT_F32, H3_DT_F32, 0, 0},
    {"bf16", H3_DT_BF16, H3_DT_BF16, 0, 0},    /* bf16 bits stored as given */
    {"bf16<f32", H3_DT_BF16, H3_DT_F32, 0, 0}, /* rounded at create */
    {"f16", H3_DT_F16, H3_DT_F32, 0, 0},
    {"f16<bf16", H3_DT_F16, H3_DT_BF16, 0, 0},
    {"i8", H3_DT_I8, H3_DT_F32, 0, 0},
    {"i8/ag24", H3_DT_I8, H3_DT_BF16, 0, 24},
    {"i8/ag64", H3_DT_I8, H3_DT_F32, 0, 64},
    {"i4/g32", H3_DT_I4, H3_DT_F32, 32, 0},
    {"i4/g64/ag64", H3_DT_I4, H3_DT_F32, 64, 64},
    {"i4/g128", H3_DT_I4, H3_DT_BF16, 128, 0},
    {"i4/g32/ag96", H3_DT_I4, H3_DT_F32, 32, 96},
    {"i4/g0", H3_DT_I4, H3_DT_F32, 0, 0}, /* group_size 0 -> 64 */
};
#define N_MODES ((int)(sizeof MODES / sizeof MODES[0]))

enum { E_NONE, E_BIAS, E_SWIGLU, E_RESID_GROW, E_RESID_ALIAS, E_RESID_GATE, E_COUNT };
static const char *EPI_NAMES[E_COUNT] = {"none", "bias", "swiglu", "resid+gate_row",
                                         "resid=y", "resid+gate"};

typedef struct { int64_t N, K; } nk_t;
/* N = output rows of W (SwiGLU: 2H), K = input channels.  Chosen to hit: vector tails,
 * K > kc (float K blocks), N > nc (several column blocks), Kp > the int K block. */
static const nk_t NK_FULL[] = {{37, 100}, {20, 300}, {530, 40}, {10, 520}, {1, 7}, {48, 64}};
static const nk_t NK_QUICK[] = {{37, 100}, {20, 300}, {250, 24}, {10, 520}, {2, 7}};
static const int64_t MS[] = {1, 3, 17, 64};

static int is_int_mode(int wt) { return wt == H3_DT_I8 || wt == H3_DT_I4; }

/* Per-element bound for |computed - exact| before the epilogue:
 *   float modes: (K+4) eps sum|x w|  (worst-case summation error of any order);
 *   int modes:   + sum_k |w_k| * sa_k * (0.5 + 1e-4), the activation rounding
 *                (|x - q sa| <= sa/2; 1e-4 covers the float rounding of x/sa). */
typedef struct {
    int64_t M, N, K;
    const gmode *mode;
    int epi;
    h3_isa isa;
    int threads; /* 0: NULL pool, 1, 2 */
    int own_ws;  /* pass a workspace of exactly h3_linear_workspace_bytes */
} gcase;

static double silu_d(double g) { return g / (1.0 + exp(-g)); }

/* Exact-ish expectation in double and its tolerance, for a case with dequantised W. */
static void gemm_expect(const gcase *c, const float *x, const float *wd, const float *bias,
                        const float *resid, const float *gate, const int32_t *grow,
                        double *yd, double *tol) {
    const int64_t M = c->M, N = c->N, K = c->K;
    const int intm = is_int_mode(c->mode->wtype);
    const double eps = FLT_EPSILON / 2;
    double *dot = malloc((size_t)(M * N) * sizeof(double));
    double *dt = malloc((size_t)(M * N) * sizeof(double));
    /* activation scales per (m, k) for int modes: amax over the act group / 127 */
    double *sa = malloc((size_t)K * sizeof(double));
    int64_t ag = c->mode->ag;
    for (int64_t m = 0; m < M; m++) {
        const float *xr = x + m * K;
        if (intm) {
            int64_t g = ag > 0 ? ag : K;
            for (int64_t k0 = 0; k0 < K; k0 += g) {
                double amax = 0;
                for (int64_t k = k0; k < k0 + g && k < K; k++) amax = fmax(amax, fabs(xr[k]));
                for (int64_t k = k0; k < k0 + g && k < K; k++) sa[k] = amax / 127.0;
            }
        }
        for (int64_t n = 0; n < N; n++) {
            const float *wr = wd + n * K;
            double s = 0, a = 0, q = 0;
            for (int64_t k = 0; k < K; k++) {
                s += (double)xr[k] * wr[k];
                a += fabs((double)xr[k] * wr[k]);
                if (intm) q += fabs(wr[k]) * sa[k] * (0.5 + 1e-4);
            }
            double b = bias ? bias[n] : 0.0;
            dot[m * N + n] = s + b;
            dt[m * N + n] = (K + 4) * eps * (a + fabs(b)) + (intm ? q + 64 * eps * (a + q) : 0.0) + 1e-30;
        }
    }
    if (c->epi == E_SWIGLU) {
        const int64_t H = N / 2;
        for (int64_t m = 0; m < M; m++)
            for (int64_t n = 0; n < H; n++) {
                double g = dot[m * N + n], v = dot[m * N + H + n];
                double tg = dt[m * N + n], tv = dt[m * N + H + n];
                double y = silu_d(g) * v;
                yd[m * H + n] = y;
                tol[m * H + n] = 1.1 * tg * (fabs(v) + tv) + (fabs(g) + tg) * tv +
                                 16 * eps * (fabs(g) + tg) * (fabs(v) + tv) + 1e-30;
            }
    } else {
        for (int64_t m = 0; m < M; m++)
            for (int64_t n = 0; n < N; n++) {
                double v = dot[m * N + n], t = dt[m * N + n];
                if (c->epi >= E_RESID_GROW) {
                    double gt = 1.0;
                    if (c->epi == E_RESID_GROW) gt = gate[(int64_t)grow[m] * N + n];
                    if (c->epi == E_RESID_GATE) gt = gate[m * N + n];
                    double r = resid[m * N + n];
                    yd[m * N + n] = r + gt * v;
                    tol[m * N + n] = fabs(gt) * t + 4 * eps * (fabs(r) + fabs(gt) * (fabs(v) + t));
                } else {
                    yd[m * N + n] = v;
                    tol[m * N + n] = t + 2 * eps * fabs(v);
                }
            }
    }
    free(dot); free(dt); free(sa);
}

typedef struct {
    h3_linear *lin;
    float *y;       /* guarded, [M, Nout] */
    h3_status st;
    h3_err err;
} grun;

static h3_pool *pool_for(int threads) { return threads == 0 ? NULL : threads == 1 ? pool1 : pool2; }

/* Run one forward; returns y (guarded) or NULL on failure (then CHECKs fired). */
static float *gemm_run(const gcase *c, h3_linear *lin, const float *x, const float *resid,
                       const float *gate, const int32_t *grow, int threads, int own_ws) {
    const int64_t M = c->M;
    const int64_t Nout = c->epi == E_SWIGLU ? c->N / 2 : c->N;
    float *y = galloc((size_t)(M * Nout));
    h3_epilogue epi;
    memset(&epi, 0, sizeof epi);
    if (c->epi == E_SWIGLU) epi.kind = H3_EPI_SWIGLU;
    if (c->epi >= E_RESID_GROW) {
        epi.kind = H3_EPI_RESID;
        epi.resid = resid;
        if (c->epi == E_RESID_ALIAS) {
            memcpy(y, resid, (size_t)(M * Nout) * sizeof(float));
            epi.resid = y;
        } else if (c->epi == E_RESID_GROW) {
            epi.gate = gate; epi.gate_row = grow; epi.gate_rows = 3;
        } else {
            epi.gate = gate; epi.gate_rows = M;
        }
    }
    h3_pool *pool = pool_for(threads);
    h3_err err;
    memset(&err, 0, sizeof err);
    void *ws = NULL;
    size_t wsb = 0;
    if (own_ws) {
        wsb = h3_linear_workspace_bytes(lin, M, h3_pool_threads(pool), &epi);
        CHECK(wsb > 0, "workspace_bytes = 0");
        ws = aligned_alloc(64, (wsb + 63) & ~(size_t)63);
    }
    h3_status st = h3_linear_forward(lin, pool, x, M, y, &epi, ws, wsb, &err);
    free(ws);
    CHECK(st == H3_OK, "forward failed: %d %s", (int)st, err.msg);
    CHECK(guards_ok(y, (size_t)(M * Nout)), "forward wrote outside y");
    if (st != H3_OK) { gfree(y); return NULL; }
    return y;
}

static h3_linear *gemm_create(const gcase *c, const void *w, const float *bias, h3_isa isa) {
    h3_linear_opts o;
    memset(&o, 0, sizeof o);
    o.wtype = c->mode->wtype; o.group_size = c->mode->gs; o.act_group = c->mode->ag;
    o.pair = c->epi == E_SWIGLU; o.isa = isa;
    h3_linear *lin = NULL;
    h3_err err;
    memset(&err, 0, sizeof err);
    h3_status st = h3_linear_create(w, c->mode->src, c->N, c->K, bias, &o, &lin, &err);
    CHECK(st == H3_OK && lin, "create failed: %d %s", (int)st, err.msg);
    if (st) return NULL;
    CHECK(h3_linear_n(lin) == c->N && h3_linear_k(lin) == c->K && h3_linear_isa(lin) == isa,
          "linear reports N=%lld K=%lld isa=%d", (long long)h3_linear_n(lin),
          (long long)h3_linear_k(lin), (int)h3_linear_isa(lin));
    CHECK(h3_linear_weight_bytes(lin) > 0, "weight_bytes = 0");
    return lin;
}

static void gemm_case(const gmode *mode, int64_t M, int64_t N, int64_t K, int epi, int variant) {
    gcase c = {M, N, K, mode, epi, H3_ISA_REF, 0, 0};
    if (epi == E_SWIGLU && N % 2) c.N = N = N + 1;
    set_ctx("gemm %s M=%lld N=%lld K=%lld epi=%s", mode->name, (long long)M, (long long)N,
            (long long)K, EPI_NAMES[epi]);
    const int64_t Nout = epi == E_SWIGLU ? N / 2 : N;
    /* inputs; weights scaled per row so that rows differ in magnitude */
    float *x = malloc((size_t)(M * K) * sizeof(float));
    float *wf = malloc((size_t)(N * K) * sizeof(float));
    uint16_t *wb = malloc((size_t)(N * K) * sizeof(uint16_t));
    float *bias = malloc((size_t)N * sizeof(float));
    float *resid = malloc((size_t)(M * Nout) * sizeof(float));
    float *gate = malloc((size_t)((M > 3 ? M : 3) * Nout) * sizeof(float));
    int32_t *grow = malloc((size_t)M * sizeof(int32_t));
    for (int64_t i = 0; i < M * K; i++) x[i] = rng_unif() * (1.0f + (float)(i % 5));
    if (M > 1) x[K] = 0.0f; /* a zero among the values */
    for (int64_t n = 0; n < N; n++) {
        float s = 0.05f + 0.1f * (float)(n % 7);
        for (int64_t k = 0; k < K; k++) wf[n * K + k] = rng_unif() * s;
    }
    if (M > 2) for (int64_t k = 0; k < K; k++) x[2 * K + k] = 0.0f; /* an all-zero row */
    for (int64_t i = 0; i < N * K; i++) {
        /* bf16 source: round here so both sides see the same weights */
        uint32_t u = f2u(wf[i]);
        wb[i] = (uint16_t)((u + 0x7fffu + ((u >> 16) & 1u)) >> 16);
        if (mode->src == H3_DT_BF16) wf[i] = u2f((uint32_t)wb[i] << 16);
    }
    for (int64_t n = 0; n < N; n++) bias[n] = rng_unif();
    for (int64_t i = 0; i < M * Nout; i++) resid[i] = rng_unif() * 2.0f;
    for (int64_t i = 0; i < (M > 3 ? M : 3) * Nout; i++) gate[i] = rng_unif() * 1.5f;
    for (int64_t m = 0; m < M; m++) grow[m] = (int32_t)((m * 7 + 1) % 3);
    const void *w = mode->src == H3_DT_BF16 ? (const void *)wb : (const void *)wf;
    const float *b = epi == E_NONE ? NULL : bias;

    h3_linear *lref = gemm_create(&c, w, b, H3_ISA_REF);
    if (!lref) goto out;
    float *wd = malloc((size_t)(N * K) * sizeof(float));
    h3_err err;
    CHECK(h3_linear_dequant(lref, wd, &err) == H3_OK, "dequant: %s", err.msg);
    /* The stored weights must be the source, rounded as the mode says. */
    {
        int bad = 0;
        int64_t where = -1;
        for (int64_t n = 0; n < N && !bad; n++) {
            double gmax = 0; /* quantisation scale of the row/group */
            for (int64_t k = 0; k < K; k++) {
                float src = wf[n * K + k], got = wd[n * K + k];
                if (mode->wtype == H3_DT_F32) bad = f2u(got) != f2u(src);
                else if (mode->wtype == H3_DT_BF16) bad = fabs(got - src) > fabs(src) * 0x1p-8;
                else if (mode->wtype == H3_DT_F16) bad = fabs(got - src) > fabs(src) * 0x1p-11 + 0x1p-25;
                else {
                    int64_t g = mode->wtype == H3_DT_I8 ? K : (mode->gs ? mode->gs : 64);
                    int64_t k0 = k / g * g;
                    if (k == k0 || k == 0) {
                        gmax = 0;
                        for (int64_t kk = k0; kk < k0 + g && kk < K; kk++) gmax = fmax(gmax, fabs(wf[n * K + kk]));
                    }
                    double qmax = mode->wtype == H3_DT_I8 ? 127.0 : 7.0;
                    bad = fabs((double)got - src) > gmax / qmax * (0.5 + 1e-5);
                }
                if (bad) { where = n * K + k; break; }
            }
        }
        CHECK(!bad, "dequantised weight [%lld] = %g, source %g", (long long)where,
              where >= 0 ? wd[where] : 0.0, where >= 0 ? wf[where] : 0.0);
    }
    double *yd = malloc((size_t)(M * Nout) * sizeof(double));
    double *tol = malloc((size_t)(M * Nout) * sizeof(double));
    gemm_expect(&c, x, wd, b, resid, gate, grow, yd, tol);

    float *yref = gemm_run(&c, lref, x, resid, gate, grow, 0, variant & 1);
    if (yref) {
        double worst = 0;
        int64_t bad = -1;
        for (int64_t i = 0; i < M * Nout; i++) {
            double e = fabs(yref[i] - yd[i]);
            double r = e / tol[i];
            if (!(r <= 1.0)) { if (bad < 0) bad = i; }
            if (r > worst || isnan(r)) worst = r;
        }
        CHECK(bad < 0, "ref vs double: y[%lld] = %.9g, want %.9g +- %.3g", (long long)bad,
              bad >= 0 ? yref[bad] : 0.0, bad >= 0 ? yd[bad] : 0.0, bad >= 0 ? tol[bad] : 0.0);
        char nm[48];
        snprintf(nm, sizeof nm, "gemm %s ref-vs-f64", is_int_mode(mode->wtype) ? "int" : "float");
        note_ratio(nm, worst);
        /* The thread count must not change any bit. */
        if (variant % 3 == 2) {
            float *y2 = gemm_run(&c, lref, x, resid, gate, grow, 2, 0);
            if (y2) {
                CHECK(!memcmp(y2, yref, (size_t)(M * Nout) * 4), "ref: 2 threads differ from 1");
                gfree(y2);
            }
        }
    }
    for (int ii = 0; ii < n_isas && yref; ii++) {
        h3_isa isa = isas[ii];
        set_ctx("gemm %s M=%lld N=%lld K=%lld epi=%s isa=%s", mode->name, (long long)M,
                (long long)N, (long long)K, EPI_NAMES[epi], h3_isa_name(isa));
        h3_linear *l = gemm_create(&c, w, b, isa);
        if (!l) continue;
        float *wd2 = malloc((size_t)(N * K) * sizeof(float));
        CHECK(h3_linear_dequant(l, wd2, &err) == H3_OK, "dequant: %s", err.msg);
        CHECK(!memcmp(wd2, wd, (size_t)(N * K) * 4), "dequantised weights differ from ref's");
        free(wd2);
        int threads = (variant + ii) % 3; /* NULL pool, 1 thread, 2 threads */
        float *y = gemm_run(&c, l, x, resid, gate, grow, threads, variant & 2);
        if (y) {
            if (is_int_mode(mode->wtype)) {
                int64_t bad = -1;
                for (int64_t i = 0; i < M * Nout && bad < 0; i++)
                    if (f2u(y[i]) != f2u(yref[i])) bad = i;
                CHECK(bad < 0, "int mode not bit-exact vs ref: y[%lld] = %.9g, ref %.9g",
                      (long long)bad, bad >= 0 ? y[bad] : 0.0, bad >= 0 ? yref[bad] : 0.0);
            } else {
                /* Kernels that multiply bf16 x bf16 (AMX tiles; VDPBF16PS) round the inputs to
                 * bf16 first (h3_linear_bf16_activations, Linear.activation_dtype): their
                 * expectation is the rounded input's, and ref (f32 inputs) is no yardstick. */
                const int bf16_act = h3_linear_bf16_activations(l);
                const double *ye = yd, *te = tol;
                double *ydb = NULL, *tolb = NULL;
                if (bf16_act) {
                    float *xb = malloc((size_t)(M * K) * sizeof(float));
                    ydb = malloc((size_t)(M * Nout) * sizeof(double));
                    tolb = malloc((size_t)(M * Nout) * sizeof(double));
                    for (int64_t i = 0; i < M * K; i++) {
                        uint32_t u = f2u(x[i]);
                        u += 0x7fffu + ((u >> 16) & 1u);   /* round to nearest even bf16 */
                        xb[i] = u2f(u & 0xffff0000u);
                    }
                    gemm_expect(&c, xb, wd, b, resid, gate, grow, ydb, tolb);
                    free(xb);
                    ye = ydb;
                    te = tolb;
                }
                double worst = 0;
                int64_t bad = -1;
                for (int64_t i = 0; i < M * Nout; i++) {
                    double r1 = fabs(y[i] - ye[i]) / te[i];
                    double r2 = bf16_act ? 0.0 : fabs((double)y[i] - yref[i]) / (2 * tol[i]);
                    double r = r1 > r2 ? r1 : r2;
                    if (!(r <= 1.0) && bad < 0) bad = i;
                    if (r > worst || isnan(r)) worst = r;
                }
                CHECK(bad < 0, "y[%lld] = %.9g, ref %.9g, f64 %.9g, tol %.3g%s", (long long)bad,
                      bad >= 0 ? y[bad] : 0.0, bad >= 0 ? yref[bad] : 0.0,
                      bad >= 0 ? ye[bad] : 0.0, bad >= 0 ? te[bad] : 0.0,
                      bf16_act ? " (bf16 inputs)" : "");
                char nm[48];
                snprintf(nm, sizeof nm, "gemm float %s-vs-%s", h3_isa_name(isa), bf16_act ? "f64/bf16x" : "ref");
                note_ratio(nm, worst);
                free(ydb);
                free(tolb);
            }
            if (threads != 0) { /* and again without a pool: identical bits */
                float *y1 = gemm_run(&c, l, x, resid, gate, grow, 0, 0);
                if (y1) {
                    CHECK(!memcmp(y1, y, (size_t)(M * Nout) * 4), "%d threads differ from no pool", threads);
                    gfree(y1);
                }
            }
            gfree(y);
        }
        h3_linear_free(l);
    }
    gfree(yref);
    free(yd); free(tol); free(wd);
    h3_linear_free(lref);
out:
    free(x); free(wf); free(wb); free(bias); free(resid); free(gate); free(grow);
}

static void test_gemm(void) {
    const nk_t *nks = quick ? NK_QUICK : NK_FULL;
    int n_nk = quick ? (int)(sizeof NK_QUICK / sizeof NK_QUICK[0]) : (int)(sizeof NK_FULL / sizeof NK_FULL[0]);
    int variant = 0;
    for (int mi = 0; mi < N_MODES; mi++) {
        for (int s = 0; s < n_nk; s++)
            for (int m = 0; m < 4; m++) {
                if (quick) {
                    /* one epilogue per shape, rotating */
                    gemm_case(&MODES[mi], MS[m], nks[s].N, nks[s].K, (variant + mi) % E_COUNT, variant);
                    variant++;
                } else {
                    for (int e = 0; e < E_COUNT; e++, variant++)
                        gemm_case(&MODES[mi], MS[m], nks[s].N, nks[s].K, e, variant);
                }
            }
        /* M past the row block (mc = 64 on ref/NEON): several A blocks per W block */
        gemm_case(&MODES[mi], 130, 26, 72, (mi % 2) ? E_RESID_GROW : E_SWIGLU, variant++);
    }
}

/* Error paths of the GEMM API: documented status, a message, no output written. */
static void test_gemm_errors(void) {
    set_ctx("gemm errors");
    const int64_t N = 8, K = 16;
    float w[8 * 16], x[2 * 16];
    for (int i = 0; i < N * K; i++) w[i] = rng_unif();
    for (int i = 0; i < 2 * K; i++) x[i] = rng_unif();
    h3_linear_opts o;
    memset(&o, 0, sizeof o);
    o.wtype = H3_DT_F32; o.isa = H3_ISA_REF;
    h3_linear *lin = (h3_linear *)(uintptr_t)1, *sentinel = lin;
    CHECK_ERR(h3_linear_create(NULL, H3_DT_F32, N, K, NULL, &o, &lin, ERR), H3_EINVAL);
    CHECK_ERR(h3_linear_create(w, H3_DT_F32, N, K, NULL, NULL, &lin, ERR), H3_EINVAL);
    CHECK_ERR(h3_linear_create(w, H3_DT_F32, N, K, NULL, &o, NULL, ERR), H3_EINVAL);
    CHECK_ERR(h3_linear_create(w, H3_DT_F32, 0, K, NULL, &o, &lin, ERR), H3_EINVAL);
    CHECK_ERR(h3_linear_create(w, H3_DT_F32, N, -1, NULL, &o, &lin, ERR), H3_EINVAL);
    CHECK_ERR(h3_linear_create(w, H3_DT_F32, (int64_t)1 << 40, K, NULL, &o, &lin, ERR), H3_EINVAL);
    CHECK_ERR(h3_linear_create(w, H3_DT_F16, N, K, NULL, &o, &lin, ERR), H3_EINVAL);
    CHECK_ERR(h3_linear_create(w, 99, N, K, NULL, &o, &lin, ERR), H3_EINVAL);
    o.wtype = 7;
    CHECK_ERR(h3_linear_create(w, H3_DT_F32, N, K, NULL, &o, &lin, ERR), H3_EINVAL);
    o.wtype = -1;
    CHECK_ERR(h3_linear_create(w, H3_DT_F32, N, K, NULL, &o, &lin, ERR), H3_EINVAL);
    o.wtype = H3_DT_F32; o.isa = (h3_isa)99;
    CHECK_ERR(h3_linear_create(w, H3_DT_F32, N, K, NULL, &o, &lin, ERR), H3_EINVAL);
    o.isa = (h3_isa)-1;
    CHECK_ERR(h3_linear_create(w, H3_DT_F32, N, K, NULL, &o, &lin, ERR), H3_EINVAL);
    if (unsupported_isa != H3_ISA_COUNT) {
        o.isa = unsupported_isa;
        CHECK_ERR(h3_linear_create(w, H3_DT_F32, N, K, NULL, &o, &lin, ERR), H3_EUNSUPPORTED);
    }
    o.isa = H3_ISA_REF; o.pair = 1;
    CHECK_ERR(h3_linear_create(w, H3_DT_F32, 7, K, NULL, &o, &lin, ERR), H3_EINVAL);
    o.pair = 0; o.wtype = H3_DT_I4; o.group_size = 48;
    CHECK_ERR(h3_linear_create(w, H3_DT_F32, N, K, NULL, &o, &lin, ERR), H3_EINVAL);
    o.group_size = -32;
    CHECK_ERR(h3_linear_create(w, H3_DT_F32, N, K, NULL, &o, &lin, ERR), H3_EINVAL);
    o.group_size = 64; o.act_group = 32; /* not a multiple of the group */
    CHECK_ERR(h3_linear_create(w, H3_DT_F32, N, K, NULL, &o, &lin, ERR), H3_EINVAL);
    o.wtype = H3_DT_I8; o.act_group = 12; /* not a multiple of 8 */
    CHECK_ERR(h3_linear_create(w, H3_DT_F32, N, K, NULL, &o, &lin, ERR), H3_EINVAL);
    o.act_group = -8;
    CHECK_ERR(h3_linear_create(w, H3_DT_F32, N, K, NULL, &o, &lin, ERR), H3_EINVAL);
    o.act_group = 0;
    w[5 * K + 3] = NAN;
    CHECK_ERR(h3_linear_create(w, H3_DT_F32, N, K, NULL, &o, &lin, ERR), H3_EINVAL);
    w[5 * K + 3] = INFINITY;
    o.wtype = H3_DT_F32;
    CHECK_ERR(h3_linear_create(w, H3_DT_F32, N, K, NULL, &o, &lin, ERR), H3_EINVAL);
    w[5 * K + 3] = 0.5f;
    CHECK(lin == sentinel, "a failed create wrote *out");
    /* NULL err must not crash */
    CHECK(h3_linear_create(NULL, H3_DT_F32, N, K, NULL, &o, &lin, NULL) == H3_EINVAL, "NULL err");

    h3_err err;
    lin = NULL;
    CHECK(h3_linear_create(w, H3_DT_F32, N, K, NULL, &o, &lin, &err) == H3_OK, "create: %s", err.msg);
    if (!lin) return;
    float *y = galloc(2 * N);
    float y0[16];
    memcpy(y0, y, sizeof y0);
    h3_epilogue epi;
    memset(&epi, 0, sizeof epi);
    CHECK_ERR(h3_linear_forward(NULL, NULL, x, 2, y, NULL, NULL, 0, ERR), H3_EINVAL);
    CHECK_ERR(h3_linear_forward(lin, NULL, NULL, 2, y, NULL, NULL, 0, ERR), H3_EINVAL);
    CHECK_ERR(h3_linear_forward(lin, NULL, x, 2, NULL, NULL, NULL, 0, ERR), H3_EINVAL);
    CHECK_ERR(h3_linear_forward(lin, NULL, x, -1, y, NULL, NULL, 0, ERR), H3_EINVAL);
    epi.kind = 3;
    CHECK_ERR(h3_linear_forward(lin, NULL, x, 2, y, &epi, NULL, 0, ERR), H3_EINVAL);
    epi.kind = -1;
    CHECK_ERR(h3_linear_forward(lin, NULL, x, 2, y, &epi, NULL, 0, ERR), H3_EINVAL);
    epi.kind = H3_EPI_SWIGLU; /* lin is not pair=1 */
    CHECK_ERR(h3_linear_forward(lin, NULL, x, 2, y, &epi, NULL, 0, ERR), H3_EINVAL);
    epi.kind = H3_EPI_RESID; /* resid missing */
    CHECK_ERR(h3_linear_forward(lin, NULL, x, 2, y, &epi, NULL, 0, ERR), H3_EINVAL);
    float resid[2 * 8] = {0}, gate[3 * 8] = {0};
    int32_t grow[2] = {0, 3};
    epi.resid = resid; epi.gate = gate; epi.gate_row = grow; epi.gate_rows = 3;
    CHECK_ERR(h3_linear_forward(lin, NULL, x, 2, y, &epi, NULL, 0, ERR), H3_EINVAL);
    grow[1] = -1;
    CHECK_ERR(h3_linear_forward(lin, NULL, x, 2, y, &epi, NULL, 0, ERR), H3_EINVAL);
    epi.gate_row = NULL; epi.gate_rows = 1; /* fewer gate rows than M */
    CHECK_ERR(h3_linear_forward(lin, NULL, x, 2, y, &epi, NULL, 0, ERR), H3_EINVAL);
    size_t need = h3_linear_workspace_bytes(lin, 2, 1, NULL);
    CHECK(need > 0, "workspace_bytes = 0");
    char *ws = aligned_alloc(64, need + 128);
    CHECK_ERR(h3_linear_forward(lin, NULL, x, 2, y, NULL, ws, need - 1, ERR), H3_EINVAL);
    CHECK_ERR(h3_linear_forward(lin, NULL, x, 2, y, NULL, ws + 4, need + 64, ERR), H3_EINVAL);
    CHECK(!memcmp(y0, y, sizeof y0) && guards_ok(y, 2 * N), "a failed forward wrote y");
    /* M = 0 is a no-op that succeeds and writes nothing */
    CHECK(h3_linear_forward(lin, NULL, x, 0, y, NULL, NULL, 0, &err) == H3_OK, "M=0: %s", err.msg);
    CHECK(!memcmp(y0, y, sizeof y0), "M=0 wrote y");
    /* and the workspace path works when sized exactly */
    CHECK(h3_linear_forward(lin, pool2, x, 2, y, NULL, NULL, 0, &err) == H3_OK, "forward: %s", err.msg);
    need = h3_linear_workspace_bytes(lin, 2, 2, NULL);
    free(ws);
    ws = aligned_alloc(64, (need + 63) & ~(size_t)63);
    float *y2 = galloc(2 * N);
    CHECK(h3_linear_forward(lin, pool2, x, 2, y2, NULL, ws, need, &err) == H3_OK, "forward ws: %s", err.msg);
    CHECK(!memcmp(y, y2, 2 * N * sizeof(float)) && guards_ok(y2, 2 * N), "workspace path differs");
    CHECK(h3_linear_workspace_bytes(NULL, 2, 1, NULL) == 0, "workspace_bytes(NULL) != 0");
    CHECK_ERR(h3_linear_dequant(NULL, y, ERR), H3_EINVAL);
    CHECK_ERR(h3_linear_dequant(lin, NULL, ERR), H3_EINVAL);
    free(ws);
    gfree(y); gfree(y2);
    h3_linear_free(lin);
    h3_linear_free(NULL);
}

/* ------------------------------------------------------------------ pool */

typedef struct { _Atomic int calls[4]; _Atomic int bad_nth; int nth_want; } pool_probe;
static void probe_fn(void *p, int ith, int nth) {
    pool_probe *pp = (pool_probe *)p;
    if (nth != pp->nth_want || ith < 0 || ith >= nth || ith >= 4) { atomic_fetch_add(&pp->bad_nth, 1); return; }
    atomic_fetch_add(&pp->calls[ith], 1);
}

/* Rows in separate tensors (h3_linear_attach_parts): 3 parts of 37 rows (no panel width
 * divides 37, so a tile straddling two parts would read past a part's end -- ASan's
 * business) and a [gate; value] pair from two halves, against the fused weight, bit for
 * bit, on every path, M = 1 (gemv) and M = 21, f32 and bf16; and the error paths. */
static void test_gemm_parts(void) {
    set_ctx("gemm parts");
    enum { P = 37, K = 45, N = 3 * P };
    for (int dt = 0; dt < 2; dt++) {
        const int wt = dt ? H3_DT_BF16 : H3_DT_F32;
        const size_t esz = dt ? 2 : 4;
        /* each part in its own exact-size heap block: an over-read is an ASan report */
        void *part[3];
        char *fused = malloc((size_t)N * K * esz);
        for (int i = 0; i < 3; i++) {
            part[i] = malloc((size_t)P * K * esz);
            for (int j = 0; j < P * K; j++) {
                float v = rng_unif();
                if (dt) { uint16_t b = (uint16_t)(f2u(v) >> 16); memcpy((char *)part[i] + j * 2, &b, 2); }
                else memcpy((char *)part[i] + j * 4, &v, 4);
            }
            memcpy(fused + (size_t)i * P * K * esz, part[i], (size_t)P * K * esz);
        }
        h3_linear_layout lay;
        memset(&lay, 0, sizeof lay);
        lay.wtype = wt; lay.N = N; lay.K = K; lay.Kp = K; lay.w_bytes = (uint64_t)N * K * esz;
        lay.f32_exact = 1;
        for (int ii = -1; ii < n_isas; ii++) {
            h3_isa isa = ii < 0 ? H3_ISA_REF : isas[ii];
            for (int pr = 0; pr < 2; pr++) {           /* plain 3 parts; pair of 2 halves */
                h3_linear_layout l2 = lay;
                int np = pr ? 2 : 3;
                if (pr) { l2.pair = 1; l2.N = 2 * P; l2.w_bytes = (uint64_t)2 * P * K * esz; }
                h3_linear *a = NULL, *b = NULL;
                h3_err err;
                CHECK(h3_linear_attach(&l2, fused, NULL, NULL, isa, &a, &err) == H3_OK, "attach: %s", err.msg);
                CHECK(h3_linear_attach_parts(&l2, (const void *const *)part, np, NULL, isa, &b, &err) == H3_OK,
                      "attach_parts: %s", err.msg);
                if (!a || !b) { h3_linear_free(a); h3_linear_free(b); continue; }
                for (int mi = 0; mi < 2; mi++) {
                    const int64_t M = mi ? 21 : 1;
                    for (int kind = 0; kind < (pr ? 2 : 1); kind++) {
                        h3_epilogue epi;
                        memset(&epi, 0, sizeof epi);
                        epi.kind = kind ? H3_EPI_SWIGLU : H3_EPI_NONE;
                        const int64_t No = kind ? P : l2.N;
                        float *x = galloc((size_t)(M * K)), *ya = galloc((size_t)(M * No)), *yb = galloc((size_t)(M * No));
                        for (int64_t j = 0; j < M * K; j++) x[j] = rng_unif();
                        CHECK(h3_linear_forward(a, pool2, x, M, ya, &epi, NULL, 0, &err) == H3_OK, "fused: %s", err.msg);
                        CHECK(h3_linear_forward(b, pool2, x, M, yb, &epi, NULL, 0, &err) == H3_OK, "parts: %s", err.msg);
                        CHECK(guards_ok(yb, (size_t)(M * No)), "parts: wrote outside y");
                        CHECK(!memcmp(ya, yb, (size_t)(M * No) * 4), "%s %s M=%lld %s: parts differ from the fused weight",
                              h3_isa_name(isa), dt ? "bf16" : "f32", (long long)M, pr ? (kind ? "pair swiglu" : "pair") : "3 parts");
                        gfree(x); gfree(ya); gfree(yb);
                    }
                }
                float *wd = malloc((size_t)l2.N * K * 4), *wf = malloc((size_t)l2.N * K * 4);
                CHECK(h3_linear_dequant(a, wf, &err) == H3_OK && h3_linear_dequant(b, wd, &err) == H3_OK, "dequant");
                CHECK(!memcmp(wd, wf, (size_t)l2.N * K * 4), "dequant of parts differs");
                free(wd); free(wf);
                h3_linear_layout got;
                CHECK_ERR(h3_linear_layout_get(b, &got, NULL, NULL, ERR), H3_EINVAL);
                h3_linear_free(a); h3_linear_free(b);
            }
        }
        h3_linear *l = NULL;
        CHECK_ERR(h3_linear_attach_parts(&lay, (const void *const *)part, 0, NULL, H3_ISA_REF, &l, ERR), H3_EINVAL);
        CHECK_ERR(h3_linear_attach_parts(&lay, (const void *const *)part, 4, NULL, H3_ISA_REF, &l, ERR), H3_EINVAL);
        CHECK_ERR(h3_linear_attach_parts(&lay, (const void *const *)part, 2, NULL, H3_ISA_REF, &l, ERR), H3_EINVAL); /* 111 rows / 2 */
        h3_linear_layout lp = lay;
        lp.pair = 1;
        CHECK_ERR(h3_linear_attach_parts(&lp, (const void *const *)part, 3, NULL, H3_ISA_REF, &l, ERR), H3_EINVAL);
        lp = lay; lp.wtype = H3_DT_I8;
        CHECK_ERR(h3_linear_attach_parts(&lp, (const void *const *)part, 3, NULL, H3_ISA_REF, &l, ERR), H3_EINVAL);
        const void *holes[3] = {part[0], NULL, part[2]};
        CHECK_ERR(h3_linear_attach_parts(&lay, holes, 3, NULL, H3_ISA_REF, &l, ERR), H3_EINVAL);
        CHECK(l == NULL, "a failed attach_parts set *out");
        for (int i = 0; i < 3; i++) free(part[i]);
        free(fused);
    }
}

/* h3_alloc / h3_alloc_large: alignment, the whole size writable (ASan checks the bounds in
 * the sanitizer build), absurd sizes refused. */
static void test_alloc(void) {
    set_ctx("alloc");
    const size_t sizes[] = {1, 100, (size_t)4 << 20, ((size_t)5 << 20) + 123, (size_t)9 << 20};
    for (size_t i = 0; i < sizeof sizes / sizeof sizes[0]; i++) {
        unsigned char *p = h3_alloc_large(sizes[i]);
        CHECK(p != NULL, "h3_alloc_large(%zu) = NULL", sizes[i]);
        if (!p) continue;
        const uintptr_t align = sizes[i] >= ((size_t)4 << 20) ? ((uintptr_t)2 << 20) : 64;
        CHECK(((uintptr_t)p & (align - 1)) == 0, "h3_alloc_large(%zu) = %p, not %zu-aligned", sizes[i],
              (void *)p, (size_t)align);
        memset(p, 0xA5, sizes[i]);
        CHECK(p[0] == 0xA5 && p[sizes[i] - 1] == 0xA5, "h3_alloc_large(%zu): bytes not kept", sizes[i]);
        h3_free(p);
    }
    CHECK(h3_alloc_large((size_t)1 << 50) == NULL, "h3_alloc_large(2^50) should fail");
    CHECK(h3_alloc((size_t)1 << 50) == NULL, "h3_alloc(2^50) should fail");
}

static void test_pool(void) {
    set_ctx("pool");
    h3_pool *p = (h3_pool *)(uintptr_t)1;
    CHECK_ERR(h3_pool_create(0, &p, ERR), H3_EINVAL);
    CHECK_ERR(h3_pool_create(-3, &p, ERR), H3_EINVAL);
    CHECK_ERR(h3_pool_create(100000, &p, ERR), H3_EINVAL);
    CHECK_ERR(h3_pool_create(2, NULL, ERR), H3_EINVAL);
    CHECK(p == (h3_pool *)(uintptr_t)1, "failed pool_create wrote *out");
    CHECK(h3_pool_threads(NULL) == 1, "threads(NULL) != 1");
    CHECK(h3_pool_threads(pool1) == 1 && h3_pool_threads(pool2) == 2, "pool thread counts");
    h3_pool_free(NULL);
    for (int nthr = 0; nthr <= 2; nthr++) {
        h3_pool *pl = pool_for(nthr);
        pool_probe pp;
        memset(&pp, 0, sizeof pp);
        pp.nth_want = nthr == 0 ? 1 : nthr;
        const int rounds = 200;
        for (int r = 0; r < rounds; r++) {
            h3_pool_run(pl, probe_fn, &pp);
            if (r % 50 == 49) { /* let workers fall asleep, then wake them */
                struct timespec ts = {0, 20 * 1000 * 1000};
                nanosleep(&ts, NULL);
            }
        }
        CHECK(atomic_load(&pp.bad_nth) == 0, "threads=%d: a task saw a wrong (ith, nth)", nthr);
        for (int i = 0; i < pp.nth_want; i++)
            CHECK(atomic_load(&pp.calls[i]) == rounds, "threads=%d: ith %d ran %d times, want %d",
                  nthr, i, atomic_load(&pp.calls[i]), rounds);
    }
    /* create and free repeatedly (joins must not hang or leak) */
    for (int i = 0; i < 5; i++) {
        h3_pool *q = NULL;
        h3_err err;
        CHECK(h3_pool_create(3, &q, &err) == H3_OK, "pool_create(3): %s", err.msg);
        pool_probe pp;
        memset(&pp, 0, sizeof pp);
        pp.nth_want = 3;
        h3_pool_run(q, probe_fn, &pp);
        CHECK(atomic_load(&pp.calls[0]) == 1 && atomic_load(&pp.calls[1]) == 1 &&
              atomic_load(&pp.calls[2]) == 1, "pool(3) did not run each thread once");
        h3_pool_free(q);
    }
}

/* Per-call row work of the SIMD tables must not fall back to the scalar reference (a NULL
 * member does, silently): the AMX table once quantised activations with the reference,
 * ~35% of a single thread's int8 GEMM.  Checked on the tables, so any x86 host catches an
 * AMX regression.  NEON quantises on the reference by design (see gemm_neon.c). */
static void test_gemm_tables(void) {
    set_ctx("gemm tables");
    const h3_isa simd[] = {
#if H3_X86
        H3_ISA_AVX2, H3_ISA_AVX512, H3_ISA_AMX,
#endif
#if H3_ARM64
        H3_ISA_NEON,
#endif
    };
    const gemm_kernels *tabs[8];
    h3_isa simd_of[8];
    size_t nt = 0;
    for (size_t i = 0; i < sizeof simd / sizeof simd[0]; i++) {
        simd_of[nt] = simd[i];
        tabs[nt++] = gemm_kernels_for(simd[i]);
    }
#if H3_ARM64
    /* the extension tables are complete tables a linear points at directly (no NULL member) */
    const gemm_kernels *ext[2] = {&gemm_kernels_neon_i8mm, &gemm_kernels_neon_bf16};
    for (int e = 0; e < 2; e++) {
        CHECK(ext[e]->ukr_f32 && ext[e]->unpack && ext[e]->gemv && ext[e]->ukr_i8 && ext[e]->ukr_i4 &&
              ext[e]->quant_row && ext[e]->swiglu_row, "neon ext table %d has a NULL member", e);
        CHECK(ext[e]->nr == gemm_kernels_neon.nr && ext[e]->kc_int == gemm_kernels_neon.kc_int,
              "neon ext table %d: another int layout or K block than neon's", e);
        tabs[nt++] = ext[e];
        simd_of[nt - 1] = H3_ISA_NEON;
    }
#endif
    for (size_t i = 0; i < nt; i++) {
        const gemm_kernels *kt = tabs[i];
        CHECK(kt->swiglu_row != gemm_swiglu_row_ref, "%s: the SwiGLU epilogue is the scalar reference",
              h3_isa_name(simd_of[i]));
        if (simd_of[i] != H3_ISA_NEON)
            CHECK(kt->quant_row != gemm_quant_row_ref, "%s: activations quantised by the scalar reference",
                  h3_isa_name(simd_of[i]));
        CHECK(kt->ukr_i8 != gemm_ukr_i8_ref && kt->ukr_f32 != gemm_ukr_f32_ref,
              "%s: a scalar reference micro-kernel", h3_isa_name(simd_of[i]));
    }
}

/* The VDPBF16PS table's weight packing (gemm_bf16_pack.inc, shared with AMX) against its
 * definition: panel p, pair kk, column c holds W[n][k0+2kk] | W[n][k0+2kk+1] << 16 for
 * n = n0 + 32p + c < n_valid and k < kc, else zero, over kc32(kc)/2 pairs.  Full panels
 * take the 16x16 transpose, the last pairs and partial panels the gathers; every word is
 * compared. */
static void test_bf16_unpack(void) {
#if H3_X86
    set_ctx("bf16 unpack");
    if (!h3_isa_supported(H3_ISA_AVX512) || !h3_cpu_has_avx512_bf16()) return;
    const gemm_kernels *kt = &gemm_kernels_avx512_bf16dp;
    enum { NR = 32 };
    const int64_t N = 100, K = 300, ldw = K + 5;
    uint16_t *w = malloc((size_t)N * ldw * 2);
    for (int64_t i = 0; i < N * ldw; i++) w[i] = (uint16_t)(i * 2654435761u >> 7);
    const struct { int64_t n0, nc, n_valid, k0, kc; } cases[] = {
        {0, 64, 100, 0, 64}, {0, 96, 100, 3, 255}, {32, 64, 90, 10, 290}, {64, 64, 100, 0, 31},
        {0, 32, 100, 1, 33}, {96, 32, 100, 0, 32}, {0, 64, 20, 0, 64},
    };
    for (size_t t = 0; t < sizeof cases / sizeof cases[0]; t++) {
        const int64_t n0 = cases[t].n0, nc = cases[t].nc, nv = cases[t].n_valid, k0 = cases[t].k0,
                      kc = cases[t].kc, pairs = ((kc + 31) & ~(int64_t)31) / 2;
        const size_t words = (size_t)(nc / NR) * kc * NR; /* the driver's float slots */
        uint32_t *out = malloc(words * 4);
        memset(out, 0xAB, words * 4);
        kt->unpack(H3_DT_BF16, w, ldw, n0, nc, nv, k0, kc, (float *)out, NR);
        long bad = 0;
        for (int64_t p = 0; p < nc / NR; p++)
            for (int64_t kk = 0; kk < pairs; kk++)
                for (int64_t c = 0; c < NR; c++) {
                    const int64_t n = n0 + p * NR + c, k = 2 * kk;
                    uint32_t lo = 0, hi = 0;
                    if (n < nv && k < kc) lo = w[n * ldw + k0 + k];
                    if (n < nv && k + 1 < kc) hi = w[n * ldw + k0 + k + 1];
                    bad += out[p * kc * NR + kk * NR + c] != (lo | hi << 16);
                }
        CHECK(bad == 0, "bf16 unpack case %zu (n0 %lld nc %lld n_valid %lld k0 %lld kc %lld): %ld words differ", t,
              (long long)n0, (long long)nc, (long long)nv, (long long)k0, (long long)kc, bad);
        free(out);
    }
    free(w);
#endif
}

/* The AVX-512 integer micro-kernels against the reference, called directly: both tables
 * (VNNI, and the vpmaddubsw one for AVX-512 CPUs without VNNI, which the public API only
 * reaches on such CPUs) and the widened-int4 kernels (ukr_i4w, the driver's large-M int4
 * path), over segment counts, row and column tails, and accumulation.  Bit for bit. */
static void test_int_kernels(void) {
#if H3_X86
    if (!h3_isa_supported(H3_ISA_AVX512)) return;
    const gemm_kernels *tabs[2] = {&gemm_kernels_avx512_novnni, &gemm_kernels_avx512};
    const int ntabs = h3_cpu_has_avx512_vnni() ? 2 : 1;
    enum { MR = 14, NR = 32, LDC = NR + 3 };
    const int nsegs[] = {1, 3}, segqs[] = {8, 32}, mrs[] = {1, 2, 5, 7, 9, 14}, nrs[] = {32, 17};
    for (int kind = 0; kind < 3; kind++) /* 0 int8, 1 int4 nibbles, 2 int4 widened */
        for (int a = 0; a < 2; a++)
            for (int b = 0; b < 2; b++) {
                const int nseg = nsegs[a], seg_q = segqs[b], kq = nseg * seg_q;
                int8_t *ap = malloc((size_t)kq * MR * 4);
                uint8_t *bp = malloc((size_t)kq * NR * 4), *bw = malloc((size_t)kq * NR * 4);
                float *sa = malloc((size_t)nseg * MR * 4), *sw = malloc((size_t)nseg * NR * 4);
                int32_t *asum = calloc((size_t)nseg * MR, 4);
                for (int i = 0; i < kq * MR * 4; i++) ap[i] = (int8_t)((int)(rng_u64() % 255) - 127);
                /* valid codes only: q_w in [-127, 127] (+128) and [-7, 7] (+8 per nibble) */
                for (int i = 0; i < kq * NR * 4; i++)
                    bp[i] = kind ? (uint8_t)((1 + rng_u64() % 15) | ((1 + rng_u64() % 15) << 4))
                                 : (uint8_t)(1 + rng_u64() % 255);
                for (int q = 0; q < kq; q++)
                    for (int i = 0; i < MR; i++)
                        for (int t = 0; t < 4; t++) asum[(q / seg_q) * MR + i] += ap[(q * MR + i) * 4 + t];
                for (int i = 0; i < nseg * MR; i++) sa[i] = 0.01f + 0.02f * fabsf(rng_unif());
                for (int i = 0; i < nseg * NR; i++) sw[i] = 0.001f + 0.003f * fabsf(rng_unif());
                gemm_widen_i4(bp, kq, NR, bw);
                const int64_t sws = kind ? NR : 0;
                for (int m = 0; m < 6; m++)
                    for (int n = 0; n < 2; n++)
                        for (int acc = 0; acc < 2; acc++) {
                            const int mr = mrs[m], nr = nrs[n];
                            float want[MR * LDC], init[MR * LDC];
                            for (int i = 0; i < MR * LDC; i++) init[i] = want[i] = rng_unif();
                            (kind ? gemm_ukr_i4_ref : gemm_ukr_i8_ref)(MR, NR, nseg, seg_q, ap, bp, sa, asum, sw,
                                                                     sws, want, LDC, mr, nr, acc);
                            for (int t = 0; t < ntabs; t++) {
                                const gemm_kernels *kt = tabs[t];
                                set_ctx("int kernel %s %s nseg=%d seg_q=%d mr=%d nr=%d acc=%d",
                                        t ? "vnni" : "bw", kind == 0 ? "i8" : kind == 1 ? "i4" : "i4w", nseg,
                                        seg_q, mr, nr, acc);
                                gemm_ukr_int_fn f = kind == 0 ? kt->ukr_i8 : kind == 1 ? kt->ukr_i4 : kt->ukr_i4w;
                                CHECK(f != NULL, "no kernel");
                                if (!f) continue;
                                float got[MR * LDC];
                                memcpy(got, init, sizeof got);
                                f(MR, NR, nseg, seg_q, ap, kind == 2 ? bw : bp, sa, asum, sw, sws, got, LDC, mr,
                                  nr, acc);
                                CHECK(!memcmp(got, want, sizeof got), "differs from the reference");
                            }
                        }
                free(ap); free(bp); free(bw); free(sa); free(sw); free(asum);
            }
#endif
}

/* ------------------------------------------------------------------ ISA / cpu */

static void test_cpu(void) {
    set_ctx("cpu");
    CHECK(h3_isa_supported(H3_ISA_REF), "ref unsupported");
    CHECK(h3_isa_supported(h3_isa_best()), "best ISA %s unsupported", h3_isa_name(h3_isa_best()));
    CHECK(!strcmp(h3_isa_name((h3_isa)99), "?") && !strcmp(h3_isa_name((h3_isa)-1), "?"), "isa_name out of range");
    CHECK(!h3_isa_supported((h3_isa)99) && !h3_isa_supported((h3_isa)-1), "isa 99 supported");
    for (int i = 0; i < H3_ISA_COUNT; i++) {
        h3_isa got = (h3_isa)-5;
        CHECK(h3_isa_from_name(h3_isa_name((h3_isa)i), &got) == 1 && got == (h3_isa)i,
              "isa name round trip %d", i);
        h3_err err;
        memset(&err, 0, sizeof err);
        h3_status st = h3_isa_check((h3_isa)i, &err);
        CHECK(st == (h3_isa_supported((h3_isa)i) ? H3_OK : H3_EUNSUPPORTED),
              "isa_check(%s) = %d", h3_isa_name((h3_isa)i), (int)st);
        if (st) CHECK(err.msg[0] && strstr(err.msg, h3_isa_name((h3_isa)i)), "isa_check message '%s'", err.msg);
    }
    h3_isa got = H3_ISA_AVX2;
    CHECK(h3_isa_from_name("sse9", &got) == 0 && got == H3_ISA_AVX2, "unknown name accepted");
    CHECK(h3_isa_from_name(NULL, &got) == 0, "NULL name accepted");
    CHECK(h3_isa_from_name("", &got) == 0, "empty name accepted");
    CHECK_ERR(h3_isa_check((h3_isa)99, ERR), H3_EINVAL);
    CHECK_ERR(h3_isa_check((h3_isa)-1, ERR), H3_EINVAL);
    if (unsupported_isa != H3_ISA_COUNT) CHECK_ERR(h3_isa_check(unsupported_isa, ERR), H3_EUNSUPPORTED);
    CHECK(h3_isa_check(H3_ISA_REF, NULL) == H3_OK, "isa_check(ref, NULL)");
    int nf = 0;
    while (h3_cpu_feature_name(nf)) nf++;
    CHECK(nf > 0 && nf <= 64, "feature names: %d", nf);
    CHECK(h3_cpu_feature_name(-1) == NULL, "feature name -1");
    CHECK(nf == 64 || (h3_cpu_features() >> nf) == 0, "feature bits past the names");
}

#include "test_kernels_convert.inc"
#include "test_kernels_ops.inc"
#include "test_kernels_audio.inc"
#include "test_kernels_video.inc"
#include "test_kernels_blockref.inc"
#include "test_kernels_dit.inc"
#include "test_kernels_qwen.inc"
#include "test_kernels_vit.inc"
#include "test_kernels_qvis.inc"
#include "test_kernels_loop.inc"
#include "test_kernels_lora.inc"
#include "test_kernels_hadamard.inc"
#include "test_kernels_neon.inc"
#include "test_kernels_gguf.inc"
#include "test_kernels_nvfp4.inc"

/* ------------------------------------------------------------------ main */

int main(int argc, char **argv) {
    const char *only = NULL; /* --only PART: run one part (while editing a kernel) */
    for (int i = 1; i < argc; i++) {
        if (!strcmp(argv[i], "--quick")) quick = 1;
        else if (!strcmp(argv[i], "--only") && i + 1 < argc) only = argv[++i];
        else { printf("usage: %s [--quick] [--only PART]\n", argv[0]); return 2; }
    }
    setvbuf(stdout, NULL, _IOLBF, 0);
    printf("isas tested: ref");
    for (int i = 1; i < H3_ISA_COUNT; i++) {
        if (h3_isa_supported((h3_isa)i)) {
            isas[n_isas++] = (h3_isa)i;
            printf(" %s", h3_isa_name((h3_isa)i));
        } else if (unsupported_isa == H3_ISA_COUNT) {
            unsupported_isa = (h3_isa)i;
        }
    }
    printf("\n");
    printf("cpu features:");
    uint64_t f = h3_cpu_features();
    for (int i = 0; h3_cpu_feature_name(i); i++) if ((f >> i) & 1) printf(" %s", h3_cpu_feature_name(i));
    printf("\n");
#if defined(__aarch64__) && defined(__linux__)
    /* which NEON integer GEMM kernel runs: SDOT (asimddp) or the ARMv8.0 SMULL one */
    printf("aarch64 asimddp: %s\n", (getauxval(AT_HWCAP) & (1ul << 20)) ? "yes" : "no");
    /* and whether the SMMLA / BFMMLA tables can be chosen (HWCAP2_I8MM, HWCAP2_BF16) */
    printf("aarch64 i8mm: %s, bf16: %s\n", (getauxval(AT_HWCAP2) & (1ul << 13)) ? "yes" : "no",
           (getauxval(AT_HWCAP2) & (1ul << 14)) ? "yes" : "no");
#endif
    h3_err err;
    if (h3_pool_create(1, &pool1, &err) || h3_pool_create(2, &pool2, &err)) {
        printf("FAIL: pool_create: %s\n", err.msg);
        return 1;
    }
    struct { const char *name; void (*fn)(void); } parts[] = {
        {"cpu", test_cpu}, {"alloc", test_alloc}, {"pool", test_pool}, {"convert", test_convert},
        {"gemm errors", test_gemm_errors}, {"gemm tables", test_gemm_tables}, {"int kernels", test_int_kernels}, {"bf16 unpack", test_bf16_unpack}, {"gemm", test_gemm}, {"gemm parts", test_gemm_parts}, {"ops", test_ops},
        {"audio", test_audio}, {"video", test_video}, {"dit", test_dit},
        {"qwen", test_qwen}, {"vit", test_vit}, {"qvis", test_qvis}, {"loop", test_loop}, {"lora", test_lora},
        {"hadamard", test_hadamard}, {"neon ext", test_neon_ext}, {"gguf", test_gguf},
        {"nvfp4", test_nvfp4},
    };
    for (size_t i = 0; i < sizeof parts / sizeof parts[0]; i++) {
        if (only && strcmp(only, parts[i].name)) continue;
        long c0 = n_checks, f0 = n_failed;
        clock_t t0 = clock();
        parts[i].fn();
        printf("%-12s %6ld checks, %ld failed, %.2fs cpu\n", parts[i].name, n_checks - c0,
               n_failed - f0, (double)(clock() - t0) / CLOCKS_PER_SEC);
    }
    for (int i = 0; i < n_tolrecs; i++)
        printf("  worst err/bound %-28s %.3g over %ld cases\n", tolrecs[i].name, tolrecs[i].worst, tolrecs[i].n);
    h3_pool_free(pool1);
    h3_pool_free(pool2);
    if (n_failed) {
        printf("FAILED: %ld of %ld checks\n", n_failed, n_checks);
        return 1;
    }
    printf("ok: %ld checks\n", n_checks);
    return 0;
}
