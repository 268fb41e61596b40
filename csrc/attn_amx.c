/* attn_amx.c — attention on Intel AMX bf16 tiles, for bf16 models (h3_attn_args.bf16_inputs:
 * q, k and v hold bf16-representable values, as a bf16 DiT or ViT block gives them).
 *
 * A unit is one head and 128 queries, walked over the keys 32 at a time:
 *   S  = Q K^T     TDPBF16PS, fp32 sums of exact bf16 products (2 x 2 C tiles per 32 rows)
 *   online softmax in AVX-512 (h3v_exp), fp32 running max and sum per row;
 *   P  = softmax numerators rounded to bf16 (as torch's bf16 attention rounds them)
 *   O  = O * alpha + P V   TDPBF16PS into fp32 O kept in the thread's scratch.
 * Each unit packs the key block it reads into tile layouts (K as VNNI pairs of d, V as VNNI
 * pairs of keys), so the workspace stays per thread and independent of S.  Only non-causal
 * attention with D a multiple of 32 runs here (attn_amx_usable); everything else takes the
 * AVX-512 kernels.  The summation order inside a TDPBF16PS is the hardware's, so results
 * are close to the float32 kernels' (the P rounding dominates: ~2^-9 relative), not equal.
 *
 * Tiles (palette 1, all 16 rows x 64 bytes): C = tmm0..3, A = tmm4, tmm5, B = tmm6, tmm7. */
#include "attn_impl.h"

#include <immintrin.h>
#include <math.h>
#include <string.h>

#include "amx_tiles.h"
#include "simd_avx512.h"

#define BQ 128 /* queries per unit: four 32-row quarters, which share each packed key block */
#define BK 32 /* keys per step */

int attn_amx_usable(const h3_attn_args *a) {
    return a->bf16_inputs && !a->causal && a->D % 32 == 0 && a->D <= 256;
}

/* 32 floats -> 32 bf16 in order (round to nearest even; exact for bf16-valued input) */
static inline __m512i bf16x32(const float *p) {
    return (__m512i)_mm512_cvtne2ps_pbh(_mm512_loadu_ps(p + 16), _mm512_loadu_ps(p));
}

/* 16 x 16 transpose of 32-bit words, in registers */
static inline void transpose16_epi32(__m512i r[16]) {
    __m512i t[16];
    for (int i = 0; i < 16; i += 2) {
        t[i] = _mm512_unpacklo_epi32(r[i], r[i + 1]);
        t[i + 1] = _mm512_unpackhi_epi32(r[i], r[i + 1]);
    }
    for (int i = 0; i < 16; i += 4) {
        r[i] = _mm512_unpacklo_epi64(t[i], t[i + 2]);
        r[i + 1] = _mm512_unpackhi_epi64(t[i], t[i + 2]);
        r[i + 2] = _mm512_unpacklo_epi64(t[i + 1], t[i + 3]);
        r[i + 3] = _mm512_unpackhi_epi64(t[i + 1], t[i + 3]);
    }
    /* r[4g + j] holds columns j, j+4, j+8, j+12 of rows 4g..4g+3 (one per 128-bit lane) */
    for (int j = 0; j < 4; j++) {
        t[j] = _mm512_shuffle_i32x4(r[j], r[j + 4], 0x88);
        t[j + 4] = _mm512_shuffle_i32x4(r[j], r[j + 4], 0xdd);
        t[j + 8] = _mm512_shuffle_i32x4(r[j + 8], r[j + 12], 0x88);
        t[j + 12] = _mm512_shuffle_i32x4(r[j + 8], r[j + 12], 0xdd);
    }
    for (int j = 0; j < 8; j++) {
        r[j] = _mm512_shuffle_i32x4(t[j], t[j + 8], 0x88);
        r[j + 8] = _mm512_shuffle_i32x4(t[j], t[j + 8], 0xdd);
    }
}

/* K rows [k0, k0+nk) of head g -> B tiles Kb[c][j] (d chunk c of 32, key half j):
 * tile row r, word n = the bf16 pair (d = 32c+2r, 32c+2r+1) of key k0+16j+n. */
static void pack_k(const h3_attn_args *a, const float *k, int g, int64_t k0, int nk, uint16_t *Kb) {
    const int D = a->D;
    for (int c = 0; c < D / 32; c++)
        for (int j = 0; j < 2; j++) {
            __m512i r[16];
            for (int n = 0; n < 16; n++) {
                int key = 16 * j + n;
                r[n] = key < nk ? bf16x32(k + (k0 + key) * a->ldk + (int64_t)g * D + 32 * c)
                                : _mm512_setzero_si512();
            }
            transpose16_epi32(r);
            uint16_t *t = Kb + ((size_t)c * 2 + j) * 512;
            for (int row = 0; row < 16; row++) _mm512_storeu_si512(t + row * 32, r[row]);
        }
}

/* V rows [k0, k0+nk) of head g -> B tiles Vb[t] (d columns 16t..16t+15):
 * tile row r, word n = the bf16 pair (key k0+2r, k0+2r+1) of column 16t+n. */
static void pack_v(const h3_attn_args *a, const float *v, int g, int64_t k0, int nk, uint16_t *Vb) {
    const int D = a->D;
    const __m512i idx = _mm512_set_epi16(31, 15, 30, 14, 29, 13, 28, 12, 27, 11, 26, 10, 25, 9, 24, 8,
                                         23, 7, 22, 6, 21, 5, 20, 4, 19, 3, 18, 2, 17, 1, 16, 0);
    for (int r = 0; r < 16; r++) {
        const int ka = 2 * r, kb = 2 * r + 1;
        const float *va = ka < nk ? v + (k0 + ka) * a->ldv + (int64_t)g * D : NULL;
        const float *vb = kb < nk ? v + (k0 + kb) * a->ldv + (int64_t)g * D : NULL;
        for (int t = 0; t < D / 16; t++) {
            __m512 lo = va ? _mm512_loadu_ps(va + 16 * t) : _mm512_setzero_ps();
            __m512 hi = vb ? _mm512_loadu_ps(vb + 16 * t) : _mm512_setzero_ps();
            /* [16 bf16 of key ka | 16 of key kb] -> interleaved pairs */
            __m512i both = (__m512i)_mm512_cvtne2ps_pbh(hi, lo);
            _mm512_storeu_si512(Vb + ((size_t)t * 16 + r) * 32, _mm512_permutexvar_epi16(idx, both));
        }
    }
}

/* One unit: head h, queries [q0, q0 + BQ). */
static void attn_unit_amx(const h3_attn_args *a, const float *q, const float *k, const float *v,
                          float *out, int h, int64_t q0, float *ws) {
    const int D = a->D, nch = D / 32;
    const int g = h / (a->Hq / a->Hkv);
    const int64_t S = a->S;
    const int nq = (int)H3_MIN((int64_t)BQ, S - q0);
    /* scratch, 224 D + 1792 floats (attn_ws_floats gives 256 D + 4480 for BQ, BK): */
    uint16_t *Qb = (uint16_t *)ws;                 /* [BQ/32][nch][32 rows][32]    128 D bf16 */
    uint16_t *Kb = Qb + (size_t)BQ * D;            /* [nch][2][16][32]              32 D bf16 */
    uint16_t *Vb = Kb + (size_t)BK * D;            /* [D/16][16][32]                32 D bf16 */
    float *O = (float *)(Vb + (size_t)BK * D);     /* [BQ][D] f32 */
    float *Sc = O + (size_t)BQ * D;                /* [32][32] f32 scores */
    uint16_t *Pb = (uint16_t *)(Sc + 32 * 32);     /* [32][32] bf16 probabilities */
    float *mrow = (float *)(Pb + 32 * 32);         /* [BQ] running max (scaled scores) */
    float *lrow = mrow + BQ;                       /* [BQ] running sum */

    /* Q -> A tiles: quarter hf, chunk c: 32 rows x 32 bf16 (rows past S zero) */
    for (int i = 0; i < BQ; i++) {
        const float *qr = q + (q0 + i) * a->ldq + (int64_t)h * D;
        for (int c = 0; c < nch; c++) {
            uint16_t *dst = Qb + (((size_t)(i / 32) * nch + c) * 32 + (i % 32)) * 32;
            _mm512_storeu_si512(dst, i < nq ? bf16x32(qr + 32 * c) : _mm512_setzero_si512());
        }
    }
    memset(O, 0, (size_t)BQ * D * sizeof(float));
    for (int i = 0; i < BQ; i++) {
        mrow[i] = -INFINITY;
        lrow[i] = 0.0f;
    }
    amx_config_tiles();
    const __m512 scale = _mm512_set1_ps(a->scale);
    for (int64_t k0 = 0; k0 < S; k0 += BK) {
        const int nk = (int)H3_MIN((int64_t)BK, S - k0);
        pack_k(a, k, g, k0, nk, Kb);
        pack_v(a, v, g, k0, nk, Vb);
        const __mmask16 m0 = nk >= 16 ? 0xffff : (__mmask16)((1u << nk) - 1u);
        const __mmask16 m1 = nk >= 32 ? 0xffff : nk <= 16 ? 0 : (__mmask16)((1u << (nk - 16)) - 1u);
        MEMORY_FENCE();
        for (int hf = 0; hf < BQ / 32 && hf * 32 < nq; hf++) {
            /* S = Q K^T for the quarter's rows hf*32 .. +31 */
            _tile_zero(0);
            _tile_zero(1);
            _tile_zero(2);
            _tile_zero(3);
            for (int c = 0; c < nch; c++) {
                const uint16_t *qa = Qb + ((size_t)hf * nch + c) * 32 * 32;
                _tile_loadd(4, qa, 64);
                _tile_loadd(5, qa + 16 * 32, 64);
                _tile_loadd(6, Kb + ((size_t)c * 2 + 0) * 512, 64);
                _tile_loadd(7, Kb + ((size_t)c * 2 + 1) * 512, 64);
                _tile_dpbf16ps(0, 4, 6);
                _tile_dpbf16ps(1, 4, 7);
                _tile_dpbf16ps(2, 5, 6);
                _tile_dpbf16ps(3, 5, 7);
            }
            _tile_stored(0, Sc, 128);
            _tile_stored(1, Sc + 16, 128);
            _tile_stored(2, Sc + 16 * 32, 128);
            _tile_stored(3, Sc + 16 * 32 + 16, 128);
            MEMORY_FENCE();
            /* online softmax of the 32 rows: new row maxima, then alpha = exp(old - new)
             * for all 32 at once, then P rows -> bf16 and O rows *= alpha */
            float *mr = mrow + hf * 32, *lr = lrow + hf * 32;
            float mnew[32] __attribute__((aligned(64)));
            for (int i = 0; i < 32; i++) {
                const __m512 ninf = _mm512_set1_ps(-INFINITY);
                __m512 s0 = _mm512_mask_mul_ps(ninf, m0, _mm512_loadu_ps(Sc + i * 32), scale);
                __m512 s1 = _mm512_mask_mul_ps(ninf, m1, _mm512_loadu_ps(Sc + i * 32 + 16), scale);
                mnew[i] = fmaxf(mr[i], _mm512_reduce_max_ps(_mm512_max_ps(s0, s1)));
            }
            float alpha[32] __attribute__((aligned(64)));
            for (int i = 0; i < 32; i += 16) {
                /* the first block: old = -inf gives ~1e-38 (h3v_exp's floor); O and l are 0 */
                __m512 e = h3v_exp(_mm512_sub_ps(_mm512_loadu_ps(mr + i), _mm512_loadu_ps(mnew + i)));
                _mm512_storeu_ps(alpha + i, e);
                _mm512_storeu_ps(mr + i, _mm512_loadu_ps(mnew + i));
            }
            for (int i = 0; i < 32; i++) {
                const __m512 mv = _mm512_set1_ps(mnew[i]);
                __m512 s0 = _mm512_mul_ps(_mm512_loadu_ps(Sc + i * 32), scale);
                __m512 s1 = _mm512_mul_ps(_mm512_loadu_ps(Sc + i * 32 + 16), scale);
                __m512 p0 = _mm512_maskz_mov_ps(m0, h3v_exp(_mm512_sub_ps(s0, mv)));
                __m512 p1 = _mm512_maskz_mov_ps(m1, h3v_exp(_mm512_sub_ps(s1, mv)));
                lr[i] = lr[i] * alpha[i] + _mm512_reduce_add_ps(_mm512_add_ps(p0, p1));
                _mm512_storeu_si512(Pb + i * 32, (__m512i)_mm512_cvtne2ps_pbh(p1, p0));
                if (alpha[i] != 1.0f) {
                    float *o = O + (size_t)(hf * 32 + i) * D;
                    const __m512 av = _mm512_set1_ps(alpha[i]);
                    for (int d = 0; d < D; d += 16) _mm512_storeu_ps(o + d, _mm512_mul_ps(_mm512_loadu_ps(o + d), av));
                }
            }
            MEMORY_FENCE();
            /* O[rows] += P V, 32 columns (two 16-column tiles) at a time */
            _tile_loadd(4, Pb, 64);
            _tile_loadd(5, Pb + 16 * 32, 64);
            float *ob = O + (size_t)hf * 32 * D;
            for (int dc = 0; dc < nch; dc++) {
                float *o = ob + 32 * dc;
                _tile_loadd(0, o, D * 4);
                _tile_loadd(1, o + 16, D * 4);
                _tile_loadd(2, o + 16 * D, D * 4);
                _tile_loadd(3, o + 16 * D + 16, D * 4);
                _tile_loadd(6, Vb + (size_t)(2 * dc) * 512, 64);
                _tile_loadd(7, Vb + (size_t)(2 * dc + 1) * 512, 64);
                _tile_dpbf16ps(0, 4, 6);
                _tile_dpbf16ps(1, 4, 7);
                _tile_dpbf16ps(2, 5, 6);
                _tile_dpbf16ps(3, 5, 7);
                _tile_stored(0, o, D * 4);
                _tile_stored(1, o + 16, D * 4);
                _tile_stored(2, o + 16 * D, D * 4);
                _tile_stored(3, o + 16 * D + 16, D * 4);
            }
            MEMORY_FENCE();
        }
    }
    _tile_release();
    for (int i = 0; i < nq; i++) {
        float *dst = out + (q0 + i) * a->ldo + (int64_t)h * D;
        const float *o = O + (size_t)i * D;
        const __m512 inv = _mm512_set1_ps(1.0f / lrow[i]);
        for (int d = 0; d < D; d += 16) _mm512_storeu_ps(dst + d, _mm512_mul_ps(_mm512_loadu_ps(o + d), inv));
    }
}

const attn_kernels attn_kernels_amx = {BQ, BK, attn_unit_amx};
