// Host-side entry points of each kernel family.  dispatch.cu is the only caller: it
// checks arguments, picks the family and tile, and owns the output tensors.
#pragma once
#include <ATen/ATen.h>
#include <cuda_runtime.h>

#include "conv_params.h"

namespace causalconv {

enum class TcKernel : int { kWgmma = 0, kMmaSync = 1 };

// CUDA-core kernels: every configuration (float32, float16, bfloat16).
void launch_fwd_generic(const ConvParams& p, at::ScalarType dtype, cudaStream_t stream);
// One input channel per group (depthwise, any channel multiplier).
void launch_fwd_depthwise(const ConvParams& p, at::ScalarType dtype, cudaStream_t stream);
// Tensor cores.  Needs x unit-stride along L with 16-byte aligned rows, L a multiple of
// 16 bytes' worth of elements; bn in {64, 128} output channels per block.
void launch_fwd_tc(const ConvParams& p, at::ScalarType dtype, TcKernel kind, int bn, cudaStream_t stream);
// Tensor cores on sm_90a with TMA and both MMA operands in shared memory (fwd_tma.cu):
// TF32 or 16-bit, x with unit stride along L and 16-byte aligned rows, y contiguous.
bool fwd_tma_supports(const ConvParams& p, at::ScalarType dtype);
void launch_fwd_tma(const ConvParams& p, at::ScalarType dtype, int sms, cudaStream_t stream);
// How many blocks launch_fwd_tma would have share each tile (p.csplits; 1 unless fp32 with a
// grid far below one wave).
int fwd_tma_channel_splits(const ConvParams& p, at::ScalarType dtype, int sms);
// The same for TF32 fp32 with x read into registers from raw windows (fwd_rs.cu).
bool fwd_rs_supports(const ConvParams& p, at::ScalarType dtype);
void launch_fwd_rs(const ConvParams& p, at::ScalarType dtype, int sms, cudaStream_t stream);

// Weight gradient into a float32 workspace of `splits` partial sums laid out as
// [splits][C_out][cin_g][K], or with tap_major [splits][K][C_out][cin_g]; launch_split_reduce
// then adds them in split order into dw.
// The *_splits functions give the split count a launch will use, to size the workspace.
struct WgradParams {
  const void* dy = nullptr;  // (B, C_out, L) contiguous
  const void* x = nullptr;   // (B, C_in, L) contiguous
  float* ws = nullptr;       // workspace
  int64_t B = 0, L = 0;
  int groups = 1, cin_g = 0, cout_g = 0, K = 1, dilation = 1, shift = 0;
  Precision precision = Precision::kNative;
  int splits = 1;
  bool tap_major = false;  // slices tap-major (wgrad_rs_tap_major(), wgrad_tc_tap_major())
};
int wgrad_generic_splits(const WgradParams& p, int sm_count);
void launch_wgrad_generic(const WgradParams& p, at::ScalarType dtype, int sm_count, cudaStream_t stream);
// One input channel per group (depthwise, any channel multiplier), dw's own layout
// (wgrad_depthwise.cu).
int wgrad_depthwise_splits(const WgradParams& p, at::ScalarType dtype, int sm_count);
void launch_wgrad_depthwise(const WgradParams& p, at::ScalarType dtype, int sm_count, cudaStream_t stream);
// Tensor cores (sm_90a, TMA): any K and dilation, TF32 or 16-bit; x and dy 16-byte
// aligned with rows of a multiple of 16 bytes.
bool wgrad_tc_supports(const WgradParams& p, at::ScalarType dtype);
int wgrad_tc_splits(const WgradParams& p, at::ScalarType dtype, int sm_count);
void launch_wgrad_tc(const WgradParams& p, at::ScalarType dtype, int sm_count, cudaStream_t stream);
// fp32 with TF32 operands only, on the same conditions: x as the register operand, read
// from a raw window at each tap's offset instead of shifted tile copies (wgrad_rs.cu).
bool wgrad_rs_supports(const WgradParams& p, at::ScalarType dtype);
int wgrad_rs_splits(const WgradParams& p, int sm_count);
void launch_wgrad_rs(const WgradParams& p, at::ScalarType dtype, int sm_count, cudaStream_t stream);
// Whether wgrad_rs.cu writes its slices tap-major, so that a warp's partial-sum stores
// cover 8 consecutive input channels of 4 output channels (4 sectors) instead of 32
// elements K apart: yes unless CAUSALCONV_WGRAD_TAP_MAJOR=0.  On an H100 the fp32 backward
// of K7 d4 measured 12% faster, the default problem 1% (NOTES v30 measured).
bool wgrad_rs_tap_major();
// The same for wgrad_tc.cu (the 16-bit weight gradient, and fp32 forced onto it), whose
// stores scatter over ~32 sectors per warp instruction in dw's layout and 8 tap-major: yes
// unless CAUSALCONV_WGRAD_TC_TAP_MAJOR=0 (NOTES v31 measured).
bool wgrad_tc_tap_major();
// out[e] = sum over s < splits, in order, of ws[s * n + e], cast to dtype (split_reduce.cu);
// with tap_k > 0 the slices are laid out [tap_k][n / tap_k] and out [n / tap_k][tap_k]
// (the weight gradient's tap-major slices).  As a programmatic dependent of the kernel
// before it on `stream` if `as_dependent`.
void launch_split_reduce(const float* ws, void* out, int64_t n, int splits, at::ScalarType dtype, cudaStream_t stream,
                         bool as_dependent, int tap_k = 0);

// The input gradient's weights, wt[g*cin_g + i, o, k] = w[g*cout_g + o, i, K-1-k], both
// contiguous, elements of 2 or 4 bytes (weight_flip.cu): for the tensor-core kernels' large
// input gradients, where reading w so while writing their image (ConvParams::w_transposed)
// costs more than the copy.
void launch_weight_flip(const void* w, void* wt, int64_t groups, int cout_g, int cin_g, int K, int64_t elem_size,
                        cudaStream_t stream);

}  // namespace causalconv
