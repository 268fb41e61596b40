/* ggml_mm: time one ggml mul_mat (quantised weight x f32 activations) on ggml's CPU backend,
 * the reference of issue #24's GGUF benchmark table.
 *
 * The graph is what stable-diffusion.cpp builds for a linear layer: weight W as stored
 * (ne = [K, N], a GGUF block type), activations x f32 (ne = [K, M]), y = mul_mat(W, x) f32
 * (ne = [N, M]), computed by ggml_backend_graph_compute on the CPU backend with
 * ggml_backend_cpu_set_n_threads.  ggml converts x to the weight type's vec_dot_type
 * (q8_0 for Q8_0, q8_K for the K-quants) inside the op, as in sd.cpp.
 *
 * Two weight placements (GGML_MM_CONFIG at build time, --config at run time):
 *   sdcpp  the CPU backend's default buffer type -- where sd.cpp's ModelManager puts the
 *          parameters of a CPU run (params_buffer_type_for -> ggml_backend_get_default_buffer_type);
 *          the "extra" buffer types (repack, AMX) are never used by sd.cpp.
 *   best   the first of the CPU device's extra buffer types (ggml_backend_dev_get_extra_bufts:
 *          AMX where the build and CPU have it, then CPU_REPACK) whose supports_op accepts this
 *          mul_mat -- as llama.cpp places weights; the default buffer when none does.  Setting the
 *          tensor repacks it (q4_K 8x8 / q4_0 8x8 / iq4_nl on AVX2, q2_K on AVX-512; on x86 there is
 *          no Q8_0/Q5_K/Q6_K/Q3_K repack at this commit).  Whether llamafile's sgemm (Q8_0, Q4_0,
 *          Q5_0 x q8_0 on AVX/AVX2/AVX-512) is in is a build option (build.sh turns it on for best).
 *
 * Weights: random normal floats (sd 0.02) quantised with ggml's own ggml_quantize_chunk.  To keep
 * start-up short at N = 28672 only the first min(N, 256) rows are quantised and the rest are
 * copies of them: a GEMM's speed does not depend on the values.  Row 0 of y is checked against a
 * double dot of the dequantised weight and the f32 activations (check_rel: the activation
 * quantisation's error, ~1e-2; a wrong layout gives ~1).
 *
 * usage:
 *   ggml_mm --types q8_0,q4_K --shapes 7168x5376,5376x14336 --m 2048,128 --threads 2 --reps 5
 *   ggml_mm --serve --threads 2      (stdin lines "TYPE N K M REPS" -> one JSON line each)
 *   ggml_mm --info                   (the build's features and extra buffer types, one JSON line)
 *   ggml_mm ... --dump PREFIX        (also write PREFIX.TYPE.{w,x,y}: the blocks as stored, x and y
 *                                     as raw f32, for tests/test_gguf_ggml_parity.py)
 * One JSON line per (type, shape, M): ms_median, ms_min, gflops (2*M*N*K / median), buft.
 */
#include <math.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>
#include <time.h>

#include "ggml.h"
#include "ggml-alloc.h"
#include "ggml-backend.h"
#include "ggml-cpu.h"

#ifndef GGML_MM_CONFIG
#define GGML_MM_CONFIG "sdcpp"
#endif

#define QROWS 256

static double now_ms(void) {
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return ts.tv_sec * 1e3 + ts.tv_nsec * 1e-6;
}

static uint64_t rng_state = 0x9E3779B97F4A7C15ull;
static double urand(void) {  /* xorshift64*, uniform in (0, 1) */
    rng_state ^= rng_state >> 12; rng_state ^= rng_state << 25; rng_state ^= rng_state >> 27;
    return ((rng_state * 2685821657736338717ull) >> 11) * (1.0 / 9007199254740992.0) + 1e-18;
}
static float nrand(void) { return (float)(sqrt(-2.0 * log(urand())) * cos(6.283185307179586 * urand())); }

static int parse_type(const char *s, enum ggml_type *t) {
    for (int i = 0; i < GGML_TYPE_COUNT; i++) {
        const char *n = ggml_type_name((enum ggml_type)i);
        if (n && ggml_blck_size((enum ggml_type)i) > 0 && strcasecmp(n, s) == 0) { *t = (enum ggml_type)i; return 0; }
    }
    return -1;
}

static int cmp_d(const void *a, const void *b) {
    double x = *(const double *)a, y = *(const double *)b;
    return x < y ? -1 : x > y;
}

/* the backend, its device, the config and the cached weight / activations */
static ggml_backend_t backend;
static ggml_backend_dev_t cpu_dev;
static int best_config;
static int n_threads = 1;
static const char *dump_prefix;

static struct {
    enum ggml_type type; int64_t N, K;
    void *qdata;            /* N rows as stored */
    size_t qbytes;
} wcache = {GGML_TYPE_COUNT, 0, 0, NULL, 0};
static struct { int64_t M, K; float *x; } xcache = {0, 0, NULL};

static const void *weight_data(enum ggml_type t, int64_t N, int64_t K) {
    if (wcache.qdata && wcache.type == t && wcache.N == N && wcache.K == K) return wcache.qdata;
    free(wcache.qdata);
    size_t row = ggml_row_size(t, K);
    int64_t qr = N < QROWS ? N : QROWS;
    float *src = malloc(sizeof(float) * qr * K);
    for (int64_t i = 0; i < qr * K; i++) src[i] = 0.02f * nrand();
    char *q = malloc(row * N);
    ggml_quantize_init(t);
    ggml_quantize_chunk(t, src, q, 0, qr, K, NULL);
    for (int64_t r = qr; r < N; r += qr) memcpy(q + r * row, q, row * (size_t)(N - r < qr ? N - r : qr));
    free(src);
    wcache.type = t; wcache.N = N; wcache.K = K; wcache.qdata = q; wcache.qbytes = row * N;
    return q;
}

static const float *act_data(int64_t M, int64_t K) {
    if (xcache.x && xcache.M == M && xcache.K == K) return xcache.x;
    free(xcache.x);
    xcache.x = malloc(sizeof(float) * M * K);
    for (int64_t i = 0; i < M * K; i++) xcache.x[i] = nrand();
    xcache.M = M; xcache.K = K;
    return xcache.x;
}

/* The buffer type for W: default (sdcpp) or the first extra one whose supports_op takes this
 * mul_mat (best).  Returns the allocated weight buffer; *name gets its type's name. */
static ggml_backend_buffer_t place_weight(struct ggml_context *ctx_w, struct ggml_tensor *w,
                                          struct ggml_tensor *x, const char **name) {
    if (best_config) {
        ggml_backend_reg_t reg = ggml_backend_dev_backend_reg(cpu_dev);
        ggml_backend_dev_get_extra_bufts_t get_extra =
            (ggml_backend_dev_get_extra_bufts_t)ggml_backend_reg_get_proc_address(reg, "ggml_backend_dev_get_extra_bufts");
        ggml_backend_buffer_type_t *extra = get_extra ? get_extra(cpu_dev) : NULL;
        for (; extra && *extra; extra++) {
            ggml_backend_buffer_t buf = ggml_backend_alloc_ctx_tensors_from_buft(ctx_w, *extra);
            if (!buf) continue;
            /* a throw-away op in a metadata-only context, as llama.cpp's weight_buft_supported */
            struct ggml_init_params p = {ggml_tensor_overhead() * 4, NULL, true};
            struct ggml_context *tmp = ggml_init(p);
            struct ggml_tensor *op = ggml_mul_mat(tmp, w, x);
            int ok = ggml_backend_dev_supports_op(cpu_dev, op);
            ggml_free(tmp);
            if (ok) { *name = ggml_backend_buft_name(*extra); return buf; }
            ggml_backend_buffer_free(buf);
            w->buffer = NULL; w->data = NULL; w->extra = NULL;   /* the rejected buffer's traits */
        }
    }
    ggml_backend_buffer_type_t def = ggml_backend_get_default_buffer_type(backend);
    *name = ggml_backend_buft_name(def);
    return ggml_backend_alloc_ctx_tensors_from_buft(ctx_w, def);
}

static int dump(const char *type, const char *ext, const void *p, size_t n) {
    char path[4096];
    snprintf(path, sizeof path, "%s.%s.%s", dump_prefix, type, ext);
    FILE *f = fopen(path, "wb");
    if (!f || fwrite(p, 1, n, f) != n) { fprintf(stderr, "ggml_mm: cannot write %s\n", path); if (f) fclose(f); return 1; }
    return fclose(f) != 0;
}

static int run_one(enum ggml_type t, int64_t N, int64_t K, int64_t M, int reps) {
    if (K % ggml_blck_size(t) != 0) {
        fprintf(stderr, "ggml_mm: K=%lld is not a multiple of %s's block %lld\n", (long long)K,
                ggml_type_name(t), (long long)ggml_blck_size(t));
        return 1;
    }
    const void *q = weight_data(t, N, K);
    const float *xh = act_data(M, K);

    struct ggml_init_params pw = {ggml_tensor_overhead() * 2, NULL, true};
    struct ggml_context *ctx_w = ggml_init(pw);
    struct ggml_tensor *w = ggml_new_tensor_2d(ctx_w, t, K, N);
    struct ggml_context *ctx_x = ggml_init(pw);
    struct ggml_tensor *x = ggml_new_tensor_2d(ctx_x, GGML_TYPE_F32, K, M);
    const char *buft_name = "?";
    ggml_backend_buffer_t wbuf = place_weight(ctx_w, w, x, &buft_name);
    ggml_backend_buffer_set_usage(wbuf, GGML_BACKEND_BUFFER_USAGE_WEIGHTS);
    ggml_backend_tensor_set(w, q, 0, ggml_nbytes(w));          /* repacks in an extra buffer */
    ggml_backend_buffer_t xbuf = ggml_backend_alloc_ctx_tensors(ctx_x, backend);
    ggml_backend_tensor_set(x, xh, 0, ggml_nbytes(x));

    size_t gsz = ggml_tensor_overhead() * 8 + ggml_graph_overhead();
    struct ggml_init_params pg = {gsz, NULL, true};
    struct ggml_context *ctx_g = ggml_init(pg);
    struct ggml_tensor *y = ggml_mul_mat(ctx_g, w, x);
    struct ggml_cgraph *gf = ggml_new_graph(ctx_g);
    ggml_build_forward_expand(gf, y);
    ggml_gallocr_t galloc = ggml_gallocr_new(ggml_backend_get_default_buffer_type(backend));
    if (!ggml_gallocr_alloc_graph(galloc, gf)) { fprintf(stderr, "ggml_mm: graph allocation failed\n"); return 1; }

    if (ggml_backend_graph_compute(backend, gf) != GGML_STATUS_SUCCESS) {  /* warm-up */
        fprintf(stderr, "ggml_mm: compute failed\n");
        return 1;
    }
    double *ms = malloc(sizeof(double) * reps);
    for (int r = 0; r < reps; r++) {
        double t0 = now_ms();
        ggml_backend_graph_compute(backend, gf);
        ms[r] = now_ms() - t0;
    }
    qsort(ms, reps, sizeof(double), cmp_d);
    double med = reps % 2 ? ms[reps / 2] : 0.5 * (ms[reps / 2 - 1] + ms[reps / 2]);

    /* check row 0 of y (first 64 outputs) against the dequantised weight, in double */
    int64_t nc = N < 64 ? N : 64;
    float *y0 = malloc(sizeof(float) * nc), *wrow = malloc(sizeof(float) * K);
    ggml_backend_tensor_get(y, y0, 0, sizeof(float) * nc);
    const struct ggml_type_traits *tr = ggml_get_type_traits(t);
    double num = 0, den = 0;
    size_t row = ggml_row_size(t, K);
    for (int64_t n = 0; n < nc; n++) {
        tr->to_float((const char *)q + n * row, wrow, K);
        double s = 0;
        for (int64_t k = 0; k < K; k++) s += (double)wrow[k] * xh[k];
        num += (y0[n] - s) * (y0[n] - s); den += s * s;
    }
    if (dump_prefix) {
        float *yall = malloc(ggml_nbytes(y));
        ggml_backend_tensor_get(y, yall, 0, ggml_nbytes(y));
        int bad = dump(ggml_type_name(t), "w", q, ggml_row_size(t, K) * N) || dump(ggml_type_name(t), "x", xh, ggml_nbytes(x)) ||
                  dump(ggml_type_name(t), "y", yall, ggml_nbytes(y));
        free(yall);
        if (bad) return 1;
    }
    double flop = 2.0 * M * N * K;
    printf("{\"impl\": \"ggml\", \"config\": \"%s\", \"type\": \"%s\", \"M\": %lld, \"N\": %lld, \"K\": %lld, "
           "\"threads\": %d, \"reps\": %d, \"ms_median\": %.3f, \"ms_min\": %.3f, \"gflops\": %.2f, "
           "\"gflops_best\": %.2f, \"buft\": \"%s\", \"check_rel\": %.3g}\n",
           best_config ? "best" : "sdcpp", ggml_type_name(t), (long long)M, (long long)N, (long long)K,
           n_threads, reps, med, ms[0], flop / med * 1e-6, flop / ms[0] * 1e-6, buft_name, sqrt(num / (den + 1e-300)));
    fflush(stdout);
    free(ms); free(y0); free(wrow);
    ggml_gallocr_free(galloc);
    ggml_free(ctx_g);
    ggml_backend_buffer_free(xbuf);
    ggml_backend_buffer_free(wbuf);
    ggml_free(ctx_x);
    ggml_free(ctx_w);
    return 0;
}

static void print_info(void) {
    ggml_backend_reg_t reg = ggml_backend_dev_backend_reg(cpu_dev);
    ggml_backend_get_features_t get_f = (ggml_backend_get_features_t)ggml_backend_reg_get_proc_address(reg, "ggml_backend_get_features");
    printf("{\"impl\": \"ggml\", \"config\": \"%s\", \"threads\": %d, \"features\": {", best_config ? "best" : "sdcpp", n_threads);
    int first = 1;
    for (struct ggml_backend_feature *f = get_f ? get_f(reg) : NULL; f && f->name; f++) {
        printf("%s\"%s\": \"%s\"", first ? "" : ", ", f->name, f->value);
        first = 0;
    }
    printf("}, \"extra_bufts\": [");
    ggml_backend_dev_get_extra_bufts_t get_extra =
        (ggml_backend_dev_get_extra_bufts_t)ggml_backend_reg_get_proc_address(reg, "ggml_backend_dev_get_extra_bufts");
    first = 1;
    for (ggml_backend_buffer_type_t *e = get_extra ? get_extra(cpu_dev) : NULL; e && *e; e++) {
        printf("%s\"%s\"", first ? "" : ", ", ggml_backend_buft_name(*e));
        first = 0;
    }
    printf("]}\n");
    fflush(stdout);
}

static int split(char *s, char **out, int max) {
    int n = 0;
    for (char *tok = strtok(s, ","); tok && n < max; tok = strtok(NULL, ",")) out[n++] = tok;
    return n;
}

int main(int argc, char **argv) {
    char *types = NULL, *shapes = NULL, *ms = NULL;
    int reps = 5, serve = 0, info = 0;
    best_config = strcmp(GGML_MM_CONFIG, "best") == 0;
    for (int i = 1; i < argc; i++) {
        const char *a = argv[i];
        const char *v = i + 1 < argc ? argv[i + 1] : NULL;
        if (!strcmp(a, "--types") && v) { types = argv[++i]; }
        else if (!strcmp(a, "--shapes") && v) { shapes = argv[++i]; }
        else if (!strcmp(a, "--m") && v) { ms = argv[++i]; }
        else if (!strcmp(a, "--threads") && v) { n_threads = atoi(argv[++i]); }
        else if (!strcmp(a, "--reps") && v) { reps = atoi(argv[++i]); }
        else if (!strcmp(a, "--config") && v) { best_config = !strcmp(argv[++i], "best"); }
        else if (!strcmp(a, "--dump") && v) { dump_prefix = argv[++i]; }
        else if (!strcmp(a, "--serve")) { serve = 1; }
        else if (!strcmp(a, "--info")) { info = 1; }
        else { fprintf(stderr, "ggml_mm: unknown argument %s (see the comment at the top of ggml_mm.c)\n", a); return 2; }
    }
    if (n_threads < 1 || reps < 1) { fprintf(stderr, "ggml_mm: --threads and --reps must be >= 1\n"); return 2; }
    cpu_dev = ggml_backend_dev_by_type(GGML_BACKEND_DEVICE_TYPE_CPU);
    backend = cpu_dev ? ggml_backend_dev_init(cpu_dev, NULL) : NULL;
    if (!backend) { fprintf(stderr, "ggml_mm: no CPU backend\n"); return 1; }
    ggml_backend_cpu_set_n_threads(backend, n_threads);
    print_info();
    if (info) return 0;

    if (serve) {
        char line[256], tn[32];
        long long N, K, M;
        int r;
        while (fgets(line, sizeof line, stdin)) {
            enum ggml_type t;
            if (sscanf(line, "%31s %lld %lld %lld %d", tn, &N, &K, &M, &r) != 5 || parse_type(tn, &t) || N < 1 || K < 1 || M < 1 || r < 1) {
                printf("{\"error\": \"bad request\"}\n");
                fflush(stdout);
                continue;
            }
            if (run_one(t, N, K, M, r)) { printf("{\"error\": \"run failed\"}\n"); fflush(stdout); }
        }
        return 0;
    }
    if (!types || !shapes || !ms) { fprintf(stderr, "ggml_mm: give --types, --shapes NxK,... and --m (or --serve / --info)\n"); return 2; }
    char *tv[32], *sv[32], *mv[32];
    int nt = split(types, tv, 32), ns = split(shapes, sv, 32), nm = split(ms, mv, 32);
    for (int a = 0; a < nt; a++) {
        enum ggml_type t;
        if (parse_type(tv[a], &t)) { fprintf(stderr, "ggml_mm: unknown type %s\n", tv[a]); return 2; }
        for (int b = 0; b < ns; b++) {
            long long N, K;
            if (sscanf(sv[b], "%lldx%lld", &N, &K) != 2) { fprintf(stderr, "ggml_mm: shape %s is not NxK\n", sv[b]); return 2; }
            for (int c = 0; c < nm; c++)
                if (run_one(t, N, K, atoll(mv[c]), reps)) return 1;
        }
    }
    return 0;
}
