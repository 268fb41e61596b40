/* gguf_decode_neon.c — the GGUF GEMM's panel decoder in AArch64 Advanced SIMD for the types
 * the published H3 files mostly use (Q8_0, Q3_K, Q4_K, Q5_K, Q6_K, IQ4_XS, IQ4_NL); every
 * other type goes to the reference (gguf_panel_ref.c), whose panel this one equals byte for
 * byte (layout: gguf_impl.h).  gguf_decode_avx2.c is the same plan in AVX2.
 *
 * Why: the reference decodes a value at a time; on x86 the same plan in AVX2 made the decoder
 * 1.3-2.4x faster and took it from 8-18% to 4-8% of a GEMM call at the text encoder's M = 128
 * (docs/gguf.md).  Not timed on ARM (no ARM machine here; checked under qemu).  A block's
 * 16-byte rows of bits become 16 unsigned values u = q + off per few vector ops
 * (per-byte shifts and masks; the IQ4 levels by one table lookup), and 4 columns' 4-value
 * quads reach the panel through a 4 x 4 transpose of 32-bit words (one 16-byte store a quad). */
#include "gguf_impl.h"

#include <arm_neon.h>
#include <string.h>

static inline uint8x16_t ld16(const uint8_t *p) { return vld1q_u8(p); }
static inline void st16(uint8_t *v, uint8x16_t x) { vst1q_u8(v, x); }
/* x >> s per byte (s a run-time count: vshlq by -s) */
static inline uint8x16_t shr(uint8x16_t x, int s) { return vshlq_u8(x, vdupq_n_s8((int8_t)-s)); }
/* bit s of each byte moved to bit t */
static inline uint8x16_t bit_at(uint8x16_t x, int s, int t) {
    return vshlq_u8(vandq_u8(shr(x, s), vdupq_n_u8(1)), vdupq_n_s8((int8_t)t));
}

/* 32 IQ4 codes (16 bytes: low nibbles first) -> their levels + 128, by one table lookup each half */
static inline void iq4_32(const uint8_t *qs, uint8_t *v) {
    const uint8x16_t lut = veorq_u8(vreinterpretq_u8_s8(vld1q_s8(gguf_iq4_levels)), vdupq_n_u8(0x80));
    const uint8x16_t x = ld16(qs);
    st16(v, vqtbl1q_u8(lut, vandq_u8(x, vdupq_n_u8(15))));
    st16(v + 16, vqtbl1q_u8(lut, vshrq_n_u8(x, 4)));
}

/* one block's u[blk] (u = q + off, the panel's unsigned values) */
static void unpack(int type, const uint8_t *p, uint8_t *v) {
    const uint8x16_t m4 = vdupq_n_u8(15), m2 = vdupq_n_u8(3);
    switch (type) {
    case H3_GGUF_Q8_0: /* u = q + 128 */
        for (int x = 0; x < 2; x++) st16(v + 16 * x, veorq_u8(ld16(p + 2 + 16 * x), vdupq_n_u8(0x80)));
        return;
    case H3_GGUF_Q3_K: /* u = low 2 bits + 4 * high bit */
        for (int x = 0; x < 2; x++) {
            const uint8x16_t hm = ld16(p + 16 * x);
            for (int h = 0; h < 2; h++) {
                const uint8x16_t qs = ld16(p + 32 + 32 * h + 16 * x);
                for (int j = 0; j < 4; j++)
                    st16(v + 128 * h + 32 * j + 16 * x, vorrq_u8(vandq_u8(shr(qs, 2 * j), m2), bit_at(hm, 4 * h + j, 2)));
            }
        }
        return;
    case H3_GGUF_Q4_K: case H3_GGUF_Q5_K: {
        const int five = type == H3_GGUF_Q5_K;
        const uint8_t *qs = p + (five ? 48 : 16);
        for (int x = 0; x < 2; x++) {
            const uint8x16_t qh = five ? ld16(p + 16 + 16 * x) : vdupq_n_u8(0);
            for (int j = 0; j < 4; j++) {
                const uint8x16_t b = ld16(qs + 32 * j + 16 * x);
                uint8x16_t lo = vandq_u8(b, m4), hi = vshrq_n_u8(b, 4);
                if (five) {
                    lo = vorrq_u8(lo, bit_at(qh, 2 * j, 4));
                    hi = vorrq_u8(hi, bit_at(qh, 2 * j + 1, 4));
                }
                st16(v + 64 * j + 16 * x, lo);
                st16(v + 64 * j + 32 + 16 * x, hi);
            }
        }
        return;
    }
    case H3_GGUF_Q6_K: /* u = q + 32: the stored 6 bits */
        for (int h = 0; h < 2; h++)
            for (int x = 0; x < 2; x++) {
                const uint8x16_t a = ld16(p + 64 * h + 16 * x), b = ld16(p + 64 * h + 32 + 16 * x);
                const uint8x16_t c = ld16(p + 128 + 32 * h + 16 * x);
                uint8_t *o = v + 128 * h + 16 * x;
                st16(o, vorrq_u8(vandq_u8(a, m4), vshlq_n_u8(vandq_u8(c, m2), 4)));
                st16(o + 32, vorrq_u8(vandq_u8(b, m4), vshlq_n_u8(vandq_u8(vshrq_n_u8(c, 2), m2), 4)));
                st16(o + 64, vorrq_u8(vshrq_n_u8(a, 4), vshlq_n_u8(vandq_u8(vshrq_n_u8(c, 4), m2), 4)));
                st16(o + 96, vorrq_u8(vshrq_n_u8(b, 4), vshlq_n_u8(vshrq_n_u8(c, 6), 4)));
            }
        return;
    case H3_GGUF_IQ4_NL:
        iq4_32(p + 2, v);
        return;
    case H3_GGUF_IQ4_XS:
        for (int j = 0; j < 8; j++) iq4_32(p + 8 + 16 * j, v + 32 * j);
        return;
    default:
        return;
    }
}

/* A block's segment scales straight into the panel (sc, mn: its first segment's entry for the
 * column; a segment on is GGUF_NR floats on): gguf_decode_scales's values (the same float
 * expressions) without its temporaries */
static void put_scales(int type, const uint8_t *p, float *sc, float *mn) {
    const float d = h3_f16_to_f32((uint16_t)(p[0] | p[1] << 8));
    switch (type) {
    case H3_GGUF_Q8_0: case H3_GGUF_IQ4_NL:
        sc[0] = d;
        return;
    case H3_GGUF_IQ4_XS:
        for (int j = 0; j < 8; j++) sc[j * GGUF_NR] = d * (float)(gguf_iq4xs_scale(p, j) - 32);
        return;
    case H3_GGUF_Q6_K: {
        const float d6 = h3_f16_to_f32((uint16_t)(p[208] | p[209] << 8));
        for (int s = 0; s < 16; s++) sc[s * GGUF_NR] = d6 * (float)(int8_t)p[192 + s];
        return;
    }
    case H3_GGUF_Q3_K: {
        const float d3 = h3_f16_to_f32((uint16_t)(p[108] | p[109] << 8));
        for (int s = 0; s < 16; s++) sc[s * GGUF_NR] = d3 * (float)gguf_k3_scale(p + 96, s);
        return;
    }
    default: { /* Q4_K, Q5_K: segments of 32 */
        const float dmin = h3_f16_to_f32((uint16_t)(p[2] | p[3] << 8));
        for (int j = 0; j < 8; j++) {
            int s, m;
            gguf_k4_scale_min(p + 4, j, &s, &m);
            sc[j * GGUF_NR] = d * (float)s;
            mn[j * GGUF_NR] = -(dmin * (float)m);
        }
        return;
    }
    }
}

/* 4 columns' 16-byte rows r[i] (quads q0..q0+3 of column c0 + i) -> the panel's quads q0..q0+3
 * of columns c0..c0+3: a 4 x 4 transpose of 32-bit words, one 16-byte store a quad */
static inline void store_quads4(const uint8_t *const r[4], uint8_t *u, int64_t q0, int c0) {
    const uint32x4x2_t t0 = vtrnq_u32(vreinterpretq_u32_u8(ld16(r[0])), vreinterpretq_u32_u8(ld16(r[1])));
    const uint32x4x2_t t1 = vtrnq_u32(vreinterpretq_u32_u8(ld16(r[2])), vreinterpretq_u32_u8(ld16(r[3])));
    const uint64x2_t a0 = vreinterpretq_u64_u32(t0.val[0]), a1 = vreinterpretq_u64_u32(t0.val[1]);
    const uint64x2_t b0 = vreinterpretq_u64_u32(t1.val[0]), b1 = vreinterpretq_u64_u32(t1.val[1]);
    uint8_t *o = u + ((size_t)q0 * GGUF_NR + (size_t)c0) * 4;
    vst1q_u8(o, vreinterpretq_u8_u64(vzip1q_u64(a0, b0)));
    vst1q_u8(o + GGUF_NR * 4, vreinterpretq_u8_u64(vzip1q_u64(a1, b1)));
    vst1q_u8(o + 2 * GGUF_NR * 4, vreinterpretq_u8_u64(vzip2q_u64(a0, b0)));
    vst1q_u8(o + 3 * GGUF_NR * 4, vreinterpretq_u8_u64(vzip2q_u64(a1, b1)));
}

void gguf_decode_panel_neon(int type, const uint8_t *const *rows, int nr, int nk, uint8_t *u, float *sc, float *mn) {
    switch (type) {
    case H3_GGUF_Q8_0: case H3_GGUF_Q3_K: case H3_GGUF_Q4_K: case H3_GGUF_Q5_K: case H3_GGUF_Q6_K:
    case H3_GGUF_IQ4_NL: case H3_GGUF_IQ4_XS:
        break;
    default:
        gguf_decode_panel_ref(type, rows, nr, nk, u, sc, mn);
        return;
    }
    const gguf_kind *t = gguf_kind_of(type);
    int blk = 1, bytes = 0;
    h3_gguf_type_size(type, &blk, &bytes);
    const int seg = t->seg;
    uint8_t v[4][256] __attribute__((aligned(16)));
    for (int b = 0; b < nk / blk; b++)
        for (int c0 = 0; c0 < GGUF_NR; c0 += 4) {
            for (int c = c0; c < c0 + 4; c++) {
                float *scc = sc + (b * blk / seg) * GGUF_NR + c;
                float *mnc = t->has_min ? mn + (b * blk / seg) * GGUF_NR + c : NULL;
                if (c >= nr) {
                    gguf_panel_zero_column(v[c - c0], blk, blk / seg, t->has_min, scc, mnc);
                    continue;
                }
                const uint8_t *p = rows[c] + (int64_t)b * bytes;
                unpack(type, p, v[c - c0]);
                put_scales(type, p, scc, mnc);
            }
            for (int r = 0; r < blk / 16; r++) {
                const uint8_t *rr[4] = {v[0] + 16 * r, v[1] + 16 * r, v[2] + 16 * r, v[3] + 16 * r};
                store_quads4(rr, u, (int64_t)b * blk / 4 + 4 * r, c0);
            }
        }
}
