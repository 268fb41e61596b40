/* gguf_decode_avx512.c — the panel decoder of the avx512 and amx paths: Q4_K and Q5_K's u alone
 * (sc NULL: those paths take the scales from gguf_float_scales_avx512 / gguf_kq_scales_avx512)
 * 16 columns at a time; everything else is gguf_decode_panel_avx2's, whose panel this one equals
 * byte for byte (layout: gguf_impl.h).
 *
 * Why: at the text encoder's M = 128 a panel's K block serves only 128 rows, and on 2 AMX cores
 * the AVX2 decoder took 16% of Q4_K's samples (te_q, session 32).  It unpacks 8 columns a block
 * into a buffer and moves each 8 x 8 block of 4-byte quads through an 8 x 8 transpose of ymm
 * words.  Here one zmm holds two columns' 32 bytes (column c and c + 8): the nibbles are split
 * in place (64 bytes per and / shift) and the 16 columns' 8 quads of a 32-value segment become
 * the panel's 8 rows of 64 bytes by the same three stages on zmm (the unpacks act per 128-bit
 * lane, so both halves transpose at once; the last stage pairs 128-bit lanes across two
 * registers, vpermt2q), with no buffer between. */
#include "gguf_impl.h"

#include <immintrin.h>

/* 16 columns' 8 quads in z[i] = [column i | column i + 8] (8 dwords each) -> the panel's 8 rows:
 * z[k] = quad k of columns 0..15 */
static inline void transpose16x8(__m512i z[8]) {
    __m512i t[8], q[8];
    for (int i = 0; i < 8; i += 2) {
        t[i] = _mm512_unpacklo_epi32(z[i], z[i + 1]);
        t[i + 1] = _mm512_unpackhi_epi32(z[i], z[i + 1]);
    }
    for (int i = 0; i < 8; i += 4) {
        q[i] = _mm512_unpacklo_epi64(t[i], t[i + 2]);
        q[i + 1] = _mm512_unpackhi_epi64(t[i], t[i + 2]);
        q[i + 2] = _mm512_unpacklo_epi64(t[i + 1], t[i + 3]);
        q[i + 3] = _mm512_unpackhi_epi64(t[i + 1], t[i + 3]);
    }
    /* per 256-bit half, AVX2's permute2x128 0x20 / 0x31: lanes (a.0, b.0 | a.2, b.2), (a.1, b.1 | a.3, b.3) */
    const __m512i lo = _mm512_setr_epi64(0, 1, 8, 9, 4, 5, 12, 13), hi = _mm512_setr_epi64(2, 3, 10, 11, 6, 7, 14, 15);
    for (int i = 0; i < 4; i++) {
        z[i] = _mm512_permutex2var_epi64(q[i], lo, q[i + 4]);
        z[i + 4] = _mm512_permutex2var_epi64(q[i], hi, q[i + 4]);
    }
}

/* bit s of each byte moved to bit 4 (Q5_K's fifth bit; 16-bit shifts: the mask keeps bit 4 of
 * each byte, which for s < 8 came from the same byte) */
static inline __m512i bit4(__m512i x, int s) {
    const __m512i m = _mm512_set1_epi8(0x10);
    return _mm512_and_si512(s <= 4 ? _mm512_slli_epi16(x, 4 - s) : _mm512_srli_epi16(x, s - 4), m);
}

/* columns c and c + 8 of a block's 32 bytes at offset off (a missing column reads zeros) */
static inline __m512i pair(const uint8_t *const *p, int c, int off) {
    const __m256i a = _mm256_loadu_si256((const __m256i *)(p[c] + off));
    const __m256i b = _mm256_loadu_si256((const __m256i *)(p[c + 8] + off));
    return _mm512_inserti64x4(_mm512_castsi256_si512(a), b, 1);
}

static void decode_k4(int five, const uint8_t *const *rows, int nr, int nk, uint8_t *u) {
    static const uint8_t zero[176] __attribute__((aligned(64))); /* a Q5_K block (the larger) of zeros: u = 0 */
    int blk = 0, bytes = 0;
    h3_gguf_type_size(five ? H3_GGUF_Q5_K : H3_GGUF_Q4_K, &blk, &bytes);
    const int qs_off = five ? 48 : 16; /* past d, dmin, the 12 scale bytes (and Q5_K's 32 high-bit bytes) */
    const __m512i m4 = _mm512_set1_epi8(15);
    const uint8_t *p[GGUF_NR];
    for (int b = 0; b < nk / 256; b++) {
        for (int c = 0; c < GGUF_NR; c++) p[c] = c < nr ? rows[c] + (int64_t)b * bytes : zero;
        __m512i qh[8];
        if (five)
            for (int i = 0; i < 8; i++) qh[i] = pair(p, i, 16);
        for (int j = 0; j < 4; j++) { /* values 64j.. (low nibbles) and 64j + 32.. (high) */
            __m512i lo[8], hi[8];
            for (int i = 0; i < 8; i++) {
                const __m512i x = pair(p, i, qs_off + 32 * j);
                lo[i] = _mm512_and_si512(x, m4);
                hi[i] = _mm512_and_si512(_mm512_srli_epi16(x, 4), m4);
                if (five) {
                    lo[i] = _mm512_or_si512(lo[i], bit4(qh[i], 2 * j));
                    hi[i] = _mm512_or_si512(hi[i], bit4(qh[i], 2 * j + 1));
                }
            }
            transpose16x8(lo);
            transpose16x8(hi);
            uint8_t *o = u + ((size_t)b * 64 + (size_t)j * 16) * GGUF_NR * 4; /* quad 64b + 16j */
            for (int k = 0; k < 8; k++) {
                _mm512_storeu_si512((void *)(o + (size_t)k * GGUF_NR * 4), lo[k]);
                _mm512_storeu_si512((void *)(o + (size_t)(8 + k) * GGUF_NR * 4), hi[k]);
            }
        }
    }
}

void gguf_decode_panel_avx512(int type, const uint8_t *const *rows, int nr, int nk, uint8_t *u, float *sc,
                              float *mn) {
    if (!sc && (type == H3_GGUF_Q4_K || type == H3_GGUF_Q5_K)) {
        decode_k4(type == H3_GGUF_Q5_K, rows, nr, nk, u);
        return;
    }
    gguf_decode_panel_avx2(type, rows, nr, nk, u, sc, mn);
}
