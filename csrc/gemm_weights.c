/* gemm_weights.c — a linear's weight storage: W converted at create (float modes: a
 * row-major copy; int modes: quantised and packed into the micro-kernels' k-quad panels,
 * see gemm_impl.h), the kernel table and packed geometry a path computes from, attach
 * over storage the caller keeps (cache files, checkpoint tensors), export and
 * dequantisation.  The run-time driver is gemm.c. */
#include "gemm_linear.h"
#include "hadamard_impl.h"

#include <math.h>
#include <pthread.h>
#include <stdlib.h>
#include <string.h>

static const gemm_kernels *raw_table(h3_isa isa) {
    switch (isa) {
#if H3_X86
    case H3_ISA_AVX2: return &gemm_kernels_avx2;
    case H3_ISA_AVXVNNI: return &gemm_kernels_avxvnni;
    case H3_ISA_AVX512: return h3_cpu_has_avx512_vnni() ? &gemm_kernels_avx512 : &gemm_kernels_avx512_novnni;
    case H3_ISA_AMX: return &gemm_kernels_amx;
#endif
#if H3_ARM64
    case H3_ISA_NEON: return &gemm_kernels_neon;
#endif
    default: return &gemm_kernels_ref;
    }
}

static gemm_kernels resolved[H3_ISA_COUNT];
static pthread_once_t resolved_once = PTHREAD_ONCE_INIT;

static void resolve_tables(void) {
    const gemm_kernels *r = &gemm_kernels_ref;
    for (int i = 0; i < H3_ISA_COUNT; i++) {
        gemm_kernels t = *raw_table((h3_isa)i);
        if (!t.ukr_f32) t.ukr_f32 = r->ukr_f32;
        if (!t.unpack) t.unpack = r->unpack;
        if (!t.gemv) t.gemv = r->gemv;
        if (!t.ukr_i8) t.ukr_i8 = r->ukr_i8;
        if (!t.ukr_i4) t.ukr_i4 = r->ukr_i4;
        if (!t.quant_row) t.quant_row = r->quant_row;
        if (!t.swiglu_row) t.swiglu_row = r->swiglu_row;
        resolved[i] = t;
    }
}

const gemm_kernels *gemm_kernels_for(h3_isa isa) {
    pthread_once(&resolved_once, resolve_tables);
    return ((unsigned)isa < H3_ISA_COUNT) ? &resolved[isa] : &resolved[H3_ISA_REF];
}

int h3_linear_int_panel_width(h3_isa isa) {
    return (unsigned)isa < H3_ISA_COUNT ? gemm_kernels_for(isa)->nr : 0;
}

int64_t h3_linear_n(const h3_linear *l) { return l->N; }
int64_t h3_linear_k(const h3_linear *l) { return l->K; }
h3_isa h3_linear_isa(const h3_linear *l) { return l->isa; }
int h3_linear_extensions(const h3_linear *l) {
#if H3_ARM64
    if (l->kt == &gemm_kernels_neon_i8mm) return H3_EXT_I8MM;
    if (l->kt == &gemm_kernels_neon_bf16) return H3_EXT_BF16;
#endif
    (void)l;
    return 0;
}
size_t h3_linear_weight_bytes(const h3_linear *l) { return l->wbytes; }
int h3_linear_bf16_activations(const h3_linear *l) {
    /* the AMX bf16 tiles take bf16 inputs; every other float kernel multiplies in f32 */
    return l->wtype != H3_DT_I8 && l->wtype != H3_DT_I4 && l->wtype != H3_DT_GGUF &&
           l->wtype != H3_DT_NVFP4 &&
           (l->kt == gemm_kernels_for(H3_ISA_AMX)
#if H3_X86
            || l->kt == &gemm_kernels_avx512_bf16dp
#endif
#if H3_ARM64
            || l->kt == &gemm_kernels_neon_bf16
#endif
           );
}

void h3_linear_free(h3_linear *l) {
    if (!l) return;
    if (l->owns_w) {
        h3_free(l->w);
        h3_free(l->wscale);
    }
    h3_free(l->bias);
    gemm_nvfp4_free(l);
    h3_linear_free(l->lora_a8);
    free(l);
}

static float src_at(const void *w, int src_dtype, int64_t idx) {
    return src_dtype == H3_DT_F32 ? ((const float *)w)[idx]
                                  : h3_bf16_to_f32(((const uint16_t *)w)[idx]);
}

/* Choose the int K block: a multiple of 8 that divides seg or is a multiple of it. */
static int64_t choose_kci(int64_t seg, int64_t target) {
    if (seg <= target) return seg * (target / seg);
    for (int64_t b = target - target % 8; b >= 8; b -= 8)
        if (seg % b == 0) return b;
    return 8; /* seg is a multiple of 8 by construction */
}

/* The packed storage of an int linear, zeroed: W (zero weights in the offset encodings)
 * and its scales. */
static h3_status alloc_int(h3_linear *l, h3_err *err) {
    const int64_t Np = np_of(l), Kp = l->Kp;
    const int i4 = l->wtype == H3_DT_I4;
    size_t wb = i4 ? (size_t)(Np * Kp / 2) : (size_t)(Np * Kp);
    size_t sb = (size_t)(i4 ? Np * (Kp / l->group_size) : Np) * sizeof(float);
    l->w = alloc_streamed(l, wb);
    l->wscale = h3_alloc(sb);
    if (!l->w || !l->wscale) return h3_fail(err, H3_ENOMEM, "linear: cannot allocate %zu bytes for packed weights", wb + sb);
    memset(l->w, i4 ? 0x88 : 0x80, wb);
    memset(l->wscale, 0, sb);
    l->wbytes = wb + sb;
    l->sbytes = sb;
    return H3_OK;
}

/* Logical row n's integer values qrow[Kp] (zero past K) into its panel slot. */
static void pack_int_row(h3_linear *l, int64_t n, const float *qrow) {
    const int nr = l->kt->nr;
    const int64_t Kp = l->Kp, r = prow_of(l, n), p = r / nr, j = r % nr;
    uint8_t *pk = (uint8_t *)l->w;
    for (int64_t k = 0; k < Kp; k++) {
        int q = (int)qrow[k];
        int64_t quad = k / 4, t = k % 4;
        if (l->wtype != H3_DT_I4) {
            pk[((p * (Kp / 4) + quad) * nr + j) * 4 + t] = (uint8_t)(q + 128);
        } else {
            uint8_t *b = &pk[((p * (Kp / 8) + quad / 2) * nr + j) * 4 + t];
            if (quad & 1) *b = (uint8_t)((*b & 0x0f) | ((q + 8) << 4));
            else *b = (uint8_t)((*b & 0xf0) | (q + 8));
        }
    }
}

static h3_status pack_int(h3_linear *l, const void *w, int src_dtype, h3_err *err) {
    const int nr = l->kt->nr;
    const int64_t K = l->K, Kp = l->Kp;
    const int i4 = l->wtype == H3_DT_I4;
    const int64_t gs = i4 ? l->group_size : Kp, ng = Kp / gs;
    const float qmax = i4 ? 7.0f : 127.0f;
    h3_status st = alloc_int(l, err);
    if (st) return st;
    float *qrow = malloc((size_t)Kp * sizeof(float));
    if (!qrow) return h3_fail(err, H3_ENOMEM, "linear: out of memory");
    for (int64_t n = 0; n < l->N; n++) {
        int64_t r = prow_of(l, n), p = r / nr, j = r % nr;
        for (int64_t g = 0; g < ng; g++) {
            int64_t k0 = g * gs, k1 = H3_MIN(k0 + gs, K);
            float amax = 0.0f;
            /* weights are finite (checked at create), so a plain compare is fmaxf here */
            for (int64_t k = k0; k < k1; k++) {
                float a = fabsf(src_at(w, src_dtype, n * K + k));
                amax = a > amax ? a : amax;
            }
            float scale = amax / qmax, inv = amax > 0.0f ? qmax / amax : 0.0f;
            if (i4) l->wscale[(p * ng + g) * nr + j] = scale;
            else l->wscale[r] = scale;
            /* a subnormal amax overflows inv (and 0 * inf would be NaN): divide in double */
            const int tiny = !(inv < INFINITY);
            for (int64_t k = k0; k < k0 + gs; k++) {
                float v = 0.0f;
                if (k < k1) {
                    float x = src_at(w, src_dtype, n * K + k);
                    v = tiny ? (float)rint((double)x * qmax / (double)amax) : rintf(x * inv);
                }
                qrow[k] = v > qmax ? qmax : (v < -qmax ? -qmax : v); /* fminf/fmaxf: v is not NaN */
            }
        }
        pack_int_row(l, n, qrow);
    }
    free(qrow);
    return H3_OK;
}

/* int8 values quantised elsewhere, q [N,K] with scales [N]: packed as they are (-128 as
 * -127, see h3_linear_create_q8). */
static h3_status pack_q8(h3_linear *l, const int8_t *q, const float *scales, h3_err *err) {
    const int64_t K = l->K, Kp = l->Kp;
    h3_status st = alloc_int(l, err);
    if (st) return st;
    float *qrow = calloc((size_t)Kp, sizeof(float));
    if (!qrow) return h3_fail(err, H3_ENOMEM, "linear: out of memory");
    for (int64_t n = 0; n < l->N; n++) {
        const int8_t *src = q + n * K;
        for (int64_t k = 0; k < K; k++) qrow[k] = src[k] < -127 ? -127.0f : (float)src[k];
        l->wscale[prow_of(l, n)] = scales[n];
        pack_int_row(l, n, qrow);
    }
    free(qrow);
    return H3_OK;
}

/* The kernel table and the packed geometry of a linear whose N, K, wtype, group_size
 * and pair are set (shared by create and attach, so both agree on every layout). */
static void set_geometry(h3_linear *l, h3_isa isa, int ag, int bf16_inputs, int f32_exact, int ext_off) {
    const int wt = l->wtype;
    l->kt = gemm_kernels_for(isa);
    l->f32_exact = f32_exact ? 1 : 0;
    l->ext_off = ext_off & H3_EXT_ALL;
#if H3_ARM64
    /* The neon path's ARMv8.6 tables, where the CPU has the instructions and the caller
     * did not turn them off.  SMMLA reads the plain neon table's packed layout (same nr,
     * same K block: same bits), so a converted-weight cache is shared by both.  BFMMLA, as
     * the x86 bf16 pair kernels: bf16 weights with bf16-valued inputs only, and not when
     * the last K block is a single k (its bf16 panels, padded to 4 k, would outgrow the
     * driver's f32 slots). */
    if (isa == H3_ISA_NEON && is_int(wt) && h3_cpu_has_neon_i8mm() && !(l->ext_off & H3_EXT_I8MM))
        l->kt = &gemm_kernels_neon_i8mm;
    if (isa == H3_ISA_NEON && wt == H3_DT_BF16 && bf16_inputs && !f32_exact && h3_cpu_has_neon_bf16() &&
        !(l->ext_off & H3_EXT_BF16) && l->K % gemm_kernels_neon_bf16.kc != 1)
        l->kt = &gemm_kernels_neon_bf16;
#endif
#if H3_X86
    /* AMX's float kernel is bf16 x bf16: use it for bf16-stored weights only (fp32/fp16
     * weights keep full precision on the AVX-512 kernels; so do bf16 weights asked to
     * multiply float32 inputs exactly), and not when the last K block would be shorter
     * than 16 (its bf16 panels would outgrow the f32 slots). */
    if (isa == H3_ISA_AMX && !is_int(wt) &&
        (wt != H3_DT_BF16 || f32_exact || (l->K % l->kt->kc != 0 && l->K % l->kt->kc < 16)))
        l->kt = gemm_kernels_for(H3_ISA_AVX512);
    /* bf16 weights and bf16-valued inputs: VDPBF16PS where the CPU has it (same K-tail
     * rule as AMX: its bf16 panels must fit the driver's f32 slots) */
    if (isa == H3_ISA_AVX512 && wt == H3_DT_BF16 && bf16_inputs && !f32_exact && h3_cpu_has_avx512_bf16() &&
        !(l->K % gemm_kernels_avx512_bf16dp.kc != 0 && l->K % gemm_kernels_avx512_bf16dp.kc < 16))
        l->kt = &gemm_kernels_avx512_bf16dp;
#endif
    const int nr = l->kt->nr;
    l->H = l->pair ? l->N / 2 : l->N;
    l->Hp = H3_ALIGN_UP(l->H, nr);
    if (is_int(wt)) {
        const int gs = l->group_size;
        if (ag > 0) l->Kp = H3_ALIGN_UP(l->K, ag);
        else l->Kp = H3_ALIGN_UP(l->K, (wt == H3_DT_I4 ? H3_MAX(gs, 64) : 64));
        l->act_group = ag > 0 ? ag : (int)l->Kp;
        l->seg = wt == H3_DT_I4 ? gs : l->act_group;
        l->kci = H3_MIN(choose_kci(l->seg, l->kt->kc_int ? l->kt->kc_int : 1024), l->Kp);
    } else {
        l->Kp = l->K;
    }
}

/* The options every create checks (weights mode, int4 group, activation group, rotation,
 * pair): the int4 group to use in *gs. */
static h3_status check_opts(const h3_linear_opts *opts, int64_t N, int64_t K, int *gs, h3_err *err) {
    int wt = opts->wtype;
    if (wt < H3_DT_F32 || wt > H3_DT_I4) return h3_fail(err, H3_EINVAL, "linear: unknown weights mode %d", wt);
    h3_status st = h3_isa_check(opts->isa, err);
    if (st) return st;
    if (opts->pair && (N % 2)) return h3_fail(err, H3_EINVAL, "linear: pair=1 needs an even row count, got %lld", (long long)N);
    *gs = 0;
    if (wt == H3_DT_I4) {
        *gs = opts->group_size ? opts->group_size : 64;
        if (*gs != 32 && *gs != 64 && *gs != 128)
            return h3_fail(err, H3_EINVAL, "linear: int4 group_size must be 32, 64 or 128, got %d", opts->group_size);
    }
    int ag = opts->act_group;
    if (ag < 0) return h3_fail(err, H3_EINVAL, "linear: act_group must be >= 0, got %d", ag);
    if (is_int(wt) && ag > 0) {
        if (ag % 8) return h3_fail(err, H3_EINVAL, "linear: act_group must be a multiple of 8, got %d", ag);
        if (wt == H3_DT_I4 && ag % *gs)
            return h3_fail(err, H3_EINVAL, "linear: act_group (%d) must be a multiple of group_size (%d)", ag, *gs);
    }
    const int rg = opts->rot_group;
    if (rg && (wt != H3_DT_I8 || !hadamard_group_ok(rg) || K % rg))
        return h3_fail(err, H3_EINVAL, "linear: rot_group %d needs int8 weights and a power of 4 "
                       "(4..4096) dividing K = %lld", rg, (long long)K);
    return H3_OK;
}

static h3_linear *new_linear(int64_t N, int64_t K, const h3_linear_opts *opts, int gs) {
    h3_linear *l = calloc(1, sizeof *l);
    if (!l) return NULL;
    l->N = N; l->K = K; l->wtype = opts->wtype; l->group_size = gs; l->pair = opts->pair;
    l->isa = opts->isa;
    l->small_pages = opts->small_pages ? 1 : 0;
    l->rot_group = opts->rot_group;
    l->owns_w = 1;
    set_geometry(l, opts->isa, opts->act_group, opts->bf16_inputs, opts->f32_exact, opts->ext_off);
    return l;
}

static h3_status copy_bias(h3_linear *l, const float *bias, h3_err *err) {
    if (!bias) return H3_OK;
    l->bias = h3_alloc((size_t)l->N * sizeof(float));
    if (!l->bias) return h3_fail(err, H3_ENOMEM, "linear: out of memory");
    memcpy(l->bias, bias, (size_t)l->N * sizeof(float));
    return H3_OK;
}

h3_status h3_linear_create(const void *w, int src_dtype, int64_t N, int64_t K,
                           const float *bias, const h3_linear_opts *opts, h3_linear **out,
                           h3_err *err) {
    if (!out || !w || !opts) return h3_fail(err, H3_EINVAL, "linear: NULL argument");
    if (N < 1 || K < 1 || N > ((int64_t)1 << 31) || K > ((int64_t)1 << 31))
        return h3_fail(err, H3_EINVAL, "linear: bad weight shape [%lld, %lld]", (long long)N, (long long)K);
    if (src_dtype != H3_DT_F32 && src_dtype != H3_DT_BF16)
        return h3_fail(err, H3_EINVAL, "linear: source weights must be float32 or bf16 (dtype id %d)", src_dtype);
    int gs;
    h3_status st = check_opts(opts, N, K, &gs, err);
    if (st) return st;
    const int wt = opts->wtype;
    /* reject non-finite weights: they would poison every output silently */
    int64_t nw = N * K;
    for (int64_t i = 0; i < nw; i++) {
        float v = src_at(w, src_dtype, i);
        if (!isfinite(v))
            return h3_fail(err, H3_EINVAL, "linear: weight[%lld, %lld] is not finite", (long long)(i / K), (long long)(i % K));
        if (wt == H3_DT_F16 && fabsf(v) >= 65520.0f) /* rounds to inf in float16 */
            return h3_fail(err, H3_EINVAL, "linear: weight[%lld, %lld] = %g overflows float16 (max 65504); "
                           "use bf16 or fp32", (long long)(i / K), (long long)(i % K), (double)v);
    }
    h3_linear *l = new_linear(N, K, opts, gs);
    if (!l) return h3_fail(err, H3_ENOMEM, "linear: out of memory");
    if (is_int(wt) && l->rot_group) {
        /* h3cy's own int8 with rotation: quantise W H (rows rotated as x will be) */
        float *wr = malloc((size_t)nw * sizeof(float));
        if (!wr) { h3_linear_free(l); return h3_fail(err, H3_ENOMEM, "linear: out of memory"); }
        for (int64_t i = 0; i < nw; i++) wr[i] = src_at(w, src_dtype, i);
        st = h3_hadamard(wr, N, K, l->rot_group, NULL, H3_ISA_REF, NULL, err);
        for (int64_t i = 0; !st && i < nw; i++)
            if (!isfinite(wr[i]))
                st = h3_fail(err, H3_EINVAL, "linear: rotated weight row %lld overflows float32", (long long)(i / K));
        if (!st) st = pack_int(l, wr, H3_DT_F32, err);
        free(wr);
    } else if (is_int(wt)) {
        st = pack_int(l, w, src_dtype, err);
    } else {
        size_t esz = wt == H3_DT_F32 ? 4 : 2;
        l->w = alloc_streamed(l, (size_t)nw * esz);
        if (!l->w) { h3_linear_free(l); return h3_fail(err, H3_ENOMEM, "linear: cannot allocate %zu bytes", (size_t)nw * esz); }
        if (wt == src_dtype) memcpy(l->w, w, (size_t)nw * esz);
        else st = h3_convert(w, src_dtype, l->w, wt, nw, H3_ISA_REF, err);
        l->wbytes = (size_t)nw * esz;
    }
    if (!st) st = copy_bias(l, bias, err);
    if (st) { h3_linear_free(l); return st; }
    *out = l;
    return H3_OK;
}

h3_status h3_linear_create_q8(const int8_t *q, const float *scales, int64_t N, int64_t K,
                              const float *bias, const h3_linear_opts *opts, h3_linear **out,
                              h3_err *err) {
    if (!out || !q || !scales || !opts) return h3_fail(err, H3_EINVAL, "linear_create_q8: NULL argument");
    if (N < 1 || K < 1 || N > ((int64_t)1 << 31) || K > ((int64_t)1 << 31))
        return h3_fail(err, H3_EINVAL, "linear_create_q8: bad weight shape [%lld, %lld]", (long long)N, (long long)K);
    if (opts->wtype != H3_DT_I8)
        return h3_fail(err, H3_EINVAL, "linear_create_q8: int8 weights need wtype H3_DT_I8, got %d", opts->wtype);
    int gs;
    h3_status st = check_opts(opts, N, K, &gs, err);
    if (st) return st;
    for (int64_t n = 0; n < N; n++)
        if (!isfinite(scales[n]))
            return h3_fail(err, H3_EINVAL, "linear_create_q8: scale[%lld] is not finite", (long long)n);
    h3_linear *l = new_linear(N, K, opts, gs);
    if (!l) return h3_fail(err, H3_ENOMEM, "linear_create_q8: out of memory");
    st = pack_q8(l, q, scales, err);
    if (!st) st = copy_bias(l, bias, err);
    if (st) { h3_linear_free(l); return st; }
    *out = l;
    return H3_OK;
}

h3_status h3_linear_attach_parts(const h3_linear_layout *lay, const void *const *parts, int nparts,
                                 const float *bias, h3_isa isa, h3_linear **out, h3_err *err) {
    if (!lay || !parts || !out) return h3_fail(err, H3_EINVAL, "linear_attach_parts: NULL argument");
    if (nparts < 1 || nparts > H3_LINEAR_MAX_PARTS)
        return h3_fail(err, H3_EINVAL, "linear_attach_parts: %d parts (1..%d)", nparts, H3_LINEAR_MAX_PARTS);
    if (is_int(lay->wtype) || lay->nr)
        return h3_fail(err, H3_EINVAL, "linear_attach_parts: only row-major float weights come in parts");
    if (lay->N % nparts || (lay->pair && nparts > 2))
        return h3_fail(err, H3_EINVAL, "linear_attach_parts: %lld rows do not split into %d%s parts",
                       (long long)lay->N, nparts, lay->pair ? " pair" : "");
    const uintptr_t wmask = lay->wtype == H3_DT_F32 ? 3 : 1;
    for (int i = 0; i < nparts; i++)
        if (!parts[i] || ((uintptr_t)parts[i] & wmask))
            return h3_fail(err, H3_EINVAL, "linear_attach_parts: part %d is NULL or not element-aligned", i);
    h3_status st = h3_linear_attach(lay, parts[0], NULL, bias, isa, out, err);
    if (st || nparts == 1) return st;
    h3_linear *l = *out;
    l->nparts = nparts;
    l->part_rows = lay->N / nparts;
    for (int i = 0; i < nparts; i++) l->part[i] = parts[i];
    return H3_OK;
}

h3_status h3_linear_dequant(const h3_linear *l, float *out, h3_err *err) {
    if (!l || !out) return h3_fail(err, H3_EINVAL, "linear_dequant: NULL argument");
    if (l->wtype == H3_DT_GGUF) return gemm_gguf_dequant(l, out, err);
    if (l->wtype == H3_DT_NVFP4) return gemm_nvfp4_dequant(l, out, err);
    const int64_t N = l->N, K = l->K, Kp = l->Kp;
    if (!is_int(l->wtype)) {
        for (int64_t n = 0; n < N; n++) {
            int64_t r;
            const void *base = rows_at(l, n, &r);
            for (int64_t k = 0; k < K; k++) out[n * K + k] = gemm_w_at(l->wtype, base, r * K + k);
        }
        return H3_OK;
    }
    const int nr = l->kt->nr;
    const uint8_t *pk = (const uint8_t *)l->w;
    const int i4 = l->wtype == H3_DT_I4;
    const int64_t ng = i4 ? Kp / l->group_size : 1;
    for (int64_t n = 0; n < N; n++) {
        int64_t r = prow_of(l, n), p = r / nr, j = r % nr;
        for (int64_t k = 0; k < K; k++) {
            int64_t quad = k / 4, t = k % 4;
            int q;
            float s;
            if (!i4) {
                q = (int)pk[((p * (Kp / 4) + quad) * nr + j) * 4 + t] - 128;
                s = l->wscale[r];
            } else {
                uint8_t b = pk[((p * (Kp / 8) + quad / 2) * nr + j) * 4 + t];
                q = (int)((quad & 1) ? (b >> 4) : (b & 15)) - 8;
                s = l->wscale[(p * ng + k / l->group_size) * nr + j];
            }
            out[n * K + k] = (float)q * s;
        }
    }
    /* stored rotated (W H): rotate the rows back (H H = I) */
    if (l->rot_group) return h3_hadamard(out, N, K, l->rot_group, NULL, H3_ISA_REF, NULL, err);
    return H3_OK;
}

/* ---------------------------------------------------------------- storage export/attach */

h3_status h3_linear_layout_get(const h3_linear *l, h3_linear_layout *lay, const void **w,
                               const float **scales, h3_err *err) {
    if (!l || !lay) return h3_fail(err, H3_EINVAL, "linear_layout_get: NULL argument");
    if (l->wtype == H3_DT_GGUF)
        return h3_fail(err, H3_EINVAL, "linear_layout_get: a GGUF linear reads the file's blocks; it has no cache layout");
    if (l->wtype == H3_DT_NVFP4)
        return h3_fail(err, H3_EINVAL, "linear_layout_get: an NVFP4 linear reads the file's codes; it has no cache layout");
    memset(lay, 0, sizeof *lay);
    lay->wtype = l->wtype;
    lay->group_size = l->group_size;
    lay->act_group = is_int(l->wtype) && l->act_group != (int)l->Kp ? l->act_group : 0;
    lay->pair = l->pair;
    lay->nr = is_int(l->wtype) ? l->kt->nr : 0;
    lay->N = l->N;
    lay->K = l->K;
    lay->Kp = l->Kp;
    lay->s_bytes = l->sbytes;
    lay->w_bytes = l->wbytes - l->sbytes;
    lay->bf16_inputs = h3_linear_bf16_activations(l);
    lay->f32_exact = l->f32_exact;
    lay->small_pages = l->small_pages;
    lay->ext_off = l->ext_off;
    if (l->nparts) return h3_fail(err, H3_EINVAL, "linear_layout_get: this linear's rows are in %d separate parts", l->nparts);
    if (l->rot_group)
        return h3_fail(err, H3_EINVAL, "linear_layout_get: a rotated (int8-convrot) linear has no cache layout");
    if (w) *w = l->w;
    if (scales) *scales = l->wscale;
    return H3_OK;
}

h3_status h3_linear_attach(const h3_linear_layout *lay, const void *w, const float *scales,
                           const float *bias, h3_isa isa, h3_linear **out, h3_err *err) {
    if (!lay || !w || !out) return h3_fail(err, H3_EINVAL, "linear_attach: NULL argument");
    h3_status st = h3_isa_check(isa, err);
    if (st) return st;
    const int wt = lay->wtype;
    if (wt < H3_DT_F32 || wt > H3_DT_I4) return h3_fail(err, H3_EINVAL, "linear_attach: unknown weights mode %d", wt);
    if (lay->N < 1 || lay->K < 1 || (lay->pair && lay->N % 2))
        return h3_fail(err, H3_EINVAL, "linear_attach: bad shape [%lld, %lld]", (long long)lay->N, (long long)lay->K);
    if (wt == H3_DT_I4 && lay->group_size != 32 && lay->group_size != 64 && lay->group_size != 128)
        return h3_fail(err, H3_EINVAL, "linear_attach: bad int4 group_size %d", lay->group_size);
    if (is_int(wt) && !scales) return h3_fail(err, H3_EINVAL, "linear_attach: int weights need scales");
    /* int panels are ours (64-byte aligned in cache files); float weights may sit at any
     * element-aligned offset of a checkpoint (the float kernels load unaligned) */
    uintptr_t wmask = is_int(wt) ? 63 : (wt == H3_DT_F32 ? 3 : 1);
    if (((uintptr_t)w & wmask) || (scales && ((uintptr_t)scales & 3)))
        return h3_fail(err, H3_EINVAL, "linear_attach: weights must be %d-byte aligned, scales 4-byte aligned",
                       (int)wmask + 1);
    h3_linear *l = calloc(1, sizeof *l);
    if (!l) return h3_fail(err, H3_ENOMEM, "linear_attach: out of memory");
    l->N = lay->N; l->K = lay->K; l->wtype = wt; l->pair = lay->pair; l->isa = isa;
    l->group_size = wt == H3_DT_I4 ? lay->group_size : 0;
    l->small_pages = lay->small_pages ? 1 : 0;
    set_geometry(l, isa, is_int(wt) ? lay->act_group : 0, lay->bf16_inputs, lay->f32_exact, lay->ext_off);
    /* the stored layout must be the one this path computes from */
    size_t wb, sb = 0;
    if (is_int(wt)) {
        const int64_t Np = np_of(l);
        wb = wt == H3_DT_I4 ? (size_t)(Np * l->Kp / 2) : (size_t)(Np * l->Kp);
        sb = (size_t)(wt == H3_DT_I4 ? Np * (l->Kp / l->group_size) : Np) * sizeof(float);
        if (lay->nr != l->kt->nr || lay->Kp != l->Kp)
            st = h3_fail(err, H3_EINVAL, "linear_attach: stored panels are nr=%d Kp=%lld, path '%s' needs nr=%d Kp=%lld",
                         lay->nr, (long long)lay->Kp, h3_isa_name(isa), l->kt->nr, (long long)l->Kp);
    } else {
        wb = (size_t)(l->N * l->K) * (wt == H3_DT_F32 ? 4u : 2u);
    }
    if (!st && (lay->w_bytes != wb || lay->s_bytes != sb))
        st = h3_fail(err, H3_EINVAL, "linear_attach: stored sizes %llu+%llu bytes, expected %zu+%zu",
                     (unsigned long long)lay->w_bytes, (unsigned long long)lay->s_bytes, wb, sb);
    if (!st && bias) {
        l->bias = h3_alloc((size_t)l->N * sizeof(float));
        if (!l->bias) st = h3_fail(err, H3_ENOMEM, "linear_attach: out of memory");
        else memcpy(l->bias, bias, (size_t)l->N * sizeof(float));
    }
    if (st) { h3_linear_free(l); return st; }
    l->w = (void *)w;
    l->wscale = (float *)scales;
    l->owns_w = 0;
    l->wbytes = wb + sb;
    l->sbytes = sb;
    *out = l;
    return H3_OK;
}
