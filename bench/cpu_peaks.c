/* cpu_peaks.c — this CPU's arithmetic peaks, for reading GEMM/attention figures as a share
 * of what the hardware can do (the figures assumed other peaks than this machine has).
 *
 *   gcc -O2 -mavx512f -mavx512vnni -mavx512bw -mavx512bf16 bench/cpu_peaks.c -o /tmp/cpu_peaks -lpthread
 *   /tmp/cpu_peaks [threads]      (default 2)
 *
 * Register-only loops of 12 independent accumulators (enough to cover the latency on
 * current x86 cores): vfmadd231ps zmm (fp32 FMA), vpdpbusd zmm (int8 VNNI) and vdpbf16ps
 * zmm (bf16 pairs summed in fp32), after a warm-up run so the clocks have settled.  Prints
 * GFLOP/s (2 per multiply-add lane) and GOP/s (2 per int8 multiply-add). */
#include <immintrin.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <time.h>

static const long N = 1200000000L; /* instructions per thread */
static int kind;                   /* 0: FMA, 1: VNNI */

static double now(void) {
    struct timespec t;
    clock_gettime(CLOCK_MONOTONIC, &t);
    return t.tv_sec + t.tv_nsec * 1e-9;
}

#define ACC12(X) X(0) X(1) X(2) X(3) X(4) X(5) X(6) X(7) X(8) X(9) X(10) X(11)

static void *run(void *out) {
    if (kind == 0) {
        __m512 w = _mm512_set1_ps(0.999f), x = _mm512_set1_ps(0.001f);
#define DECL(i) __m512 a##i = _mm512_set1_ps(1.0f);
        ACC12(DECL)
        for (long i = 0; i < N / 12; i++) {
#define FMA(i) __asm__ volatile("vfmadd231ps %2, %1, %0" : "+v"(a##i) : "v"(w), "v"(x));
            ACC12(FMA)
        }
#define SUMF(i) + _mm512_reduce_add_ps(a##i)
        *(double *)out = 0 ACC12(SUMF);
    } else if (kind == 2) {
        __m512i w = _mm512_set1_epi32(0x3f803f80), x = _mm512_set1_epi32(0x3a833a83); /* bf16 pairs */
#define DECLB(i) __m512 c##i = _mm512_set1_ps(1.0f);
        ACC12(DECLB)
        for (long i = 0; i < N / 12; i++) {
#define DPB(i) __asm__ volatile("vdpbf16ps %2, %1, %0" : "+v"(c##i) : "v"(w), "v"(x));
            ACC12(DPB)
        }
#define SUMB(i) + _mm512_reduce_add_ps(c##i)
        *(double *)out = 0 ACC12(SUMB);
    } else {
        __m512i w = _mm512_set1_epi32(0x01010101), x = _mm512_set1_epi32(0x02020202);
#define DECLI(i) __m512i b##i = _mm512_set1_epi32(1);
        ACC12(DECLI)
        for (long i = 0; i < N / 12; i++) {
#define DOT(i) __asm__ volatile("vpdpbusd %2, %1, %0" : "+v"(b##i) : "v"(w), "v"(x));
            ACC12(DOT)
        }
#define SUMI(i) + (double)_mm512_reduce_add_epi32(b##i)
        *(double *)out = 0 ACC12(SUMI);
    }
    return NULL;
}

int main(int argc, char **argv) {
    int T = argc > 1 ? atoi(argv[1]) : 2;
    if (T < 1 || T > 256) T = 2;
    pthread_t *th = malloc(sizeof *th * T);
    double *res = malloc(sizeof *res * T);
    for (kind = 0; kind < 3; kind++) {
        run(res); /* warm-up: let the clocks settle */
        double t0 = now();
        for (int i = 0; i < T; i++) pthread_create(&th[i], NULL, run, &res[i]);
        for (int i = 0; i < T; i++) pthread_join(th[i], NULL);
        double dt = now() - t0;
        static const char *names[3] = {"fp32 FMA (vfmadd231ps zmm)", "int8 VNNI (vpdpbusd zmm)",
                                       "bf16 pairs (vdpbf16ps zmm)"};
        static const int lanes[3] = {16, 64, 32}; /* multiply-adds per instruction */
        double ops = (double)T * N * lanes[kind] * 2;
        printf("%-28s %d threads: %8.1f %s\n", names[kind], T, ops / dt / 1e9, kind == 1 ? "GOP/s" : "GFLOP/s");
    }
    free(th);
    free(res);
    return 0;
}
