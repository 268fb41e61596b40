/* h3_video.h — kernels of the video VAE encoder (MiniMaxH3VideoEncoder3d): the causal
 * Conv3d over channels-last video and the per-frame GroupNorm (+ SiLU).  Included at the
 * end of h3.h.
 *
 * Layout: a video is channels-last, x[t, y, x, c] = x + ((t*H + y)*W + x)*C + c
 * ([T, H, W, C] row-major, one row per pixel).  The convolution runs on h3_linear (the
 * GEMM): one linear per temporal tap, im2col rows gathered here a chunk of output pixels
 * at a time (the gather is split over the pool, the GEMM splits its own work).  Its ISA is
 * its linears'; h3_group_norm takes one. */
#ifndef H3_VIDEO_H
#define H3_VIDEO_H

#include "h3.h"

#ifdef __cplusplus
extern "C" {
#endif

/* Causal Conv3d (MiniMaxH3VideoCausalConv3d / Downsample3d):
 *   x is first padded in space by reflection (pad_top rows above, pad_bottom below,
 *   pad_left / pad_right columns; torch F.pad "reflect": index -i for i < 0, 2(n-1) - i
 *   for i >= n; every pad < the axis length) and in time by pad_t zero frames in front;
 *   then y[t, oy, ox, co] = sum over taps (jt, dy, dx, ci) of
 *       W[co, ci, jt, dy, dx] * xp[t*st + jt, oy*sh + dy, ox*sw + dx, ci]  (+ b[co]) (+ resid).
 * x: [T, H, W, Cin] -> y, resid: [T_out, H_out, W_out, Cout] with
 *   T_out = (T + pad_t - kt) / st + 1, H_out = (H + pad_top + pad_bottom - kh) / sh + 1,
 *   W_out likewise (each must be >= 1).
 * taps[jt] (jt < kt): a linear with N = Cout, K = kh*kw*Cin whose row co is
 *   W[co, :, jt] transposed to [kh][kw][Cin].  A temporal tap that lands on a zero pad
 *   frame is skipped, not multiplied by zeros, so one frame (T = 1, pad_t = kt - 1) costs
 *   one 2-D convolution.  Each output frame is the sum of its valid taps, computed from
 *   the last tap down; give the bias to taps[kt-1] only (with causal padding,
 *   pad_t = kt - 1, that tap is always valid).
 * resid may be NULL or y itself (y += conv); y must not overlap x.
 * ws: >= h3_conv3d_workspace_bytes, 64-byte aligned, or NULL (allocated inside). */
typedef struct {
    int64_t T, H, W, Cin;
    int kt, kh, kw;
    int st, sh, sw;
    int pad_t;
    int pad_top, pad_bottom, pad_left, pad_right;
} h3_conv3d_args;
size_t h3_conv3d_workspace_bytes(const h3_conv3d_args *a, const h3_linear *const *taps, int n_threads);
h3_status h3_conv3d(const h3_conv3d_args *a, const h3_linear *const *taps, const float *x,
                    const float *resid, float *y, h3_pool *pool, void *ws, size_t ws_bytes,
                    h3_err *err);

/* GroupNorm of every frame on its own (MiniMaxH3VideoGroupNorm), optionally followed by
 * SiLU: for frame t and group g (channels [g*C/G, (g+1)*C/G)),
 *   mean, var = the mean and biased variance of x[t, :, g's channels]
 *   y = x * s[c] + (beta[c] - mean * s[c]),  s[c] = gamma[c] / sqrt(var + eps)
 *   (torch's CPU kernel's form), then y = y / (1 + exp(-y)) with silu.
 * x, y: [T, P, C] (P = pixels per frame); y may alias x.  gamma, beta: [C] or NULL (1, 0).
 * G divides C.  The statistics are summed in double on every path (two passes: the mean,
 * then the squared deviations), so paths differ only in the last bits of the apply (FMA)
 * and SiLU's vector exp (~2 ulp).  Results do not depend on the thread count. */
h3_status h3_group_norm(const float *x, float *y, int64_t T, int64_t P, int64_t C, int G,
                        const float *gamma, const float *beta, float eps, int silu,
                        h3_pool *pool, h3_isa isa, h3_isa *ran, h3_err *err);

#ifdef __cplusplus
}
#endif
#endif /* H3_VIDEO_H */
