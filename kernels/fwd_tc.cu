// Tensor-core forward: entry point over the per-type instantiations (fwd_tc_*.cu); the
// kernels themselves are in fwd_tc.cuh.
#include "fwd_tc.cuh"

namespace causalconv {

void launch_fwd_tc(const ConvParams& p, at::ScalarType dtype, TcKernel kind, int bn, cudaStream_t stream) {
  CAUSALCONV_CHECK(p.precision != Precision::kNative || dtype != at::kFloat,
                   "causalconv: fp32 on tensor cores needs TF32 or 3xTF32 precision");
  switch (dtype) {
    case at::kFloat: return launch_fwd_tc_f32(p, kind, bn, stream);
    case at::kBFloat16: return launch_fwd_tc_bf16(p, kind, bn, stream);
    case at::kHalf: return launch_fwd_tc_f16(p, kind, bn, stream);
    default: CAUSALCONV_CHECK(false, "causalconv: tensor-core kernel supports float32, float16, bfloat16; got ", dtype);
  }
}

}  // namespace causalconv
