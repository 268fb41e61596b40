/* gguf_panel_ref.c — the GGUF GEMM's reference pieces (gguf_impl.h has the arithmetic every
 * path shares): how each type runs (segment, offset), the activation quantiser, the panel
 * decoder (once per 16 weight rows, K block and PN_MC rows of x; run by the paths without a
 * SIMD one: gguf_decode_avx2.c has x86's for the main types, byte for byte this one's) and the scalar micro-kernel, the definition the SIMD ones equal
 * bit for bit. */
#include "gguf_impl.h"

#include <math.h>
#include <string.h>

/* seg: the scales' granularity (Q8_0, Q4_x, Q5_x, Q4_K and Q5_K have one scale per 32:
 * half the float steps of a 16-value segment).  g16: k-quads of pair sums that fit int16
 * (g16 * 2 * umax * 127 <= 32767). */
static const gguf_kind kinds[] = {
    [H3_GGUF_Q8_0] = {32, 128, 255, 0, 0}, [H3_GGUF_Q4_0] = {32, 8, 15, 8, 0}, [H3_GGUF_Q4_1] = {32, 0, 15, 8, 1},
    [H3_GGUF_Q5_0] = {32, 16, 31, 4, 0},   [H3_GGUF_Q5_1] = {32, 0, 31, 4, 1}, [H3_GGUF_Q2_K] = {16, 0, 3, 4, 1},
    [H3_GGUF_Q3_K] = {16, 4, 7, 4, 0},     [H3_GGUF_Q4_K] = {32, 0, 15, 8, 1}, [H3_GGUF_Q5_K] = {32, 0, 31, 4, 1},
    [H3_GGUF_Q6_K] = {16, 32, 63, 2, 0},
    /* the IQ4 levels span -127..113: full int8, Q8_0's route */
    [H3_GGUF_IQ4_NL] = {32, 128, 255, 0, 0}, [H3_GGUF_IQ4_XS] = {32, 128, 255, 0, 0},
};

const gguf_kind *gguf_kind_of(int type) {
    if (type < 0 || type >= (int)(sizeof kinds / sizeof kinds[0]) || !kinds[type].seg) return NULL;
    return &kinds[type];
}

void gguf_quant_act_row_ref(const float *x, int64_t K, int8_t *a, float *d, int32_t *as) {
    for (int64_t g0 = 0; g0 < K; g0 += GGUF_AG) {
        const int64_t n = H3_MIN((int64_t)GGUF_AG, K - g0);
        float amax = 0.0f;
        for (int64_t i = 0; i < n; i++) amax = fmaxf(amax, fabsf(x[g0 + i]));
        const float s = amax / 127.0f;
        d[g0 / GGUF_AG] = s;
        for (int64_t i = 0; i < n; i++) {
            int v = s > 0.0f ? (int)nearbyintf(x[g0 + i] / s) : 0;
            v = v > 127 ? 127 : (v < -127 ? -127 : v);
            a[g0 + i] = (int8_t)v;
        }
    }
    for (int64_t b = 0; b < K / 32; b++) {
        int32_t s0 = 0, s1 = 0;
        for (int i = 0; i < 16; i++) {
            s0 += a[b * 32 + i];
            s1 += a[b * 32 + 16 + i];
        }
        as[2 * b] = s0;
        as[2 * b + 1] = s1;
        as[K / 16 + b] = s0 + s1;
    }
}

/* block b of column c's segment scales (and offsets, for the types with them) into the panel's
 * [segment][GGUF_NR] arrays from gguf_decode_scales's per-16 values (a 32-value segment's two
 * halves share them); s16 NULL: 0.0, a column past nr */
static void put_scales(const gguf_kind *t, int blk, int b, int c, const float *s16, const float *m16, float *sc,
                       float *mn) {
    const int seg = t->seg;
    for (int s = 0; s < blk / seg; s++) {
        sc[(b * blk / seg + s) * GGUF_NR + c] = s16 ? s16[s * seg / GGUF_SUB] : 0.0f;
        if (t->has_min) mn[(b * blk / seg + s) * GGUF_NR + c] = s16 ? m16[s * seg / GGUF_SUB] : 0.0f;
    }
}

void gguf_decode_panel_ref(int type, const uint8_t *const *rows, int nr, int nk, uint8_t *u, float *sc, float *mn) {
    const gguf_kind *t = gguf_kind_of(type);
    int blk = 1, bytes = 0;
    h3_gguf_type_size(type, &blk, &bytes);
    int8_t q[256];
    uint8_t v[256];
    float s16[256 / GGUF_SUB], m16[256 / GGUF_SUB];
    for (int c = 0; c < GGUF_NR; c++) {
        if (c >= nr) {
            for (int k = 0; k < nk; k += 4) memset(u + ((k / 4) * GGUF_NR + c) * 4, 0, 4);
            for (int b = 0; b < nk / blk; b++) put_scales(t, blk, b, c, NULL, NULL, sc, mn);
            continue;
        }
        for (int b = 0; b < nk / blk; b++) {
            gguf_decode_block(type, rows[c] + (int64_t)b * bytes, q, s16, m16);
            for (int e = 0; e < blk; e++) v[e] = (uint8_t)(q[e] + t->off);
            /* 4 values (a quad) a column: one 4-byte word of the panel */
            for (int j = 0; j < blk / 4; j++) memcpy(u + (((b * blk) / 4 + j) * GGUF_NR + c) * 4, v + 4 * j, 4);
            put_scales(t, blk, b, c, s16, m16, sc, mn);
        }
    }
}

/* gguf_q8d_amx.c's definition: the same interface (weights in place, activations in the 16-row
 * tile layout, cb transposed) in scalar C, the reference's operations per element; the Q8_0
 * tile route's kernel on the other paths when it is forced (h3_linear_set_gguf_opts q8d 2),
 * so the driver's side of the route is tested on any machine */
void gguf_ukr_q8d_ref(int mr, int nseg, const uint8_t *w, int64_t ldw, const int8_t *a, int64_t ldg, const float *d,
                      int64_t ldd, float *cbt, int64_t ldc) {
    const int gs = GGUF_AG / 32;
    for (int i = 0; i < mr; i++) {
        const int8_t *ai = a + (i / 16) * ldg + (i % 16) * 4;
        for (int c = 0; c < 16; c++) {
            float h = 0.0f, f = cbt[c * ldc + i];
            for (int s = 0; s < nseg; s++) {
                if (s % gs == 0) h = 0.0f;
                const uint8_t *p = w + c * ldw + s * 34;
                int32_t dot = 0;
                for (int k = 0; k < 32; k++) dot += (int8_t)p[2 + k] * ai[(s * 32 + k) / 4 * 64 + k % 4];
                h = fmaf((float)dot, h3_f16_to_f32((uint16_t)(p[0] | p[1] << 8)), h);
                if ((s + 1) % gs == 0 || s + 1 == nseg) f = fmaf(d[i * ldd + s / gs], h, f);
            }
            cbt[c * ldc + i] = f;
        }
    }
}

void gguf_ukr_ref(int mr, const gguf_kind *t, int nseg, const int8_t *a, int64_t lda, const float *d, int64_t ldd,
                  const int32_t *as, int64_t ldas, const uint8_t *u, const float *sc, const float *mn, float *cb) {
    const int seg = t->seg, gs = GGUF_AG / seg;
    for (int i = 0; i < mr; i++)
        for (int c = 0; c < GGUF_NR; c++) {
            float f = cb[i * GGUF_NR + c];
            for (int s0 = 0; s0 < nseg; s0 += gs) {
                float h = 0.0f;
                for (int s = s0; s < H3_MIN(s0 + gs, nseg); s++) {
                    int32_t dot = 0;
                    for (int k = 0; k < seg; k++)
                        dot += (int32_t)u[((s * seg / 4 + k / 4) * GGUF_NR + c) * 4 + k % 4] *
                               (int32_t)a[i * lda + s * seg + k];
                    const int32_t sum = as[i * ldas + s];
                    dot -= t->off * sum;
                    h = fmaf((float)dot, sc[s * GGUF_NR + c], h);
                    if (mn) h = fmaf(mn[s * GGUF_NR + c], (float)sum, h);
                }
                f = fmaf(d[i * ldd + s0 / gs], h, f);
            }
            cb[i * GGUF_NR + c] = f;
        }
}

gguf_quant_fn gguf_quant_for(h3_isa isa) {
#if H3_X86
    /* the kernel decides: the avx512 path's reads its activations unsigned */
    const gguf_ukr_fn k = gguf_ukr_for(isa);
    if (k == gguf_ukr_avx512 || k == gguf_ukr_avxvnni) return gguf_quant_act_row_avx2u;
#endif
    return h3_isa_x86_simd(isa) ? H3_ON_X86(gguf_quant_act_row_avx2) : gguf_quant_act_row_ref;
}

gguf_decode_fn gguf_decode_for(h3_isa isa) {
#if H3_ARM64
    if (h3_isa_vector(isa) == H3_ISA_NEON) return gguf_decode_panel_neon;
#endif
#if H3_X86
    if (isa == H3_ISA_AVX512 || isa == H3_ISA_AMX) return gguf_decode_panel_avx512;
#endif
    return h3_isa_x86_simd(isa) ? H3_ON_X86(gguf_decode_panel_avx2) : gguf_decode_panel_ref;
}

gguf_ukr_fn gguf_ukr_for(h3_isa isa) {
#if H3_X86
    const h3_isa v = h3_isa_vector(isa);
    if (isa == H3_ISA_AMX && h3_cpu_has_avx512_vnni()) return gguf_ukr_amx;
    if (v == H3_ISA_AVX512 && h3_cpu_has_avx512_vnni()) return gguf_ukr_avx512;
    if (isa == H3_ISA_AVXVNNI) return gguf_ukr_avxvnni;
    if (h3_isa_x86_simd(isa)) return gguf_ukr_avx2;
#endif
#if H3_ARM64
    if (h3_isa_vector(isa) == H3_ISA_NEON) return gguf_ukr_neon;
#endif
    (void)isa;
    return gguf_ukr_ref;
}

/* ---- the K-quants' integer super-block order (gguf_impl.h: the AMX path's Q4_K, Q5_K) ---- */

void gguf_kq_scales(int type, const uint8_t *const *rows, int nr, int nk, uint8_t *isc, uint8_t *imn, float *ds,
                    float *dm) {
    int blk = 256, bytes = 0;
    h3_gguf_type_size(type, &blk, &bytes);
    const int nsb = nk / blk;
    for (int c = 0; c < GGUF_NR; c++)
        for (int b = 0; b < nsb; b++) {
            const uint8_t *p = c < nr ? rows[c] + (int64_t)b * bytes : NULL;
            ds[b * GGUF_NR + c] = p ? h3_f16_to_f32((uint16_t)(p[0] | p[1] << 8)) : 0.0f;
            dm[b * GGUF_NR + c] = p ? -h3_f16_to_f32((uint16_t)(p[2] | p[3] << 8)) : 0.0f;
            for (int j = 0; j < 8; j++) {
                int s = 0, m = 0;
                if (p) gguf_k4_scale_min(p + 4, j, &s, &m);
                isc[(b * 8 + j) * GGUF_NR + c] = (uint8_t)s;
                imn[(b * 8 + j) * GGUF_NR + c] = (uint8_t)m;
            }
        }
}

void gguf_float_scales_ref(int type, const uint8_t *const *rows, int nr, int nk, float *sc, float *mn) {
    const gguf_kind *t = gguf_kind_of(type);
    int blk = 1, bytes = 0;
    h3_gguf_type_size(type, &blk, &bytes);
    float s16[256 / GGUF_SUB], m16[256 / GGUF_SUB];
    for (int c = 0; c < GGUF_NR; c++)
        for (int b = 0; b < nk / blk; b++) { /* gguf_decode_panel_ref's scales */
            if (c < nr) gguf_decode_scales(type, rows[c] + (int64_t)b * bytes, s16, m16);
            put_scales(t, blk, b, c, c < nr ? s16 : NULL, m16, sc, mn);
        }
}

/* activation i's input k: the rows in place (tl 0: row i at a + i * lda) or the 32-row tile
 * layout (tl 1: gguf_ukr_amx_kq_tiles's, lda the bytes between row tiles) */
static inline int32_t act_at(int tl, const int8_t *a, int64_t lda, int i, int k) {
    return tl ? a[(i / GGUF_KQ_TILE) * lda + (k / 64) * GGUF_KQ_CHUNK + (i % GGUF_KQ_TILE) * 64 + k % 64]
              : a[i * lda + k];
}

static void kq_ref(int tl, int mr, int nsb, const int8_t *a, int64_t lda, const float *d, int64_t ldd,
                   const int32_t *as, int64_t ldas, const uint8_t *u, const uint8_t *isc, const uint8_t *imn,
                   const float *ds, const float *dm, float *cb) {
    for (int i = 0; i < mr; i++)
        for (int c = 0; c < GGUF_NR; c++)
            for (int b = 0; b < nsb; b++) {
                int32_t S = 0, Mi = 0;
                for (int j = 0; j < 8; j++) {
                    const int s = b * 8 + j;
                    int32_t dot = 0;
                    for (int k = s * 32; k < s * 32 + 32; k++)
                        dot += act_at(tl, a, lda, i, k) * (int32_t)u[((k / 4) * GGUF_NR + c) * 4 + k % 4];
                    S += (int32_t)isc[s * GGUF_NR + c] * dot;
                    Mi += (int32_t)imn[s * GGUF_NR + c] * as[i * ldas + s];
                }
                const float h = fmaf((float)Mi, dm[b * GGUF_NR + c], (float)S * ds[b * GGUF_NR + c]);
                cb[i * GGUF_NR + c] = fmaf(d[i * ldd + b], h, cb[i * GGUF_NR + c]);
            }
}

void gguf_ukr_kq_ref(int mr, int nsb, const int8_t *a, int64_t lda, const float *d, int64_t ldd, const int32_t *as,
                     int64_t ldas, const uint8_t *u, const uint8_t *isc, const uint8_t *imn, const float *ds,
                     const float *dm, float *cb) {
    kq_ref(0, mr, nsb, a, lda, d, ldd, as, ldas, u, isc, imn, ds, dm, cb);
}

void gguf_ukr_kq_tiles_ref(int mr, int nsb, const int8_t *a, int64_t ldt, const float *d, int64_t ldd,
                           const int32_t *as, int64_t ldas, const uint8_t *u, const uint8_t *isc, const uint8_t *imn,
                           const float *ds, const float *dm, float *cb) {
    kq_ref(1, mr, nsb, a, ldt, d, ldd, as, ldas, u, isc, imn, ds, dm, cb);
}
