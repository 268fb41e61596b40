/* tests/c/amx_emul/immintrin.h — a plain-C stand-in for the few AVX-512 and AMX intrinsics
 * csrc/gguf_amx.c uses, so that its bookkeeping (tile configuration, tile addressing in the
 * activations and the panel, the two-buffer pipeline, the fold's float order, partial row
 * groups and odd segment counts) can be checked on any machine against the scalar definition
 * (tests/c/test_gguf_amx_emul.c, run by tests/test_gguf_amx_emulated.py).  Put first on the
 * include path instead of the compiler's immintrin.h.
 *
 * The tile operations follow Intel's pseudo-code (SDM, "Intel AMX instruction set
 * reference"): TILELOADD reads rows x colsb bytes at the stride and zeroes the rest of the
 * tile; TDPBSSD checks the shapes (A rows = C rows, A colsb = 4 * B rows, B colsb = C colsb)
 * and adds the int32 dot of each signed A quad with the signed B column quad; TILESTORED
 * writes rows x colsb bytes.  A shape mismatch or an unconfigured tile aborts (the hardware
 * raises #UD).  The vector operations are lane loops with C's single-rounding float ops
 * (fmaf for the FMA), which is what the instructions compute in the default MXCSR. */
#ifndef AMX_EMUL_IMMINTRIN_H
#define AMX_EMUL_IMMINTRIN_H

#include <math.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

typedef struct { float f[16]; } __m512;
typedef union { int32_t i[16]; int16_t w[32]; int8_t b[64]; } __m512i;
typedef struct { uint8_t b[16]; } __m128i;
typedef uint16_t __mmask16;
typedef struct { uint16_t w[16]; } __m256i; /* only as 16 float16 lanes (gguf_q8d_amx.c's scales) */
float h3_f16_to_f32(uint16_t h); /* the stubs' exact binary16 -> float */

static inline __m512 _mm512_loadu_ps(const void *p) { __m512 v; memcpy(&v, p, 64); return v; }
static inline void _mm512_storeu_ps(void *p, __m512 v) { memcpy(p, &v, 64); }
static inline __m512 _mm512_load_ps(const void *p) {
    if ((uintptr_t)p % 64) { fprintf(stderr, "emul: unaligned _mm512_load_ps\n"); abort(); }
    __m512 v; memcpy(&v, p, 64); return v;
}
static inline __m512 _mm512_setzero_ps(void) { __m512 v; memset(&v, 0, 64); return v; }
static inline void _mm512_store_ps(void *p, __m512 v) {
    if ((uintptr_t)p % 64) { fprintf(stderr, "emul: unaligned _mm512_store_ps\n"); abort(); }
    memcpy(p, &v, 64);
}
static inline __m512i _mm512_loadu_si512(const void *p) { __m512i v; memcpy(&v, p, 64); return v; }
static inline __m512i _mm512_load_si512(const void *p) {
    if ((uintptr_t)p % 64) { fprintf(stderr, "emul: unaligned _mm512_load_si512\n"); abort(); }
    return _mm512_loadu_si512(p);
}
static inline void _mm512_store_si512(void *p, __m512i v) {
    if ((uintptr_t)p % 64) { fprintf(stderr, "emul: unaligned _mm512_store_si512\n"); abort(); }
    memcpy(p, &v, 64);
}
static inline __m512i _mm512_maskz_loadu_epi32(__mmask16 k, const void *p) {
    __m512i v;
    for (int l = 0; l < 16; l++) {
        v.i[l] = 0;
        if (k >> l & 1) memcpy(&v.i[l], (const char *)p + 4 * l, 4); /* masked lanes are not read */
    }
    return v;
}
/* gguf_q8d_amx.c's scale gather: 16 int32 from base + idx[l] * scale bytes, their low 16 bits,
 * float16 -> float */
static inline __m512i _mm512_setr_epi32(int e0, int e1, int e2, int e3, int e4, int e5, int e6, int e7, int e8,
                                        int e9, int e10, int e11, int e12, int e13, int e14, int e15) {
    const int e[16] = {e0, e1, e2, e3, e4, e5, e6, e7, e8, e9, e10, e11, e12, e13, e14, e15};
    __m512i v;
    for (int l = 0; l < 16; l++) v.i[l] = e[l];
    return v;
}
static inline __m512i _mm512_i32gather_epi32(__m512i idx, const void *base, int scale) {
    __m512i v;
    for (int l = 0; l < 16; l++) memcpy(&v.i[l], (const char *)base + (int64_t)idx.i[l] * scale, 4);
    return v;
}
/* the lanes of k read base + idx * scale (scale 1, 2, 4 or 8, as the instruction allows); the
 * others keep src and read nothing (the caller's masked-off rows may lie past the buffer) */
static inline __m512 _mm512_mask_i32gather_ps(__m512 src, __mmask16 k, __m512i idx, const void *base, int scale) {
    if (scale != 1 && scale != 2 && scale != 4 && scale != 8) { fprintf(stderr, "gather scale %d\n", scale); abort(); }
    __m512 v = src;
    for (int l = 0; l < 16; l++)
        if (k >> l & 1) memcpy(&v.f[l], (const char *)base + (int64_t)idx.i[l] * scale, 4);
    return v;
}
static inline __m256i _mm512_cvtepi32_epi16(__m512i a) {
    __m256i v;
    for (int l = 0; l < 16; l++) v.w[l] = (uint16_t)a.i[l];
    return v;
}
static inline __m512 _mm512_cvtph_ps(__m256i a) {
    __m512 v;
    for (int l = 0; l < 16; l++) v.f[l] = h3_f16_to_f32(a.w[l]);
    return v;
}
/* masked float lanes (gguf_q8d_amx.c's last row tile): masked lanes neither read nor written */
static inline __m512 _mm512_maskz_loadu_ps(__mmask16 k, const void *p) {
    __m512 v;
    for (int l = 0; l < 16; l++) {
        v.f[l] = 0.0f;
        if (k >> l & 1) memcpy(&v.f[l], (const char *)p + 4 * l, 4);
    }
    return v;
}
static inline void _mm512_mask_storeu_ps(void *p, __mmask16 k, __m512 v) {
    for (int l = 0; l < 16; l++)
        if (k >> l & 1) memcpy((char *)p + 4 * l, &v.f[l], 4);
}
static inline __m512 _mm512_set1_ps(float x) { __m512 v; for (int l = 0; l < 16; l++) v.f[l] = x; return v; }
static inline __m512i _mm512_set1_epi8(char x) { __m512i v; memset(&v, x, 64); return v; }
static inline __m512i _mm512_sub_epi8(__m512i a, __m512i b) {
    for (int l = 0; l < 64; l++) a.b[l] = (int8_t)(uint8_t)((uint8_t)a.b[l] - (uint8_t)b.b[l]);
    return a;
}
/* integer lane ops gguf_kq_amx.c uses (wrapping, as the instructions) */
static inline __m512i _mm512_setzero_si512(void) { __m512i v; memset(&v, 0, 64); return v; }
static inline void _mm512_storeu_si512(void *p, __m512i v) { memcpy(p, &v, 64); }
static inline __m128i _mm_loadu_si128(const void *p) { __m128i v; memcpy(&v, p, 16); return v; }
static inline __m512i _mm512_set1_epi32(int x) { __m512i v; for (int l = 0; l < 16; l++) v.i[l] = x; return v; }
static inline __m512i _mm512_set1_epi16(short x) { __m512i v; for (int l = 0; l < 32; l++) v.w[l] = x; return v; }
static inline __m512i _mm512_cvtepu8_epi32(__m128i a) { __m512i v; for (int l = 0; l < 16; l++) v.i[l] = a.b[l]; return v; }
static inline __m512i _mm512_and_si512(__m512i a, __m512i b) { for (int l = 0; l < 16; l++) a.i[l] &= b.i[l]; return a; }
static inline __m512i _mm512_or_si512(__m512i a, __m512i b) { for (int l = 0; l < 16; l++) a.i[l] |= b.i[l]; return a; }
static inline __m512i _mm512_add_epi32(__m512i a, __m512i b) {
    for (int l = 0; l < 16; l++) a.i[l] = (int32_t)((uint32_t)a.i[l] + (uint32_t)b.i[l]);
    return a;
}
static inline __m512i _mm512_slli_epi32(__m512i a, int n) { for (int l = 0; l < 16; l++) a.i[l] = (int32_t)((uint32_t)a.i[l] << n); return a; }
static inline __m512i _mm512_srli_epi32(__m512i a, int n) { for (int l = 0; l < 16; l++) a.i[l] = (int32_t)((uint32_t)a.i[l] >> n); return a; }
static inline __m512i _mm512_slli_epi16(__m512i a, int n) { for (int l = 0; l < 32; l++) a.w[l] = (int16_t)(uint16_t)((uint16_t)a.w[l] << n); return a; }
static inline __m512i _mm512_srli_epi16(__m512i a, int n) { for (int l = 0; l < 32; l++) a.w[l] = (int16_t)(uint16_t)((uint16_t)a.w[l] >> n); return a; }
static inline __m512i _mm512_mullo_epi16(__m512i a, __m512i b) {
    for (int l = 0; l < 32; l++) a.w[l] = (int16_t)(uint16_t)((uint32_t)(uint16_t)a.w[l] * (uint16_t)b.w[l]);
    return a;
}
static inline __m512i _mm512_mullo_epi32(__m512i a, __m512i b) {
    for (int l = 0; l < 16; l++) a.i[l] = (int32_t)((uint32_t)a.i[l] * (uint32_t)b.i[l]);
    return a;
}
/* VPDPWSSD: src + the two signed 16-bit products of each lane (no saturation) */
static inline __m512i _mm512_dpwssd_epi32(__m512i src, __m512i a, __m512i b) {
    for (int l = 0; l < 16; l++)
        src.i[l] = (int32_t)((uint32_t)src.i[l] + (uint32_t)((int32_t)a.w[2 * l] * b.w[2 * l]) +
                             (uint32_t)((int32_t)a.w[2 * l + 1] * b.w[2 * l + 1]));
    return src;
}
static inline __m512 _mm512_cvtepi32_ps(__m512i a) { __m512 v; for (int l = 0; l < 16; l++) v.f[l] = (float)a.i[l]; return v; }
static inline __m512 _mm512_mul_ps(__m512 a, __m512 b) { for (int l = 0; l < 16; l++) a.f[l] *= b.f[l]; return a; }
static inline __m512 _mm512_fmadd_ps(__m512 a, __m512 b, __m512 c) {
    for (int l = 0; l < 16; l++) c.f[l] = fmaf(a.f[l], b.f[l], c.f[l]);
    return c;
}

/* ---- AMX ---------------------------------------------------------------------------- */

typedef struct { int rows, colsb; uint8_t data[16][64]; } emul_tile;
static emul_tile emul_tmm[8];
static int emul_configured;

static inline void _tile_loadconfig(const void *cfg) {
    const uint8_t *c = (const uint8_t *)cfg;
    if (c[0] != 1) { fprintf(stderr, "emul: palette %d\n", c[0]); abort(); }
    for (int t = 0; t < 8; t++) {
        uint16_t colsb;
        memcpy(&colsb, c + 16 + 2 * t, 2);
        const int rows = c[48 + t];
        if (rows > 16 || colsb > 64 || colsb % 4) { fprintf(stderr, "emul: tile %d is %dx%d\n", t, rows, colsb); abort(); }
        emul_tmm[t].rows = rows;
        emul_tmm[t].colsb = colsb;
        memset(emul_tmm[t].data, 0, sizeof emul_tmm[t].data);
    }
    emul_configured = 1;
}
static inline emul_tile *emul_get(int t) {
    if (!emul_configured || t < 0 || t > 7 || !emul_tmm[t].rows || !emul_tmm[t].colsb) {
        fprintf(stderr, "emul: tile %d used unconfigured\n", t);
        abort();
    }
    return &emul_tmm[t];
}
static inline void emul_tile_zero(int t) { memset(emul_get(t)->data, 0, sizeof emul_tmm[t].data); }
static inline void emul_tile_loadd(int t, const void *base, long stride) {
    emul_tile *x = emul_get(t);
    memset(x->data, 0, sizeof x->data);
    for (int r = 0; r < x->rows; r++) memcpy(x->data[r], (const char *)base + (long)r * stride, (size_t)x->colsb);
}
static inline void emul_tile_stored(int t, void *base, long stride) {
    emul_tile *x = emul_get(t);
    for (int r = 0; r < x->rows; r++) memcpy((char *)base + (long)r * stride, x->data[r], (size_t)x->colsb);
}
/* TDPBSSD (b_signed) or TDPBSUD (signed A, unsigned B) */
static inline void emul_tile_dpbssd(int dst, int a, int b, int b_signed) {
    emul_tile *c = emul_get(dst), *ta = emul_get(a), *tb = emul_get(b);
    if (ta->rows != c->rows || ta->colsb != 4 * tb->rows || tb->colsb != c->colsb) {
        fprintf(stderr, "emul: tdpbssd shapes C %dx%d A %dx%d B %dx%d\n", c->rows, c->colsb, ta->rows, ta->colsb,
                tb->rows, tb->colsb);
        abort();
    }
    for (int m = 0; m < c->rows; m++)
        for (int n = 0; n < c->colsb / 4; n++) {
            int32_t acc;
            memcpy(&acc, &c->data[m][4 * n], 4);
            for (int k = 0; k < ta->colsb / 4; k++)
                for (int e = 0; e < 4; e++)
                    acc += (int32_t)(int8_t)ta->data[m][4 * k + e] *
                           (b_signed ? (int32_t)(int8_t)tb->data[k][4 * n + e] : (int32_t)tb->data[k][4 * n + e]);
            memcpy(&c->data[m][4 * n], &acc, 4);
        }
}
#define _tile_zero(t) emul_tile_zero(t)
#define _tile_loadd(t, base, stride) emul_tile_loadd((t), (base), (long)(stride))
#define _tile_stored(t, base, stride) emul_tile_stored((t), (base), (long)(stride))
#define _tile_dpbssd(c, a, b) emul_tile_dpbssd((c), (a), (b), 1)
#define _tile_dpbsud(c, a, b) emul_tile_dpbssd((c), (a), (b), 0)
#define _tile_release() (emul_configured = 0)
/* a hint: no effect on results (and none may be relied on) */
#define _MM_HINT_T0 3
#define _mm_prefetch(p, hint) __builtin_prefetch((p), 0, 3)

#endif
