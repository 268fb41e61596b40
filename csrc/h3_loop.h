/* h3_loop.h — host-side pieces of the denoising loop (csrc/loop.c): latent packing, the
 * Euler update, velocity extrapolation, the final-layer modulation, a monotonic clock and
 * a cancel flag.  The Cython driver (pyx/_loop.pxi) calls these without the GIL.
 *
 * All arithmetic is float32 with every operation rounded separately (-ffp-contract=off),
 * as numpy and diffusers compute it, so the loop's results equal h3cy's numpy loop bit for
 * bit.  Hot-loop functions return void: the driver checks shapes once before the loop. */
#ifndef H3_LOOP_H
#define H3_LOOP_H

#include "h3.h"

#ifdef __cplusplus
extern "C" {
#endif

/* Video latent lat: [C, T, h, w] (h, w even) -> patch rows: [T*(h/2)*(w/2), 4C], row
 * (f, py, px) frame-major, column c*4 + dy*2 + dx holds lat[c, f, 2py+dy, 2px+dx]. */
void h3_patchify(const float *lat, int64_t C, int64_t T, int64_t h, int64_t w, float *rows);
/* The inverse: rows [T*(h/2)*(w/2), 4C] -> lat [C, T, h, w]. */
void h3_unpatchify(const float *rows, int64_t C, int64_t T, int64_t h, int64_t w, float *lat);

/* Audio latent lat: [ch, Ca, A] -> rows [ch*A, Ca]: rows[k*A + j][c] = lat[k, c, j]. */
void h3_pack_audio(const float *lat, int64_t ch, int64_t Ca, int64_t A, float *rows);
/* The inverse: rows [ch*A, Ca] -> lat [ch, Ca, A]. */
void h3_unpack_audio(const float *rows, int64_t ch, int64_t Ca, int64_t A, float *lat);

/* One Euler step of diffusers' MiniMaxH3Scheduler for x, v, x0: [outer, frames, inner],
 * frame f with timestep t[f] and sigmas sigma[f] -> sigma_next[f]:
 *   x0 = fl(x + fl(fl(1 - t) * v))                    (written to x0)
 *   r = fl(sigma_next / sigma);  x = fl(fl(r * x) + fl(fl(1 - r) * x0))   (x in place)
 * A uniform schedule passes frames = 1 (or equal values for every frame). */
void h3_euler_update(float *x, const float *v, float *x0, int64_t outer, int64_t frames,
                     int64_t inner, const float *t, const float *sigma, const float *sigma_next);

/* reuse=N velocity extrapolation: out = fl(last + fl(r * fl(last - prev))), all [n]. */
void h3_extrapolate(const float *last, const float *prev, float r, float *out, int64_t n);

/* Final-layer AdaLN: x[i] = x[i] * s1p[rows[i]] + shift[rows[i]], x: [n_rows, n],
 * s1p/shift: [table_rows, n] (s1p holds 1 + scale).  round_bf16: each of the two ops is
 * rounded to bf16 (diffusers in bf16). */
void h3_modulate_rows(float *x, const float *s1p, const float *shift, const int32_t *rows,
                      int64_t n_rows, int64_t n, int round_bf16);

/* Seconds of CLOCK_MONOTONIC (the clock of Python's time.monotonic on Linux). */
double h3_monotonic(void);

/* A cancel flag set from any thread (CancelToken.cancel) and polled by the loop. */
static inline int h3_flag_get(const int *f) { return __atomic_load_n(f, __ATOMIC_ACQUIRE); }
static inline void h3_flag_set(int *f, int v) { __atomic_store_n(f, v, __ATOMIC_RELEASE); }

/* Page advice for memory-mapped weights (streaming DiTs in the loop): madvise the pages
 * covering [p, p + n) (start rounded down, end up to whole pages).  advice: H3_PAGES_WILLNEED
 * (start reading them in now) or H3_PAGES_DONTNEED (drop them from this process's resident
 * set; for a file mapping the page cache keeps them while memory allows, so a re-read is a
 * minor fault).  Linux/POSIX madvise; a no-op where that is missing.  Advice is a hint:
 * failures are ignored, results never depend on it — for read-only file mappings only
 * (h3cy maps checkpoints and weight caches ACCESS_READ): on anonymous or privately
 * written memory DONTNEED would discard the data. */
enum { H3_PAGES_WILLNEED = 1, H3_PAGES_DONTNEED = 2 };
void h3_pages_advise(const void *p, size_t n, int advice);

#ifdef __cplusplus
}
#endif
#endif
