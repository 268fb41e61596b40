/* h3.h — the public C API of h3cy's kernel library (the only header pyx/ sees).
 *
 * Conventions
 *  - Arrays are row-major, float32 unless the name says otherwise.
 *  - Fallible functions return h3_status (0 = H3_OK, negative = error) and fill
 *    h3_err with a message naming what was wrong; outputs are written only on success.
 *  - C borrows every pointer for one call only, unless the name says "create"
 *    (which copies what it needs).  Nothing here prints, aborts or reads getenv.
 *  - Each public kernel takes the h3_isa to run; h3_isa_check() says whether the CPU
 *    (and the OS) supports it.  H3_ISA_REF (plain scalar C) is always available and is
 *    the executable specification every SIMD path is tested against.
 */
#ifndef H3_H
#define H3_H

#include <stddef.h>
#include <stdint.h>

#ifdef __cplusplus
extern "C" {
#endif

typedef enum {
    H3_OK = 0,
    H3_EINVAL = -1,       /* bad argument: shape, dtype, pointer, option */
    H3_ENOMEM = -2,
    H3_EIO = -3,
    H3_EFORMAT = -4,      /* malformed file or tensor */
    H3_EUNSUPPORTED = -5, /* CPU/OS lacks the requested path */
    H3_ECANCELLED = -6
} h3_status;

typedef struct { char msg[256]; } h3_err;

typedef enum {
    H3_ISA_REF = 0,
    H3_ISA_AVX2 = 1,    /* AVX2 + FMA + F16C */
    H3_ISA_AVX512 = 2,  /* AVX-512 F/BW/VL/DQ (+BF16, +VNNI used when present) */
    H3_ISA_AMX = 3,     /* AVX512 + AMX-TILE/BF16/INT8 with Linux permission granted */
    H3_ISA_NEON = 4,    /* AArch64 Advanced SIMD (always present on AArch64; +SDOT, +SMMLA,
                           +BFMMLA used when present: see H3_EXT_*) */
    H3_ISA_AVXVNNI = 5, /* AVX2 + AVX-VNNI (VEX vpdpbusd): AVX2's kernels, VNNI int GEMMs */
    H3_ISA_COUNT = 6
} h3_isa;

/* ---- CPU features and dispatch (cpu.c) ------------------------------------- */
const char *h3_isa_name(h3_isa isa);                 /* "ref", "avx2", ... ; "?" if out of range */
int h3_isa_from_name(const char *name, h3_isa *out); /* 1 on success, 0 if unknown */
int h3_isa_supported(h3_isa isa);                    /* 1 if this CPU+OS can run it */
h3_isa h3_isa_best(void);                            /* the fastest supported path */
/* The path whose vector (non-tile) kernels run for `isa`: AMX adds tile GEMMs and tile
 * attention to AVX-512, so its element-wise ops, float attention and convolutions are
 * AVX-512's; every other path is its own.  The one place this mapping is written. */
h3_isa h3_isa_vector(h3_isa isa);
h3_status h3_isa_check(h3_isa isa, h3_err *err);     /* H3_EUNSUPPORTED with the reason */
/* Feature flags as detected (for diagnostics): bit i = feature i of h3_cpu_feature_name(i). */
uint64_t h3_cpu_features(void);
const char *h3_cpu_feature_name(int i);              /* NULL past the last one */
/* Optional extensions of the 'neon' path, chosen per linear (never a separate ISA name):
 * where the CPU has them (AArch64 Linux HWCAP2) and the linear's opts do not turn them
 * off, its int8/int4 GEMMs run SMMLA (same packed layout, same bits as the reference) and
 * its bf16 x bf16-input GEMMs BFMMLA (another summation order, see gemm_neon.c).  SDOT
 * (asimddp) is not one of them: the plain neon kernels use it wherever the CPU has it. */
enum { H3_EXT_I8MM = 1, H3_EXT_BF16 = 2, H3_EXT_ALL = 3 };
int h3_cpu_extensions(void);                         /* H3_EXT_* bits this CPU has */

/* ---- Thread pool (pool.c) --------------------------------------------------- */
/* One explicit pool per model (never a global).  h3_pool_run(fn) calls fn(ctx, ith, nth)
 * on nth threads (the caller is thread 0) and returns when all are done; that return is
 * the barrier between dependent phases.  Idle workers spin briefly, then sleep. */
typedef struct h3_pool h3_pool;

/* The calling convention every transformer block kind shares (h3_dit.h, h3_vit.h,
 * h3_qwen.h, h3_qwen_vision.h), written once:
 *   size_t    PREFIX_workspace_bytes(const W *w, const ARGS *a, int n_threads);
 *   h3_status PREFIX_forward(const W *w, const ARGS *a, float *h, h3_pool *pool,
 *                            void *ws, size_t ws_bytes, h3_isa isa, h3_err *err);
 * forward updates the rows h in place; ws: 64-byte aligned, >= the workspace bytes (NULL:
 * allocated inside).  Each header declares its block with one H3_BLOCK_API line. */
#define H3_BLOCK_API(PREFIX, W, ARGS)                                                         \
    size_t PREFIX##_workspace_bytes(const W *w, const ARGS *a, int n_threads);                \
    h3_status PREFIX##_forward(const W *w, const ARGS *a, float *h, h3_pool *pool, void *ws,   \
                               size_t ws_bytes, h3_isa isa, h3_err *err)
typedef void (*h3_task_fn)(void *ctx, int ith, int nth);
h3_status h3_pool_create(int n_threads, h3_pool **out, h3_err *err);
void h3_pool_free(h3_pool *pool);                    /* NULL is a no-op */
int h3_pool_threads(const h3_pool *pool);            /* NULL pool -> 1 */
void h3_pool_run(h3_pool *pool, h3_task_fn fn, void *ctx); /* NULL pool -> fn(ctx,0,1) */

/* ---- Number formats (convert.c, elem.c) --------------------------------------- */
/* bf16 is passed as raw uint16 bits, f16 as IEEE binary16 bits.  Every path gives the
 * same bits as the scalar reference: f32->bf16 and f32->f16 round to nearest even;
 * f16 overflow -> +-inf; subnormals are kept (never flushed); NaN stays NaN (f32->bf16
 * keeps sign and payload and sets the quiet bit, f32->f16 gives sign|0x7e00).
 * src_dtype/dst_dtype: H3_DT_F32, H3_DT_BF16 or H3_DT_F16; src and dst must not overlap
 * (unless the dtypes are equal: then this is memmove).  h3_convert runs on the calling
 * thread; h3_convert_mt splits n over pool and reports the kernel table that ran. */
h3_status h3_convert(const void *src, int src_dtype, void *dst, int dst_dtype, int64_t n,
                     h3_isa isa, h3_err *err);
h3_status h3_convert_mt(const void *src, int src_dtype, void *dst, int dst_dtype, int64_t n,
                        h3_pool *pool, h3_isa isa, h3_isa *ran, h3_err *err);
enum { H3_DT_F32 = 0, H3_DT_BF16 = 1, H3_DT_F16 = 2, H3_DT_I8 = 3, H3_DT_I4 = 4,
       H3_DT_GGUF = 5 /* a linear over GGUF blocks as stored (h3_linear_attach_gguf) */,
       H3_DT_NVFP4 = 6 /* a linear over NVFP4 codes and scales as stored (h3_linear_attach_nvfp4) */ };

/* ---- GEMM: y[M,N] = x[M,K] . W[N,K]^T (+ epilogue)  (gemm_weights.c, gemm.c) ------ */
/* A "linear" owns W converted to the storage the chosen mode computes from:
 *   H3_DT_F32 / H3_DT_BF16 / H3_DT_F16: [N,K] row-major copies (bf16 from bf16 bits is
 *     stored as given, f16 is converted with round-to-nearest-even);
 *   H3_DT_I8: symmetric, one float scale per output channel, q in [-127,127];
 *   H3_DT_I4: symmetric, one float scale per group of group_size along K, q in [-7,7].
 * For I8/I4, activations are quantised per row to int8 on the fly, with one scale per
 * act_group input channels (0 = the whole row).  Activations are float32 in every mode. */
typedef struct h3_linear h3_linear;

typedef struct {
    int wtype;       /* H3_DT_* storage/compute mode */
    int group_size;  /* I4: 32, 64 or 128 (0 -> 64); ignored otherwise */
    int act_group;   /* I8/I4: input channels per activation scale, 0 = whole row */
    int pair;        /* 1: W rows are [gate; value] halves (needed for H3_EPI_SWIGLU) */
    int bf16_inputs; /* bf16 weights: the caller's x is bf16-representable, so kernels that
                        multiply bf16 pairs (AVX512-BF16 VDPBF16PS) may run; same exact
                        products, another summation order */
    h3_isa isa;      /* the path this linear runs (its packed layout follows it) */
    int f32_exact;   /* bf16 weights: multiply float32 x exactly (widened weights, f32 FMA),
                        never through bf16 x bf16 kernels (AMX tiles, VDPBF16PS) -- the
                        DiT's fp32 mode over a bf16 checkpoint */
    int small_pages; /* 1: keep the converted W and the workspaces forward allocates itself in
                        ordinary 4 KB pages; 0 (default): large ones go in transparent huge
                        pages (same bits; the A/B switch, H3CY_HUGEPAGES=0 in h3cy._config) */
    int rot_group;   /* I8 only, 0 = none: each row of x is rotated by the block Hadamard of
                        this group (h3_hadamard) before it is quantised -- the weights were
                        rotated the same way when they were quantised (int8-convrot files,
                        h3_linear_create_q8); a power of 4 dividing K, act_group 0 or a
                        multiple of it */
    int ext_off;     /* H3_EXT_* bits this linear must not use even where the CPU has them
                        (0, the default: all it has).  A run-time choice of kernels, not of
                        storage: the A/B switch, H3CY_NEON_EXT in h3cy._config */
} h3_linear_opts;

/* w: [N,K] of src_dtype (H3_DT_F32 or H3_DT_BF16); bias: [N] float32 or NULL. */
h3_status h3_linear_create(const void *w, int src_dtype, int64_t N, int64_t K,
                           const float *bias, const h3_linear_opts *opts,
                           h3_linear **out, h3_err *err);
/* A linear over int8 weights quantised elsewhere (int8-convrot or int8_tensorwise files):
 * q: [N,K] int8, row-major; scales: [N] float32, W[n,k] = q[n,k] * scales[n] (a per-tensor
 * scale is passed repeated).  q is packed into this path's panels at create (no float copy;
 * q = -128 is read as -127: the kernels' exact int16 pair sums need |q| <= 127, and
 * Comfy's quantiser, amax / 127, never writes it).  opts->wtype must be H3_DT_I8;
 * opts->rot_group > 0 when the file's weights are rotated (convrot).  Scales must be
 * finite. */
h3_status h3_linear_create_q8(const int8_t *q, const float *scales, int64_t N, int64_t K,
                              const float *bias, const h3_linear_opts *opts, h3_linear **out,
                              h3_err *err);
void h3_linear_free(h3_linear *lin);
int64_t h3_linear_n(const h3_linear *lin);
int64_t h3_linear_k(const h3_linear *lin);
h3_isa h3_linear_isa(const h3_linear *lin);
size_t h3_linear_weight_bytes(const h3_linear *lin);
/* 1 if this linear multiplies x as bf16 (AMX's bf16 tiles round it; the VDPBF16PS kernel,
 * chosen with bf16_inputs, takes it as given), else 0 (float32 inputs). */
int h3_linear_bf16_activations(const h3_linear *lin);   /* storage held for W (+scales) */
/* The H3_EXT_* extensions this linear's kernels use (0 on every path but neon). */
int h3_linear_extensions(const h3_linear *lin);
/* Output columns per packed panel of the int8/int4 kernels of `isa` (0 for an unknown
 * isa): the packed layout follows it, so a converted-weight cache names it in its key. */
int h3_linear_int_panel_width(h3_isa isa);
/* Storage export / attach, for weight cache files and zero-copy bf16 checkpoints.
 * layout_get describes a linear's converted storage (w: w_bytes, scales: s_bytes; the
 * pointers stay owned by the linear).  attach makes a linear over storage the caller
 * keeps alive and unchanged for the linear's lifetime (an mmap'd cache, or a bf16
 * checkpoint tensor as [N,K] row-major): nothing is copied but the bias.  The layout must
 * be the one `isa` computes from (int modes: the same panel width nr and padded K), else
 * H3_EINVAL; int panels must be 64-byte aligned, float weights element-aligned. */
typedef struct {
    int wtype, group_size, act_group, pair, nr;
    int64_t N, K, Kp;
    uint64_t w_bytes, s_bytes;
    int bf16_inputs;   /* a run-time option, as in h3_linear_opts (not part of the storage) */
    int f32_exact;     /* likewise */
    int small_pages;   /* likewise (attach copies no weights: only forward's own workspace) */
    int ext_off;       /* likewise */
} h3_linear_layout;
h3_status h3_linear_layout_get(const h3_linear *lin, h3_linear_layout *layout, const void **w,
                               const float **scales, h3_err *err);
h3_status h3_linear_attach(const h3_linear_layout *layout, const void *w, const float *scales,
                           const float *bias, h3_isa isa, h3_linear **out, h3_err *err);
/* attach over float rows ([N,K] bf16/f32, nr = 0) that lie in nparts equal row blocks at
 * separate addresses: parts[i] holds logical rows [i*N/nparts, (i+1)*N/nparts).  For
 * checkpoints that store one logical weight as several tensors (the diffusers layout's
 * to_q/to_k/to_v; its SwiGLU [value; gate] read as gate = second half, value = first),
 * with no copy.  nparts in 1..H3_LINEAR_MAX_PARTS; a pair linear needs 1 or 2 (its
 * halves).  layout->w_bytes counts all parts.  Such a linear has no single storage to
 * export (layout_get fails). */
#define H3_LINEAR_MAX_PARTS 3
h3_status h3_linear_attach_parts(const h3_linear_layout *layout, const void *const *parts,
                                 int nparts, const float *bias, h3_isa isa, h3_linear **out,
                                 h3_err *err);
/* A LoRA's low-rank addend, run by h3_linear_forward inside the GEMM (before the bias
 * and the epilogue, so a SwiGLU or gated-residual epilogue sees the adapted product):
 *   y[m, n] += sum_r ((x[m] . a[r]) * scale[r]) * b[n, r]
 * a: [R, K] float32, b: [N, R] float32 (rows in the linear's logical order: [gate; value]
 * for a pair linear), scale: [R].  Several adapters on one linear are one h3_lora whose
 * ranks are concatenated (each its own scale).  create copies a, b and scale (ranks
 * reordered inside; set_scale takes them in the caller's order).  Float32 products on
 * every isa (bit-identical to H3_ISA_REF but for the sign of zero results) except
 * H3_ISA_AMX, whose products run on bf16 tiles (x, a, u, b rounded to bf16; pass
 * H3_ISA_AVX512 for float32 LoRA products beside an AMX linear) and whose down product on
 * an int8/int4 linear reads that linear's int8 rows (h3_lora_set_int_down). */
typedef struct h3_lora h3_lora;
h3_status h3_lora_create(const float *a, const float *b, const float *scale, int64_t R, int64_t N,
                         int64_t K, h3_isa isa, h3_lora **out, h3_err *err);
void h3_lora_free(h3_lora *lora);                       /* NULL is a no-op */
h3_status h3_lora_set_scale(h3_lora *lora, const float *scale, h3_err *err);   /* [R] */
/* on != 0: on an int8/int4 linear of the LoRA's own isa, add the up product as the GEMM's
 * micro-kernel stores each output tile of its last K block (one write of the output)
 * instead of in a second pass over it; where the isa has no such kernel nothing changes.
 * Default: on for H3_ISA_AMX, off elsewhere (H3_ISA_REF has the kernel as the AMX one's
 * executable spec).  Either way the values of the second pass: the same sums added in the
 * same order, but for the sign of zero results and, with a non-finite u (x . A^T), NaN
 * where the fused sum meets it times a zero of B.  Not while the LoRA is attached to a
 * running linear (the workspace size follows it). */
h3_status h3_lora_set_fused(h3_lora *lora, int on, h3_err *err);
/* on != 0: on an int8/int4 linear, compute the down product u = x . A^T on the linear's
 * int kernel from the int8 rows it quantises for its own product (A quantised to int8 per
 * rank when attached), instead of rereading x in float: the LoRA's part then carries the
 * int8 activation error the base's product has (~1% of it, against bf16 tiles' ~0.3%); on
 * the 16-core SPR it cost +0.2 ms against the float one's +2.0 ms (M = 1872, K = 5376, rank
 * 64).  Default: on, on every isa (on AVX-512 VNNI a rank-64 LoRA's block cost fell from
 * +8.2% to +5.2%).
 * Read when attached (h3_linear_set_lora). */
h3_status h3_lora_set_int_down(h3_lora *lora, int on, h3_err *err);
/* Attach (borrowed: keep it alive and unchanged while attached; NULL detaches) to a linear
 * of the same N and K.  Not for conv rows (h3_linear_forward_rows refuses).  The
 * linear's workspace_bytes grow by the addend's (u and per thread its GEMM's workspace);
 * with int_down on an int8/int4 linear, the linear also holds an int8 copy of A (R x K
 * bytes) until it is detached or freed. */
h3_status h3_linear_set_lora(h3_linear *lin, const h3_lora *lora, h3_err *err);

/* The weight the GEMM effectively multiplies by, dequantised to float32: out [N,K] (a
 * rotated linear's rows rotated back: x . W^T = (x H) . (W H)^T, H = H^T = H^-1). */
h3_status h3_linear_dequant(const h3_linear *lin, float *out, h3_err *err);

enum {
    H3_EPI_NONE = 0,
    H3_EPI_SWIGLU = 1,   /* W rows are [gate; value] (2H rows): y[M,H] = silu(g) * v */
    H3_EPI_RESID = 2     /* y[m,n] = resid[m,n] + gate[gate_row[m]? : m][n] * (xW^T+b)[m,n] */
};
typedef struct {
    int kind;                 /* H3_EPI_* */
    const float *resid;       /* RESID: [M, N] (may alias y) */
    const float *gate;        /* RESID: [G, N] per-row gate table, or NULL for gate = 1 */
    const int32_t *gate_row;  /* RESID: [M] row -> gate table row, or NULL for row m */
    int64_t gate_rows;        /* RESID: G (checked against gate_row) */
} h3_epilogue;

/* Scratch the call needs, in bytes (activation quantisation, packed panels, per thread). */
size_t h3_linear_workspace_bytes(const h3_linear *lin, int64_t M, int n_threads,
                                 const h3_epilogue *epi);
/* x: [M,K] float32; y: [M,N] (or [M,N/2] for SWIGLU).  ws: workspace_bytes or NULL (then
 * allocated and freed inside; ENOMEM possible).  y must not alias x. */
h3_status h3_linear_forward(const h3_linear *lin, h3_pool *pool, const float *x, int64_t M,
                            float *y, const h3_epilogue *epi, void *ws, size_t ws_bytes,
                            h3_err *err);

/* ---- GGUF blocks (gguf_ref.c: formats; gemm_gguf.c: the linear) --------------- */
/* ggml's tensor types by their GGUF ids.  A row of K values is K / blk blocks of
 * `bytes` bytes each (h3_gguf_type_size); quantised types need K % blk == 0. */
enum {
    H3_GGUF_F32 = 0, H3_GGUF_F16 = 1, H3_GGUF_Q4_0 = 2, H3_GGUF_Q4_1 = 3, H3_GGUF_Q5_0 = 6,
    H3_GGUF_Q5_1 = 7, H3_GGUF_Q8_0 = 8, H3_GGUF_Q2_K = 10, H3_GGUF_Q3_K = 11, H3_GGUF_Q4_K = 12,
    H3_GGUF_Q5_K = 13, H3_GGUF_Q6_K = 14, H3_GGUF_IQ4_NL = 20, H3_GGUF_IQ4_XS = 23, H3_GGUF_BF16 = 30
};
/* 1 and the block's values and bytes for a type h3cy reads, else 0 (outputs untouched). */
int h3_gguf_type_size(int type, int *blk, int *bytes);
/* src: n values of `type` as stored (n a multiple of its block) -> out [n] float32.
 * Float types are widened exactly; a quantised value is computed as the format defines it
 * (scale * q - min, in float32).  EINVAL on an unknown type or a partial block. */
h3_status h3_gguf_dequant(int type, const void *src, int64_t n, float *out, h3_err *err);
/* The activation quantiser the GGUF linear applies to each row of x, exposed for tests:
 * per group of 256 values of a row (the last group the rest of the row) d = max|x| / 127,
 * q = rint(x / d) (ties to even; 0 when d = 0).  x: [M, K] (K % 32 == 0) -> q [M, K] int8,
 * d [M, ceil(K / 256)] float32. */
h3_status h3_gguf_quant_act(const float *x, int64_t M, int64_t K, int8_t *q, float *d, h3_err *err);
/* A linear over GGUF blocks, borrowed (the caller keeps them alive and unchanged): the
 * [N, K] weight's rows lie in nparts equal parts (rows [i*N/nparts, (i+1)*N/nparts) in
 * parts[i], of quantised type types[i]; parts may differ in type, as llama.cpp's mixed
 * "_M" files do for q/k/v).  pair: rows are [gate; value] halves (H3_EPI_SWIGLU), then
 * nparts is 1 or 2.  h3_linear_forward quantises each row of x per 256 values
 * (h3_gguf_quant_act), multiplies every weight sub-block (16 or 32 values) by its int8
 * activations in integers and applies both scales in float32, in one order on every path
 * (AVX2, AVX-VNNI, AVX-512 VNNI, NEON: the reference's bits; docs/gguf.md).  A LoRA
 * (h3_linear_set_lora) is added after the base product and before the epilogue
 * (gemm_lora.c).  No conv rows, no cache layout (EINVAL).  types[i] must be one of the
 * quantised types above (EINVAL otherwise). */
h3_status h3_linear_attach_gguf(const void *const *parts, const int *types, int nparts, int64_t N,
                                int64_t K, const float *bias, int pair, h3_isa isa,
                                h3_linear **out, h3_err *err);
/* Run-time choices of a GGUF linear, for A/B (the same results up to the order noted):
 * kq 2 (default) runs Q4_K / Q5_K on the amx path in their integer super-block order
 * (gguf_kq_amx.c, ~2e-7 from ref), a linear whose parts are all Q4_K / Q5_K with the
 * activations in the kernel's tile layout (the same bits as 1); 1 the rows in place for all;
 * 3 the tile layout on every path (its scalar kernel off AMX: for testing the driver's side
 * anywhere); 0 the common order (ref's bits); group 1..16 column
 * panels per pass over the K blocks, 0 the path's default (4 on amx, else 1; the same bits);
 * q8d 1 (default) runs a linear whose parts are all Q8_0 on the amx path with its weights as
 * the tiles' A operand, read in place (gguf_q8d_amx.c), 0 on the per-segment tile kernel over
 * decoded panels (the same bits), 2 that route on every path (its scalar kernel off AMX: for
 * testing the driver's side anywhere).  h3cy._config fills them from H3CY_GGUF_KQ /
 * H3CY_GGUF_GROUP / H3CY_GGUF_Q8D.  H3_EINVAL for another value or a linear that is not GGUF.
 * h3_linear_gguf_q8d: 1 when the linear's forward takes that route; h3_linear_gguf_kq_tiles:
 * 1 when it takes the K-quants' tile-layout one. */
h3_status h3_linear_set_gguf_opts(h3_linear *lin, int kq, int group, int q8d, h3_err *err);
int h3_linear_gguf_q8d(const h3_linear *lin);
int h3_linear_gguf_kq_tiles(const h3_linear *lin);
/* on 1 (attach's default): off the amx path, each K block's kernel call first prefetches the
 * panel's next K block of weights, so the next call's reads of the file's rows (one stream a
 * weight row) do not wait on memory (on the amx path the SPR's hardware prefetchers kept up:
 * left to them); 2 prefetches on every path, 0 on none (the same bits; for A/B; h3cy._config
 * fills it from H3CY_GGUF_PF).  H3_EINVAL for another value or a linear that is not GGUF. */
h3_status h3_linear_set_gguf_prefetch(h3_linear *lin, int on, h3_err *err);

/* ---- NVFP4 (ComfyUI "nvfp4"; gemm_nvfp4.c, nvfp4_*.c) --------------------------- */
/* One tensor of an NVFP4 linear as the file stores it (comfy-kitchen's
 * TensorCoreNVFP4Layout): W[n, k] = e2m1(code) * e4m3(scale[n, k / 16]) * scale_2, times
 * pre_scale[k] when given (AWQ: the input is multiplied by it before it is quantised). */
typedef struct {
    const uint8_t *codes;    /* rows of ld bytes: two E2M1 codes a byte, the even input in the
                                high nibble (bit 3 of a code its sign) */
    int64_t ld;              /* bytes per row (the file pads K to 16: ld >= K / 2) */
    const uint8_t *scales;   /* float8 e4m3fn, one per 16 inputs, in cuBLAS's blocked layout
                                over (rows rounded up to 128, 2 ld / 16 rounded up to 4):
                                128 x 4 tiles, each stored as [32][4][4] */
    float scale_2;           /* the per-tensor scale */
    const float *pre_scale;  /* [K] or NULL (copied) */
} h3_nvfp4_part;
/* A linear over NVFP4 tensors, borrowed (codes and scales stay the caller's, alive and
 * unchanged; nothing is widened in memory): the [N, K] weight's rows lie in nparts (1..3)
 * equal parts; pair: rows are [gate; value] halves (H3_EPI_SWIGLU), nparts 1 or 2.
 * K % 32 == 0.  h3_linear_forward multiplies each row of x by the part's pre_scale,
 * quantises it per 32 inputs to int8 (d = max|x| / 127, rint, ties to even), widens 16
 * weight rows' codes at a time to int8 2 e2m1 in [-12, 12] and multiplies in integers per
 * 16 inputs, the scales applied in float32: every path (ref, AVX2, AVX-512 VNNI, NEON)
 * computes the same bits.  That is the int8 route; on H3_ISA_AMX the default is the bf16
 * route (h3_linear_nvfp4_route, below).  No LoRA (EUNSUPPORTED), no conv rows, no cache layout (EINVAL);
 * a NaN scale_2 or pre_scale, or a NaN block scale, is EINVAL. */
h3_status h3_linear_attach_nvfp4(const h3_nvfp4_part *parts, int nparts, int64_t N, int64_t K, const float *bias,
                                 int pair, h3_isa isa, h3_linear **out, h3_err *err);
/* The product an NVFP4 linear's forward computes (its "route"):
 *   H3_NVFP4_ROUTE_INT8: the above (activations int8 per 32, integer dots per 16 inputs);
 *   H3_NVFP4_ROUTE_BF16: each row of x (times pre_scale, rounded to float) rounded to bf16
 *     (nearest even), the weights e2m1 * e4m3 (exact in bf16), float32 sums over K blocks of
 *     1024 inputs, each block's sum times scale_2 added: y = sum_b fmaf(scale_2, s_b, y).
 *     On H3_ISA_AMX the sums run on AMX bf16 tiles (their order is the hardware's: within
 *     float32 summation error of the reference); on other paths on the scalar reference
 *     (slow: for tests; H3_ISA_AVX512 decodes with AVX-512, the same bits);
 *   H3_NVFP4_ROUTE_AUTO (what attach sets, min_rows H3_NVFP4_AMX_MIN_ROWS): BF16 on
 *     H3_ISA_AMX for calls of M >= min_rows rows, else INT8.
 * EINVAL for another wtype, route or a negative min_rows. */
enum { H3_NVFP4_ROUTE_AUTO = 0, H3_NVFP4_ROUTE_INT8 = 1, H3_NVFP4_ROUTE_BF16 = 2 };
#define H3_NVFP4_AMX_MIN_ROWS 0
h3_status h3_linear_nvfp4_route(h3_linear *l, int route, int64_t min_rows, h3_err *err);

/* ---- Block Hadamard rotation (hadamard.c) ------------------------------------ */
/* x: [rows, n] in place: each run of `group` consecutive values of a row becomes
 * H_G . x_g with H_G = kron^p(H4) / sqrt(G), G = group = 4^p (4..4096, dividing n) and
 * H4 = [[1,1,1,-1],[1,1,-1,1],[1,-1,1,1],[-1,1,1,1]]: the "regular" Hadamard that Comfy's
 * int8-convrot files rotate their weights by (comfy-kitchen int8_utils._build_hadamard).
 * H_G is symmetric and orthogonal (its own inverse).  A fast Walsh-Hadamard transform:
 * p levels of halved H4 butterflies, O(n log n); every path gives the reference's bits.
 * `ran` (may be NULL) receives the path whose kernel ran. */
h3_status h3_hadamard(float *x, int64_t rows, int64_t n, int group, h3_pool *pool, h3_isa isa,
                      h3_isa *ran, h3_err *err);

/* ---- Attention (attn.c) ------------------------------------------------------ */
/* Multi-head self-attention over one sequence, online (flash) softmax in float32:
 *   out[i,h,:] = sum_j softmax_j(scale * q[i,h,:] . k[j,g,:]) v[j,g,:],  g = h / (Hq/Hkv)
 * q: [S, Hq, D], k,v: [S, Hkv, D] with row strides (in floats) ldq, ldk, ldv between
 * consecutive sequence positions (>= H*D, so views into a fused QKV buffer work);
 * out: [S, Hq, D] with stride ldo.  Hq % Hkv == 0 (grouped-query).  scale: usually
 * 1/sqrt(D).  causal: row i attends to keys 0..i only.  1 <= D <= 256.  S = 0 is a no-op.
 * out may be q itself (ldo == ldq) but must not overlap k or v (EINVAL).
 * Memory: workspace only, O(n_threads * tile * D), never S x S; workspace_bytes does not
 * depend on S and covers every isa.  ws == NULL: allocated and freed inside (ENOMEM
 * possible); else it must be 64-byte aligned and at least workspace_bytes.
 * isa H3_ISA_AMX runs the AVX-512 kernels (the products are f32), except with
 * bf16_inputs: q, k, v are multiplied as bf16 (rounded to nearest even when packed; exact
 * for the bf16 values of a bf16 model, a deliberate rounding for the int8/int4 models, see
 * h3_dit_block_args.attn_bf16), and then non-causal attention with D a multiple of 32
 * multiplies bf16 pairs exactly and sums in fp32 (AMX
 * tiles on H3_ISA_AMX, VDPBF16PS on H3_ISA_AVX512 where the CPU has AVX512-BF16), with the
 * softmax numerators rounded to bf16 before P.V as torch's bf16 attention rounds them
 * (attn_bf16.inc); other paths and cases ignore the flag.  Results do not depend on the thread count. */
typedef struct {
    int64_t S;
    int Hq, Hkv, D;
    int64_t ldq, ldk, ldv, ldo;
    float scale;
    int causal;
    int bf16_inputs;
} h3_attn_args;
size_t h3_attn_workspace_bytes(const h3_attn_args *a, int n_threads);
h3_status h3_attention(const h3_attn_args *a, const float *q, const float *k, const float *v,
                       float *out, h3_pool *pool, void *ws, size_t ws_bytes, h3_isa isa,
                       h3_err *err);

/* ---- Element-wise and row ops (elem.c) --------------------------------------- */
/* All operate on contiguous float32 arrays ([rows, n], row stride n).  Work is split
 * over rows (or elements) of `pool` (NULL: calling thread only); small calls run on the
 * calling thread.  `ran` (may be NULL) receives the ISA whose kernels ran: `isa` itself,
 * except H3_ISA_AMX, which runs the AVX-512 kernels and reports H3_ISA_AVX512.  An
 * unsupported isa is H3_EUNSUPPORTED, never a silent fallback.  "may alias" means the
 * output may be the very same buffer as that input; any other overlap is H3_EINVAL.
 * Exactness vs H3_ISA_REF: RoPE, AdaLN and conversions are bit-identical on every path;
 * RMSNorm differs by the order of its sum (~1e-7 relative); SiLU/SwiGLU use a ~2-ulp
 * vector exp (<= 2e-7 relative vs float64, as ref); SIMD GELU is x*sigmoid(2u), which
 * avoids the 1+tanh cancellation of torch's formula (the ref) for x < -3: both are
 * within 1.3e-7 * max(1, |x|) of float64. */

/* RMSNorm (torch order, float32): out = (x * (1 / sqrt(mean(x^2) + eps))) * w.
 * x, out: [rows, n] (out may alias x); w: [n] or NULL (no weight); n >= 1; eps >= 0. */
h3_status h3_rmsnorm(const float *x, const float *w, float *out, int64_t rows, int64_t n,
                     float eps, h3_pool *pool, h3_isa isa, h3_isa *ran, h3_err *err);

/* Rotate-half RoPE on the first rot_dim channels of each head, in place.
 * x: [rows, heads, head_dim]; cos, sin: [rows, rot_dim/2] (per-row tables; the same
 * angle is used for channel i and i + rot_dim/2); rot_dim even, 2 <= rot_dim <= head_dim:
 *   x1 = x[i], x2 = x[i + rot_dim/2]  (i < rot_dim/2)
 *   x[i] = x1*cos - x2*sin ; x[i + rot_dim/2] = x2*cos + x1*sin
 * (= torch's x*cos + rotate_half(x)*sin with cos/sin repeated twice; channels past
 * rot_dim are left as they are). */
h3_status h3_rope(float *x, const float *cos, const float *sin, int64_t rows, int heads,
                  int head_dim, int rot_dim, h3_pool *pool, h3_isa isa, h3_isa *ran,
                  h3_err *err);

/* out[i] = act(x[i]), x, out: [n] (out may alias x).
 *   H3_ACT_SILU:      x / (1 + exp(-x))
 *   H3_ACT_GELU_TANH: 0.5 x (1 + tanh(sqrt(2/pi) (x + 0.044715 x^3)))  (torch "tanh") */
enum { H3_ACT_SILU = 0, H3_ACT_GELU_TANH = 1 };
h3_status h3_activation(const float *x, float *out, int64_t n, int act, h3_pool *pool,
                        h3_isa isa, h3_isa *ran, h3_err *err);

/* SwiGLU of a [gate; value] pair per row: x: [rows, 2h] -> out: [rows, h] = silu(g) * v.
 * out may alias x (the result is compacted into x's first rows*h floats; that call
 * runs on one thread). */
h3_status h3_swiglu(const float *x, float *out, int64_t rows, int64_t h, h3_pool *pool,
                    h3_isa isa, h3_isa *ran, h3_err *err);

/* AdaLN modulation: out[i] = x[i] * (1 + scale[t]) + shift[t], t = row_table[i]
 * x, out: [rows, n] (out may alias x); scale, shift: [table_rows, n];
 * row_table: [rows] int32 in [0, table_rows) (NULL -> every row uses table row 0). */
h3_status h3_adaln_modulate(const float *x, const float *scale, const float *shift,
                            const int32_t *row_table, int64_t table_rows, float *out,
                            int64_t rows, int64_t n, h3_pool *pool, h3_isa isa,
                            h3_isa *ran, h3_err *err);

#ifdef __cplusplus
}
#endif
#endif /* H3_H */
#include "h3_dit.h"
#include "h3_qwen.h"
#include "h3_vit.h"
#include "h3_qwen_vision.h"
#include "h3_audio.h"
#include "h3_video.h"
