/* cpu_peaks_avx2.c — this CPU's 256-bit peaks, for reading the avx2 / avxvnni GEMM figures
 * as a share of what the hardware can do (cpu_peaks.c is the AVX-512 twin).
 *
 *   gcc -O2 -mavx2 -mfma -mavxvnni bench/cpu_peaks_avx2.c -o /tmp/cpu_peaks_avx2 -lpthread
 *   /tmp/cpu_peaks_avx2 [threads]      (default 1)
 *
 * Each line times 12 independent register chains of one instruction mix in inline asm (so
 * the compiler can neither hoist nor fuse them), after a warm-up, and prints the mix's
 * rate in instructions and in operations (2 per multiply-add):
 *   fma        vfmadd231ps ymm                        8 MACs
 *   maddubs    vpmaddubsw ymm                         32 MACs (int16 pair sums)
 *   maddwd     vpmaddwd ymm                           16 MACs
 *   i8-exact   vpsignb + vpmaddubsw + vpmaddwd + vpaddd: the avx2 path's exact int8 step,
 *              32 MACs (the |a| of the broadcast row is shared by the row's vectors and
 *              left out)
 *   i4         vpmaddubsw + vpmaddwd + vpaddd: the avx2 int4 step (no sign fix-up)
 *   dpbusd     vpdpbusd ymm (AVX-VNNI, only where the CPU has it)   32 MACs
 * The int8 GEMM's bound on this CPU is the i8-exact line; against fma it says how much
 * faster than fp32 an exact vpmaddubsw int8 GEMM can be here. */
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <time.h>

static double now(void) {
    struct timespec t;
    clock_gettime(CLOCK_MONOTONIC, &t);
    return t.tv_sec + t.tv_nsec * 1e-9;
}

#define CLOB "xmm0", "xmm1", "xmm2", "xmm3", "xmm4", "xmm5", "xmm6", "xmm7", "xmm8", "xmm9", "xmm10", "xmm11", \
             "xmm12", "xmm13", "xmm14", "xmm15"
/* 12 chains: op src, src2, acc_i */
#define X12(op) \
    op " %%ymm14,%%ymm15,%%ymm0\n\t" op " %%ymm14,%%ymm15,%%ymm1\n\t" op " %%ymm14,%%ymm15,%%ymm2\n\t" \
    op " %%ymm14,%%ymm15,%%ymm3\n\t" op " %%ymm14,%%ymm15,%%ymm4\n\t" op " %%ymm14,%%ymm15,%%ymm5\n\t" \
    op " %%ymm14,%%ymm15,%%ymm6\n\t" op " %%ymm14,%%ymm15,%%ymm7\n\t" op " %%ymm14,%%ymm15,%%ymm8\n\t" \
    op " %%ymm14,%%ymm15,%%ymm9\n\t" op " %%ymm14,%%ymm15,%%ymm10\n\t" op " %%ymm14,%%ymm15,%%ymm11\n\t"
/* 4 chains of the exact int8 step: t = sign(w, a); t = maddubs(|a|, t); t = madd(t, 1); acc += t.
 * Registers: ymm13 = |a|, ymm14 = w, ymm15 = a, ymm12 = ones; temps ymm4..ymm7, accs ymm0..ymm3 */
#define I8STEP(t, acc)                                                                   \
    "vpsignb %%ymm15,%%ymm14,%%ymm" #t "\n\t"                                             \
    "vpmaddubsw %%ymm" #t ",%%ymm13,%%ymm" #t "\n\t"                                      \
    "vpmaddwd %%ymm12,%%ymm" #t ",%%ymm" #t "\n\t"                                        \
    "vpaddd %%ymm" #t ",%%ymm" #acc ",%%ymm" #acc "\n\t"
#define I4STEP(t, acc)                                                                   \
    "vpmaddubsw %%ymm15,%%ymm14,%%ymm" #t "\n\t"                                          \
    "vpmaddwd %%ymm12,%%ymm" #t ",%%ymm" #t "\n\t"                                        \
    "vpaddd %%ymm" #t ",%%ymm" #acc ",%%ymm" #acc "\n\t"

static const long N = 40000000L; /* loop iterations per thread */
static int kind;
typedef struct { double instr_per_iter, macs_per_iter; const char *name; } mix;
static const mix mixes[] = {
    {12, 12 * 8, "fma (vfmadd231ps ymm)"},  {12, 12 * 32, "maddubs (vpmaddubsw ymm)"},
    {12, 12 * 16, "maddwd (vpmaddwd ymm)"}, {16, 4 * 32, "i8-exact (sign+maddubs+maddwd+add)"},
    {12, 4 * 32, "i4 (maddubs+maddwd+add)"}, {12, 12 * 32, "dpbusd (vpdpbusd ymm, AVX-VNNI)"}};

static void *run(void *unused) {
    (void)unused;
    for (long k = 0; k < N; k++) {
        switch (kind) {
        case 0: __asm__ volatile("vpxor %%ymm14,%%ymm14,%%ymm14\n\t" X12("vfmadd231ps") ::: CLOB); break;
        case 1: __asm__ volatile(X12("vpmaddubsw") ::: CLOB); break;
        case 2: __asm__ volatile(X12("vpmaddwd") ::: CLOB); break;
        case 3:
            __asm__ volatile(I8STEP(4, 0) I8STEP(5, 1) I8STEP(6, 2) I8STEP(7, 3) ::: CLOB);
            break;
        case 4: __asm__ volatile(I4STEP(4, 0) I4STEP(5, 1) I4STEP(6, 2) I4STEP(7, 3) ::: CLOB); break;
#if defined(__AVXVNNI__)
        case 5: __asm__ volatile(X12("%{vex%} vpdpbusd") ::: CLOB); break;
#endif
        }
    }
    return NULL;
}

int main(int argc, char **argv) {
    int nth = argc > 1 ? atoi(argv[1]) : 1;
    if (nth < 1 || nth > 256) nth = 1;
    pthread_t th[256];
    __builtin_cpu_init();
    int has_vnni = 0;
#if defined(__AVXVNNI__)
    has_vnni = __builtin_cpu_supports("avxvnni");
#endif
    printf("threads %d\n", nth);
    for (kind = 0; kind < 6; kind++) {
        if (kind == 5 && !has_vnni) {
            printf("%-40s not on this CPU (or not built with -mavxvnni)\n", mixes[5].name);
            continue;
        }
        for (int rep = 0; rep < 2; rep++) { /* the first pass warms the clocks up */
            double t = now();
            for (int i = 0; i < nth; i++) pthread_create(&th[i], NULL, run, NULL);
            for (int i = 0; i < nth; i++) pthread_join(th[i], NULL);
            t = now() - t;
            if (rep) {
                double ips = N * mixes[kind].instr_per_iter * nth / t; /* the mix's instructions */
                double ops = 2.0 * N * mixes[kind].macs_per_iter * nth / t;
                printf("%-40s %7.2f G instr/s  %8.1f GOP/s\n", mixes[kind].name, ips / 1e9, ops / 1e9);
            }
        }
    }
    return 0;
}
