// One description of a causal convolution launch, shared by every kernel family.
//
// Index convention (all kernels):  y[b, o, t] = bias[o] +
//     sum_{k < K} sum_{i < cin_g} w[o, i, k] * x[b, g*cin_g + i, t + k*dilation + shift]
// where g = o / cout_g and x outside [0, L) reads as zero.  The forward pass uses
// shift = -(K-1)*dilation (the causal left pad); the input gradient runs the same
// kernels on dy with transposed, tap-reversed weights and shift = 0 (an anti-causal
// window).  Strides are in elements and 64-bit so tensors above 2^31 elements index
// correctly.
#pragma once
#include <cstdint>

namespace causalconv {

enum class Precision : int {
  kNative = 0,  // half types (fp32 accumulation), or fp32 with full fp32 products
  kTF32 = 1,    // fp32 operands rounded to TF32 (round-to-nearest-even), fp32 accumulation
  kTF32x3 = 2,  // fp32 split into hi + lo TF32 parts, three products (full fp32 accuracy)
};

struct ConvParams {
  const void* x = nullptr;     // (B, C_in, L), strides below
  const void* w = nullptr;     // (C_out, cin_g, K), contiguous; see w_transposed
  const void* bias = nullptr;  // (C_out) or null
  void* y = nullptr;           // (B, C_out, L), strides below, unit stride along L

  int64_t B = 0, C_in = 0, C_out = 0, L = 0;
  int64_t sx_b = 0, sx_c = 0, sx_t = 1;
  int64_t sy_b = 0, sy_c = 0;

  int groups = 1, cin_g = 0, cout_g = 0, K = 1, dilation = 1;
  int shift = 0;
  Precision precision = Precision::kNative;

  // The input gradient's weights without a copy: p.w then holds the forward's weight,
  // contiguous (groups * cin_g, cout_g, K), and the launch multiplies by it transposed per
  // group and tap-reversed, w[g*cout_g + o, i, k] = p.w[g*cin_g + i, o, K-1-k].  The kernels
  // that read the weights through the weight image (weight_image.cuh) and the CUDA-core
  // forwards (fwd_generic.cu, fwd_depthwise.cu) accept it; the dispatcher writes a
  // transposed copy instead only where the image kernel's strided reads would cost more
  // (transposed_image_pays in dispatch.cu).
  bool w_transposed = false;

  // The TMA forward's input-channel split (fwd_tma.cu): csplits blocks share each tile, each
  // over its own run of input-channel chunks, and store fp32 partial sums, laid out as y is,
  // in slice s of ws ([csplits][B][C_out][L]; the bias in slice 0); launch_split_reduce adds
  // the slices into y.
  float* ws = nullptr;
  int csplits = 1;
};

}  // namespace causalconv
