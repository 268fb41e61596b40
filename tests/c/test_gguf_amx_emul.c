/* tests/c/test_gguf_amx_emul.c — csrc/gguf_amx.c (the GGUF micro-kernel on AMX tiles) against
 * the scalar definition, gguf_ukr_ref (csrc/gguf_panel_ref.c), bit for bit, and
 * csrc/gguf_kq_amx.c (Q4_K / Q5_K in the integer super-block order) against its own,
 * gguf_ukr_kq_ref, bit for bit and the common order's to 1e-6, with the AVX-512
 * and AMX intrinsics replaced by the plain-C emulation in tests/c/amx_emul/immintrin.h.  This
 * checks the kernel's own logic on any machine (tile shapes and addresses, the two-buffer
 * pipeline, the fold's float order, 16-row groups, odd segment counts, the rows past the last
 * 16, K blocks inside a longer row); the hardware run is bench/gguf_amx_check.py.
 *
 * Built and run by tests/test_gguf_amx_emulated.py:
 *   gcc -Itests/c/amx_emul -Icsrc tests/c/test_gguf_amx_emul.c csrc/gguf_panel_ref.c -lm
 * Prints "ok: N checks" and exits 0, or names the first mismatch and exits 1. */
#include "gguf_amx.c"
#include "gguf_kq_amx.c"
#include "gguf_q8d_amx.c"

#include <stdio.h>
#include <stdlib.h>

#include "gguf_ref_stubs.h"

/* the rows past the last 16: on the hardware the AVX-512 kernel, equal to ref by the driver
 * tests; here ref itself, counted so that the test knows the tail was taken */
static int tail_calls;
void gguf_ukr_avx512_signed(int mr, const gguf_kind *t, int nseg, const int8_t *a, int64_t lda, const float *d,
                     int64_t ldd, const int32_t *as, int64_t ldas, const uint8_t *u, const float *sc,
                     const float *mn, float *cb) {
    tail_calls++;
    gguf_ukr_ref(mr, t, nseg, a, lda, d, ldd, as, ldas, u, sc, mn, cb);
}

static uint64_t rng = 0x9e3779b97f4a7c15ull;
static uint32_t rnd(void) {
    rng ^= rng << 13; rng ^= rng >> 7; rng ^= rng << 17;
    return (uint32_t)(rng >> 11);
}
static float rndf(void) { return ((float)(rnd() % 2000001) - 1000000.0f) / 1000000.0f; } /* [-1, 1] */


/* gguf_kq_amx.c against gguf_ukr_kq_ref bit for bit, and both against the common order
 * (gguf_ukr_ref on sc = ds * isc, mn = dm * imn: exact float products) within 1e-6 of the
 * largest output (observed ~3e-8: the common order rounds after each of 8 sub-blocks; a
 * wrong tile, scale or min would be off by ~1e-2 or more) */
static int check_kq(const int8_t *a, int64_t K, const float *d, const int32_t *as, float *cb0, float *cb1,
                    int *checks) {
    static const int mrs[] = {1, 15, 16, 17, 31, 32, 33, 48, 64, 80, 130};
    static const int types[] = {H3_GGUF_Q4_K, H3_GGUF_Q5_K};
    uint8_t u[512 * 16] __attribute__((aligned(64)));
    uint8_t isc[16 * 16], imn[16 * 16];
    float ds[2 * 16], dm[2 * 16], sc[16 * 16], mn[16 * 16];
    float *cb2 = malloc(sizeof(float) * 130 * 16);
    const int64_t ldas = K / 16 + K / 32;
    double worst = 0;
    for (int ti = 0; ti < 2; ti++) {
        const gguf_kind *t = gguf_kind_of(types[ti]);
        for (int nsb = 1; nsb <= 2; nsb++) {
            const int nk = nsb * 256, nr = 9 + (int)(rnd() % 8);
            const int64_t k0 = nk == 256 ? 512 : 256; /* a K block inside the row, on a group */
            for (int c = 0; c < 16; c++) {
                for (int k = 0; k < nk; k++)
                    u[((k / 4) * 16 + c) * 4 + k % 4] = c < nr ? (uint8_t)(rnd() % (unsigned)(t->umax + 1)) : 0;
                for (int b = 0; b < nsb; b++) {
                    ds[b * 16 + c] = c < nr ? rndf() * 0.001f : 0.0f;
                    dm[b * 16 + c] = c < nr ? -fabsf(rndf()) * 0.002f : 0.0f;
                }
                for (int s = 0; s < nk / 32; s++) {
                    /* the extremes too: 63 * 31 in bl / bh, the largest mins */
                    isc[s * 16 + c] = c < nr ? (uint8_t)(s % 5 == 0 ? 63 : rnd() % 64) : 0;
                    imn[s * 16 + c] = c < nr ? (uint8_t)(s % 7 == 0 ? 63 : rnd() % 64) : 0;
                    sc[s * 16 + c] = ds[(s / 8) * 16 + c] * (float)isc[s * 16 + c];
                    mn[s * 16 + c] = dm[(s / 8) * 16 + c] * (float)imn[s * 16 + c];
                }
            }
            const int32_t *asp = as + K / 16 + k0 / 32;
            for (size_t mi = 0; mi < sizeof mrs / sizeof mrs[0]; mi++) {
                const int mr = mrs[mi];
                for (int e = 0; e < mr * 16; e++) cb0[e] = cb1[e] = cb2[e] = rndf();
                gguf_ukr_kq_ref(mr, nsb, a + k0, K, d + k0 / GGUF_AG, K / 32, asp, ldas, u, isc, imn, ds, dm, cb0);
                gguf_ukr_amx_kq(mr, nsb, a + k0, K, d + k0 / GGUF_AG, K / 32, asp, ldas, u, isc, imn, ds, dm, cb1);
                gguf_ukr_ref(mr, t, nk / 32, a + k0, K, d + k0 / GGUF_AG, K / 32, asp, ldas, u, sc, mn, cb2);
                /* the activations' rows in the kq route's 32-row tile layout (zero past mr): the
                 * tiles kernel and its scalar form on them, from the same start, give the same bits */
                const int64_t ldt = 32 * (int64_t)nk;
                int8_t *at = calloc((size_t)((mr + 31) / 32) * (size_t)ldt, 1);
                float *cb3 = malloc(sizeof(float) * (size_t)mr * 16), *cb4 = malloc(sizeof(float) * (size_t)mr * 16);
                for (int i = 0; i < mr; i++)
                    for (int k = 0; k < nk; k++) at[(i / 32) * ldt + (k / 64) * 2048 + (i % 32) * 64 + k % 64] = a[i * K + k0 + k];
                for (int e = 0; e < mr * 16; e++) cb3[e] = cb4[e] = 0.25f * (float)(e % 7);
                gguf_ukr_amx_kq_tiles(mr, nsb, at, ldt, d + k0 / GGUF_AG, K / 32, asp, ldas, u, isc, imn, ds, dm, cb3);
                gguf_ukr_kq_tiles_ref(mr, nsb, at, ldt, d + k0 / GGUF_AG, K / 32, asp, ldas, u, isc, imn, ds, dm, cb4);
                float *cb5 = malloc(sizeof(float) * (size_t)mr * 16);
                for (int e = 0; e < mr * 16; e++) cb5[e] = 0.25f * (float)(e % 7);
                gguf_ukr_kq_ref(mr, nsb, a + k0, K, d + k0 / GGUF_AG, K / 32, asp, ldas, u, isc, imn, ds, dm, cb5);
                const int tiles_ok = !memcmp(cb3, cb4, sizeof(float) * (size_t)mr * 16) &&
                                     !memcmp(cb3, cb5, sizeof(float) * (size_t)mr * 16);
                free(at); free(cb3); free(cb4); free(cb5);
                if (!tiles_ok) {
                    printf("FAIL kq tiles type %d nsb %d mr %d: the tile-layout kernel or its reference differs\n",
                           types[ti], nsb, mr);
                    free(cb2);
                    return 1;
                }
                double big = 0, diff = 0;
                for (int e = 0; e < mr * 16; e++) {
                    if (memcmp(&cb0[e], &cb1[e], 4)) {
                        printf("FAIL kq type %d nsb %d mr %d row %d col %d: kq_ref %.9g amx_kq %.9g\n", types[ti], nsb,
                               mr, e / 16, e % 16, cb0[e], cb1[e]);
                        free(cb2);
                        return 1;
                    }
                    big = fmax(big, fabs((double)cb2[e]));
                    diff = fmax(diff, fabs((double)cb0[e] - (double)cb2[e]));
                }
                if (diff > 1e-6 * big) {
                    printf("FAIL kq type %d nsb %d mr %d: %g from the common order (largest %g)\n", types[ti], nsb, mr,
                           diff, big);
                    free(cb2);
                    return 1;
                }
                worst = fmax(worst, diff / big);
                (*checks)++;
            }
        }
    }
    printf("kq: largest difference from the common order %.3g of the largest output\n", worst);
    free(cb2);
    return 0;
}

/* gguf_q8d_amx.c (Q8_0 blocks in place as the A tiles, the activations in the 16-row tile
 * layout as B, cb transposed) against gguf_ukr_ref on the same rows decoded to its panel, bit
 * for bit: row counts around the 16-row tiles, each K block length, a K block inside a longer
 * row, a cb stride past mr, and 16 weight rows whose stride is a Q8_0 row's (not a multiple of
 * 64).  Wrong roles of A and B, a transposed store, a scale of the wrong row or segment, the
 * live-row mask or the group ends would each change bits. */
static int check_q8d(const int8_t *a, int64_t K, const float *d, const int32_t *as, int *checks) {
    static const int mrs[] = {1, 15, 16, 17, 31, 32, 33, 48, 80, 130};
    static const int nks[] = {32, 96, 256, 512};
    const gguf_kind *t = gguf_kind_of(H3_GGUF_Q8_0);
    const int64_t ldw = K / 32 * 34, ldas = K / 16 + K / 32, MT = 144; /* 130 rows up to whole tiles */
    uint8_t *w = malloc((size_t)(16 * ldw));
    int8_t *at = calloc((size_t)(MT * K), 1); /* the tile layout: per 16 rows [K / 4][16][4] */
    float *cb0 = malloc(sizeof(float) * 130 * 16), *cbt = malloc(sizeof(float) * 16 * 140);
    uint8_t u[512 * 16] __attribute__((aligned(64)));
    float sc[16 * 16];
    for (int r = 0; r < 16; r++)
        for (int64_t b = 0; b < K / 32; b++) {
            uint8_t *p = w + r * ldw + b * 34;
            const uint16_t h = (uint16_t)((rnd() & 1) << 15 | (3 + rnd() % 12) << 10 | rnd() % 1024); /* normal */
            p[0] = (uint8_t)h; p[1] = (uint8_t)(h >> 8);
            for (int k = 0; k < 32; k++) p[2 + k] = (uint8_t)(k % 9 == 0 ? (k % 2 ? 127 : 128) : rnd() % 256);
        }
    for (int64_t m = 0; m < 130; m++)
        for (int64_t k = 0; k < K; k++) at[(m / 16) * 16 * K + (k / 4) * 64 + (m % 16) * 4 + k % 4] = a[m * K + k];
    for (size_t ni = 0; ni < sizeof nks / sizeof nks[0]; ni++) {
        const int nk = nks[ni], nseg = nk / 32;
        const int64_t k0 = nk <= 256 ? 512 : 256; /* a K block inside the row, on a group */
        for (int c = 0; c < 16; c++)
            for (int s = 0; s < nseg; s++) {
                const uint8_t *p = w + c * ldw + (k0 / 32 + s) * 34;
                sc[s * 16 + c] = h3_f16_to_f32((uint16_t)(p[0] | p[1] << 8));
                for (int k = 0; k < 32; k++) u[(((s * 32 + k) / 4) * 16 + c) * 4 + k % 4] = (uint8_t)(p[2 + k] ^ 0x80);
            }
        for (size_t mi = 0; mi < sizeof mrs / sizeof mrs[0]; mi++) {
            const int mr = mrs[mi];
            const int64_t ldc = mr + 3;
            for (int e = 0; e < mr * 16; e++) cb0[e] = rndf();
            for (int e = 0; e < 16 * ldc; e++) cbt[e] = -7.0f; /* the stride's gap must stay -7 */
            for (int i = 0; i < mr; i++)
                for (int c = 0; c < 16; c++) cbt[c * ldc + i] = cb0[i * 16 + c];
            gguf_ukr_ref(mr, t, nseg, a + k0, K, d + k0 / GGUF_AG, K / 32, as + K / 16 + k0 / 32, ldas, u, sc, NULL,
                         cb0);
            gguf_ukr_amx_q8d(mr, nseg, w + k0 / 32 * 34, ldw, at + k0 * 16, 16 * K, d + k0 / GGUF_AG, K / 32, cbt,
                             ldc);
            for (int c = 0; c < 16; c++)
                for (int64_t i = 0; i < ldc; i++) {
                    const float want = i < mr ? cb0[i * 16 + c] : -7.0f;
                    if (memcmp(&want, &cbt[c * ldc + i], 4)) {
                        printf("FAIL q8d nk %d mr %d row %lld col %d: ref %.9g q8d %.9g\n", nk, mr, (long long)i, c,
                               want, cbt[c * ldc + i]);
                        free(w); free(at); free(cb0); free(cbt);
                        return 1;
                    }
                }
            (*checks)++;
        }
    }
    free(w); free(at); free(cb0); free(cbt);
    return 0;
}

int main(void) {
    static const struct { int id; const char *name; } types[] = {
        {H3_GGUF_Q8_0, "Q8_0"}, {H3_GGUF_Q4_0, "Q4_0"}, {H3_GGUF_Q4_1, "Q4_1"}, {H3_GGUF_Q5_0, "Q5_0"},
        {H3_GGUF_Q5_1, "Q5_1"}, {H3_GGUF_Q2_K, "Q2_K"}, {H3_GGUF_Q3_K, "Q3_K"}, {H3_GGUF_Q4_K, "Q4_K"},
        {H3_GGUF_Q5_K, "Q5_K"}, {H3_GGUF_Q6_K, "Q6_K"}, {H3_GGUF_IQ4_NL, "IQ4_NL"}, {H3_GGUF_IQ4_XS, "IQ4_XS"}};
    static const int mrs[] = {1, 15, 16, 17, 31, 32, 33, 48, 80, 130};
    static const int nks[] = {32, 96, 256, 512}; /* K block lengths (multiples of every type's block) */
    const int64_t K = 1024, MMAX = 130;
    int checks = 0, tails = 0;
    float *x = malloc(sizeof(float) * MMAX * K), *d = malloc(sizeof(float) * MMAX * (K / 32));
    int8_t *a = malloc((size_t)(MMAX * K));
    int32_t *as = malloc(sizeof(int32_t) * MMAX * (K / 16 + K / 32));
    float *cb0 = malloc(sizeof(float) * MMAX * 16), *cb1 = malloc(sizeof(float) * MMAX * 16);
    uint8_t u[512 * 16] __attribute__((aligned(64)));
    float sc[32 * 16], mn[32 * 16];
    for (int64_t m = 0; m < MMAX; m++) {
        for (int64_t k = 0; k < K; k++) x[m * K + k] = rndf() * (float)(1 + m % 7);
        gguf_quant_act_row_ref(x + m * K, K, a + m * K, d + m * (K / 32), as + m * (K / 16 + K / 32));
    }
    for (size_t ti = 0; ti < sizeof types / sizeof types[0]; ti++) {
        const gguf_kind *t = gguf_kind_of(types[ti].id);
        if (!t) { printf("FAIL %s: no kind\n", types[ti].name); return 1; }
        for (size_t ni = 0; ni < sizeof nks / sizeof nks[0]; ni++) {
            const int nk = nks[ni];
            if (nk % t->seg) continue;
            const int nseg = nk / t->seg, nr = 9 + (int)(rnd() % 8); /* 9..16 columns, the rest zero */
            const int64_t k0 = nk <= 256 ? 512 : 0; /* a K block inside the row (calls start on a group) */
            for (int c = 0; c < 16; c++) {
                for (int k = 0; k < nk; k++)
                    u[((k / 4) * 16 + c) * 4 + k % 4] = c < nr ? (uint8_t)(rnd() % (unsigned)(t->umax + 1)) : 0;
                for (int s = 0; s < nseg; s++) {
                    sc[s * 16 + c] = c < nr ? rndf() * 0.01f : 0.0f;
                    mn[s * 16 + c] = c < nr ? rndf() * 0.02f : 0.0f;
                }
            }
            for (size_t mi = 0; mi < sizeof mrs / sizeof mrs[0]; mi++) {
                const int mr = mrs[mi];
                for (int e = 0; e < mr * 16; e++) cb0[e] = cb1[e] = rndf();
                const int64_t ldas = K / 16 + K / 32;
                const int32_t *asp = as + (t->seg == 16 ? k0 / 16 : K / 16 + k0 / 32);
                const float *mnp = t->has_min ? mn : NULL;
                gguf_ukr_ref(mr, t, nseg, a + k0, K, d + k0 / GGUF_AG, K / 32, asp, ldas, u, sc, mnp, cb0);
                const int before = tail_calls;
                gguf_ukr_amx(mr, t, nseg, a + k0, K, d + k0 / GGUF_AG, K / 32, asp, ldas, u, sc, mnp, cb1);
                tails += tail_calls > before;
                if ((tail_calls > before) != (mr % 16 != 0)) {
                    printf("FAIL %s mr %d: the AVX-512 tail %s\n", types[ti].name, mr,
                           tail_calls > before ? "ran" : "did not run");
                    return 1;
                }
                for (int e = 0; e < mr * 16; e++) {
                    if (memcmp(&cb0[e], &cb1[e], 4)) {
                        printf("FAIL %s nk %d mr %d row %d col %d: ref %.9g amx %.9g\n", types[ti].name, nk, mr,
                               e / 16, e % 16, cb0[e], cb1[e]);
                        return 1;
                    }
                }
                checks++;
            }
        }
    }
    const int bad = check_kq(a, K, d, as, cb0, cb1, &checks) || check_q8d(a, K, d, as, &checks);
    if (!bad) {
        printf("tail runs: %d\n", tails);
        printf("ok: %d checks\n", checks);
    }
    free(x); free(d); free(a); free(as); free(cb0); free(cb1);
    return bad;
}
