// The forward tensor-core tiles that are instantiated, and how a launch picks one:
// on sm_90a the shared-operand wgmma kernel (fwd_wgmma.cuh) with 128 output channels
// per block (64 for narrow problems, and always for the 3xTF32 split, whose second
// accumulator set needs the registers); elsewhere mma.sync (fwd_tc.cuh) with 64, the
// widest without spills.
#pragma once
#include "fwd_tc.cuh"
#include "fwd_wgmma.cuh"

namespace causalconv {
namespace tc {
namespace fwd {

template <typename T, Precision P>
void launch_tile(const ConvParams& p, TcKernel kind, int bn, cudaStream_t stream) {
  if (kind == TcKernel::kMmaSync) return launch_mma_sync<T, P, 64>(p, stream);
  int dev = 0, sms = 0;
  CAUSALCONV_CUDA_CHECK(cudaGetDevice(&dev));
  CAUSALCONV_CUDA_CHECK(cudaDeviceGetAttribute(&sms, cudaDevAttrMultiProcessorCount, dev));
  if constexpr (P != Precision::kTF32x3) {
    if (bn == 128) return launch_ss<T, P, 128>(p, stream, sms);
  }
  return launch_ss<T, P, 64>(p, stream, sms);
}

}  // namespace fwd
}  // namespace tc

// One translation unit per operand type (they compile in parallel).
void launch_fwd_tc_f32(const ConvParams& p, TcKernel kind, int bn, cudaStream_t stream);
void launch_fwd_tc_bf16(const ConvParams& p, TcKernel kind, int bn, cudaStream_t stream);
void launch_fwd_tc_f16(const ConvParams& p, TcKernel kind, int bn, cudaStream_t stream);

}  // namespace causalconv
