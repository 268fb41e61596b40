/* Read bandwidth: T = 1, 2, 4, 8, 16 threads each streaming its slice of a 1 GB buffer with
 * AVX-512 loads (best of 4); HUGE=1 marks the buffer for transparent huge pages.  Tells
 * whether a GEMM at small M is bound by memory (compare its weight bytes per second).
 *
 *     gcc -O2 -mavx512f bench/read_bandwidth.c -o /tmp/read_bandwidth -lpthread
 *     /tmp/read_bandwidth; HUGE=1 /tmp/read_bandwidth
 */
#define _GNU_SOURCE
#include <immintrin.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <time.h>

static double now(void) {
    struct timespec t;
    clock_gettime(CLOCK_MONOTONIC, &t);
    return t.tv_sec + t.tv_nsec * 1e-9;
}

static char *buf;
static size_t per;
static volatile int sink[64]; /* keeps the loads alive */

static void *reader(void *arg) {
    const long i = (long)arg;
    const char *p = buf + i * per;
    __m512i s = _mm512_setzero_si512();
    for (size_t o = 0; o < per; o += 64) s = _mm512_add_epi32(s, _mm512_load_si512(p + o));
    sink[i] = _mm512_reduce_add_epi32(s);
    return NULL;
}

int main(void) {
    const size_t n = (size_t)1 << 30;
    if (posix_memalign((void **)&buf, (size_t)2 << 20, n)) return 1;
    if (getenv("HUGE")) madvise(buf, n, MADV_HUGEPAGE);
    memset(buf, 1, n);
    const int counts[] = {1, 2, 4, 8, 16};
    for (int k = 0; k < 5; k++) {
        const int T = counts[k];
        per = n / T;
        double best = 1e9;
        for (int r = 0; r < 4; r++) {
            pthread_t th[16];
            double t = now();
            for (long i = 0; i < T; i++) pthread_create(&th[i], NULL, reader, (void *)i);
            for (int i = 0; i < T; i++) pthread_join(th[i], NULL);
            t = now() - t;
            if (t < best) best = t;
        }
        printf("%s threads=%2d read %.1f GB/s\n", getenv("HUGE") ? "huge" : "4k  ", T, n / best * 1e-9);
    }
    return 0;
}
