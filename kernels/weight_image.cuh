// The forward's weight operand, pre-arranged on the device into the exact shared-memory
// image the tensor cores read, so that a stage's weights copy in verbatim (16-byte async
// copies or one bulk copy): for each (group, tile of BN output channels, chunk of one
// 128-byte row of input channels, tap) a BN x row block, row o holding that chunk of
// input channels with the 128-byte swizzle, zero padded past the group, TF32-rounded in
// fp32 modes (and the rounded remainder for the 3xTF32 split).
#pragma once
#include <ATen/ATen.h>

#include <algorithm>

#include "conv_params.h"
#include "tc_common.cuh"

namespace causalconv {
namespace tc {

template <typename T, Precision P, int BN>
__global__ void weight_image_kernel(const T* __restrict__ w, T* __restrict__ hi, T* __restrict__ lo, int cout_g,
                                    int cin_g, int K, int n_ot, int n_ic, int64_t total, bool transposed) {
  constexpr int kCI = kRowElems<T>, kV = kChunkElems<T>;
  ptx::griddep_launch_dependents();  // the forward after it may start its prologue (launch_dependent)
  for (int64_t e = blockIdx.x * static_cast<int64_t>(blockDim.x) + threadIdx.x; e < total;
       e += static_cast<int64_t>(gridDim.x) * blockDim.x) {
    int64_t r = e;
    const int pos = static_cast<int>(r % kCI);
    r /= kCI;
    const int o = static_cast<int>(r % BN);
    r /= BN;
    const int k = static_cast<int>(r % K);
    r /= K;
    const int ic = static_cast<int>(r % n_ic);
    r /= n_ic;
    const int ot = static_cast<int>(r % n_ot);
    const int64_t g = r / n_ot;
    const int chunk = swizzle_chunk(o, pos / kV);  // the swizzle is its own inverse
    const int ci = ic * kCI + chunk * kV + pos % kV;
    const int og = ot * BN + o;
    const bool ok = og < cout_g && ci < cin_g;
    // transposed: the input gradient's weights read from the forward's (ConvParams::w_transposed)
    const int64_t src = transposed ? ((g * cin_g + ci) * cout_g + og) * K + (K - 1 - k)
                                   : ((g * cout_g + og) * cin_g + ci) * K + k;
    const T v = ok ? w[src] : from_float<T>(0.f);
    if constexpr (P == Precision::kNative) {
      hi[e] = v;
    } else {
      const float f = to_float(v);
      const float h = round_tf32(f);
      hi[e] = from_float<T>(h);
      if constexpr (P == Precision::kTF32x3) lo[e] = from_float<T>(round_tf32(f - h));
    }
  }
}

// Elements of one image part (hi or lo).
template <typename T, int BN>
int64_t weight_image_elems(const ConvParams& p) {
  return static_cast<int64_t>(p.groups) * ceil_div(p.cout_g, BN) * ceil_div(p.cin_g, kRowElems<T>) * p.K * BN *
         kRowElems<T>;
}

// Writes the image of p.w (read as ConvParams::w_transposed says) into hi (and lo for the
// 3xTF32 split) on `stream`.  A normal launch, on purpose: everything enqueued before it
// has then completed when it starts, so the forward launched as its dependent may read x
// before its griddep_wait.
template <typename T, Precision P, int BN>
void write_weight_image(const ConvParams& p, T* hi, T* lo, cudaStream_t stream) {
  const int64_t total = weight_image_elems<T, BN>(p);
  const int threads = 256;
  const int blocks = static_cast<int>(std::min<int64_t>(ceil_div(total, threads), 4096));
  weight_image_kernel<T, P, BN><<<blocks, threads, 0, stream>>>(
      static_cast<const T*>(p.w), hi, lo, p.cout_g, p.cin_g, p.K, static_cast<int>(ceil_div(p.cout_g, BN)),
      static_cast<int>(ceil_div(p.cin_g, kRowElems<T>)), total, p.w_transposed);
  CAUSALCONV_CHECK_LAUNCH("weight_image");
}

}  // namespace tc
}  // namespace causalconv
