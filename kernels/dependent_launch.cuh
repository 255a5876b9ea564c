// Programmatic dependent launch (sm_90): a kernel launched this way may start while the
// kernel ahead of it in the stream is still running, once every block of that kernel has
// called ptx::griddep_launch_dependents (or exited).  Its launch, prologue and, where the
// inputs came from earlier work, its first loads then overlap the other kernel's tail.
// The contract on the follower: it calls ptx::griddep_wait before it reads anything the
// kernel ahead writes and before it writes anything that kernel may still touch;
// griddep_wait returns once that kernel has completed and its writes are visible.  Work
// enqueued before that kernel is complete when the follower starts only if that kernel was
// itself a normal launch (the weight image kernel is, so the forwards after it read x
// before their griddep_wait); a follower of a follower may rely on nothing before its wait.
#pragma once
#include <cuda_runtime.h>

#include <cstdint>
#include <utility>

#include "common.cuh"
#include "ptx.cuh"

namespace causalconv {

// Whether followers launch as programmatic dependents: yes unless CAUSALCONV_PDL=0, the knob
// that times them as normal launches.  Measured on an H200 (scripts/ab_pdl.sh, NOTES v22):
// the L=64 fp32 forward 0.016 -> 0.012 ms, 3x96->160 -10%, 32x128->128 K7 d4 -3%, the large
// forwards and backwards within run-to-run spread.
inline bool pdl_enabled() { return env_switch("CAUSALCONV_PDL"); }

// Launches `kernel` on `stream` in clusters of `cluster` blocks (1: none), as a programmatic
// dependent of the kernel before it when `dependent` and pdl_enabled(), else normally.  A
// failed launch raises an error naming `name`.
template <typename... Params, typename... Args>
void launch_ex(const char* name, bool dependent, int cluster, void (*kernel)(Params...), int64_t grid, int threads,
               size_t smem, cudaStream_t stream, Args&&... args) {
  cudaLaunchConfig_t cfg = {};
  cfg.gridDim = dim3(static_cast<unsigned>(grid));
  cfg.blockDim = dim3(threads);
  cfg.dynamicSmemBytes = smem;
  cfg.stream = stream;
  cudaLaunchAttribute attr[2];
  unsigned n = 0;
  if (dependent && pdl_enabled()) {
    attr[n].id = cudaLaunchAttributeProgrammaticStreamSerialization;
    attr[n++].val.programmaticStreamSerializationAllowed = 1;
  }
  if (cluster > 1) {
    attr[n].id = cudaLaunchAttributeClusterDimension;
    attr[n++].val.clusterDim = {static_cast<unsigned>(cluster), 1, 1};
  }
  cfg.attrs = attr;
  cfg.numAttrs = n;
  const cudaError_t err = cudaLaunchKernelEx(&cfg, kernel, std::forward<Args>(args)...);
  CAUSALCONV_CHECK(err == cudaSuccess, "causalconv: launch of ", name, " failed: ", cudaGetErrorString(err));
}

template <typename... Params, typename... Args>
void launch_maybe_dependent(const char* name, bool dependent, void (*kernel)(Params...), int64_t grid, int threads,
                            size_t smem, cudaStream_t stream, Args&&... args) {
  launch_ex(name, dependent, 1, kernel, grid, threads, smem, stream, std::forward<Args>(args)...);
}

// Clusters of `cluster` blocks of `kernel` (its shared memory attribute already set) that
// can be resident at once: 0 when none fits.
template <typename... Params>
int max_active_clusters(void (*kernel)(Params...), int cluster, int threads, size_t smem) {
  cudaLaunchConfig_t cfg = {};
  cfg.gridDim = dim3(static_cast<unsigned>(cluster));
  cfg.blockDim = dim3(threads);
  cfg.dynamicSmemBytes = smem;
  cudaLaunchAttribute attr;
  attr.id = cudaLaunchAttributeClusterDimension;
  attr.val.clusterDim = {static_cast<unsigned>(cluster), 1, 1};
  cfg.attrs = &attr;
  cfg.numAttrs = 1;
  int n = 0;
  CAUSALCONV_CUDA_CHECK(cudaOccupancyMaxActiveClusters(&n, kernel, &cfg));
  return n;
}

template <typename... Params, typename... Args>
void launch_dependent(const char* name, void (*kernel)(Params...), int64_t grid, int threads, size_t smem,
                      cudaStream_t stream, Args&&... args) {
  launch_maybe_dependent(name, true, kernel, grid, threads, smem, stream, std::forward<Args>(args)...);
}

}  // namespace causalconv
