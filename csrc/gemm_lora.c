/* gemm_lora.c — a LoRA's low-rank addend on a linear, y += ((x . A^T) * scale) . B^T.
 *
 * The base weights are never touched (they stay int8/int4/bf16 and shared, e.g. mapped
 * from a cache file).  h3_linear_forward runs the addend in two products:
 *
 *   down: u = (x . A^T) * scale [M, R], before the base product, on all threads: the rows
 *         of x in fixed chunks of H3_LORA_CHUNK, each chunk one single-threaded fp32 GEMM
 *         (the driver on the float linear `a`).  Splitting by rows rather than by the R
 *         output columns keeps every thread busy (rank 64 is two NR = 32 panels: one GEMM
 *         over columns ran on 2 of 16 threads), and chunk boundaries that depend on M
 *         alone keep the bits independent of the thread count.
 *   int down (lo->int_down, default on): on an int8/int4 base, h3_linear_set_lora
 *         quantises A to int8 (make_a8, in the base's activation layout) and h3_linear_forward
 *         runs u = x . A^T on the int kernel from the rows the base's own product quantises,
 *         right after quantising them (gemm.c), then scales and packs u (gemm_lora_u_finish).
 *         The float down product reread x in float32 and rounded it to bf16 per chunk: on
 *         the 16-core SPR it cost ~3 ms of a 13.8 ms int8 linear (M = 1872, K = 5376, rank
 *         64), ~10x its tile arithmetic.  u then carries the base's int8 activation error
 *         (~1% of the LoRA's part, as of the base's product).
 *   up:   u . B^T, added to each output tile right after the base product and before the
 *         bias and the epilogue (gemm.c, run_block), so the fused SwiGLU and gated-residual
 *         epilogues see the adapted product.  It runs on the fp32 GEMM micro-kernel of the
 *         ISA (FMA, registers blocked MR x NR), with B packed at create into NR-column
 *         panels, each holding only the ranks nonzero on its columns (a to_q LoRA on the
 *         fused QKV fills a third of the ranks of each panel, not all of them).
 *
 *   fused: where the base is int8/int4 on a table with ukr_int_lora (AMX; the reference
 *         table too when asked, h3_lora_set_fused), the up product runs inside the int
 *         micro-kernel instead: as it stores a tile's last K block it adds that tile's
 *         u . B^T (gemm.c int_block, gemm_lora_tile_at), so the output is written once,
 *         not read and written again by a second pass (on AMX that pass cost about as
 *         much per 32x32 output tile as its tile arithmetic: the LoRA's cost followed N,
 *         not the rank).  AMX: the dots on tiles 0-3 once the int block is stored, u packed
 *         to bf16 rows once per call (down_task), B the same panels; the same tile sums
 *         added in the same order as the second pass, so the same values.  Where the
 *         LoRA's NR-column panels do not line up with the int ones (the SwiGLU value half
 *         at an H that is no multiple of NR) that part keeps the second pass.
 *
 * AMX (lo->bf16): both products on bf16 tiles, as the AMX table's float path runs them (x,
 * A, u and B rounded to bf16, float32 sums): beside an int8 base on AMX, float32 FMA at
 * ~1/16 of the int8 tile rate made a rank-64 LoRA cost +55% of a block.  Not bit-equal to
 * the reference (which rounds only B there): ~2^-8 relative of the LoRA's part.  DiT gives
 * a float32/fp16 base on AMX an AVX-512 (float32) LoRA instead.
 *
 * Ranks are reordered at create (stably, by the first output column where B is nonzero),
 * so that the ranks nonzero on any column form one run: the q, k and v ranks of several
 * LoRAs on a fused QKV each become adjacent.
 *
 * The up product's definition (gemm_lora_add_ref computes it element by element):
 *   t[m, n] += acc,  acc = fma-chain over r in [col_lo[n], col_hi[n]) (ascending, from +0)
 *                    of u[m, r] * B[n, r];   a column with an empty range is untouched.
 * The micro-kernel runs its panel's (wider) range, whose extra terms are exact zero
 * products: the same value, and the same bits except the sign of a zero result (+0 where
 * the reference leaves -0).  Each output element is computed by one thread in a fixed
 * order: results do not depend on the thread count. */
#include "gemm_linear.h"

#include <math.h>
#include <stdlib.h>
#include <string.h>

void h3_lora_free(h3_lora *lo) {
    if (!lo) return;
    h3_linear_free(lo->a);
    h3_free(lo->bp);
    h3_free(lo->scale);
    h3_free(lo->perm);
    h3_free(lo->col_lo);
    h3_free(lo->col_hi);
    h3_free(lo->pan_lo);
    h3_free(lo->pan_hi);
    h3_free(lo->pan_off);
    h3_free(lo);
}

/* The table whose micro-kernel runs the up product: the ISA's fp32 one (AVX-VNNI's table
 * is AVX2's with other int kernels), except AMX, whose float kernel is bf16 tiles (lo->bf16). */
static const gemm_kernels *up_kernels(h3_isa isa) {
#if H3_X86
    if (isa == H3_ISA_AVXVNNI) isa = H3_ISA_AVX2;
#endif
    return gemm_kernels_for(isa);
}

/* Floats of room for one panel of kc ranks: [kc][NR] f32, or AMX's bf16 pairs over
 * kc rounded up to 32 (half the bytes of as many floats), 64-byte aligned. */
static int64_t panel_floats(const h3_lora *lo, int64_t kc) {
    return H3_ALIGN_UP((lo->bf16 ? H3_ALIGN_UP(kc, 32) : kc) * lo->kt->nr, 16);
}

typedef struct {
    int64_t first, r;
} rank_key;

static int cmp_rank(const void *a, const void *b) {
    const rank_key *x = a, *y = b;
    if (x->first != y->first) return (x->first > y->first) - (x->first < y->first);
    return (x->r > y->r) - (x->r < y->r);   /* stable: one adapter's ranks keep their order */
}

/* perm: ranks by their first nonzero column (an all-zero rank last). */
static h3_status order_ranks(h3_lora *lo, const float *b, h3_err *err) {
    const int64_t R = lo->R, N = lo->N;
    rank_key *keys = h3_alloc((size_t)R * sizeof *keys);
    if (!keys) return h3_fail(err, H3_ENOMEM, "lora_create: out of memory (ranks)");
    for (int64_t r = 0; r < R; r++) {
        int64_t n = 0;
        while (n < N && b[n * R + r] == 0.0f) n++;
        keys[r].first = n;
        keys[r].r = r;
    }
    qsort(keys, (size_t)R, sizeof *keys, cmp_rank);
    for (int64_t i = 0; i < R; i++) lo->perm[i] = keys[i].r;
    h3_free(keys);
    return H3_OK;
}

/* col_lo/col_hi per column, the panels' ranges (their columns' union) and the packed B:
 * panel p at bp + pan_off[p], [kc][NR] with kc = pan_hi - pan_lo, zero past column N. */
static h3_status pack_up(h3_lora *lo, const float *b_caller, h3_err *err) {
    const int64_t R = lo->R, N = lo->N, NR = lo->kt->nr, P = H3_CEIL_DIV(N, NR);
    float *b = h3_alloc((size_t)N * (size_t)R * 4);       /* B [N, R] in rank order */
    if (!b) return h3_fail(err, H3_ENOMEM, "lora_create: out of memory (B)");
    for (int64_t n = 0; n < N; n++)
        for (int64_t i = 0; i < R; i++) b[n * R + i] = b_caller[n * R + lo->perm[i]];
    h3_status st = H3_OK;
    lo->npanel = P;
    lo->col_lo = h3_alloc((size_t)N * 4);
    lo->col_hi = h3_alloc((size_t)N * 4);
    lo->pan_lo = h3_alloc((size_t)P * 8);
    lo->pan_hi = h3_alloc((size_t)P * 8);
    lo->pan_off = h3_alloc((size_t)P * 8);
    if (!lo->col_lo || !lo->col_hi || !lo->pan_lo || !lo->pan_hi || !lo->pan_off) {
        st = h3_fail(err, H3_ENOMEM, "lora_create: out of memory (panels)");
        goto done;
    }
    for (int64_t n = 0; n < N; n++) {
        int64_t a = R, z = 0;
        for (int64_t i = 0; i < R; i++)
            if (b[n * R + i] != 0.0f) {
                if (a == R) a = i;
                z = i + 1;
            }
        lo->col_lo[n] = (int32_t)(a < z ? a : 0);
        lo->col_hi[n] = (int32_t)(a < z ? z : 0);
    }
    int64_t total = 0;
    lo->max_kc = 0;
    for (int64_t p = 0; p < P; p++) {
        int64_t a = R, z = 0;
        for (int64_t n = p * NR; n < H3_MIN(N, (p + 1) * NR); n++)
            if (lo->col_lo[n] < lo->col_hi[n]) {
                a = H3_MIN(a, lo->col_lo[n]);
                z = H3_MAX(z, lo->col_hi[n]);
            }
        if (a >= z) a = z = 0;
        lo->pan_lo[p] = a;
        lo->pan_hi[p] = z;
        lo->pan_off[p] = total;
        total += panel_floats(lo, z - a);
        lo->max_kc = H3_MAX(lo->max_kc, z - a);
    }
    lo->bp = h3_alloc((size_t)(total ? total : 16) * 4);
    if (!lo->bp) {
        st = h3_fail(err, H3_ENOMEM, "lora_create: cannot allocate the packed B (%lld floats)", (long long)total);
        goto done;
    }
    for (int64_t p = 0; p < P; p++) {
        float *o = lo->bp + lo->pan_off[p];
        if (lo->pan_lo[p] >= lo->pan_hi[p]) continue;
        if (lo->bf16) {   /* the table's own bf16 packing (rounds to nearest even) */
            lo->kt->unpack(H3_DT_F32, b, R, p * NR, NR, N, lo->pan_lo[p], lo->pan_hi[p] - lo->pan_lo[p], o, (int)NR);
            continue;
        }
        for (int64_t k = lo->pan_lo[p]; k < lo->pan_hi[p]; k++, o += NR)
            for (int64_t j = 0; j < NR; j++) {
                const int64_t n = p * NR + j;
                o[j] = n < N ? b[n * R + k] : 0.0f;
            }
    }
done:
    h3_free(b);
    return st;
}

h3_status h3_lora_create(const float *a, const float *b, const float *scale, int64_t R, int64_t N,
                         int64_t K, h3_isa isa, h3_lora **out, h3_err *err) {
    if (!a || !b || !scale || !out) return h3_fail(err, H3_EINVAL, "lora_create: NULL argument");
    if (R < 1 || N < 1 || K < 1)
        return h3_fail(err, H3_EINVAL, "lora_create: R = %lld, N = %lld, K = %lld must be >= 1",
                       (long long)R, (long long)N, (long long)K);
    if (R > INT32_MAX) return h3_fail(err, H3_EINVAL, "lora_create: R = %lld is too large", (long long)R);
    h3_status st = h3_isa_check(isa, err);
    if (st) return st;
    h3_lora *lo = h3_alloc(sizeof *lo);
    if (!lo) return h3_fail(err, H3_ENOMEM, "lora_create: out of memory");
    memset(lo, 0, sizeof *lo);
    lo->N = N; lo->K = K; lo->R = R;
    lo->kt = up_kernels(isa);
#if H3_X86
    lo->bf16 = isa == H3_ISA_AMX;
    lo->fused = isa == H3_ISA_AMX;
#endif
    lo->int_down = 1; /* h3_lora_set_int_down: faster on every path measured */
    lo->perm = h3_alloc((size_t)R * 8);
    lo->scale = h3_alloc((size_t)R * 4);
    float *ar = h3_alloc((size_t)R * (size_t)K * 4);
    if (!lo->perm || !lo->scale || !ar) {
        h3_free(ar);
        st = h3_fail(err, H3_ENOMEM, "lora_create: cannot allocate A (%lld x %lld)", (long long)R, (long long)K);
        goto fail;
    }
    st = order_ranks(lo, b, err);
    if (st) { h3_free(ar); goto fail; }
    for (int64_t i = 0; i < R; i++) memcpy(ar + i * K, a + lo->perm[i] * K, (size_t)K * 4);
    h3_linear_opts o;
    memset(&o, 0, sizeof o);
    o.wtype = lo->bf16 ? H3_DT_BF16 : H3_DT_F32;   /* AMX: the down product on bf16 tiles too */
    o.bf16_inputs = lo->bf16;
    o.isa = isa;
    o.small_pages = 1;
    st = h3_linear_create(ar, H3_DT_F32, R, K, NULL, &o, &lo->a, err);
    h3_free(ar);
    if (st) goto fail;
    st = pack_up(lo, b, err);
    if (st) goto fail;
    st = h3_lora_set_scale(lo, scale, err);
    if (st) goto fail;
    *out = lo;
    return H3_OK;
fail:
    h3_lora_free(lo);
    return st;
}

h3_status h3_lora_set_scale(h3_lora *lo, const float *scale, h3_err *err) {
    if (!lo || !scale) return h3_fail(err, H3_EINVAL, "lora_set_scale: NULL argument");
    for (int64_t i = 0; i < lo->R; i++) lo->scale[i] = scale[lo->perm[i]];
    return H3_OK;
}

h3_status h3_lora_set_fused(h3_lora *lo, int on, h3_err *err) {
    if (!lo) return h3_fail(err, H3_EINVAL, "lora_set_fused: NULL argument");
    lo->fused = on != 0;
    return H3_OK;
}

h3_status h3_lora_set_int_down(h3_lora *lo, int on, h3_err *err) {
    if (!lo) return h3_fail(err, H3_EINVAL, "lora_set_int_down: NULL argument");
    lo->int_down = on != 0;
    return H3_OK;
}

/* The down product's A as an int8 linear that reads lin's quantised activations: the same
 * path, K padding, activation groups and rotation as lin (so the same quantised rows
 * serve both), and lin's K block and segment, with which the int8 kernel walks them (its
 * weight layout does not depend on either).  A is taken as the LoRA holds it (rank order;
 * bf16-rounded on AMX), quantised per rank.  *out stays NULL where the layouts cannot
 * agree (another kernel table). */
static h3_status make_a8(const h3_linear *lin, const h3_lora *lo, h3_linear **out, h3_err *err) {
    *out = NULL;
    float *af = h3_alloc((size_t)lo->R * (size_t)lo->K * 4);
    if (!af) return h3_fail(err, H3_ENOMEM, "linear_set_lora: cannot allocate A (%lld x %lld)",
                            (long long)lo->R, (long long)lo->K);
    h3_status st = h3_linear_dequant(lo->a, af, err);
    h3_linear *a8 = NULL;
    if (!st) {
        h3_linear_opts o;
        memset(&o, 0, sizeof o);
        o.wtype = H3_DT_I8;
        o.act_group = lin->act_group;
        o.rot_group = lin->rot_group;
        o.isa = lin->isa;
        o.small_pages = 1;
        st = h3_linear_create(af, H3_DT_F32, lo->R, lo->K, NULL, &o, &a8, err);
    }
    h3_free(af);
    if (st) return st;
    if (a8->Kp != lin->Kp || a8->kt != lin->kt) {
        h3_linear_free(a8);
        return H3_OK;
    }
    a8->kci = lin->kci;
    a8->seg = lin->seg;
    *out = a8;
    return H3_OK;
}

h3_status h3_linear_set_lora(h3_linear *lin, const h3_lora *lo, h3_err *err) {
    if (!lin) return h3_fail(err, H3_EINVAL, "linear_set_lora: NULL linear");
    if (lo && lin->wtype == H3_DT_NVFP4)
        return h3_fail(err, H3_EUNSUPPORTED, "linear_set_lora: a LoRA on an NVFP4 linear is not supported yet");
    if (lo && (lo->N != lin->N || lo->K != lin->K))
        return h3_fail(err, H3_EINVAL, "linear_set_lora: the LoRA is [%lld x %lld], the linear [%lld x %lld]",
                       (long long)lo->N, (long long)lo->K, (long long)lin->N, (long long)lin->K);
    h3_linear *a8 = NULL;
    if (lo && lo->int_down && is_int(lin->wtype)) {
        const h3_status st = make_a8(lin, lo, &a8, err);
        if (st) return st;
    }
    h3_linear_free(lin->lora_a8);
    lin->lora_a8 = a8;
    lin->lora = lo;
    return H3_OK;
}

/* ---- the down product ------------------------------------------------------------------ */

/* each thread area ends with an h3_err for the down product's failure report */
#define ERR_BYTES H3_ALIGN_UP(sizeof(h3_err), 64)

static size_t u_bytes(const h3_lora *lo, int64_t M) { return H3_ALIGN_UP((size_t)M * (size_t)lo->R * 4, 64); }

int gemm_lora_fuses(const h3_linear *l) {
    const h3_lora *lo = l->lora;
    return lo && lo->fused && is_int(l->wtype) && l->kt == lo->kt && l->kt->ukr_int_lora;
}

/* The fused path's packed u (tables with lora_pack_u): [Mp][ldu] rows, Mp = M rounded up to
 * MR (zero rows past M), ldu = R rounded up to 32 plus 32 (a tile reads 32 ranks from any
 * panel's first rank; zero past R). */
static int64_t packed_ldu(const h3_lora *lo) { return H3_ALIGN_UP(lo->R, 32) + 32; }
static size_t packed_u_bytes(const h3_linear *l, int64_t M) {
    const h3_lora *lo = l->lora;
    if (!gemm_lora_fuses(l) || !lo->kt->lora_pack_u) return 0;
    const size_t Mp = (size_t)H3_ALIGN_UP(M, lo->kt->mr);
    return H3_ALIGN_UP(Mp * (size_t)packed_ldu(lo) * (size_t)lo->kt->lora_u_elem, 64);
}
/* u, then the packed u, then the thread areas */
static size_t shared_bytes(const h3_linear *l, int64_t M) { return u_bytes(l->lora, M) + packed_u_bytes(l, M); }

const void *gemm_lora_u_operand(const h3_linear *l, void *ws, int64_t M, int64_t *ldu) {
    const h3_lora *lo = l->lora;
    if (packed_u_bytes(l, M)) {
        *ldu = packed_ldu(lo);
        return (char *)ws + u_bytes(lo, M);
    }
    *ldu = lo->R;
    return ws;
}

/* The up product's scratch: the packed rows of u (MR x max_kc, room for AMX's bf16 tiles
 * over max_kc rounded up to 32), then one MR x NR tile at tmp_offset. */
static int64_t tmp_offset(const h3_lora *lo) {
    return H3_ALIGN_UP((int64_t)lo->kt->mr * H3_ALIGN_UP(H3_MAX(lo->max_kc, 1), 32), 16);
}

size_t gemm_lora_scratch_floats(const h3_lora *lo) {
    return (size_t)(tmp_offset(lo) + H3_ALIGN_UP((int64_t)lo->kt->mr * lo->kt->nr, 16));
}

/* One thread's down-product GEMM workspace, or its up-product scratch (the two are used
 * at different times; with l->lora_a8 the down product runs in the linear's own arena and
 * needs none here: a float down product's room on AMX, ~2.8 MB per thread, unused). */
static size_t thread_bytes(const h3_linear *l, int64_t M) {
    const h3_lora *lo = l->lora;
    const size_t down = l->lora_a8 ? 0 : h3_linear_workspace_bytes(lo->a, H3_MIN(M, H3_LORA_CHUNK), 1, NULL);
    const size_t up = gemm_lora_scratch_floats(lo) * 4;
    return H3_ALIGN_UP(H3_MAX(down, up), 64) + ERR_BYTES;
}

size_t gemm_lora_workspace_bytes(const h3_linear *l, int64_t M, int nth) {
    const h3_lora *lo = l->lora;
    if (!lo) return 0;
    return shared_bytes(l, M) + (size_t)nth * thread_bytes(l, M);
}

float *gemm_lora_scratch(const h3_linear *l, void *ws, int64_t M, int ith) {
    return (float *)((char *)ws + shared_bytes(l, M) + (size_t)ith * thread_bytes(l, M));
}

typedef struct {
    const h3_lora *lo;
    const float *x;
    int64_t M;
    float *u;
    void *up;            /* the fused path's packed u (packed_u_bytes), or NULL */
    void *ws;
    size_t each;         /* thread_bytes */
    int failed;          /* a failing thread + 1, else 0 */
    int st;              /* its status */
} down_ctx;

static void finish_chunk(const down_ctx *c, int64_t m0, int64_t mc);

static void down_task(void *p, int ith, int nth) {
    down_ctx *c = (down_ctx *)p;
    const h3_lora *lo = c->lo;
    const int64_t R = lo->R, K = lo->K, nch = H3_CEIL_DIV(c->M, H3_LORA_CHUNK);
    char *ws = (char *)c->ws + (size_t)ith * c->each;
    const size_t wsb = c->each - ERR_BYTES;
    h3_err *err = (h3_err *)(ws + wsb);
    for (int64_t ch = ith; ch < nch; ch += nth) {
        const int64_t m0 = ch * H3_LORA_CHUNK, mc = H3_MIN(H3_LORA_CHUNK, c->M - m0);
        float *u = c->u + m0 * R;
        const h3_status st = h3_linear_forward(lo->a, NULL, c->x + m0 * K, mc, u, NULL, ws, wsb, err);
        if (st != H3_OK) {
            __atomic_store_n(&c->st, (int)st, __ATOMIC_RELAXED);
            __atomic_store_n(&c->failed, ith + 1, __ATOMIC_RELAXED);
            return;
        }
        finish_chunk(c, m0, mc);
    }
}

/* the chunk's u scaled, and packed once for every column block where the up product is
 * fused (the last chunk's rows up to a multiple of MR, zero) */
static void finish_chunk(const down_ctx *c, int64_t m0, int64_t mc) {
    const h3_lora *lo = c->lo;
    const int64_t R = lo->R;
    float *u = c->u + m0 * R;
    for (int64_t m = 0; m < mc; m++)
        for (int64_t r = 0; r < R; r++) u[m * R + r] *= lo->scale[r];
    if (c->up) {
        const int64_t ldu = packed_ldu(lo), Mp = H3_ALIGN_UP(c->M, lo->kt->mr);
        const int64_t rows_out = m0 + H3_LORA_CHUNK >= c->M ? Mp - m0 : mc;
        lo->kt->lora_pack_u(u, mc, R, (char *)c->up + m0 * ldu * lo->kt->lora_u_elem, ldu, rows_out);
    }
}

static void finish_task(void *p, int ith, int nth) {
    const down_ctx *c = (const down_ctx *)p;
    for (int64_t ch = ith; ch < H3_CEIL_DIV(c->M, H3_LORA_CHUNK); ch += nth)
        finish_chunk(c, ch * H3_LORA_CHUNK, H3_MIN(H3_LORA_CHUNK, c->M - ch * H3_LORA_CHUNK));
}

void gemm_lora_u_finish(const h3_linear *l, h3_pool *pool, int64_t M, float *u, void *ws) {
    void *up = packed_u_bytes(l, M) ? (char *)ws + u_bytes(l->lora, M) : NULL;
    down_ctx c = {l->lora, NULL, M, u, up, NULL, 0, 0, 0};
    h3_pool_run(pool, finish_task, &c);
}

h3_status gemm_lora_u(const h3_linear *l, h3_pool *pool, const float *x, int64_t M, float *u,
                      void *ws, h3_err *err) {
    void *up = packed_u_bytes(l, M) ? (char *)ws + u_bytes(l->lora, M) : NULL;
    down_ctx c = {l->lora, x, M, u, up, (char *)ws + shared_bytes(l, M), thread_bytes(l, M), 0, 0};
    h3_pool_run(pool, down_task, &c);
    if (c.failed) {
        const h3_err *e = (const h3_err *)((char *)c.ws + (size_t)c.failed * c.each - ERR_BYTES);
        if (err) *err = *e;
        return (h3_status)c.st;
    }
    return H3_OK;
}

/* ---- the up product -------------------------------------------------------------------- */

/* B[n, r] (rank order) from the packed panels; r must lie in n's panel range.  bf16
 * panels are pairs [kc32/2][NR][2]. */
static inline float b_at(const h3_lora *lo, int64_t r, int64_t n) {
    const int64_t NR = lo->kt->nr, p = n / NR, k = r - lo->pan_lo[p], j = n - p * NR;
    if (lo->bf16)
        return h3_bf16_to_f32(((const uint16_t *)(lo->bp + lo->pan_off[p]))[((k / 2) * NR + j) * 2 + (k & 1)]);
    return lo->bp[lo->pan_off[p] + k * NR + j];
}

void gemm_lora_add_ref(const h3_lora *lo, const float *u, float *target, int64_t ld, int64_t m0, int64_t m1,
                       int64_t c0, int64_t w, float *scratch) {
    (void)scratch;
    const int64_t R = lo->R;
    for (int64_t m = m0; m < m1; m++)
        for (int64_t n = c0; n < c0 + w; n++) {
            const int64_t a = lo->col_lo[n], z = lo->col_hi[n];
            if (a >= z) continue;
            float acc = 0.0f;
            for (int64_t r = a; r < z; r++) acc = fmaf(u[m * R + r], b_at(lo, r, n), acc);
            target[m * ld + (n - c0)] += acc;
        }
}

/* The micro-kernel version: per MR-row panel of u (packed [kc][MR] for the current panel
 * range, repacked only when the range changes: q, k, v runs of a fused QKV), every NR
 * column panel of the tile; a panel that starts left of c0 goes through the MR x NR
 * scratch tile (computed whole, then added: the same c + acc as the in-place call). */
static void lora_add_panels(const h3_lora *lo, const float *u, float *target, int64_t ld, int64_t m0,
                            int64_t m1, int64_t c0, int64_t w, float *scratch) {
    const gemm_kernels *kt = lo->kt;
    const int MR = kt->mr, NR = kt->nr;
    const int64_t R = lo->R, c1 = c0 + w;
    float *ap = scratch;
    float *tmp = scratch + tmp_offset(lo);
    if (kt->begin) kt->begin();   /* AMX: the tile configuration (already loaded inside the GEMM) */
    for (int64_t ir = m0; ir < m1; ir += MR) {
        const int mr = (int)H3_MIN(MR, m1 - ir);
        int64_t plo = -1, phi = -1;
        for (int64_t p = c0 / NR; p * NR < c1; p++) {
            const int64_t a = lo->pan_lo[p], z = lo->pan_hi[p];
            if (a >= z) continue;
            if ((a != plo || z != phi) && kt->pack_a) {   /* AMX: bf16 tiles */
                kt->pack_a(u + ir * R + a, R, mr, z - a, MR, ap);
                plo = a;
                phi = z;
            } else if (a != plo || z != phi) {
                for (int64_t k = a; k < z; k++) {
                    float *d = ap + (k - a) * MR;
                    int i = 0;
                    for (; i < mr; i++) d[i] = u[(ir + i) * R + k];
                    for (; i < MR; i++) d[i] = 0.0f;
                }
                plo = a;
                phi = z;
            }
            const int64_t ps = p * NR, e = H3_MIN(ps + NR, c1);
            const float *bp = lo->bp + lo->pan_off[p];
            if (ps >= c0) {
                kt->ukr_f32(MR, NR, z - a, ap, bp, target + ir * ld + (ps - c0), ld, mr, (int)(e - ps), 1);
            } else {
                kt->ukr_f32(MR, NR, z - a, ap, bp, tmp, NR, mr, (int)(e - ps), 0);
                for (int i = 0; i < mr; i++)
                    for (int64_t n = c0; n < e; n++) target[(ir + i) * ld + (n - c0)] += tmp[i * NR + (n - ps)];
            }
        }
    }
}

void gemm_lora_add(const h3_lora *lo, const float *u, float *target, int64_t ld, int64_t m0, int64_t m1,
                   int64_t c0, int64_t w, float *scratch) {
    if (lo->kt->ukr_f32 == gemm_ukr_f32_ref) gemm_lora_add_ref(lo, u, target, ld, m0, m1, c0, w, scratch);
    else lora_add_panels(lo, u, target, ld, m0, m1, c0, w, scratch);
}

/* ---- a GGUF base ------------------------------------------------------------------------ */

/* The GGUF GEMM (gemm_gguf.c) applies its epilogue inside its own loop.  With a LoRA the
 * base product runs there without one (x . W^T + bias) into t, which is y itself or, when
 * an epilogue follows, a scratch [M, N]; then each thread adds the up product to its
 * columns of t (whole NR panels, every row) and applies the epilogue to them, in the GGUF
 * GEMM's own arithmetic order (gate * value, then + resid; SwiGLU by gemm_swiglu_row_ref).
 * The sum is (x . W^T + bias) + up where the other types add the up product before the
 * bias: a rounding-level difference.  Strength 0 detaches the LoRA (h3cy.models), so the
 * base stays bit for bit.  Workspace: the LoRA's (u first), t, then the GGUF GEMM's. */
static size_t gguf_t_bytes(const h3_linear *l, int64_t M, const h3_epilogue *epi) {
    return epi && epi->kind != H3_EPI_NONE ? H3_ALIGN_UP((size_t)M * (size_t)l->N * 4, 64) : 0;
}

size_t gemm_lora_gguf_workspace_bytes(const h3_linear *l, int64_t M, int nth, const h3_epilogue *epi) {
    return gemm_lora_workspace_bytes(l, M, nth) + gguf_t_bytes(l, M, epi) + gemm_panel_workspace_bytes(l, M, nth);
}

typedef struct {
    const h3_linear *l;
    const float *u;
    float *t, *y;
    const h3_epilogue *epi;
    int64_t M;
    void *lora_ws;
} gguf_up_ctx;

static void gguf_up_task(void *p, int ith, int nth) {
    const gguf_up_ctx *c = (const gguf_up_ctx *)p;
    const h3_linear *l = c->l;
    const h3_lora *lo = l->lora;
    const int kind = c->epi ? c->epi->kind : H3_EPI_NONE;
    const int64_t N = l->N, M = c->M, ncol = kind == H3_EPI_SWIGLU ? l->H : N, NR = lo->kt->nr;
    const int64_t P = H3_CEIL_DIV(ncol, NR);
    const int64_t c0 = H3_MIN(ncol, P * ith / nth * NR), c1 = H3_MIN(ncol, P * (ith + 1) / nth * NR);
    if (c0 >= c1) return;
    float *scratch = gemm_lora_scratch(l, c->lora_ws, M, ith);
    gemm_lora_add(lo, c->u, c->t + c0, N, 0, M, c0, c1 - c0, scratch);
    if (kind == H3_EPI_SWIGLU) {          /* the value half: columns H + [c0, c1) */
        gemm_lora_add(lo, c->u, c->t + l->H + c0, N, 0, M, l->H + c0, c1 - c0, scratch);
        for (int64_t m = 0; m < M; m++) {
            float *g = c->t + m * N + c0;
            gemm_swiglu_row_ref(g, c->t + m * N + l->H + c0, c1 - c0, NULL, NULL);
            memcpy(c->y + m * ncol + c0, g, (size_t)(c1 - c0) * 4);
        }
    } else if (kind == H3_EPI_RESID) {
        const h3_epilogue *e = c->epi;
        for (int64_t m = 0; m < M; m++)
            for (int64_t n = c0; n < c1; n++) {
                float acc = c->t[m * N + n];
                if (e->gate) acc *= e->gate[(e->gate_row ? e->gate_row[m] : m) * N + n];
                c->y[m * N + n] = e->resid[m * N + n] + acc;
            }
    }
}

h3_status gemm_lora_gguf_forward(const h3_linear *l, h3_pool *pool, const float *x, int64_t M, float *y,
                                 const h3_epilogue *epi, void *ws, size_t ws_bytes, h3_err *err) {
    const int nth = h3_pool_threads(pool);
    void *own = NULL;
    h3_status st = h3_workspace(&ws, &ws_bytes, gemm_lora_gguf_workspace_bytes(l, M, nth, epi), &own,
                                "linear_forward", err);
    if (st) return st;
    const size_t lb = gemm_lora_workspace_bytes(l, M, nth), tb = gguf_t_bytes(l, M, epi);
    float *u = (float *)ws;
    st = gemm_lora_u(l, pool, x, M, u, ws, err);
    float *t = tb ? (float *)((char *)ws + lb) : y;
    if (!st) st = gemm_panel_forward(l, pool, x, M, t, NULL, (char *)ws + lb + tb, ws_bytes - lb - tb, err);
    if (!st) {
        gguf_up_ctx c = {l, u, t, y, epi, M, ws};
        h3_pool_run(pool, gguf_up_task, &c);
    }
    h3_free(own);
    return st;
}
