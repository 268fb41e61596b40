/* h3_internal.h — helpers shared by the C files of the kernel library (not for pyx/). */
#ifndef H3_INTERNAL_H
#define H3_INTERNAL_H

#include "h3.h"
#include <math.h>
#include <stdarg.h>
#include <string.h>

#if defined(__x86_64__) || defined(_M_X64)
#define H3_X86 1
#else
#define H3_X86 0
#endif
#if defined(__aarch64__)
#define H3_ARM64 1
#else
#define H3_ARM64 0
#endif

/* A kernel family's table for a path (AMX takes AVX-512's: h3_isa_vector): the per-ISA
 * tables are named with H3_ON_X86 / H3_ON_ARM64, which are NULL in a build for the other
 * architecture, where those tables do not exist; a path without a table gives NULL. */
#if H3_X86
#define H3_ON_X86(p) (p)
#else
#define H3_ON_X86(p) NULL
#endif
#if H3_ARM64
#define H3_ON_ARM64(p) (p)
#else
#define H3_ON_ARM64(p) NULL
#endif
static inline const void *h3_isa_table(h3_isa isa, const void *ref, const void *avx2, const void *avx512,
                                       const void *neon) {
    switch (h3_isa_vector(isa)) {
    case H3_ISA_REF: return ref;
    case H3_ISA_AVX2: return avx2;
    case H3_ISA_AVX512: return avx512;
    case H3_ISA_NEON: return neon;
    default: return NULL;
    }
}

/* Whether a path runs on x86 vector code (AVX2, AVX-512, AVX-VNNI, AMX: every one has
 * AVX2, so a routine with only an AVX2 body serves them all); 0 in an ARM build.  For the
 * selectors that pick one function for a path (gguf_quant_for and the like):
 *     return h3_isa_x86_simd(isa) ? H3_ON_X86(f_avx2) : f_ref; */
static inline int h3_isa_x86_simd(h3_isa isa) {
    const h3_isa v = h3_isa_vector(isa);
    return H3_X86 && (v == H3_ISA_AVX2 || v == H3_ISA_AVX512);
}

#define H3_MIN(a, b) ((a) < (b) ? (a) : (b))
#define H3_MAX(a, b) ((a) > (b) ? (a) : (b))
#define H3_CEIL_DIV(a, b) (((a) + (b) - 1) / (b))
#define H3_ALIGN_UP(a, b) (H3_CEIL_DIV(a, b) * (b))

/* Fill err (if non-NULL) and return code.  printf-style message. */
h3_status h3_fail(h3_err *err, h3_status code, const char *fmt, ...)
#if defined(__GNUC__)
    __attribute__((format(printf, 3, 4)))
#endif
    ;

/* 64-byte aligned allocation; NULL on failure or overflow.  Free with h3_free. */
void *h3_alloc(size_t bytes);
/* As h3_alloc, but from 4 MB up 2 MB-aligned and marked for transparent huge pages
 * (Linux): for weights and large workspaces that are streamed through.  With 4 KB pages
 * the hardware prefetchers stop at every page boundary; one core of the 2-core Zen 4 VM
 * streamed 26-28 GB/s from 4 KB pages and 28-31 GB/s from huge pages (one noisy run:
 * 18.6 against 29.3).  A linear created with small_pages (h3_linear_opts; the A/B switch
 * H3CY_HUGEPAGES=0) calls h3_alloc instead.  Free with h3_free. */
void *h3_alloc_large(size_t bytes);
void h3_free(void *p);
/* A call's workspace: the caller's *ws of *ws_bytes (at least need bytes and 64-byte
 * aligned, else H3_EINVAL), or, when *ws is NULL, need bytes allocated here (H3_ENOMEM;
 * *ws_bytes becomes need), also put in *own for h3_free after the call (*own is NULL
 * otherwise).  who names the call. */
h3_status h3_workspace(void **ws, size_t *ws_bytes, size_t need, void **own, const char *who, h3_err *err);

/* Workspace carving: take `bytes` (rounded up to 64) from a bump pointer. */
typedef struct { char *base; size_t used, cap; } h3_arena;
static inline void *h3_arena_take(h3_arena *a, size_t bytes) {
    size_t b = (bytes + 63u) & ~(size_t)63u;
    if (a->used + b > a->cap) return 0;
    void *p = a->base + a->used;
    a->used += b;
    return p;
}

/* Scalar number-format helpers (exact, round-to-nearest-even like torch). */
static inline float h3_bf16_to_f32(uint16_t h) {
    union { uint32_t u; float f; } v;
    v.u = (uint32_t)h << 16;
    return v.f;
}
static inline uint16_t h3_f32_to_bf16(float f) {
    union { uint32_t u; float f; } v;
    v.f = f;
    if ((v.u & 0x7fffffffu) > 0x7f800000u) return (uint16_t)((v.u >> 16) | 0x40u); /* quiet NaN */
    uint32_t lsb = (v.u >> 16) & 1u;
    return (uint16_t)((v.u + 0x7fffu + lsb) >> 16);
}
float h3_f16_to_f32(uint16_t h);
uint16_t h3_f32_to_f16(float f);
/* x rounded to the nearest bf16 (ties to even), returned widened: one bf16 op's output */
static inline float h3_round_to_bf16(float x) { return h3_bf16_to_f32(h3_f32_to_bf16(x)); }

/* The scalar RMSNorm over rows of n (elem_ref.c; qwen_elem.c with bf16), x, out: [rows, n]:
 *   inv = 1 / sqrt(mean(x^2) + eps), the sum of squares accumulated in double (the exact
 *   value rounded once, which torch's vectorised float reduction lands within a few ulp of);
 *   float32 (torch):        out = x * inv * w       (w NULL: no weight);
 *   bf16 (transformers):    out = bf16(w * bf16(x * inv))   (w required). */
static inline void h3_rmsnorm_rows_ref(const float *x, const float *w, float *out, int64_t rows, int64_t n,
                                       float eps, const int bf16) {
    for (int64_t r = 0; r < rows; r++) {
        const float *xr = x + r * n;
        float *orow = out + r * n;
        double acc = 0.0;
        for (int64_t j = 0; j < n; j++) acc += (double)xr[j] * (double)xr[j];
        float ms = (float)(acc / (double)n);
        float inv = 1.0f / sqrtf(ms + eps);
        for (int64_t j = 0; j < n; j++) {
            float v = xr[j] * inv;
            if (bf16) orow[j] = h3_round_to_bf16(w[j] * h3_round_to_bf16(v));
            else orow[j] = w ? v * w[j] : v;
        }
    }
}

/* Optional instructions a path's kernels use when present (cpu.c: every CPU feature check
 * of the library is made there, once). */
int h3_cpu_has_avx512_bf16(void);   /* VDPBF16PS */
int h3_cpu_has_avx512_vnni(void);   /* VPDPBUSD */
int h3_cpu_has_neon_dotprod(void);  /* SDOT/UDOT (ARMv8.2 asimddp; Linux only, else 0) */
int h3_cpu_has_neon_i8mm(void);     /* SMMLA (HWCAP2_I8MM; Linux only, else 0) */
int h3_cpu_has_neon_bf16(void);     /* BFMMLA/BFDOT (HWCAP2_BF16; Linux only, else 0) */

/* n floats of one conv tap.  BigVGAN's late stages have 8-32 channels, where a memcpy
 * call per tap costs more than the copy: those sizes are copied inline. */
static inline void h3_copy_tap(float *dst, const float *src, int64_t n) {
    switch (n) {
    case 8: memcpy(dst, src, 8 * 4); return;
    case 16: memcpy(dst, src, 16 * 4); return;
    case 32: memcpy(dst, src, 32 * 4); return;
    default: memcpy(dst, src, (size_t)n * 4);
    }
}

/* A Conv1d's im2col rows, read in place by the GEMM (conv.c -> gemm.c): row m of A
 * (K = k*Cin, tap-major) is x[(r0 + m + j*dil - pad) * Cin + ci] for tap j, channel ci,
 * zero where that step lies outside [0, T).  The packed A panels hold the same values an
 * im2col buffer would give, so results are the same bits without the buffer. */
typedef struct {
    const float *x;
    int64_t T, Cin, r0;
    int k, dil, pad;
} h3_conv_rows;
size_t h3_linear_rows_workspace_bytes(const h3_linear *l, int64_t M, int nth, const h3_epilogue *epi);
h3_status h3_linear_forward_rows(const h3_linear *l, h3_pool *pool, const h3_conv_rows *a, int64_t M,
                                 float *y, const h3_epilogue *epi, void *ws, size_t ws_bytes,
                                 h3_err *err);

#endif /* H3_INTERNAL_H */
