// Sums a split reduction's fp32 workspace slices in split order (bitwise reproducible) and
// casts to the output dtype: the weight gradient's (B x L split) and the TMA forward's
// (input-channel split).  It launches as a programmatic dependent of the kernel that wrote
// the slices where the caller asks (dependent_launch.cuh): that kernel's blocks let it start
// as they begin, and its blocks then wait on free multiprocessors.
#include <ATen/ATen.h>

#include "common.cuh"
#include "dependent_launch.cuh"
#include "launchers.h"

namespace causalconv {
namespace {

// Element e of a slice goes to out[e], or with tap_k > 0 (slices [tap_k][m], out [m][tap_k])
// to out[(e % m) * tap_k + e / m]: the loop walks the slices in order, so their reads stay
// coalesced and the writes are tap_k elements apart.
template <typename T>
__global__ void reduce_kernel(const float* __restrict__ ws, T* __restrict__ out, int64_t n, int splits, int tap_k) {
  ptx::griddep_wait();  // the slices are complete
  const int64_t m = tap_k > 0 ? n / tap_k : n;
  for (int64_t e = blockIdx.x * static_cast<int64_t>(blockDim.x) + threadIdx.x; e < n;
       e += static_cast<int64_t>(gridDim.x) * blockDim.x) {
    float s = 0.f;
    for (int k = 0; k < splits; ++k) s += ws[k * n + e];
    if (tap_k > 0) {  // (uniform: no division where the slices are laid out as out)
      const int64_t tap = e / m;
      out[(e - tap * m) * tap_k + tap] = from_float<T>(s);
    } else {
      out[e] = from_float<T>(s);
    }
  }
}

}  // namespace

void launch_split_reduce(const float* ws, void* out, int64_t n, int splits, at::ScalarType dtype, cudaStream_t stream,
                         bool as_dependent, int tap_k) {
  CAUSALCONV_CHECK(tap_k >= 0 && (tap_k == 0 || n % tap_k == 0), "causalconv: ", n,
                   " elements are not tap-major slices of ", tap_k, " taps");
  const int threads = 256;
  const int blocks = static_cast<int>(std::min<int64_t>(ceil_div(n, threads), 8192));
  switch (dtype) {
    case at::kFloat:
      launch_maybe_dependent("conv_split_reduce", as_dependent, reduce_kernel<float>, blocks, threads, 0, stream, ws,
                             static_cast<float*>(out), n, splits, tap_k);
      break;
    case at::kHalf:
      launch_maybe_dependent("conv_split_reduce", as_dependent, reduce_kernel<__half>, blocks, threads, 0, stream, ws,
                             static_cast<__half*>(out), n, splits, tap_k);
      break;
    case at::kBFloat16:
      launch_maybe_dependent("conv_split_reduce", as_dependent, reduce_kernel<__nv_bfloat16>, blocks, threads, 0,
                             stream, ws, static_cast<__nv_bfloat16*>(out), n, splits, tap_k);
      break;
    default: CAUSALCONV_CHECK(false, "causalconv: split reductions support float32, float16, bfloat16 outputs; got ", dtype);
  }
}

}  // namespace causalconv
