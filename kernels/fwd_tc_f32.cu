// fp32 instantiations of the tensor-core forward: TF32 and the 3xTF32 split.
#include "fwd_tc.cuh"

namespace causalconv {

void launch_fwd_tc_f32(const ConvParams& p, TcKernel kind, int bn, cudaStream_t stream) {
  if (p.precision == Precision::kTF32x3) return tc::fwd::launch_tile<float, Precision::kTF32x3>(p, kind, bn, stream);
  return tc::fwd::launch_tile<float, Precision::kTF32>(p, kind, bn, stream);
}

}  // namespace causalconv
