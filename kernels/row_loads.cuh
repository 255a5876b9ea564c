// Reading rows of x for the CUDA-core forwards (fwd_generic.cu, fwd_depthwise.cu): staging a
// row segment into shared memory as fp32 operands, whether rows allow 16-byte loads, and the
// launch of a kernel's 16-byte-load variant where they do.
#pragma once
#include <ATen/ATen.h>

#include "common.cuh"

namespace causalconv {

// Stage one x row segment [a0, a0 + width) (a0 a multiple of V) of channel row `src`
// into dst as fp32 operands, zero outside [0, L).  Row-parallel over `lanes` threads.
template <typename T, bool kVec>
__device__ __forceinline__ void stage_row_chunk(float* dst, const T* src, int64_t sx_t, int64_t t, int64_t L,
                                                bool tf32) {
  constexpr int V = 16 / sizeof(T);
  if (kVec && t >= 0 && t + V <= L) {
    union {
      uint4 u;
      T e[V];
    } v;
    v.u = *reinterpret_cast<const uint4*>(src + t);
#pragma unroll
    for (int e = 0; e < V; ++e) dst[e] = operand(to_float(v.e[e]), tf32);
  } else {
#pragma unroll
    for (int e = 0; e < V; ++e) {
      const int64_t te = t + e;
      dst[e] = (te >= 0 && te < L) ? operand(to_float(src[te * sx_t]), tf32) : 0.f;
    }
  }
}

// The x segment a tile of `tile` steps from t0 reads for its tap group k0 .. k0 + nt - 1
// (at most tpg taps): from a0, a multiple of V, `off` elements before the first tap's first
// step, `nchunks` chunks of V elements.
struct TapGroupWindow {
  int nt, off, nchunks;
  int64_t a0;
};
template <typename T>
__device__ __forceinline__ TapGroupWindow tap_group_window(const ConvParams& p, int64_t t0, int k0, int tpg, int tile) {
  constexpr int V = 16 / sizeof(T);
  TapGroupWindow g;
  g.nt = min(tpg, p.K - k0);
  const int64_t ws0 = t0 + static_cast<int64_t>(k0) * p.dilation + p.shift;
  g.a0 = floor_div(ws0, V) * V;
  g.off = static_cast<int>(ws0 - g.a0);
  g.nchunks = static_cast<int>(ceil_div(g.off + tile + (g.nt - 1) * p.dilation, V));
  return g;
}

// Rows can be read 16 bytes at a time when x is unit-stride along L and every row
// starts on a 16-byte boundary.
template <typename T>
bool rows_vectorizable(const ConvParams& p) {
  constexpr int V = 16 / sizeof(T);
  return p.sx_t == 1 && reinterpret_cast<uintptr_t>(p.x) % 16 == 0 && p.sx_c % V == 0 && p.sx_b % V == 0;
}

// Launches the 16-byte-load variant when the rows allow it.
template <typename T, template <typename, bool> class Kernel, typename Tiling>
void launch_rows(const ConvParams& p, const Tiling& tl, int64_t blocks, size_t smem, const char* name,
                 cudaStream_t stream) {
  CAUSALCONV_CHECK(blocks <= INT32_MAX, "causalconv: problem too large for one launch of ", name);
  const auto grid = static_cast<unsigned>(blocks);
  if (rows_vectorizable<T>(p)) {
    Kernel<T, true>::launch(grid, smem, stream, p, tl);
  } else {
    Kernel<T, false>::launch(grid, smem, stream, p, tl);
  }
  CAUSALCONV_CHECK_LAUNCH(name);
}

}  // namespace causalconv
