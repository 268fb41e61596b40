# h3.pxd — the one `cdef extern` of csrc/h3.h; every declaration is nogil.
from libc.stdint cimport int8_t, int32_t, int64_t, uint8_t, uint16_t, uint64_t

cdef extern from "h3.h" nogil:
    ctypedef enum h3_status:
        H3_OK
        H3_EINVAL
        H3_ENOMEM
        H3_EIO
        H3_EFORMAT
        H3_EUNSUPPORTED
        H3_ECANCELLED

    ctypedef struct h3_err:
        char msg[256]

    ctypedef enum h3_isa:
        H3_ISA_REF
        H3_ISA_AVX2
        H3_ISA_AVX512
        H3_ISA_AMX
        H3_ISA_NEON
        H3_ISA_AVXVNNI
        H3_ISA_COUNT

    const char *h3_isa_name(h3_isa isa)
    int h3_isa_from_name(const char *name, h3_isa *out)
    int h3_isa_supported(h3_isa isa)
    h3_isa h3_isa_best()
    h3_isa h3_isa_vector(h3_isa isa)
    h3_status h3_isa_check(h3_isa isa, h3_err *err)
    uint64_t h3_cpu_features()
    const char *h3_cpu_feature_name(int i)
    enum:
        H3_EXT_I8MM
        H3_EXT_BF16
        H3_EXT_ALL
    int h3_cpu_extensions()

    ctypedef struct h3_pool:
        pass
    ctypedef void (*h3_task_fn)(void *ctx, int ith, int nth)
    h3_status h3_pool_create(int n_threads, h3_pool **out, h3_err *err)
    void h3_pool_free(h3_pool *pool)
    int h3_pool_threads(const h3_pool *pool)

    enum:
        H3_DT_F32
        H3_DT_BF16
        H3_DT_F16
        H3_DT_I8
        H3_DT_I4
    h3_status h3_convert(const void *src, int src_dtype, void *dst, int dst_dtype, int64_t n,
                         h3_isa isa, h3_err *err)
    h3_status h3_convert_mt(const void *src, int src_dtype, void *dst, int dst_dtype,
                            int64_t n, h3_pool *pool, h3_isa isa, h3_isa *ran, h3_err *err)

    ctypedef struct h3_linear:
        pass
    ctypedef struct h3_linear_opts:
        int wtype
        int group_size
        int act_group
        int pair
        int bf16_inputs
        h3_isa isa
        int f32_exact
        int small_pages
        int rot_group
        int ext_off
    h3_status h3_linear_create_q8(const int8_t *q, const float *scales, int64_t N, int64_t K,
                                  const float *bias, const h3_linear_opts *opts,
                                  h3_linear **out, h3_err *err)
    h3_status h3_hadamard(float *x, int64_t rows, int64_t n, int group, h3_pool *pool,
                          h3_isa isa, h3_isa *ran, h3_err *err)
    h3_status h3_linear_create(const void *w, int src_dtype, int64_t N, int64_t K,
                               const float *bias, const h3_linear_opts *opts,
                               h3_linear **out, h3_err *err)
    void h3_linear_free(h3_linear *lin)
    size_t h3_linear_weight_bytes(const h3_linear *lin)
    int h3_linear_bf16_activations(const h3_linear *lin)
    int h3_linear_extensions(const h3_linear *lin)
    int h3_linear_int_panel_width(h3_isa isa)
    h3_isa h3_linear_isa(const h3_linear *lin)
    h3_status h3_linear_dequant(const h3_linear *lin, float *out, h3_err *err)
    ctypedef struct h3_lora:
        pass
    h3_status h3_lora_create(const float *a, const float *b, const float *scale, int64_t R,
                             int64_t N, int64_t K, h3_isa isa, h3_lora **out, h3_err *err)
    void h3_lora_free(h3_lora *lora)
    h3_status h3_lora_set_scale(h3_lora *lora, const float *scale, h3_err *err)
    h3_status h3_lora_set_fused(h3_lora *lora, int on, h3_err *err)
    h3_status h3_lora_set_int_down(h3_lora *lora, int on, h3_err *err)
    h3_status h3_linear_set_lora(h3_linear *lin, const h3_lora *lora, h3_err *err)
    enum:
        H3_EPI_NONE
        H3_EPI_SWIGLU
        H3_EPI_RESID
    ctypedef struct h3_epilogue:
        int kind
        const float *resid
        const float *gate
        const int32_t *gate_row
        int64_t gate_rows
    size_t h3_linear_workspace_bytes(const h3_linear *lin, int64_t M, int n_threads,
                                     const h3_epilogue *epi)
    h3_status h3_linear_forward(const h3_linear *lin, h3_pool *pool, const float *x, int64_t M,
                                float *y, const h3_epilogue *epi, void *ws, size_t ws_bytes,
                                h3_err *err)

    ctypedef struct h3_attn_args:
        int64_t S
        int Hq
        int Hkv
        int D
        int64_t ldq
        int64_t ldk
        int64_t ldv
        int64_t ldo
        float scale
        int causal
        int bf16_inputs
    size_t h3_attn_workspace_bytes(const h3_attn_args *a, int n_threads)
    h3_status h3_attention(const h3_attn_args *a, const float *q, const float *k,
                           const float *v, float *out, h3_pool *pool, void *ws,
                           size_t ws_bytes, h3_isa isa, h3_err *err)

    h3_status h3_rmsnorm(const float *x, const float *w, float *out, int64_t rows, int64_t n,
                         float eps, h3_pool *pool, h3_isa isa, h3_isa *ran, h3_err *err)
    h3_status h3_rope(float *x, const float *cos, const float *sin, int64_t rows, int heads,
                      int head_dim, int rot_dim, h3_pool *pool, h3_isa isa, h3_isa *ran,
                      h3_err *err)
    enum:
        H3_ACT_SILU
        H3_ACT_GELU_TANH
    h3_status h3_activation(const float *x, float *out, int64_t n, int act, h3_pool *pool,
                            h3_isa isa, h3_isa *ran, h3_err *err)
    h3_status h3_swiglu(const float *x, float *out, int64_t rows, int64_t h, h3_pool *pool,
                        h3_isa isa, h3_isa *ran, h3_err *err)
    h3_status h3_adaln_modulate(const float *x, const float *scale, const float *shift,
                                const int32_t *row_table, int64_t table_rows, float *out,
                                int64_t rows, int64_t n, h3_pool *pool, h3_isa isa,
                                h3_isa *ran, h3_err *err)

cdef extern from "h3_block.h" nogil:
    ctypedef struct h3_block_weights:
        const h3_linear *qkv
        const h3_linear *out
        const h3_linear *up
        const h3_linear *down
        int qkv_interleaved
        const float *norm1
        const float *norm2
    ctypedef struct h3_block_shape:
        int64_t S
        int hidden
        int heads
        int head_dim
        int ffn
        int rot_dim

cdef extern from "h3_dit.h" nogil:
    enum:
        H3_DIT_STAGES
    const char *const h3_dit_stage_names[]
    ctypedef struct h3_dit_block:
        h3_block_weights base
        const float *norm_q
        const float *norm_k
    ctypedef struct h3_dit_block_args:
        h3_block_shape shape
        float eps
        float qk_eps
        int round_bf16
        int attn_bf16
        const int32_t *rows
        int64_t table_rows
        const float *shift_msa
        const float *scale1p_msa
        const float *gate_msa
        const float *shift_mlp
        const float *scale1p_mlp
        const float *gate_mlp
        const float *cos
        const float *sin
        double *stage_seconds
    size_t h3_dit_block_workspace_bytes(const h3_dit_block *w, const h3_dit_block_args *a,
                                        int n_threads)
    h3_status h3_dit_block_forward(const h3_dit_block *w, const h3_dit_block_args *a, float *h,
                                   h3_pool *pool, void *ws, size_t ws_bytes, h3_isa isa,
                                   h3_err *err)
    h3_status h3_round_bf16(float *x, int64_t n, h3_pool *pool, h3_err *err)

cdef extern from "h3.h" nogil:
    ctypedef struct h3_linear_layout:
        int wtype
        int group_size
        int act_group
        int pair
        int nr
        int64_t N
        int64_t K
        int64_t Kp
        uint64_t w_bytes
        uint64_t s_bytes
        int bf16_inputs
        int f32_exact
        int small_pages
        int ext_off
    h3_status h3_linear_layout_get(const h3_linear *lin, h3_linear_layout *layout,
                                   const void **w, const float **scales, h3_err *err)
    h3_status h3_linear_attach(const h3_linear_layout *layout, const void *w,
                               const float *scales, const float *bias, h3_isa isa,
                               h3_linear **out, h3_err *err)
    h3_status h3_linear_attach_parts(const h3_linear_layout *layout, const void *const *parts,
                                     int nparts, const float *bias, h3_isa isa,
                                     h3_linear **out, h3_err *err)
    int h3_gguf_type_size(int type, int *blk, int *nbytes)
    h3_status h3_gguf_dequant(int type, const void *src, int64_t n, float *out, h3_err *err)
    h3_status h3_gguf_quant_act(const float *x, int64_t M, int64_t K, int8_t *q, float *d, h3_err *err)
    h3_status h3_linear_attach_gguf(const void *const *parts, const int *types, int nparts,
                                    int64_t N, int64_t K, const float *bias, int pair, h3_isa isa,
                                    h3_linear **out, h3_err *err)
    h3_status h3_linear_set_gguf_opts(h3_linear *lin, int kq, int group, int q8d, h3_err *err)
    h3_status h3_linear_set_gguf_prefetch(h3_linear *lin, int on, h3_err *err)
    int h3_linear_gguf_q8d(const h3_linear *lin)
    int h3_linear_gguf_kq_tiles(const h3_linear *lin)
    ctypedef struct h3_nvfp4_part:
        const uint8_t *codes
        int64_t ld
        const uint8_t *scales
        float scale_2
        const float *pre_scale
    h3_status h3_linear_attach_nvfp4(const h3_nvfp4_part *parts, int nparts, int64_t N, int64_t K,
                                     const float *bias, int pair, h3_isa isa, h3_linear **out,
                                     h3_err *err)
    h3_status h3_linear_nvfp4_route(h3_linear *l, int route, int64_t min_rows, h3_err *err)

cdef extern from "h3.h" nogil:
    h3_status h3_qwen_rmsnorm_bf16(const float *x, const float *w, float *out, int64_t rows,
                                   int64_t n, float eps, h3_pool *pool, h3_isa isa, h3_isa *ran,
                                   h3_err *err)
    h3_status h3_rope_bf16(float *x, const float *cos, const float *sin, int64_t rows, int heads,
                           int head_dim, h3_pool *pool, h3_isa isa, h3_isa *ran, h3_err *err)
    h3_status h3_swiglu_bf16(const float *g, const float *u, float *out, int64_t n,
                             h3_pool *pool, h3_isa isa, h3_isa *ran, h3_err *err)
    h3_status h3_attention_bf16p(const h3_attn_args *a, const float *q, const float *k,
                                 const float *v, float *out, h3_pool *pool, void *ws,
                                 size_t ws_bytes, h3_isa isa, h3_err *err)
    ctypedef struct h3_qwen_layer:
        const h3_linear *q
        const h3_linear *k
        const h3_linear *v
        const h3_linear *o
        const h3_linear *gate_up
        const h3_linear *gate
        const h3_linear *up
        const h3_linear *down
        const float *input_norm
        const float *post_norm
        const float *q_norm
        const float *k_norm
    ctypedef struct h3_qwen_layer_args:
        int64_t S
        int hidden
        int heads
        int kv_heads
        int head_dim
        int ffn
        float eps
        int round_bf16
        const float *cos
        const float *sin
    size_t h3_qwen_layer_workspace_bytes(const h3_qwen_layer *w, const h3_qwen_layer_args *a,
                                         int n_threads)
    h3_status h3_qwen_layer_forward(const h3_qwen_layer *w, const h3_qwen_layer_args *a,
                                    float *h, h3_pool *pool, void *ws, size_t ws_bytes,
                                    h3_isa isa, h3_err *err)

cdef extern from "h3_vit.h" nogil:
    h3_status h3_layernorm(const float *x, const float *w, const float *b, float *out,
                           int64_t rows, int64_t n, float eps, h3_pool *pool, h3_isa isa,
                           h3_err *err)
    ctypedef struct h3_vit_block:
        h3_block_weights base
        const float *scale1
        const float *scale2
    ctypedef struct h3_vit_block_args:
        h3_block_shape shape
        float eps
        int round_bf16
        int attn_bf16
        const float *cos
        const float *sin
    size_t h3_vit_block_workspace_bytes(const h3_vit_block *w, const h3_vit_block_args *a,
                                        int n_threads)
    h3_status h3_vit_block_forward(const h3_vit_block *w, const h3_vit_block_args *a, float *h,
                                   h3_pool *pool, void *ws, size_t ws_bytes, h3_isa isa,
                                   h3_err *err)

cdef extern from "h3.h" nogil:
    # audio VAE decoder kernels (h3_audio.h): channels-last [T, C] signals
    int H3_CONV_IM2COL
    size_t h3_conv1d_workspace_bytes(const h3_linear *lin, int64_t T_out, int n_threads, int flags)
    h3_status h3_conv1d(const h3_linear *lin, const float *x, int64_t T, int64_t Cin, int k,
                        int dil, int pad, const float *resid, float *y, int flags, h3_pool *pool,
                        void *ws, size_t ws_bytes, h3_err *err)
    size_t h3_conv_transpose1d_workspace_bytes(const h3_linear *lin, int64_t T, int stride,
                                               int n_threads)
    h3_status h3_conv_transpose1d(const h3_linear *lin, const float *x, int64_t T,
                                  int64_t Cout, int k, int stride, int pad, const float *bias,
                                  float *y, h3_pool *pool, void *ws, size_t ws_bytes,
                                  h3_err *err)
    h3_status h3_snake_aa(const float *x, float *y, int64_t T, int64_t C, const float *alpha,
                          const float *beta, const float *fu, const float *fd, h3_pool *pool,
                          h3_isa isa, h3_isa *ran, h3_err *err)

cdef extern from "h3.h" nogil:
    # video VAE encoder kernels (h3_video.h): channels-last [T, H, W, C] video
    ctypedef struct h3_conv3d_args:
        int64_t T, H, W, Cin
        int kt, kh, kw
        int st, sh, sw
        int pad_t
        int pad_top, pad_bottom, pad_left, pad_right
    size_t h3_conv3d_workspace_bytes(const h3_conv3d_args *a, const h3_linear *const *taps,
                                     int n_threads)
    h3_status h3_conv3d(const h3_conv3d_args *a, const h3_linear *const *taps, const float *x,
                        const float *resid, float *y, h3_pool *pool, void *ws, size_t ws_bytes,
                        h3_err *err)
    h3_status h3_group_norm(const float *x, float *y, int64_t T, int64_t P, int64_t C, int G,
                            const float *gamma, const float *beta, float eps, int silu,
                            h3_pool *pool, h3_isa isa, h3_isa *ran, h3_err *err)

cdef extern from "h3_loop.h" nogil:
    void h3_patchify(const float *lat, int64_t C, int64_t T, int64_t h, int64_t w, float *rows)
    void h3_unpatchify(const float *rows, int64_t C, int64_t T, int64_t h, int64_t w, float *lat)
    void h3_pack_audio(const float *lat, int64_t ch, int64_t Ca, int64_t A, float *rows)
    void h3_unpack_audio(const float *rows, int64_t ch, int64_t Ca, int64_t A, float *lat)
    void h3_euler_update(float *x, const float *v, float *x0, int64_t outer, int64_t frames,
                         int64_t inner, const float *t, const float *sigma,
                         const float *sigma_next)
    void h3_extrapolate(const float *last, const float *prev, float r, float *out, int64_t n)
    void h3_modulate_rows(float *x, const float *s1p, const float *shift, const int32_t *rows,
                          int64_t n_rows, int64_t n, int round_bf16)
    double h3_monotonic()
    int h3_flag_get(const int *f)
    void h3_flag_set(int *f, int v)

cdef extern from "h3_loop.h" nogil:
    enum:
        H3_PAGES_WILLNEED
        H3_PAGES_DONTNEED
    void h3_pages_advise(const void *p, size_t n, int advice)

cdef extern from "h3_qwen_vision.h" nogil:
    h3_status h3_gelu_erf(const float *x, float *out, int64_t n, h3_pool *pool, h3_err *err)
    h3_status h3_qvis_pos_add(float *h, const float *table, int64_t P, const int64_t *idx,
                              const float *w, int taps, int64_t S, int C, int round_bf16,
                              h3_err *err)
    h3_status h3_rows_add(float *h, int64_t L, const int64_t *rows, const float *src, int64_t n,
                          int C, int round_bf16, h3_err *err)
    ctypedef struct h3_qvis_block:
        const h3_linear *q
        const h3_linear *k
        const h3_linear *v
        const h3_linear *proj
        const h3_linear *fc1
        const h3_linear *fc2
        const float *norm1_w
        const float *norm1_b
        const float *norm2_w
        const float *norm2_b
    ctypedef struct h3_qvis_block_args:
        int64_t S
        int hidden, heads, ffn
        int nseg
        const int64_t *seg
        const float *cos
        const float *sin
        float eps
        int round_bf16
    size_t h3_qvis_block_workspace_bytes(const h3_qvis_block *w, const h3_qvis_block_args *a,
                                         int n_threads)
    h3_status h3_qvis_block_forward(const h3_qvis_block *w, const h3_qvis_block_args *a, float *h,
                                    h3_pool *pool, void *ws, size_t ws_bytes, h3_isa isa,
                                    h3_err *err)
    ctypedef struct h3_qvis_merger:
        const h3_linear *fc1
        const h3_linear *fc2
        const float *norm_w
        const float *norm_b
        int postshuffle
    size_t h3_qvis_merger_workspace_bytes(const h3_qvis_merger *w, int64_t S, int C, int unit,
                                          int n_threads)
    h3_status h3_qvis_merger_forward(const h3_qvis_merger *w, const float *x, int64_t S, int C,
                                     int unit, float eps, int round_bf16, float *out,
                                     h3_pool *pool, void *ws, size_t ws_bytes, h3_isa isa,
                                     h3_err *err)
