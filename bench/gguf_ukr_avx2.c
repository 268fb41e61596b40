/* gguf_ukr_avx2.c — the AVX2 GGUF micro-kernel and panel decoder alone, on one 16-column
 * panel (no driver, no threads, no Python), in CPU time: the numbers behind docs/gguf.md's
 * 2-core bound paragraph, and a quick bit-for-bit check of both against the reference.
 *
 *   gcc -O3 -std=c11 -D_GNU_SOURCE -ffp-contract=off -fno-math-errno -mavx2 -mfma -mf16c -Icsrc \
 *       bench/gguf_ukr_avx2.c csrc/gguf_ref.c csrc/gguf_panel_ref.c csrc/gguf_avx2.c \
 *       csrc/gguf_decode_avx2.c -lm -o /tmp/gguf_ukr_avx2
 *   /tmp/gguf_ukr_avx2 [M=256] [K=5376] [reps=15]
 *
 * The AVX-512 VNNI kernel instead (the same decoder; -DUKR names the kernel timed and checked):
 *
 *   gcc -O3 -std=c11 -D_GNU_SOURCE -ffp-contract=off -fno-math-errno -mavx2 -mfma -mf16c -Icsrc \
 *       -mavx512f -mavx512bw -mavx512vl -mavx512vnni -DUKR=gguf_ukr_avx512 bench/gguf_ukr_avx2.c \
 *       csrc/gguf_ref.c csrc/gguf_panel_ref.c csrc/gguf_avx2.c csrc/gguf_decode_avx2.c csrc/gguf_avx512.c \
 *       -lm -o /tmp/gguf_ukr_avx512
 *
 * The AMX tile kernel (signed activations; its rows past a multiple of 16 run the AVX-512 one):
 * the line above with -mamx-tile -mamx-int8 -DUKR_AMX -DUKR=gguf_ukr_amx and csrc/gguf_amx.c.
 * Q4_K and Q5_K in the AMX path's integer super-block order (gguf_kq_amx.c; checked against
 * gguf_ukr_kq_ref, the other types run gguf_ukr_amx): the AMX line with -DUKR_KQ and
 * csrc/gguf_kq_amx.c; the decode time then includes gguf_kq_scales.
 * Two panels at once (gguf_ukr_avx512_x2, the panel twice): -DUKR=gguf_ukr_avx512 -DUKR_X2.
 * M x K bytes of activations past L2 (M = 768 at K = 5376 is 4 MB) shows what re-reading them
 * per panel costs, as the driver does.
 *
 * Per type: random blocks (f16 scales finite), random activations with their true sums;
 * the K loop of the driver (decode a 512-input K block, run the kernel over M rows), best
 * of reps passes; GOP/s of the kernel (2 M 16 K / its time) and the decode's time as a
 * share of it.  Then, on extreme values too (every u at its largest or 0, every a at
 * +-127: the int16 bounds' worst case), kernel == gguf_ukr_ref and decoder ==
 * gguf_decode_panel_ref byte for byte (also for partial panels); a mismatch exits 1. */
#include "gguf_impl.h"

#include <immintrin.h>
#include <stdio.h>
#include <sys/syscall.h>
#include <unistd.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

/* ---- what the five csrc files link against, outside this tool's scope ---------------- */
float h3_f16_to_f32(uint16_t h) { return _cvtsh_ss(h); }
h3_status h3_fail(h3_err *e, h3_status s, const char *f, ...) { (void)e; (void)f; return s; }
h3_isa h3_isa_vector(h3_isa isa) { return isa; }
int h3_cpu_has_avx512_vnni(void) { return 0; }
void gguf_quant_act_row_avx2(const float *x, int64_t K, int8_t *a, float *d, int32_t *as) { abort(); }
void gguf_quant_act_row_avx2u(const float *x, int64_t K, int8_t *a, float *d, int32_t *as) { abort(); }
#define NO_UKR(name)                                                                                           \
    void name(int mr, const gguf_kind *t, int nseg, const int8_t *a, int64_t lda, const float *d, int64_t ldd, \
              const int32_t *as, int64_t ldas, const uint8_t *u, const float *sc, const float *mn, float *cb) { \
        abort();                                                                                               \
    }
#ifndef UKR
#define UKR gguf_ukr_avx2
NO_UKR(gguf_ukr_avx512)
#endif
NO_UKR(gguf_ukr_avxvnni)
#ifndef UKR_AMX
NO_UKR(gguf_ukr_amx)
#endif

#ifdef UKR_X2
#define X2 2 /* columns counted: two panels a call */
#else
#define X2 1
#endif

static double cpu_now(void) {
    struct timespec t;
    clock_gettime(CLOCK_THREAD_CPUTIME_ID, &t);
    return t.tv_sec + t.tv_nsec * 1e-9;
}

typedef struct { const char *name; int type, f16[2]; } type_info;
static const type_info TYPES[] = {{"Q8_0", H3_GGUF_Q8_0, {0, -1}}, {"Q6_K", H3_GGUF_Q6_K, {208, -1}},
                                  {"Q5_K", H3_GGUF_Q5_K, {0, 2}},  {"Q4_K", H3_GGUF_Q4_K, {0, 2}},
                                  {"Q3_K", H3_GGUF_Q3_K, {108, -1}}};

/* 16 rows of blocks: random (extreme: row r all 0xff or all 0x00), scales finite */
static uint8_t *make_rows(const type_info *ti, int64_t K, int extreme, size_t *rb) {
    int blk, bytes;
    h3_gguf_type_size(ti->type, &blk, &bytes);
    *rb = (size_t)(K / blk) * (size_t)bytes;
    uint8_t *w = malloc(16 * *rb);
    for (size_t i = 0; i < 16 * *rb; i++) w[i] = extreme ? ((i / *rb) % 2 ? 0xff : 0) : (uint8_t)rand();
    for (size_t b = 0; b < 16 * *rb / (size_t)bytes; b++)
        for (int j = 0; j < 2; j++)
            if (ti->f16[j] >= 0) {
                w[b * bytes + ti->f16[j]] = 0x1f;
                w[b * bytes + ti->f16[j] + 1] = (uint8_t)(0x20 + b % 7);
            }
    return w;
}

/* activations [M][K], scales, and the sums the quantiser writes: per 16, then per 32 */
static void make_act(int64_t M, int64_t K, int extreme, int8_t *a, float *d, int32_t *as) {
    for (int64_t i = 0; i < M * K; i++) a[i] = extreme ? ((i / K) % 2 ? 127 : -127) : (int8_t)(rand() % 255 - 127);
    for (int64_t i = 0; i < M * (K / 32); i++) d[i] = 0.01f * (float)(1 + i % 5);
    for (int64_t m = 0; m < M; m++)
        for (int64_t b = 0; b < K / 16; b++) {
            int32_t s = 0;
            for (int k = 0; k < 16; k++) s += a[m * K + b * 16 + k];
            int32_t *r = as + m * (K / 32 * 3);
            r[b] = s;
            if (b % 2) r[K / 16 + b / 2] = s + r[b - 1];
        }
}

/* the driver's K loop over one panel; returns the kernel's and the decoder's seconds */
static void run(const type_info *ti, const uint8_t *w, size_t rb, int64_t M, int64_t K, const int8_t *a,
                const float *d, const int32_t *as, gguf_ukr_fn ukr, gguf_decode_fn dec, float *cb, double *tk,
                double *td) {
    static uint8_t u[GGUF_KB * GGUF_NR] __attribute__((aligned(64)));
    static float sm[2 * (GGUF_KB / GGUF_SUB) * GGUF_NR] __attribute__((aligned(64)));
    const gguf_kind *t = gguf_kind_of(ti->type);
    int blk, bytes;
    h3_gguf_type_size(ti->type, &blk, &bytes);
    *tk = *td = 0;
    for (int64_t k0 = 0; k0 < K; k0 += GGUF_KB) {
        const int nk = (int)(K - k0 < GGUF_KB ? K - k0 : GGUF_KB);
        const uint8_t *rows[GGUF_NR];
        for (int j = 0; j < GGUF_NR; j++) rows[j] = w + j * rb + (size_t)(k0 / blk) * (size_t)bytes;
        const double t0 = cpu_now();
        dec(ti->type, rows, GGUF_NR, nk, u, sm, sm + (GGUF_KB / GGUF_SUB) * GGUF_NR);
#ifdef UKR_KQ
        if (ti->type == H3_GGUF_Q4_K || ti->type == H3_GGUF_Q5_K) {
            static uint8_t isc[GGUF_KB / 32 * GGUF_NR], imn[GGUF_KB / 32 * GGUF_NR];
            static float ds[GGUF_KB / 256 * GGUF_NR], dm[GGUF_KB / 256 * GGUF_NR];
            gguf_kq_scales(ti->type, rows, GGUF_NR, nk, isc, imn, ds, dm);
            const double t1 = cpu_now();
            (ukr == gguf_ukr_ref ? gguf_ukr_kq_ref : gguf_ukr_amx_kq)((int)M, nk / 256, a + k0, K, d + k0 / GGUF_AG,
                                                                      K / 32, as + K / 16 + k0 / 32, K / 32 * 3, u,
                                                                      isc, imn, ds, dm, cb);
            *td += t1 - t0;
            *tk += cpu_now() - t1;
            continue;
        }
#endif
        const double t1 = cpu_now();
        /* gguf_ukr_avx512 reads its activations unsigned: the flipped copy after a */
        const int8_t *ak = ukr == gguf_ukr_avx512 ? a + M * K : a;
        /* and its sums as float: the copy after as */
        const int32_t *ask = ukr == gguf_ukr_avx512 ? as + M * (K / 32 * 3) : as;
#ifdef UKR_X2 /* gguf_ukr_avx512_x2: the panel twice (32 columns, cb rows of 32) */
        if (ukr == gguf_ukr_avx512) {
            const float *mn = t->has_min ? sm + (GGUF_KB / GGUF_SUB) * GGUF_NR : NULL;
            gguf_ukr_avx512_x2((int)M, t, nk / t->seg, ak + k0, K, d + k0 / GGUF_AG, K / 32,
                               ask + (t->seg == 16 ? k0 / 16 : K / 16 + k0 / 32), K / 32 * 3, u, sm, mn, u, sm, mn, cb);
        } else
#endif
        ukr((int)M, t, nk / t->seg, ak + k0, K, d + k0 / GGUF_AG, K / 32, ask + (t->seg == 16 ? k0 / 16 : K / 16 + k0 / 32),
            K / 32 * 3, u, sm, t->has_min ? sm + (GGUF_KB / GGUF_SUB) * GGUF_NR : NULL, cb);
        *td += t1 - t0;
        *tk += cpu_now() - t1;
    }
}

static int check(const type_info *ti, int64_t M, int64_t K, int extreme) {
    size_t rb;
    uint8_t *w = make_rows(ti, K, extreme, &rb);
    int8_t *a = malloc((size_t)(2 * M * K)); /* a, then a ^ 0x80 */
    float *d = malloc(sizeof(float) * (size_t)(M * (K / 32)));
    int32_t *as = malloc(sizeof(int32_t) * (size_t)(2 * M * (K / 32 * 3))); /* int, then float */
    float *c1 = calloc((size_t)(32 * M), sizeof(float)), *c2 = calloc((size_t)(16 * M), sizeof(float));
    make_act(M, K, extreme, a, d, as);
    for (int64_t i = 0; i < M * K; i++) a[M * K + i] = (int8_t)(a[i] ^ 0x80);
    for (int64_t i = 0; i < M * (K / 32 * 3); i++) {
        const float f = (float)as[i];
        memcpy(as + M * (K / 32 * 3) + i, &f, 4);
    }
    double tk, td;
    run(ti, w, rb, M, K, a, d, as, UKR, gguf_decode_panel_avx2, c1, &tk, &td);
    run(ti, w, rb, M, K, a, d, as, gguf_ukr_ref, gguf_decode_panel_ref, c2, &tk, &td);
#ifdef UKR_X2
    int bad = 0;
    for (int64_t i = 0; i < M; i++)
        bad |= memcmp(c1 + i * 32, c2 + i * 16, 64) != 0 || memcmp(c1 + i * 32 + 16, c2 + i * 16, 64) != 0;
#else
    int bad = memcmp(c1, c2, sizeof(float) * (size_t)(16 * M)) != 0;
#endif
    int blk, bytes;
    h3_gguf_type_size(ti->type, &blk, &bytes);
    static uint8_t u1[GGUF_KB * GGUF_NR], u2[GGUF_KB * GGUF_NR];
    static float s1[2 * 32 * GGUF_NR], s2[2 * 32 * GGUF_NR];
    for (int nr = 1; nr <= GGUF_NR; nr += 5) {
        const uint8_t *rows[GGUF_NR];
        for (int j = 0; j < GGUF_NR; j++) rows[j] = w + j * rb;
        memset(u1, 0xaa, sizeof u1); memset(u2, 0x55, sizeof u2);
        memset(s1, 0, sizeof s1); memset(s2, 0, sizeof s2);
        gguf_decode_panel_ref(ti->type, rows, nr, GGUF_KB, u1, s1, s1 + 32 * GGUF_NR);
        gguf_decode_panel_avx2(ti->type, rows, nr, GGUF_KB, u2, s2, s2 + 32 * GGUF_NR);
        bad |= memcmp(u1, u2, sizeof u1) != 0 || memcmp(s1, s2, sizeof s1) != 0;
    }
    free(w); free(a); free(d); free(as); free(c1); free(c2);
    return bad;
}

int main(int argc, char **argv) {
    const int64_t M = argc > 1 ? atoll(argv[1]) : 256, K = argc > 2 ? atoll(argv[2]) : 5376;
    const int reps = argc > 3 ? atoi(argv[3]) : 15;
    if (M < 1 || K < 512 || K % 256 || reps < 1) { fprintf(stderr, "M >= 1, K a multiple of 256 >= 512\n"); return 2; }
    int8_t *a = malloc((size_t)(2 * M * K)); /* a, then a ^ 0x80 */
    float *d = malloc(sizeof(float) * (size_t)(M * (K / 32)));
    int32_t *as = malloc(sizeof(int32_t) * (size_t)(2 * M * (K / 32 * 3))); /* int, then float */
    float *cb = calloc((size_t)(32 * M), sizeof(float));
    srand(1);
    make_act(M, K, 0, a, d, as);
    for (int64_t i = 0; i < M * K; i++) a[M * K + i] = (int8_t)(a[i] ^ 0x80);
    for (int64_t i = 0; i < M * (K / 32 * 3); i++) {
        const float f = (float)as[i];
        memcpy(as + M * (K / 32 * 3) + i, &f, 4);
    }
#ifdef UKR_AMX
    if (syscall(SYS_arch_prctl, 0x1023, 18)) { fprintf(stderr, "no AMX tile permission\n"); return 2; }
#endif
    printf("M %lld, K %lld, 16 columns, 1 thread, CPU time, best of %d\n", (long long)M, (long long)K, reps);
    int bad = 0;
    for (size_t i = 0; i < sizeof TYPES / sizeof TYPES[0]; i++) {
        const type_info *ti = &TYPES[i];
        size_t rb;
        uint8_t *w = make_rows(ti, K, 0, &rb);
        double bk = 1e9, bd = 1e9, bdr = 1e9;
        for (int r = 0; r < reps; r++) {
            double tk, td, tkr, tdr;
            run(ti, w, rb, M, K, a, d, as, UKR, gguf_decode_panel_avx2, cb, &tk, &td);
            run(ti, w, rb, 1, K, a, d, as, gguf_ukr_ref, gguf_decode_panel_ref, cb, &tkr, &tdr);
            if (tk < bk) bk = tk;
            if (td < bd) bd = td;
            if (tdr < bdr) bdr = tdr;
        }
        const int ok = !check(ti, 16, K, 0) && !check(ti, 16, K, 1) && !check(ti, 50, K, 0) && !check(ti, 50, K, 1);
        bad |= !ok;
        printf("%s  kernel %5.1f GOP/s   decode %.3f ms (%4.1f%% of the kernel; reference decoder %.3f ms)   %s\n",
               ti->name, X2 * 2.0 * (double)M * 16 * (double)K / bk * 1e-9, bd * 1e3, 100 * bd / bk, bdr * 1e3,
               ok ? "== ref" : "DIFFERS FROM REF");
        free(w);
    }
    free(a); free(d); free(as); free(cb);
    return bad;
}
