// 16-byte chunks of a row for the depthwise register kernels (fwd_depthwise.cu,
// wgrad_depthwise.cu): chunk c holds steps c*V .. c*V + V-1 (V = 16 bytes of elements).  A
// thread loads its chunk whole, and the chunks its taps reach into from the lanes beside it
// by shuffles (the lanes at a warp's edge loading theirs), so that no step is read twice.
#pragma once
#include <cuda_runtime.h>

#include "common.cuh"

namespace causalconv {
namespace chunks {

// The register kernels, and the copy of channel-last x before a depthwise forward
// (dispatch.cu), are opt-in (CAUSALCONV_DEPTHWISE_REGISTERS=1) until they have run on a GPU:
// they were written in a session that had none (NOTES v38, v39).
inline bool enabled() { return env_switch("CAUSALCONV_DEPTHWISE_REGISTERS", false); }

template <typename T>
constexpr int kVec = 16 / static_cast<int>(sizeof(T));

template <typename T>
union Chunk {
  uint4 u;
  T e[kVec<T>];
};

// Chunk c of a row, zeros outside the sequence: callers take rows whose length is a
// multiple of V, so a chunk lies wholly inside or outside.
template <typename T>
__device__ __forceinline__ uint4 load(const T* row, int64_t c, int64_t n_chunks) {
  return c >= 0 && c < n_chunks ? *reinterpret_cast<const uint4*>(row + c * kVec<T>) : make_uint4(0u, 0u, 0u, 0u);
}

// Chunk c of a row from fp32 values, one 16-byte store (as plain C++ the compiler split the
// first of a thread's stores into four 4-byte ones, each warp instruction then touching 16
// sectors for a quarter of their bytes).
template <typename T>
__device__ __forceinline__ void store(T* row, int64_t c, const float* f) {
  Chunk<T> out;
#pragma unroll
  for (int e = 0; e < kVec<T>; ++e) out.e[e] = from_float<T>(f[e]);
  asm volatile("st.global.v4.b32 [%0], {%1, %2, %3, %4};" ::"l"(__cvta_generic_to_global(row + c * kVec<T>)),
               "r"(out.u.x), "r"(out.u.y), "r"(out.u.z), "r"(out.u.w)
               : "memory");
}

template <typename T>
__device__ __forceinline__ void unpack(uint4 u, float* f, bool tf32) {
  Chunk<T> c;
  c.u = u;
#pragma unroll
  for (int e = 0; e < kVec<T>; ++e) f[e] = operand(to_float(c.e[e]), tf32);
}

// The chunk of the lane h below (kUp) or above this one; every lane of the warp takes part.
template <bool kUp>
__device__ __forceinline__ uint4 shuffle(uint4 v, int h) {
  constexpr unsigned kAll = 0xffffffffu;
  if constexpr (kUp) {
    return make_uint4(__shfl_up_sync(kAll, v.x, h), __shfl_up_sync(kAll, v.y, h), __shfl_up_sync(kAll, v.z, h),
                      __shfl_up_sync(kAll, v.w, h));
  } else {
    return make_uint4(__shfl_down_sync(kAll, v.x, h), __shfl_down_sync(kAll, v.y, h), __shfl_down_sync(kAll, v.z, h),
                      __shfl_down_sync(kAll, v.w, h));
  }
}

// The window under K taps at dilation 1 around a thread's chunk c of x, as fp32 operands:
// with kAnti (an input gradient's taps reaching forward) chunks c .. c + kNb, else c - kNb ..
// c, in order, kNb = the chunks the taps reach into beside c.  `edge` holds, for the lanes at
// the warp's edge, the neighbours they loaded themselves (load_edges).
template <typename T, int K>
struct Window {
  static constexpr int V = kVec<T>;
  static constexpr int kNb = (K - 1 + V - 1) / V;
  static constexpr int kEdges = kNb > 0 ? kNb : 1;  // (arrays of at least one element)
  static constexpr int kElems = (kNb + 1) * V;

  template <bool kAnti>
  static __device__ __forceinline__ bool at_edge(int lane, int h) {
    return kAnti ? lane >= 32 - h : lane < h;
  }

  // Issued with the thread's own loads, before any of them is used.
  template <bool kAnti>
  static __device__ __forceinline__ void load_edges(uint4 (&edge)[kEdges], const T* row, int64_t c, int64_t n_chunks,
                                                    int lane) {
#pragma unroll
    for (int h = 1; h <= kNb; ++h)
      edge[h - 1] = at_edge<kAnti>(lane, h) ? load(row, kAnti ? c + h : c - h, n_chunks) : make_uint4(0u, 0u, 0u, 0u);
  }

  template <bool kAnti>
  static __device__ __forceinline__ void fill(float (&win)[kElems], uint4 own, const uint4 (&edge)[kEdges], int lane,
                                              bool tf32) {
    unpack<T>(own, win + (kAnti ? 0 : kNb * V), tf32);
#pragma unroll
    for (int h = 1; h <= kNb; ++h) {
      const uint4 nb = shuffle<!kAnti>(own, h);
      unpack<T>(at_edge<kAnti>(lane, h) ? edge[h - 1] : nb, win + (kAnti ? h : kNb - h) * V, tf32);
    }
  }

  // The element tap k multiplies for step j of the chunk.
  template <bool kAnti>
  static __device__ __forceinline__ int at(int j, int k) {
    return kAnti ? j + k : kNb * V + j + k - (K - 1);
  }
};

}  // namespace chunks
}  // namespace causalconv
