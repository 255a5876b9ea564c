// __nv_bfloat16 instantiations of the tensor-core forward.
#include "fwd_tc.cuh"

namespace causalconv {

void launch_fwd_tc_bf16(const ConvParams& p, TcKernel kind, int bn, cudaStream_t stream) {
  tc::fwd::launch_tile<__nv_bfloat16, Precision::kNative>(p, kind, bn, stream);
}

}  // namespace causalconv
