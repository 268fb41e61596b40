/* port_mix.h — the timing loop bench/avx2_port_mix.c and bench/avx512_port_mix.c share:
 * PORT_MIX_TIME(best, reps, body) sets best to the seconds one pass of the inline-asm block
 * `body` takes, the best of `reps` runs of 20 million passes each, in the process's CPU time
 * (the 2-core box is shared: wall time is noise there).  The including file defines CLOB
 * (the registers its blocks write) and `buf` (what %0 points at) first. */
#ifndef H3_BENCH_PORT_MIX_H
#define H3_BENCH_PORT_MIX_H

#include <time.h>

static double cpu_now(void) {
    struct timespec t;
    clock_gettime(CLOCK_PROCESS_CPUTIME_ID, &t);
    return t.tv_sec + t.tv_nsec * 1e-9;
}

#define PORT_MIX_TIME(best, reps, body)                                                  \
    do {                                                                                 \
        const long n_ = 20000000;                                                        \
        best = 1e9;                                                                      \
        for (int rep_ = 0; rep_ < (reps); rep_++) {                                      \
            double t_ = cpu_now();                                                       \
            for (long k_ = 0; k_ < n_; k_++) __asm__ volatile(body ::"r"(buf) : CLOB);   \
            t_ = (cpu_now() - t_) / n_;                                                  \
            if (t_ < best) best = t_;                                                    \
        }                                                                                \
    } while (0)

#endif
