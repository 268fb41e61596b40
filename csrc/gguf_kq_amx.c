/* gguf_kq_amx.c — Q4_K and Q5_K on AMX tiles in the K-quants' integer super-block order
 * (gguf_impl.h; gguf_ukr_kq_ref is its scalar definition, equal bit for bit).
 *
 * Why not gguf_amx.c's way (one tile product per 32-input segment, its 16x16 int32 dots
 * stored and folded with that segment's float scale): there every 8192 multiply-adds cost a
 * tile store and a 16-row fold, and the stores, not the products, set the pace.  The K-quants'
 * sub-block scales are 6-bit integers, so they can ride in the weights instead:
 *   bl = u * (sc & 7), bh = u * (sc >> 3)   (<= 31 * 7 = 217: unsigned bytes, TDPBSUD's B)
 * and sum_j sc_j dot_j = sum a bl + 8 * sum a bh, exactly, over a whole super-block of 256
 * inputs: two products at K = 64 (a tile product takes about as long at K = 64 as at 32,
 * bench/results/amx_tile_rates_spr16_s26.txt) where there were two at K = 32, and one store
 * and fold per 256 inputs where there were eight.
 *
 * Tiles (all 16 rows x 64 bytes): C tmm0..3 = rows 0-15 x bl, rows 0-15 x bh, rows 16-31 x bl,
 * rows 16-31 x bh; A tmm4, tmm5 = 16 rows x 64 inputs each (the rows in place, stride lda, or
 * 1 KB of the 32-row tile layout: gguf_ukr_amx_kq_tiles);
 * B tmm6, tmm7 = 16 quads x 16 columns of bl and bh.  One step = 32 rows x one super-block:
 * 4 chunks of 64 inputs, 4 products each, then the 4 C tiles stored.  The previous step's fold
 * (per row: S = lo + 8 hi, the mins' sum by vpdpwssd, two float ops, the activation scale into
 * cb) runs a quarter after each chunk's products, so the vector ports work while the tiles
 * multiply.  Rows past the last multiple of 32 are copied, zero-padded, into a 32-row block
 * (the tile layout has them zero already).
 *
 * Why the tile layout (session 33): rows in place are K bytes apart, and at the checkpoint's
 * K (3072, 5120, 8192, 25600: multiples of 1 KB) a tile's 16 rows fall into 1 to 4 of L1's 64
 * sets.  With each chunk's 32 rows x 64 bytes contiguous (2 KB) the driver ran Q4_K 1.00-1.09x
 * and Q5_K 1.02-1.07x at the text encoder's M = 128 on a 2-vCPU AMX Xeon, 1.02x / 1.00x at
 * M = 2048 (bench/gguf_switch_ab.py --switch KQ --a 1 --b 2; docs/gguf.md, session 33). */
#include "gguf_impl.h"

#include <immintrin.h>
#include <string.h>

#include "amx_tiles.h"

/* v * m per byte (the products fit a byte): 16-bit multiplies of the even and odd bytes */
static inline __m512i mul_bytes(__m512i v, __m512i m) {
    const __m512i even = _mm512_and_si512(_mm512_mullo_epi16(v, m), _mm512_set1_epi16(0x00ff));
    const __m512i odd = _mm512_slli_epi16(_mm512_mullo_epi16(_mm512_srli_epi16(v, 8), _mm512_srli_epi16(m, 8)), 8);
    return _mm512_or_si512(even, odd);
}

/* bl, bh (u's layout, [nseg * 8 quads][16 columns][4]) from u and each segment's scales */
static void scaled_panels(int nseg, const uint8_t *u, const uint8_t *isc, uint8_t *bl, uint8_t *bh) {
    const __m512i rep = _mm512_set1_epi32(0x01010101), seven = _mm512_set1_epi32(7);
    for (int s = 0; s < nseg; s++) {
        const __m512i sc = _mm512_cvtepu8_epi32(_mm_loadu_si128((const __m128i *)(isc + s * GGUF_NR)));
        const __m512i ml = _mm512_mullo_epi32(_mm512_and_si512(sc, seven), rep);
        const __m512i mh = _mm512_mullo_epi32(_mm512_srli_epi32(sc, 3), rep);
        for (int j = 0; j < 8; j++) {
            const int64_t o = (int64_t)(s * 8 + j) * 64;
            const __m512i v = _mm512_loadu_si512(u + o);
            _mm512_store_si512(bl + o, mul_bytes(v, ml));
            _mm512_store_si512(bh + o, mul_bytes(v, mh));
        }
    }
}

/* rows [q * 8, q * 8 + 8) (of nv valid) of a stored step: 32 rows from r0, super-block b */
static inline __attribute__((always_inline)) void fold_quarter(int q, int nv, int64_t r0, int b, const int32_t *cbuf,
                                                               const int32_t *mp, const float *ds, const float *dm,
                                                               const float *d, int64_t ldd, const int32_t *as,
                                                               int64_t ldas, float *cb) {
    const __m512i p0 = _mm512_load_si512(mp + (b * 4 + 0) * 16), p1 = _mm512_load_si512(mp + (b * 4 + 1) * 16);
    const __m512i p2 = _mm512_load_si512(mp + (b * 4 + 2) * 16), p3 = _mm512_load_si512(mp + (b * 4 + 3) * 16);
    const __m512 dsv = _mm512_loadu_ps(ds + b * GGUF_NR), dmv = _mm512_loadu_ps(dm + b * GGUF_NR);
    const int end = H3_MIN(q * 8 + 8, nv);
    for (int r = q * 8; r < end; r++) {
        const int32_t *lo = cbuf + (2 * (r >> 4)) * 256 + (r & 15) * 16;
        const __m512i S = _mm512_add_epi32(_mm512_load_si512(lo), _mm512_slli_epi32(_mm512_load_si512(lo + 256), 3));
        const int32_t *ar = as + (r0 + r) * ldas + b * 8;
        __m512i M = _mm512_setzero_si512();
        M = _mm512_dpwssd_epi32(M, _mm512_set1_epi32((int)((uint32_t)(uint16_t)ar[0] | (uint32_t)ar[1] << 16)), p0);
        M = _mm512_dpwssd_epi32(M, _mm512_set1_epi32((int)((uint32_t)(uint16_t)ar[2] | (uint32_t)ar[3] << 16)), p1);
        M = _mm512_dpwssd_epi32(M, _mm512_set1_epi32((int)((uint32_t)(uint16_t)ar[4] | (uint32_t)ar[5] << 16)), p2);
        M = _mm512_dpwssd_epi32(M, _mm512_set1_epi32((int)((uint32_t)(uint16_t)ar[6] | (uint32_t)ar[7] << 16)), p3);
        const __m512 h = _mm512_fmadd_ps(_mm512_cvtepi32_ps(M), dmv, _mm512_mul_ps(_mm512_cvtepi32_ps(S), dsv));
        float *c = cb + (r0 + r) * GGUF_NR;
        _mm512_storeu_ps(c, _mm512_fmadd_ps(_mm512_set1_ps(d[(r0 + r) * ldd + b]), h, _mm512_loadu_ps(c)));
    }
}

/* tl 0: the activations' rows in place (row i at a + i * lda); tl 1: in the 32-row tile layout
 * (gguf_impl.h, gguf_ukr_amx_kq_tiles), block blk's chunk of 64 inputs k at a + blk * lda +
 * (k / 64) * GGUF_KQ_CHUNK, its rows 16-31 1 KB on, and the rows past mr zero */
static inline __attribute__((always_inline)) void kq_body(const int tl, int mr, int nsb, const int8_t *a, int64_t lda,
                                                          const float *d, int64_t ldd, const int32_t *as, int64_t ldas,
                                                          const uint8_t *u, const uint8_t *isc, const uint8_t *imn,
                                                          const float *ds, const float *dm, float *cb) {
    uint8_t bl[GGUF_KB * GGUF_NR] __attribute__((aligned(64))), bh[GGUF_KB * GGUF_NR] __attribute__((aligned(64)));
    int8_t pad[32 * GGUF_KB] __attribute__((aligned(64)));
    int32_t cbuf[2][4 * 256] __attribute__((aligned(64)));
    int32_t mp[(GGUF_KB / 256) * 4 * 16] __attribute__((aligned(64)));
    if (mr <= 0 || nsb <= 0) return;
    const int nk = nsb * 256, nblk = (mr + 31) / 32, tail = mr % 32;
    scaled_panels(nsb * 8, u, isc, bl, bh);
    for (int b = 0; b < nsb; b++) /* the mins of sub-blocks 2p, 2p + 1 as int16 pairs: vpdpwssd's */
        for (int p = 0; p < 4; p++)
            for (int c = 0; c < GGUF_NR; c++)
                mp[(b * 4 + p) * 16 + c] = (int32_t)((uint32_t)imn[(b * 8 + 2 * p) * GGUF_NR + c] |
                                                     (uint32_t)imn[(b * 8 + 2 * p + 1) * GGUF_NR + c] << 16);
    if (tail && !tl) { /* the last block's rows, zero-padded to 32 */
        memset(pad, 0, (size_t)32 * nk);
        for (int r = 0; r < tail; r++) memcpy(pad + (int64_t)r * nk, a + (int64_t)(mr - tail + r) * lda, (size_t)nk);
    }
    MEMORY_FENCE();
    amx_config_tiles();
    const int steps = nblk * nsb;
    int64_t pr0 = 0; /* the step stored last: its rows, valid rows, super-block, buffer */
    int pnv = 0, pb = 0, have = 0;
    int blk = 0, b = 0;
    for (int t = 0; t <= steps; t++) {
        const int32_t *pbuf = cbuf[(t + 1) & 1];
        if (t == steps) {
            MEMORY_FENCE();
            for (int q = 0; q < 4; q++) fold_quarter(q, pnv, pr0, pb, pbuf, mp, ds, dm, d, ldd, as, ldas, cb);
            break;
        }
        const int last = !tl && tail && blk == nblk - 1;
        const int8_t *a0 = last ? pad : a + (int64_t)blk * (tl ? 1 : 32) * lda;
        const int64_t la = tl ? 64 : last ? nk : lda;
        _tile_zero(0);
        _tile_zero(1);
        _tile_zero(2);
        _tile_zero(3);
        for (int ch = 0; ch < 4; ch++) {
            const int64_t k = (int64_t)b * 256 + ch * 64;
            const int8_t *ac = tl ? a0 + (k / 64) * GGUF_KQ_CHUNK : a0 + k; /* the chunk's rows 0-15 */
            _tile_loadd(4, ac, la);
            _tile_loadd(5, ac + 16 * la, la);
            _tile_loadd(6, bl + k * GGUF_NR, 64);
            _tile_loadd(7, bh + k * GGUF_NR, 64);
            _tile_dpbsud(0, 4, 6);
            _tile_dpbsud(1, 4, 7);
            _tile_dpbsud(2, 5, 6);
            _tile_dpbsud(3, 5, 7);
            if (have) fold_quarter(ch, pnv, pr0, pb, pbuf, mp, ds, dm, d, ldd, as, ldas, cb);
        }
        int32_t *sbuf = cbuf[t & 1];
        MEMORY_FENCE();
        _tile_stored(0, sbuf, 64);
        _tile_stored(1, sbuf + 256, 64);
        _tile_stored(2, sbuf + 512, 64);
        _tile_stored(3, sbuf + 768, 64);
        MEMORY_FENCE();
        pr0 = (int64_t)blk * 32;
        pnv = H3_MIN(32, mr - blk * 32);
        pb = b;
        have = 1;
        if (++b == nsb) { b = 0; blk++; }
    }
}

void gguf_ukr_amx_kq(int mr, int nsb, const int8_t *a, int64_t lda, const float *d, int64_t ldd, const int32_t *as,
                     int64_t ldas, const uint8_t *u, const uint8_t *isc, const uint8_t *imn, const float *ds,
                     const float *dm, float *cb) {
    kq_body(0, mr, nsb, a, lda, d, ldd, as, ldas, u, isc, imn, ds, dm, cb);
}

void gguf_ukr_amx_kq_tiles(int mr, int nsb, const int8_t *a, int64_t ldt, const float *d, int64_t ldd,
                           const int32_t *as, int64_t ldas, const uint8_t *u, const uint8_t *isc, const uint8_t *imn,
                           const float *ds, const float *dm, float *cb) {
    kq_body(1, mr, nsb, a, ldt, d, ldd, as, ldas, u, isc, imn, ds, dm, cb);
}
