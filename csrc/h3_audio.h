/* h3_audio.h — kernels of the audio VAE decoder (BigVGAN): 1-D convolutions over
 * channels-last signals and the anti-aliased SnakeBeta activation.  Included at the end
 * of h3.h.
 *
 * Layout: every signal is channels-last, x[t, c] = x + t*C + c ([T, C] row-major, one
 * row per time step).  The convolutions run on h3_linear (the GEMM), whose weights the
 * caller lays out as given below; im2col (read in place by the GEMM) / col2im happen
 * here, a chunk of time steps at a time, and the chunks are split over the pool's
 * threads (each thread runs its GEMMs single-threaded, so small channel counts still use
 * every thread).
 * The ISA of a convolution is its linear's; h3_snake_aa takes one. */
#ifndef H3_AUDIO_H
#define H3_AUDIO_H

#include "h3.h"

#ifdef __cplusplus
extern "C" {
#endif

/* Conv1d, stride 1 (torch nn.Conv1d semantics, zero padding):
 *   y[t, co] = (sum_{j<k, ci<Cin} W[co, ci, j] * x[t + j*dil - pad, ci]) + b[co]  (+ resid[t, co])
 * with x read as 0 outside [0, T).  x: [T, Cin]; y, resid: [T_out, Cout],
 * T_out = T + 2*pad - dil*(k-1) (must be >= 1).
 * lin: N = Cout, K = k*Cin, row co = W[co] transposed to [k][Cin] (tap-major), bias b
 * (or none).  resid may be NULL or y itself (y += conv); y must not overlap x.
 * flags: 0, or H3_CONV_IM2COL to build the im2col rows in the workspace before each GEMM
 * (the older route, for A/B; the default reads them in place).  Both give the same bits.
 * ws: >= h3_conv1d_workspace_bytes (same flags), 64-byte aligned, or NULL (allocated inside). */
#define H3_CONV_IM2COL 1
size_t h3_conv1d_workspace_bytes(const h3_linear *lin, int64_t T_out, int n_threads, int flags);
h3_status h3_conv1d(const h3_linear *lin, const float *x, int64_t T, int64_t Cin, int k,
                    int dil, int pad, const float *resid, float *y, int flags, h3_pool *pool,
                    void *ws, size_t ws_bytes, h3_err *err);

/* ConvTranspose1d (torch nn.ConvTranspose1d, output_padding 0, dilation 1):
 *   y[o, co] = (sum over t, j with t*stride - pad + j == o of sum_ci x[t, ci] * W[ci, co, j]) + b[co]
 * x: [T, Cin]; y: [T_out, Cout], T_out = (T-1)*stride - 2*pad + k (must be >= 1).
 * lin: N = k*Cout, K = Cin, row j*Cout + co = W[:, co, j] (no bias in the linear);
 * bias: [Cout] or NULL.  y must not overlap x.  ws as for h3_conv1d. */
size_t h3_conv_transpose1d_workspace_bytes(const h3_linear *lin, int64_t T_out, int stride,
                                           int n_threads);
h3_status h3_conv_transpose1d(const h3_linear *lin, const float *x, int64_t T, int64_t Cout,
                              int k, int stride, int pad, const float *bias, float *y,
                              h3_pool *pool, void *ws, size_t ws_bytes, h3_err *err);

/* Anti-aliased SnakeBeta (BigVGAN's Activation1d: x2 up, SnakeBeta, x2 down), per
 * channel c of x: [T, C] -> y: [T, C] (T >= 1; y must not overlap x):
 *   xp[i] = x[clamp(i - 5, 0, T-1)]                         replicate pad 5 | 5
 *   u[n]  = 2 * sum_{i, j: 2i + j = n + 15} xp[i] * fu[j],  n in [0, 2T)   (conv_transpose
 *           stride 2 with the 12-tap fu, x2 gain, 15 cropped each side)
 *   v[n]  = u[n] + sin(exp(alpha[c]) * u[n])^2 / (exp(beta[c]) + 1e-9)
 *   y[t]  = sum_{j<12} fd[j] * v[clamp(2t + j - 5, 0, 2T-1)]  (replicate pad 5 | 6,
 *           stride-2 FIR with the 12-tap fd)
 * alpha, beta: [C] (log space, as stored); fu, fd: [12] (the checkpoint's
 * upsample.filter and downsample.lowpass.filter).  Split over (channel group, time tile)
 * units of the pool.  Exactness vs H3_ISA_REF: SIMD paths use FMA and a vector sine
 * (~2 ulp), so results agree to ~1e-6 relative. */
h3_status h3_snake_aa(const float *x, float *y, int64_t T, int64_t C, const float *alpha,
                      const float *beta, const float *fu, const float *fd, h3_pool *pool,
                      h3_isa isa, h3_isa *ran, h3_err *err);

#ifdef __cplusplus
}
#endif
#endif /* H3_AUDIO_H */
