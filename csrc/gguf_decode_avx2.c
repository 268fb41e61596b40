/* gguf_decode_avx2.c — the GGUF GEMM's panel decoder in AVX2 for the types the published H3
 * files mostly use (Q8_0, Q3_K, Q4_K, Q5_K, Q6_K, IQ4_XS, IQ4_NL); every other type goes to the reference
 * (gguf_panel_ref.c), whose panel this one equals byte for byte (layout: gguf_impl.h).
 *
 * Why: the reference decodes a value at a time (~2.4 cycles a value on Zen 1), which at the
 * text encoder's M = 128 rows cost 8-18% of the GEMM; here a block's 32-byte rows of bits
 * become 32 unsigned values u = q + off per few vector ops (shifts and masks on 16-bit
 * lanes, which never carry bits across bytes after the mask), and 8 columns' 4-value quads
 * reach the panel through an 8 x 8 transpose of 32-bit words (one 32-byte store a quad). */
#include "gguf_impl.h"

#include <immintrin.h>
#include <string.h>

static inline __m256i ld32(const uint8_t *p) { return _mm256_loadu_si256((const __m256i *)p); }
static inline void st32(uint8_t *v, __m256i x) { _mm256_storeu_si256((__m256i *)v, x); }
/* bits [s, s + 1) of each byte, moved to bit t (t >= s or t < s; s, t < 8) */
static inline __m256i bit_at(__m256i x, int s, int t) {
    const __m256i one = _mm256_set1_epi8(1);
    __m256i b = _mm256_and_si256(_mm256_srli_epi16(x, s), one);
    return _mm256_slli_epi16(b, t); /* b <= 1 per byte: no bit crosses into the next byte */
}

/* 32 IQ4 codes (16 bytes: low nibbles first) -> their levels + 128, by one table lookup */
static inline __m256i iq4_32(const uint8_t *qs) {
    const __m128i x = _mm_loadu_si128((const __m128i *)qs), m4 = _mm_set1_epi8(15);
    const __m256i codes = _mm256_set_m128i(_mm_and_si128(_mm_srli_epi16(x, 4), m4), _mm_and_si128(x, m4));
    const __m256i lut = _mm256_broadcastsi128_si256(_mm_loadu_si128((const __m128i *)gguf_iq4_levels));
    return _mm256_xor_si256(_mm256_shuffle_epi8(lut, codes), _mm256_set1_epi8((char)0x80));
}

/* one block's u[blk] (u = q + off, the panel's unsigned values) */
static void unpack(int type, const uint8_t *p, uint8_t *v) {
    const __m256i m4 = _mm256_set1_epi8(15), m2 = _mm256_set1_epi8(3);
    switch (type) {
    case H3_GGUF_Q8_0: /* u = q + 128 */
        st32(v, _mm256_xor_si256(ld32(p + 2), _mm256_set1_epi8((char)0x80)));
        return;
    case H3_GGUF_Q3_K: { /* u = low 2 bits + 4 * high bit */
        const __m256i hm = ld32(p);
        for (int h = 0; h < 2; h++) {
            const __m256i qs = ld32(p + 32 + 32 * h);
            for (int j = 0; j < 4; j++) {
                const __m256i lo = _mm256_and_si256(_mm256_srli_epi16(qs, 2 * j), m2);
                st32(v + 128 * h + 32 * j, _mm256_or_si256(lo, bit_at(hm, 4 * h + j, 2)));
            }
        }
        return;
    }
    case H3_GGUF_Q4_K: case H3_GGUF_Q5_K: {
        const int five = type == H3_GGUF_Q5_K;
        const uint8_t *qs = p + (five ? 48 : 16);
        const __m256i qh = five ? ld32(p + 16) : _mm256_setzero_si256();
        for (int j = 0; j < 4; j++) {
            const __m256i x = ld32(qs + 32 * j);
            __m256i lo = _mm256_and_si256(x, m4), hi = _mm256_and_si256(_mm256_srli_epi16(x, 4), m4);
            if (five) {
                lo = _mm256_or_si256(lo, bit_at(qh, 2 * j, 4));
                hi = _mm256_or_si256(hi, bit_at(qh, 2 * j + 1, 4));
            }
            st32(v + 64 * j, lo);
            st32(v + 64 * j + 32, hi);
        }
        return;
    }
    case H3_GGUF_Q6_K: /* u = q + 32: the stored 6 bits */
        for (int h = 0; h < 2; h++) {
            const __m256i a = ld32(p + 64 * h), b = ld32(p + 64 * h + 32), c = ld32(p + 128 + 32 * h);
            const __m256i c0 = _mm256_slli_epi16(_mm256_and_si256(c, m2), 4);
            const __m256i c1 = _mm256_slli_epi16(_mm256_and_si256(_mm256_srli_epi16(c, 2), m2), 4);
            const __m256i c2 = _mm256_slli_epi16(_mm256_and_si256(_mm256_srli_epi16(c, 4), m2), 4);
            const __m256i c3 = _mm256_slli_epi16(_mm256_and_si256(_mm256_srli_epi16(c, 6), m2), 4);
            uint8_t *o = v + 128 * h;
            st32(o, _mm256_or_si256(_mm256_and_si256(a, m4), c0));
            st32(o + 32, _mm256_or_si256(_mm256_and_si256(b, m4), c1));
            st32(o + 64, _mm256_or_si256(_mm256_and_si256(_mm256_srli_epi16(a, 4), m4), c2));
            st32(o + 96, _mm256_or_si256(_mm256_and_si256(_mm256_srli_epi16(b, 4), m4), c3));
        }
        return;
    case H3_GGUF_IQ4_NL: /* u = level + 128 */
        st32(v, iq4_32(p + 2));
        return;
    case H3_GGUF_IQ4_XS:
        for (int j = 0; j < 8; j++) st32(v + 32 * j, iq4_32(p + 8 + 16 * j));
        return;
    default:
        return;
    }
}

/* 8 rows of 8 dwords -> 8 columns (r[i] dword j -> o[j] dword i) */
static inline void transpose8(__m256i r[8]) {
    __m256i t[8], q[8];
    for (int i = 0; i < 8; i += 2) {
        t[i] = _mm256_unpacklo_epi32(r[i], r[i + 1]);
        t[i + 1] = _mm256_unpackhi_epi32(r[i], r[i + 1]);
    }
    for (int i = 0; i < 8; i += 4) {
        q[i] = _mm256_unpacklo_epi64(t[i], t[i + 2]);
        q[i + 1] = _mm256_unpackhi_epi64(t[i], t[i + 2]);
        q[i + 2] = _mm256_unpacklo_epi64(t[i + 1], t[i + 3]);
        q[i + 3] = _mm256_unpackhi_epi64(t[i + 1], t[i + 3]);
    }
    for (int i = 0; i < 4; i++) {
        r[i] = _mm256_permute2x128_si256(q[i], q[i + 4], 0x20);
        r[i + 4] = _mm256_permute2x128_si256(q[i], q[i + 4], 0x31);
    }
}

/* 8 columns' transposed quads (transpose8's output) to their place in the panel: quad q0 + j,
 * columns c0..c0+7 */
static inline void store_quads(const __m256i x[8], uint8_t *u, int64_t q0, int c0) {
    uint8_t *o = u + ((size_t)q0 * GGUF_NR + (size_t)c0) * 4;
    for (int j = 0; j < 8; j++) _mm256_storeu_si256((__m256i *)(o + j * GGUF_NR * 4), x[j]);
}

/* Q8_0 on its own: a block is one f16 scale and 32 q, so the generic loop's per-block,
 * per-column call of gguf_decode_scales was most of its time (0.023 ms a 16 x 5376 panel, 36%
 * of the AVX-512 kernel at M = 128, Zen 4); here 8 columns' scales are one vcvtph2ps (exact,
 * as h3_f16_to_f32) and their q one transpose, per block */
static void decode_q8_0(const uint8_t *const *rows, int nr, int nk, uint8_t *u, float *sc) {
    const __m256i flip = _mm256_set1_epi8((char)0x80);
    for (int b = 0; b < nk / 32; b++)
        for (int c0 = 0; c0 < GGUF_NR; c0 += 8) {
            __m256i x[8];
            uint16_t h[8];
            for (int i = 0; i < 8; i++) {
                if (c0 + i < nr) {
                    const uint8_t *p = rows[c0 + i] + (int64_t)b * 34;
                    memcpy(&h[i], p, 2);
                    x[i] = _mm256_xor_si256(ld32(p + 2), flip);
                } else { /* the reference's zero column */
                    h[i] = 0;
                    x[i] = _mm256_setzero_si256();
                }
            }
            _mm256_storeu_ps(sc + b * GGUF_NR + c0, _mm256_cvtph_ps(_mm_loadu_si128((const __m128i *)h)));
            transpose8(x);
            store_quads(x, u, (int64_t)b * 8, c0);
        }
}

static inline float f16_of(const uint8_t *p) {
    uint16_t h;
    memcpy(&h, p, 2);
    return _cvtsh_ss(h); /* exact, as h3_f16_to_f32 */
}

/* A K-quant block's segment scales straight into the panel (sc, mn: its first segment's
 * entry for the column; a segment on is GGUF_NR floats on): gguf_decode_scales's values
 * without its temporaries, function calls and per-call switch, which were about half the
 * decoder's time (Zen 4) */
static inline __attribute__((always_inline)) void put_scales(const int type, const uint8_t *p, float *sc, float *mn) {
    if (type == H3_GGUF_Q6_K) {
        const float d = f16_of(p + 208);
        for (int s = 0; s < 16; s++) sc[s * GGUF_NR] = d * (float)(int8_t)p[192 + s];
    } else if (type == H3_GGUF_IQ4_NL) {
        sc[0] = f16_of(p);
    } else if (type == H3_GGUF_IQ4_XS) {
        const float d = f16_of(p);
        for (int j = 0; j < 8; j++) sc[j * GGUF_NR] = d * (float)(gguf_iq4xs_scale(p, j) - 32);
    } else if (type == H3_GGUF_Q3_K) {
        const float d = f16_of(p + 108);
        for (int s = 0; s < 16; s++) sc[s * GGUF_NR] = d * (float)gguf_k3_scale(p + 96, s);
    } else { /* Q4_K, Q5_K: segments of 32 */
        const float d = f16_of(p), dmin = f16_of(p + 2);
        for (int j = 0; j < 8; j++) {
            int s, m;
            gguf_k4_scale_min(p + 4, j, &s, &m);
            sc[j * GGUF_NR] = d * (float)s;
            mn[j * GGUF_NR] = -(dmin * (float)m);
        }
    }
}

static inline __attribute__((always_inline)) void decode_k(const int type, const uint8_t *const *rows, int nr,
                                                           int nk, uint8_t *u, float *sc, float *mn) {
    const gguf_kind *t = gguf_kind_of(type);
    int blk = 1, bytes = 0;
    h3_gguf_type_size(type, &blk, &bytes);
    const int seg = t->seg;
    uint8_t v[8][256] __attribute__((aligned(32)));
    for (int b = 0; b < nk / blk; b++)
        for (int c0 = 0; c0 < GGUF_NR; c0 += 8) {
            /* 8 columns' blocks unpacked, then 32 values (8 quads) of each at a time
             * transposed so that each quad's 8 words are one 32-byte store */
            for (int c = c0; c < c0 + 8; c++) {
                float *scc = sc ? sc + (b * blk / seg) * GGUF_NR + c : NULL;
                float *mnc = sc && mn ? mn + (b * blk / seg) * GGUF_NR + c : NULL;
                if (c >= nr) {
                    gguf_panel_zero_column(v[c - c0], blk, blk / seg, t->has_min, scc, mnc);
                    continue;
                }
                const uint8_t *p = rows[c] + (int64_t)b * bytes;
                unpack(type, p, v[c - c0]);
                if (sc) put_scales(type, p, scc, mnc);
            }
            for (int r = 0; r < blk / 32; r++) {
                __m256i x[8];
                for (int i = 0; i < 8; i++) x[i] = _mm256_load_si256((const __m256i *)(v[i] + 32 * r));
                transpose8(x);
                store_quads(x, u, (int64_t)b * blk / 4 + 8 * r, c0);
            }
        }
}

void gguf_decode_panel_avx2(int type, const uint8_t *const *rows, int nr, int nk, uint8_t *u, float *sc, float *mn) {
    switch (type) {
    case H3_GGUF_Q8_0: decode_q8_0(rows, nr, nk, u, sc); return;
    case H3_GGUF_Q6_K: decode_k(H3_GGUF_Q6_K, rows, nr, nk, u, sc, mn); return;
    case H3_GGUF_Q5_K: decode_k(H3_GGUF_Q5_K, rows, nr, nk, u, sc, mn); return;
    case H3_GGUF_Q4_K: decode_k(H3_GGUF_Q4_K, rows, nr, nk, u, sc, mn); return;
    case H3_GGUF_Q3_K: decode_k(H3_GGUF_Q3_K, rows, nr, nk, u, sc, mn); return;
    case H3_GGUF_IQ4_XS: decode_k(H3_GGUF_IQ4_XS, rows, nr, nk, u, sc, mn); return;
    case H3_GGUF_IQ4_NL: decode_k(H3_GGUF_IQ4_NL, rows, nr, nk, u, sc, mn); return;
    default: gguf_decode_panel_ref(type, rows, nr, nk, u, sc, mn); return;
    }
}

void gguf_panel_signed_avx2(const gguf_kind *t, int nseg, const uint8_t *u, int8_t *w, int32_t *start) {
    const __m256i o = _mm256_set1_epi8((char)t->off), ones8 = _mm256_set1_epi8(1), ones16 = _mm256_set1_epi16(1);
    for (int s = 0; s < nseg; s++) {
        /* each column's w pair sums in int16 (|pair| <= 256, 8 quads <= 2048), the pairs added
         * into int32 once a segment */
        __m256i c[2] = {_mm256_setzero_si256(), _mm256_setzero_si256()};
        for (int j = 0; j < t->seg / 4; j++)
            for (int x = 0; x < 2; x++) { /* columns 0-7, 8-15 of quad q */
                const int64_t q = (int64_t)s * t->seg / 4 + j;
                const __m256i v = _mm256_sub_epi8(ld32(u + q * 64 + 32 * x), o);
                _mm256_store_si256((__m256i *)(w + q * 64 + 32 * x), v);
                if (start) c[x] = _mm256_add_epi16(c[x], _mm256_maddubs_epi16(ones8, v));
            }
        if (start)
            for (int x = 0; x < 2; x++)
                _mm256_store_si256((__m256i *)(start + s * GGUF_NR + 8 * x),
                                   _mm256_sub_epi32(_mm256_setzero_si256(),
                                                    _mm256_slli_epi32(_mm256_madd_epi16(c[x], ones16), 7)));
    }
}
