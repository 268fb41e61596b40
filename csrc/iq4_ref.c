/* iq4_ref.c — scalar decoders of ggml's IQ4_NL and IQ4_XS blocks (written from the format
 * description; bit-exact with the gguf package's numpy dequantiser, tests/test_gguf.py).
 *
 * Both map 4-bit codes through one non-uniform table of 16 int8 levels (kvalues_iq4nl)
 * and scale them:
 *   IQ4_NL (id 20): 32 values in 18 bytes: f16 d | qs[16]; value j < 16 is the low nibble
 *     of qs[j], value 16 + j its high nibble; w = d * level.
 *   IQ4_XS (id 23): 256 values in 136 bytes: f16 d | u16 scales_h | u8 scales_l[4] |
 *     qs[128]; eight sub-blocks of 32, sub-block i with the 6-bit scale
 *     ls = (scales_l[i/2] >> 4*(i%2) & 15) | ((scales_h >> 2i & 3) << 4), dl = d * (ls - 32),
 *     and its 16 bytes of qs laid out as IQ4_NL's.
 * Every value is one float32 product of the block's float32 scale and the level (the
 * reference's order: dl = d * (ls - 32) first, then dl * level).
 *
 * Found in published H3 sets (an IQ4_XS DiT among the re-uploaded unsloth quants, see
 * docs/gguf.md), so the loader decodes them at load (dequantised, then converted as a float
 * weight); the GGUF GEMM does not run them as stored yet.  Their int8 decode for it is
 * direct: q = level, a scale per 32 (d or dl), no offset. */
#include "h3_internal.h"

static const int8_t kvalues_iq4nl[16] = {-127, -104, -83, -65, -49, -35, -22, -10,
                                         1,    13,   25,  38,  53,  69,  89,  113};

static uint16_t rd16(const uint8_t *p) { return (uint16_t)(p[0] | (p[1] << 8)); }

static void nl_32(const uint8_t *qs, float d, float *out) {
    for (int j = 0; j < 16; j++) {
        out[j] = d * (float)kvalues_iq4nl[qs[j] & 15];
        out[j + 16] = d * (float)kvalues_iq4nl[qs[j] >> 4];
    }
}

int h3_iq4_type_size(int type, int *blk, int *bytes) {
    if (type == H3_GGUF_IQ4_NL) { *blk = 32; *bytes = 18; return 1; }
    if (type == H3_GGUF_IQ4_XS) { *blk = 256; *bytes = 136; return 1; }
    return 0;
}

h3_status h3_iq4_dequant(int type, const void *src, int64_t n, float *out, h3_err *err) {
    int blk = 0, bytes = 0;
    if (!h3_iq4_type_size(type, &blk, &bytes))
        return h3_fail(err, H3_EINVAL, "iq4_dequant: type %d is not IQ4_NL (20) or IQ4_XS (23)", type);
    if (!src || !out || n < 0 || n % blk)
        return h3_fail(err, H3_EINVAL, "iq4_dequant: %lld values are not whole blocks of %d", (long long)n, blk);
    const uint8_t *b = (const uint8_t *)src;
    for (int64_t i = 0; i < n / blk; i++, b += bytes, out += blk) {
        const float d = h3_f16_to_f32(rd16(b));
        if (type == H3_GGUF_IQ4_NL) {
            nl_32(b + 2, d, out);
            continue;
        }
        const uint16_t sh = rd16(b + 2);
        for (int s = 0; s < 8; s++) {
            const int ls = ((b[4 + s / 2] >> (4 * (s % 2))) & 15) | (((sh >> (2 * s)) & 3) << 4);
            nl_32(b + 8 + 16 * s, d * (float)(ls - 32), out + 32 * s);
        }
    }
    return H3_OK;
}
