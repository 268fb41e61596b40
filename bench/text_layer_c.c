/* One full-size Qwen3-VL-32B text layer (hidden 5120, 64/8 heads of 128, MLP 25600) through
 * h3_qwen_layer_forward alone: no Python, no torch in the process.  For A/B of two builds
 * of csrc/ (run each from its own checkout, alternately): differences of 1-2% show through
 * here that the Python benchmarks' noise hides.  Random weights, quantised at start-up.
 *
 *     python3 bench/text_layer_c.py --threads 2 --L 128 [--weights int4] [--reps 8]
 *
 * Prints the fastest of --reps calls and a checksum of the output (equal checksums: equal
 * bits). */
#include "h3.h"

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

enum { HID = 5120, HEADS = 64, KV = 8, HD = 128, FFN = 25600 };

static double now(void) {
    struct timespec t;
    clock_gettime(CLOCK_MONOTONIC, &t);
    return t.tv_sec + t.tv_nsec * 1e-9;
}

static float urand(void) { return (float)rand() / (float)RAND_MAX - 0.5f; }

static h3_linear *make_linear(int64_t N, int64_t K, int wt, int pair) {
    float *w = malloc((size_t)N * K * sizeof(float));
    if (!w) { fprintf(stderr, "out of memory\n"); exit(1); }
    for (int64_t i = 0; i < N * K; i++) w[i] = 0.05f * urand();
    h3_linear_opts o;
    memset(&o, 0, sizeof o);
    o.wtype = wt;
    o.group_size = 128;
    o.pair = pair;
    o.isa = h3_isa_best();
    /* the library reads no environment: this driver keeps H3CY_HUGEPAGES=0 as its A/B switch */
    o.small_pages = getenv("H3CY_HUGEPAGES") && !strcmp(getenv("H3CY_HUGEPAGES"), "0");
    h3_linear *l;
    h3_err e;
    if (h3_linear_create(w, H3_DT_F32, N, K, NULL, &o, &l, &e)) { fprintf(stderr, "linear: %s\n", e.msg); exit(1); }
    free(w);
    return l;
}

int main(int argc, char **argv) {
    int threads = 2, reps = 8;
    int64_t S = 128;
    int wt = H3_DT_I8;
    for (int i = 1; i + 1 < argc; i += 2) {
        if (!strcmp(argv[i], "--threads")) threads = atoi(argv[i + 1]);
        else if (!strcmp(argv[i], "--L")) S = atol(argv[i + 1]);
        else if (!strcmp(argv[i], "--reps")) reps = atoi(argv[i + 1]);
        else if (!strcmp(argv[i], "--weights")) wt = strcmp(argv[i + 1], "int4") ? H3_DT_I8 : H3_DT_I4;
        else { fprintf(stderr, "usage: %s [--threads N] [--L S] [--reps R] [--weights int8|int4]\n", argv[0]); return 2; }
    }
    if (threads < 1 || S < 1 || reps < 1) { fprintf(stderr, "bad arguments\n"); return 2; }
    srand(1);
    h3_qwen_layer L;
    memset(&L, 0, sizeof L);
    L.q = make_linear(HEADS * HD, HID, wt, 0);
    L.k = make_linear(KV * HD, HID, wt, 0);
    L.v = make_linear(KV * HD, HID, wt, 0);
    L.o = make_linear(HID, HEADS * HD, wt, 0);
    L.gate_up = make_linear(2 * FFN, HID, wt, 1);
    L.down = make_linear(HID, FFN, wt, 0);
    static float norm_h[HID], norm_d[HD];
    for (int i = 0; i < HID; i++) norm_h[i] = 1.0f + 0.1f * urand();
    for (int i = 0; i < HD; i++) norm_d[i] = 1.0f + 0.1f * urand();
    L.input_norm = L.post_norm = norm_h;
    L.q_norm = L.k_norm = norm_d;
    float *cs = malloc((size_t)S * HD / 2 * sizeof(float)), *sn = malloc((size_t)S * HD / 2 * sizeof(float));
    for (int64_t s = 0; s < S; s++)
        for (int i = 0; i < HD / 2; i++) {
            double a = (double)s * pow(5e6, -2.0 * i / HD);
            cs[s * HD / 2 + i] = (float)cos(a);
            sn[s * HD / 2 + i] = (float)sin(a);
        }
    h3_qwen_layer_args a = {S, HID, HEADS, KV, HD, FFN, 1e-6f, 0, cs, sn};
    h3_err e;
    h3_pool *pool;
    if (h3_pool_create(threads, &pool, &e)) { fprintf(stderr, "pool: %s\n", e.msg); return 1; }
    const size_t wsb = h3_qwen_layer_workspace_bytes(&L, &a, threads);
    void *ws = aligned_alloc(64, (wsb + 63) & ~(size_t)63);
    float *x0 = malloc((size_t)S * HID * sizeof(float)), *h = malloc((size_t)S * HID * sizeof(float));
    for (int64_t i = 0; i < S * HID; i++) x0[i] = 2.0f * urand();
    double best = 1e30;
    for (int r = 0; r < reps; r++) {
        memcpy(h, x0, (size_t)S * HID * sizeof(float));
        double t = now();
        if (h3_qwen_layer_forward(&L, &a, h, pool, ws, wsb, h3_isa_best(), &e)) { fprintf(stderr, "forward: %s\n", e.msg); return 1; }
        t = now() - t;
        if (t < best) best = t;
    }
    double checksum = 0;
    for (int64_t i = 0; i < S * HID; i++) checksum += h[i];
    printf("text layer, %s, L=%lld, %d threads, isa %s: %.2f ms (fastest of %d), checksum %.6f\n",
           wt == H3_DT_I8 ? "int8" : "int4", (long long)S, threads, h3_isa_name(h3_isa_best()), best * 1e3, reps,
           checksum);
    return 0;
}
