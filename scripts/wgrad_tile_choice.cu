// The tensor-core weight gradient's tile choice (kernels/wgrad_tc.cu's host code, compiled
// whole into this program) for one shape, on a machine without a GPU: the two CUDA queries
// the choice makes are answered with an sm_90 card's 227 KB of opt-in shared memory.  Prints
// the tile, or the error a CAUSALCONV_WGRAD_TILE value raises.  Built and run by
// scripts/wgrad_tile_choice.sh.
#include <cuda_runtime.h>

#include <cstdio>
#include <cstdlib>

namespace {
cudaError_t no_gpu_get_device(int* dev) {
  *dev = 0;
  return cudaSuccess;
}
cudaError_t no_gpu_attribute(int* value, cudaDeviceAttr, int) {
  *value = 232448;  // cudaDevAttrMaxSharedMemoryPerBlockOptin on H100 and H200
  return cudaSuccess;
}
}  // namespace
#define cudaGetDevice no_gpu_get_device
#define cudaDeviceGetAttribute no_gpu_attribute
#include "../kernels/wgrad_tc.cu"
#undef cudaGetDevice
#undef cudaDeviceGetAttribute

namespace causalconv {  // the launch path's tensor maps are never built here
CUtensorMap make_row_tensor_map(const void*, at::ScalarType, int64_t, int64_t, int, int, bool) { return {}; }
}  // namespace causalconv

int main(int argc, char** argv) {
  if (argc != 3) {
    std::fprintf(stderr, "usage: %s B,Cin,Cout,K,dilation,L bytes_per_element\n", argv[0]);
    return 2;
  }
  causalconv::WgradParams p{};
  long long b, cin, cout, k, d, len;
  if (std::sscanf(argv[1], "%lld,%lld,%lld,%lld,%lld,%lld", &b, &cin, &cout, &k, &d, &len) != 6) {
    std::fprintf(stderr, "shape must be B,Cin,Cout,K,dilation,L, got '%s'\n", argv[1]);
    return 2;
  }
  p.B = b;
  p.L = len;
  p.groups = 1;
  p.cin_g = static_cast<int>(cin);
  p.cout_g = static_cast<int>(cout);
  p.K = static_cast<int>(k);
  p.dilation = static_cast<int>(d);
  p.shift = static_cast<int>(-(k - 1) * d);
  const int elem = std::atoi(argv[2]);
  try {
    const auto nt = causalconv::tc::pick_n_tile(p, elem);
    std::printf("%s %d-byte: %s taps %d, %d channel rows, n %d x %d, raw window %d\n", argv[1], elem,
                nt.mn ? "MN-major" : "K-major", nt.taps, nt.it_rows, nt.n, nt.ca, nt.window);
  } catch (const c10::Error& e) {
    std::printf("%s %d-byte: error: %s\n", argv[1], elem, e.what_without_backtrace());
  }
  return 0;
}
