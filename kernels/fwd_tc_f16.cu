// __half instantiations of the tensor-core forward.
#include "fwd_tc.cuh"

namespace causalconv {

void launch_fwd_tc_f16(const ConvParams& p, TcKernel kind, int bn, cudaStream_t stream) {
  tc::fwd::launch_tile<__half, Precision::kNative>(p, kind, bn, stream);
}

}  // namespace causalconv
