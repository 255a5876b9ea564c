// The input gradient's weights: the forward kernels run on dy with per-group transposed,
// tap-reversed weights, wt[g*cin_g + i, o, k] = w[g*cout_g + o, i, K-1-k].  One launch
// writes them, where the ATen route (view, transpose, flip, reshape) took two kernels, flip
// and the copy after it.  (torch.profiler had put aten::flip first among a small backward's
// CPU costs; with this kernel the 4x512->512 bf16 backward still took 168 -> 166 us per
// back-to-back call, but that measure includes waiting for the GPU, whose kernels take
// about as long there, so whether the CPU time fell is not known.)  Since then every
// forward family reads the forward's weight transposed itself (ConvParams::w_transposed),
// one kernel and one launch fewer per input gradient; this copy is left to the tensor-core
// kernels' large input gradients, whose weight image is cheaper to write from it
// (transposed_image_pays in dispatch.cu).
#include <ATen/ATen.h>

#include "common.cuh"
#include "launchers.h"

namespace causalconv {
namespace {

// Moves elements as raw bits: the same kernel serves every dtype of one size.
template <typename Bits>
__global__ void weight_flip_kernel(const Bits* __restrict__ w, Bits* __restrict__ wt, int64_t n, int cout_g,
                                   int cin_g, int K) {
  for (int64_t e = blockIdx.x * static_cast<int64_t>(blockDim.x) + threadIdx.x; e < n;
       e += static_cast<int64_t>(gridDim.x) * blockDim.x) {
    const int k = static_cast<int>(e % K);
    int64_t r = e / K;
    const int o = static_cast<int>(r % cout_g);
    r /= cout_g;
    const int i = static_cast<int>(r % cin_g);
    const int64_t g = r / cin_g;
    wt[e] = w[((g * cout_g + o) * cin_g + i) * K + (K - 1 - k)];
  }
}

}  // namespace

void launch_weight_flip(const void* w, void* wt, int64_t groups, int cout_g, int cin_g, int K, int64_t elem_size,
                        cudaStream_t stream) {
  const int64_t n = groups * cout_g * cin_g * static_cast<int64_t>(K);
  if (n == 0) return;
  const int threads = 256;
  const int blocks = static_cast<int>(std::min<int64_t>(ceil_div(n, threads), 4096));
  switch (elem_size) {
    case 4:
      weight_flip_kernel<uint32_t><<<blocks, threads, 0, stream>>>(static_cast<const uint32_t*>(w),
                                                                    static_cast<uint32_t*>(wt), n, cout_g, cin_g, K);
      break;
    case 2:
      weight_flip_kernel<uint16_t><<<blocks, threads, 0, stream>>>(static_cast<const uint16_t*>(w),
                                                                    static_cast<uint16_t*>(wt), n, cout_g, cin_g, K);
      break;
    default: CAUSALCONV_CHECK(false, "causalconv: weights of ", elem_size, "-byte elements are not supported on CUDA");
  }
  CAUSALCONV_CHECK_LAUNCH("conv_weight_flip");
}

}  // namespace causalconv
