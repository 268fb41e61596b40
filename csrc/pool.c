/* pool.c — a small persistent pthread pool (no OpenMP: inside ComfyUI the process
 * already carries torch's OpenMP runtime, and two runtimes fight over the cores).
 *
 * h3_pool_run publishes a job by bumping `generation`; workers spin on it for a short
 * while (cheap hand-off between the many small phases of a forward pass) and then sleep
 * on a condition variable, leaving the cores to other work.  The caller is thread 0 and
 * waits until `pending` drops to zero, which is the barrier between phases. */
#include "h3_internal.h"

#include <pthread.h>
#include <stdatomic.h>
#include <stdlib.h>
#if H3_X86
#include <immintrin.h>
#define CPU_RELAX() _mm_pause()
#elif H3_ARM64
#define CPU_RELAX() __asm__ volatile("yield")
#else
#define CPU_RELAX() ((void)0)
#endif

#define SPIN_ITERS 20000 /* ~ tens of microseconds before a worker sleeps */

struct h3_pool {
    int n;
    pthread_t *threads;
    pthread_mutex_t mu;
    pthread_cond_t cv;
    _Atomic uint64_t generation;
    _Atomic int pending;
    _Atomic int stop;
    h3_task_fn fn;
    void *ctx;
    struct worker_arg { h3_pool *pool; int ith; } *args;
};

static void *worker_main(void *p) {
    struct worker_arg *wa = (struct worker_arg *)p;
    h3_pool *pool = wa->pool;
    uint64_t seen = 0;
    for (;;) {
        uint64_t g;
        int spins = 0;
        while ((g = atomic_load_explicit(&pool->generation, memory_order_acquire)) == seen) {
            if (atomic_load_explicit(&pool->stop, memory_order_acquire)) return NULL;
            if (++spins < SPIN_ITERS) { CPU_RELAX(); continue; }
            pthread_mutex_lock(&pool->mu);
            while (atomic_load(&pool->generation) == seen && !atomic_load(&pool->stop))
                pthread_cond_wait(&pool->cv, &pool->mu);
            pthread_mutex_unlock(&pool->mu);
            spins = 0;
        }
        if (atomic_load_explicit(&pool->stop, memory_order_acquire)) return NULL;
        seen = g;
        pool->fn(pool->ctx, wa->ith, pool->n);
        atomic_fetch_sub_explicit(&pool->pending, 1, memory_order_acq_rel);
    }
}

h3_status h3_pool_create(int n_threads, h3_pool **out, h3_err *err) {
    if (!out) return h3_fail(err, H3_EINVAL, "pool: NULL output pointer");
    if (n_threads < 1 || n_threads > 1024)
        return h3_fail(err, H3_EINVAL, "pool: n_threads must be in 1..1024, got %d", n_threads);
    h3_pool *p = calloc(1, sizeof *p);
    if (!p) return h3_fail(err, H3_ENOMEM, "pool: out of memory");
    p->n = n_threads;
    pthread_mutex_init(&p->mu, NULL);
    pthread_cond_init(&p->cv, NULL);
    atomic_init(&p->generation, 0);
    atomic_init(&p->pending, 0);
    atomic_init(&p->stop, 0);
    if (n_threads > 1) {
        p->threads = calloc((size_t)n_threads, sizeof *p->threads);
        p->args = calloc((size_t)n_threads, sizeof *p->args);
        if (!p->threads || !p->args) goto nomem;
        for (int i = 1; i < n_threads; i++) {
            p->args[i].pool = p;
            p->args[i].ith = i;
            if (pthread_create(&p->threads[i], NULL, worker_main, &p->args[i]) != 0) {
                p->n = i; /* join what was started */
                h3_pool_free(p);
                return h3_fail(err, H3_ENOMEM, "pool: could not start thread %d of %d", i,
                               n_threads);
            }
        }
    }
    *out = p;
    return H3_OK;
nomem:
    free(p->threads);
    free(p->args);
    free(p);
    return h3_fail(err, H3_ENOMEM, "pool: out of memory");
}

void h3_pool_free(h3_pool *p) {
    if (!p) return;
    if (p->n > 1 && p->threads) {
        pthread_mutex_lock(&p->mu);
        atomic_store(&p->stop, 1);
        pthread_cond_broadcast(&p->cv);
        pthread_mutex_unlock(&p->mu);
        for (int i = 1; i < p->n; i++) pthread_join(p->threads[i], NULL);
    }
    pthread_cond_destroy(&p->cv);
    pthread_mutex_destroy(&p->mu);
    free(p->threads);
    free(p->args);
    free(p);
}

int h3_pool_threads(const h3_pool *p) { return p ? p->n : 1; }

void h3_pool_run(h3_pool *p, h3_task_fn fn, void *ctx) {
    if (!p || p->n == 1) {
        fn(ctx, 0, 1);
        return;
    }
    p->fn = fn;
    p->ctx = ctx;
    atomic_store_explicit(&p->pending, p->n - 1, memory_order_release);
    pthread_mutex_lock(&p->mu);
    atomic_fetch_add_explicit(&p->generation, 1, memory_order_acq_rel);
    pthread_cond_broadcast(&p->cv);
    pthread_mutex_unlock(&p->mu);
    fn(ctx, 0, p->n);
    while (atomic_load_explicit(&p->pending, memory_order_acquire) > 0) CPU_RELAX();
}
