/* gguf_ref.c — ggml's block formats as GGUF files store them, decoded by plain loops (the
 * executable spec of every GGUF kernel); the GEMM's reference pieces are in gguf_panel_ref.c.
 *
 * Written from the format description (llama.cpp's docs and gguf-py's quants.py name the
 * fields); block by block, values in the order they follow in the row:
 *   Q8_0  (32, 34 B): f16 d; int8 q[32].                            w = d * q
 *   Q4_0  (32, 18 B): f16 d; u8 qs[16]: value j low nibble of qs[j], j + 16 the high one.
 *                                                                   w = d * (q - 8)
 *   Q4_1  (32, 20 B): f16 d, m; qs[16] as Q4_0.                     w = d * q + m
 *   Q5_0  (32, 22 B): f16 d; u32 qh (bit j = 5th bit of value j); qs[16] as Q4_0.
 *                                                                   w = d * (q - 16)
 *   Q5_1  (32, 24 B): f16 d, m; qh; qs[16].                         w = d * q + m
 *   Q2_K (256, 84 B): u8 scales[16] (low nibble scale, high nibble min, per 16 values);
 *                     u8 qs[64]; f16 d, dmin.  Value e = 128 h + 32 j + l (h < 2, j < 4,
 *                     l < 32): 2 bits at shift 2 j of qs[32 h + l]; sub-block 8 h + 2 j + l/16.
 *                                                                   w = d*sc * q - dmin*m
 *   Q3_K (256,110 B): u8 hmask[32]; qs[64]; scales[12] (16 six-bit scales, biased by 32);
 *                     f16 d.  Value e as Q2_K for the 2 low bits; high bit = bit 4 h + j of
 *                     hmask[l]; q = low - (high ? 0 : 4).               w = d*(s-32) * q
 *   Q4_K (256,144 B): f16 d, dmin; scales[12] (8 six-bit scales and mins, per 32);
 *                     qs[128].  Value 64 j + l: low nibble of qs[32 j + l] (sub-block 2 j),
 *                     64 j + 32 + l: its high nibble (sub-block 2 j + 1).
 *                                                                   w = d*sc * q - dmin*m
 *   Q5_K (256,176 B): f16 d, dmin; scales[12]; qh[32]; qs[128]: Q4_K's nibbles plus a
 *                     5th bit, bit 2 j (low) or 2 j + 1 (high) of qh[l].
 *   Q6_K (256,210 B): ql[128]; qh[64]; int8 scales[16] (per 16); f16 d.  Half h (128
 *                     values): for l < 32, values l, l+32, l+64, l+96 take the low nibble of
 *                     ql[64h+l], ql[64h+l+32], then their high nibbles, with bits 0-1, 2-3,
 *                     4-5, 6-7 of qh[32h+l] on top; q - 32.        w = d*sc * (q - 32)
 *   IQ4_NL (32, 18 B): f16 d; qs[16] as Q4_0, each 4-bit code an index into one table of 16
 *                     non-uniform int8 levels (kvalues_iq4nl).        w = d * level
 *   IQ4_XS (256,136 B): f16 d; u16 scales_h; u8 scales_l[4]; qs[128]: 8 sub-blocks of 32,
 *                     sub-block j with the 6-bit ls = (scales_l[j/2] >> 4 (j%2) & 15) |
 *                     (scales_h >> 2 j & 3) << 4 and its 16 bytes of qs laid out as IQ4_NL's.
 *                                                     w = (d * (ls - 32)) * level
 * The six-bit scale packing of Q4_K/Q5_K (sub-block j < 8): j < 4: scale = b[j] & 63,
 * min = b[j+4] & 63; else scale = (b[j+4] & 15) | (b[j-4] >> 6) << 4,
 * min = (b[j+4] >> 4) | (b[j] >> 6) << 4.  Q3_K (j < 16): low 4 bits from b[j] (j < 8,
 * low nibble) or b[j-8] (high nibble), top 2 bits from b[8 + j%4] at shift 2 (j/4). */
#include "gguf_impl.h"

#include <stdlib.h>

#include <math.h>
#include <string.h>

int h3_gguf_type_size(int type, int *blk, int *bytes) {
    int b, n;
    switch (type) {
    case H3_GGUF_F32: b = 1; n = 4; break;
    case H3_GGUF_F16: case H3_GGUF_BF16: b = 1; n = 2; break;
    case H3_GGUF_Q4_0: b = 32; n = 18; break;
    case H3_GGUF_Q4_1: b = 32; n = 20; break;
    case H3_GGUF_Q5_0: b = 32; n = 22; break;
    case H3_GGUF_Q5_1: b = 32; n = 24; break;
    case H3_GGUF_Q8_0: b = 32; n = 34; break;
    case H3_GGUF_Q2_K: b = 256; n = 84; break;
    case H3_GGUF_Q3_K: b = 256; n = 110; break;
    case H3_GGUF_Q4_K: b = 256; n = 144; break;
    case H3_GGUF_Q5_K: b = 256; n = 176; break;
    case H3_GGUF_Q6_K: b = 256; n = 210; break;
    case H3_GGUF_IQ4_NL: b = 32; n = 18; break;
    case H3_GGUF_IQ4_XS: b = 256; n = 136; break;
    default: return 0;
    }
    if (blk) *blk = b;
    if (bytes) *bytes = n;
    return 1;
}

int gguf_is_quant(int type) {
    int b;
    return h3_gguf_type_size(type, &b, NULL) && b > 1;
}

int gguf_has_min(int type) {
    return type == H3_GGUF_Q4_1 || type == H3_GGUF_Q5_1 || type == H3_GGUF_Q2_K ||
           type == H3_GGUF_Q4_K || type == H3_GGUF_Q5_K;
}

/* IQ4_NL / IQ4_XS: the level of each 4-bit code (ggml's kvalues_iq4nl) */
const int8_t gguf_iq4_levels[16] = {-127, -104, -83, -65, -49, -35, -22, -10, 1, 13, 25, 38, 53, 69, 89, 113};

static float f16_at(const uint8_t *p) { return h3_f16_to_f32((uint16_t)(p[0] | p[1] << 8)); }
static uint32_t u32_at(const uint8_t *p) {
    return (uint32_t)p[0] | (uint32_t)p[1] << 8 | (uint32_t)p[2] << 16 | (uint32_t)p[3] << 24;
}

/* one block -> q[blk], sc/mn[blk/16] (the scales: gguf_decode_scales) */
void gguf_decode_scales(int type, const uint8_t *p, float *sc, float *mn) {
    switch (type) {
    case H3_GGUF_Q8_0: case H3_GGUF_Q4_0: case H3_GGUF_Q5_0: case H3_GGUF_IQ4_NL:
        sc[0] = sc[1] = f16_at(p);
        mn[0] = mn[1] = 0.0f;
        return;
    case H3_GGUF_Q4_1: case H3_GGUF_Q5_1:
        sc[0] = sc[1] = f16_at(p);
        mn[0] = mn[1] = f16_at(p + 2);
        return;
    case H3_GGUF_Q2_K: {
        const uint8_t *scales = p;
        float d = f16_at(p + 80), dmin = f16_at(p + 82);
        for (int s = 0; s < 16; s++) {
            sc[s] = d * (float)(scales[s] & 15);
            mn[s] = -(dmin * (float)(scales[s] >> 4));
        }
        return;
    }
    case H3_GGUF_Q3_K: {
        float d = f16_at(p + 108);
        for (int s = 0; s < 16; s++) {
            sc[s] = d * (float)gguf_k3_scale(p + 96, s);
            mn[s] = 0.0f;
        }
        return;
    }
    case H3_GGUF_Q4_K: case H3_GGUF_Q5_K: {
        float d = f16_at(p), dmin = f16_at(p + 2);
        for (int j = 0; j < 8; j++) {
            int s, m;
            gguf_k4_scale_min(p + 4, j, &s, &m);
            sc[2 * j] = sc[2 * j + 1] = d * (float)s;
            mn[2 * j] = mn[2 * j + 1] = -(dmin * (float)m);
        }
        return;
    }
    case H3_GGUF_IQ4_XS: {
        const float d = f16_at(p);
        for (int j = 0; j < 8; j++) {
            sc[2 * j] = sc[2 * j + 1] = d * (float)(gguf_iq4xs_scale(p, j) - 32);
            mn[2 * j] = mn[2 * j + 1] = 0.0f;
        }
        return;
    }
    case H3_GGUF_Q6_K: {
        const int8_t *scales = (const int8_t *)(p + 192);
        float d = f16_at(p + 208);
        for (int s = 0; s < 16; s++) {
            sc[s] = d * (float)scales[s];
            mn[s] = 0.0f;
        }
        return;
    }
    default:
        return;
    }
}

void gguf_decode_block(int type, const uint8_t *p, int8_t *q, float *sc, float *mn) {
    gguf_decode_scales(type, p, sc, mn);
    switch (type) {
    case H3_GGUF_Q8_0:
        for (int i = 0; i < 32; i++) q[i] = (int8_t)p[2 + i];
        return;
    case H3_GGUF_Q4_0: case H3_GGUF_Q4_1: {
        const int has_m = type == H3_GGUF_Q4_1;
        const uint8_t *qs = p + (has_m ? 4 : 2);
        for (int j = 0; j < 16; j++) {
            q[j] = (int8_t)((qs[j] & 15) - (has_m ? 0 : 8));
            q[j + 16] = (int8_t)((qs[j] >> 4) - (has_m ? 0 : 8));
        }
        return;
    }
    case H3_GGUF_Q5_0: case H3_GGUF_Q5_1: {
        const int has_m = type == H3_GGUF_Q5_1;
        const uint8_t *h = p + (has_m ? 4 : 2);
        const uint8_t *qs = h + 4;
        uint32_t qh = u32_at(h);
        for (int j = 0; j < 16; j++) {
            int lo = (qs[j] & 15) | (int)((qh >> j) & 1) << 4;
            int hi = (qs[j] >> 4) | (int)((qh >> (j + 16)) & 1) << 4;
            q[j] = (int8_t)(lo - (has_m ? 0 : 16));
            q[j + 16] = (int8_t)(hi - (has_m ? 0 : 16));
        }
        return;
    }
    case H3_GGUF_Q2_K: {
        const uint8_t *qs = p + 16;
        for (int h = 0; h < 2; h++)
            for (int j = 0; j < 4; j++)
                for (int l = 0; l < 32; l++) q[128 * h + 32 * j + l] = (int8_t)((qs[32 * h + l] >> (2 * j)) & 3);
        return;
    }
    case H3_GGUF_Q3_K: {
        const uint8_t *hm = p, *qs = p + 32;
        for (int h = 0; h < 2; h++)
            for (int j = 0; j < 4; j++)
                for (int l = 0; l < 32; l++) {
                    int lo = (qs[32 * h + l] >> (2 * j)) & 3;
                    int hi = (hm[l] >> (4 * h + j)) & 1;
                    q[128 * h + 32 * j + l] = (int8_t)(lo - (hi ? 0 : 4));
                }
        return;
    }
    case H3_GGUF_Q4_K: case H3_GGUF_Q5_K: {
        const int five = type == H3_GGUF_Q5_K;
        const uint8_t *qh = p + 16, *qs = p + (five ? 48 : 16);
        for (int j = 0; j < 4; j++)
            for (int l = 0; l < 32; l++) {
                int lo = qs[32 * j + l] & 15, hi = qs[32 * j + l] >> 4;
                if (five) {
                    lo |= ((qh[l] >> (2 * j)) & 1) << 4;
                    hi |= ((qh[l] >> (2 * j + 1)) & 1) << 4;
                }
                q[64 * j + l] = (int8_t)lo;
                q[64 * j + 32 + l] = (int8_t)hi;
            }
        return;
    }
    case H3_GGUF_Q6_K: {
        const uint8_t *ql = p, *qh = p + 128;
        for (int h = 0; h < 2; h++)
            for (int l = 0; l < 32; l++) {
                const uint8_t a = ql[64 * h + l], b = ql[64 * h + l + 32], c = qh[32 * h + l];
                int8_t *o = q + 128 * h + l;
                o[0] = (int8_t)(((a & 15) | (c & 3) << 4) - 32);
                o[32] = (int8_t)(((b & 15) | ((c >> 2) & 3) << 4) - 32);
                o[64] = (int8_t)(((a >> 4) | ((c >> 4) & 3) << 4) - 32);
                o[96] = (int8_t)(((b >> 4) | ((c >> 6) & 3) << 4) - 32);
            }
        return;
    }
    case H3_GGUF_IQ4_NL: case H3_GGUF_IQ4_XS: {
        const int nsub = type == H3_GGUF_IQ4_NL ? 1 : 8;
        const uint8_t *qs = p + (type == H3_GGUF_IQ4_NL ? 2 : 8);
        for (int j = 0; j < nsub; j++)
            for (int l = 0; l < 16; l++) {
                q[32 * j + l] = gguf_iq4_levels[qs[16 * j + l] & 15];
                q[32 * j + 16 + l] = gguf_iq4_levels[qs[16 * j + l] >> 4];
            }
        return;
    }
    default:
        return;
    }
}

h3_status h3_gguf_dequant(int type, const void *src, int64_t n, float *out, h3_err *err) {
    int blk, bytes;
    if (!src || !out) return h3_fail(err, H3_EINVAL, "gguf_dequant: NULL argument");
    if (!h3_gguf_type_size(type, &blk, &bytes)) return h3_fail(err, H3_EINVAL, "gguf_dequant: unknown type %d", type);
    if (n < 0 || n % blk) return h3_fail(err, H3_EINVAL, "gguf_dequant: %lld values are not whole blocks of %d", (long long)n, blk);
    const uint8_t *p = (const uint8_t *)src;
    if (type == H3_GGUF_F32) { memcpy(out, p, (size_t)n * 4); return H3_OK; }
    if (type == H3_GGUF_F16 || type == H3_GGUF_BF16) {
        for (int64_t i = 0; i < n; i++) {
            uint16_t h = (uint16_t)(p[2 * i] | p[2 * i + 1] << 8);
            out[i] = type == H3_GGUF_F16 ? h3_f16_to_f32(h) : h3_bf16_to_f32(h);
        }
        return H3_OK;
    }
    int8_t q[256];
    float sc[256 / GGUF_SUB], mn[256 / GGUF_SUB];
    for (int64_t b = 0; b < n / blk; b++) {
        gguf_decode_block(type, p + b * bytes, q, sc, mn);
        for (int i = 0; i < blk; i++) out[b * blk + i] = sc[i / GGUF_SUB] * (float)q[i] + mn[i / GGUF_SUB];
    }
    return H3_OK;
}

h3_status h3_gguf_quant_act(const float *x, int64_t M, int64_t K, int8_t *q, float *d, h3_err *err) {
    if (!x || !q || !d) return h3_fail(err, H3_EINVAL, "gguf_quant_act: NULL argument");
    if (M < 0 || K <= 0 || K % 32)
        return h3_fail(err, H3_EINVAL, "gguf_quant_act: M = %lld, K = %lld (K must be a positive multiple of 32)",
                       (long long)M, (long long)K);
    int32_t *as = malloc(sizeof(int32_t) * (size_t)(K / 16 + K / 32));
    if (!as) return h3_fail(err, H3_ENOMEM, "gguf_quant_act: out of memory");
    const int64_t ng = (K + GGUF_AG - 1) / GGUF_AG;
    for (int64_t m = 0; m < M; m++) gguf_quant_act_row_ref(x + m * K, K, q + m * K, d + m * ng, as);
    free(as);
    return H3_OK;
}
