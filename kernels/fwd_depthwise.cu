// Forward of a depthwise convolution (one input channel per group, any channel multiplier)
// on CUDA cores.  Memory-bound: an output step costs one x element read and one y element
// written for K multiply-adds, so the kernels are judged by the bytes they keep in flight.
//
// Two kernels:
// - registers (opt-in, CAUSALCONV_DEPTHWISE_REGISTERS=1; dilation 1, up to 8 taps, rows of x
//   and y 16-byte aligned, L a multiple of 16 bytes' worth of elements): a thread loads its
//   16-byte chunks of x, all of them before any store, and computes each chunk's outputs in
//   registers; the taps that reach into the neighbouring chunk (the one before for the
//   forward, after for an input gradient) get it from the neighbouring lane by shuffles, and
//   the lanes at a warp's edge load it themselves (chunks.cuh); 16-byte stores.  kPer
//   chunks per thread, 128-thread blocks: at 26-56 registers, 9 to 16 blocks and 36-64 KB
//   of loads in flight per multiprocessor.
// - staged (the default, and everything the register kernel does not take): the segment and
//   the taps' span through shared memory, one element store per step.  It keeps ~2 KB of
//   16-byte loads in flight per block and measured 89 us on an 8x1536 K4 L2048 bf16 layer on
//   an H100 (NOTES v35), 3.7x that layer's 24 us floor at 4.2 TB/s.
// Both sum the taps in the same order from the same fp32 operands, so they agree bit for bit.
// An input gradient's weights come as the forward's (ConvParams::w_transposed): with one
// input channel per group the per-group transpose is the identity, so they are read
// tap-reversed, and no flipped copy is written first.
#include <ATen/ATen.h>

#include <algorithm>

#include "chunks.cuh"
#include "common.cuh"
#include "launchers.h"
#include "row_loads.cuh"

namespace causalconv {
namespace {

// Staged: a block stages one row segment of kTB steps (and the taps' span) into shared
// memory as fp32 operands, then thread j sums its steps j, j + 256, ... from there.
namespace staged {
constexpr int kThreads = 256;
constexpr int kTB = 1024;
constexpr int kMaxSpan = 4096;

struct Tiling {
  int tpg;
  int row;
};

template <typename T>
Tiling tiling(const ConvParams& p) {
  constexpr int V = 16 / sizeof(T);
  Tiling t;
  t.tpg = std::max(1, std::min(p.K, 1 + kMaxSpan / p.dilation));
  t.row = kTB + (t.tpg - 1) * p.dilation + 2 * V;
  return t;
}

template <typename T, bool kVec>
__global__ void __launch_bounds__(kThreads) kernel(ConvParams p, Tiling tl) {
  constexpr int V = 16 / sizeof(T);
  constexpr int kPer = kTB / kThreads;
  extern __shared__ float xs[];

  const int64_t n_tt = ceil_div(p.L, kTB);
  int64_t bid = blockIdx.x;
  const int64_t oc = bid % p.C_out;
  bid /= p.C_out;
  const int64_t t0 = (bid % n_tt) * kTB;
  const int64_t b = bid / n_tt;
  const int64_t ic = oc / p.cout_g;  // the group's single input channel

  const bool tf32 = p.precision == Precision::kTF32;
  const T* x = static_cast<const T*>(p.x) + b * p.sx_b + ic * p.sx_c;
  const T* w = static_cast<const T*>(p.w) + oc * p.K;

  float acc[kPer];
#pragma unroll
  for (int j = 0; j < kPer; ++j) acc[j] = 0.f;

  for (int k0 = 0; k0 < p.K; k0 += tl.tpg) {
    const auto [nt, off, nchunks, a0] = tap_group_window<T>(p, t0, k0, tl.tpg, kTB);
    __syncthreads();
    for (int ch = threadIdx.x; ch < nchunks; ch += kThreads) {
      stage_row_chunk<T, kVec>(xs + ch * V, x, p.sx_t, a0 + static_cast<int64_t>(ch) * V, p.L, tf32);
    }
    __syncthreads();
    for (int k = 0; k < nt; ++k) {
      const float wv = operand(to_float(w[p.w_transposed ? p.K - 1 - k0 - k : k0 + k]), tf32);
      const float* xk = xs + off + threadIdx.x + k * p.dilation;
#pragma unroll
      for (int j = 0; j < kPer; ++j) acc[j] = fmaf(wv, xk[j * kThreads], acc[j]);
    }
  }

  T* y = static_cast<T*>(p.y) + b * p.sy_b + oc * p.sy_c;
  const float bv = p.bias ? to_float(static_cast<const T*>(p.bias)[oc]) : 0.f;
#pragma unroll
  for (int j = 0; j < kPer; ++j) {
    const int64_t t = t0 + threadIdx.x + j * kThreads;
    if (t < p.L) y[t] = from_float<T>(acc[j] + bv);
  }
}
}  // namespace staged

namespace registers {
constexpr int kThreads = 128;
constexpr int kPer = 2;                      // 16-byte chunks per thread, kThreads apart
constexpr int kSegChunks = kThreads * kPer;  // chunks per block
constexpr int kMaxTaps = 8;

// kAnti: the input gradient's anti-causal window (shift 0, taps reaching forward), else the
// causal one (shift -(K-1)).  Block: one row (batch, output channel) segment of kSegChunks.
template <typename T, int K, bool kAnti>
__global__ void __launch_bounds__(kThreads) kernel(ConvParams p, int64_t n_seg) {
  using W = chunks::Window<T, K>;
  constexpr int V = W::V;
  const int64_t n_chunks = p.L / V;
  const int64_t seg = blockIdx.x % n_seg, row = blockIdx.x / n_seg;
  const int64_t oc = row % p.C_out, b = row / p.C_out;
  const T* x = static_cast<const T*>(p.x) + b * p.sx_b + oc / p.cout_g * p.sx_c;
  T* y = static_cast<T*>(p.y) + b * p.sy_b + oc * p.sy_c;
  const bool tf32 = p.precision == Precision::kTF32;
  const int lane = threadIdx.x & 31;

  const int64_t c0 = seg * kSegChunks + threadIdx.x;
  uint4 own[kPer], edge[kPer][W::kEdges];
#pragma unroll
  for (int i = 0; i < kPer; ++i) {
    const int64_t c = c0 + i * kThreads;
    own[i] = chunks::load(x, c, n_chunks);
    W::template load_edges<kAnti>(edge[i], x, c, n_chunks, lane);
  }
  const T* wrow = static_cast<const T*>(p.w) + oc * K;
  float w[K];
#pragma unroll
  for (int k = 0; k < K; ++k) w[k] = operand(to_float(wrow[p.w_transposed ? K - 1 - k : k]), tf32);
  const float bv = p.bias ? to_float(static_cast<const T*>(p.bias)[oc]) : 0.f;

#pragma unroll
  for (int i = 0; i < kPer; ++i) {
    float win[W::kElems];
    W::template fill<kAnti>(win, own[i], edge[i], lane, tf32);  // every lane takes part
    const int64_t c = c0 + i * kThreads;
    if (c >= n_chunks) continue;
    float out[V];
#pragma unroll
    for (int j = 0; j < V; ++j) {
      float acc = 0.f;
#pragma unroll
      for (int k = 0; k < K; ++k) acc = fmaf(w[k], win[W::template at<kAnti>(j, k)], acc);
      out[j] = acc + bv;
    }
    chunks::store(y, c, out);
  }
}

// Whether the register kernel takes p (see the file's comment; opt-in, chunks::enabled()).
template <typename T>
bool fits(const ConvParams& p) {
  constexpr int V = chunks::kVec<T>;
  const bool causal = p.shift == -(p.K - 1) * p.dilation, anti = p.shift == 0;
  return p.K <= kMaxTaps && (p.K == 1 || p.dilation == 1) && (causal || anti) && p.L % V == 0 &&
         rows_vectorizable<T>(p) && p.sy_c % V == 0 && p.sy_b % V == 0 && reinterpret_cast<uintptr_t>(p.y) % 16 == 0 &&
         chunks::enabled();  // the environment read last
}

template <typename T>
void launch(const ConvParams& p, cudaStream_t stream) {
  const int64_t n_seg = ceil_div(p.L / chunks::kVec<T>, kSegChunks);
  const int64_t blocks = p.B * p.C_out * n_seg;
  CAUSALCONV_CHECK(blocks <= INT32_MAX, "causalconv: problem too large for one launch of conv_fwd_depthwise");
  // K = 1 reads no neighbour; its shift is 0 for either direction.
  const bool anti = p.K > 1 && p.shift == 0;
  with_tap_group(p.K, "conv_fwd_depthwise", [&](auto taps) {
    constexpr int K = decltype(taps)::value;
    auto kern = anti ? kernel<T, K, true> : kernel<T, K, false>;
    kern<<<static_cast<unsigned>(blocks), kThreads, 0, stream>>>(p, n_seg);
  });
  CAUSALCONV_CHECK_LAUNCH("conv_fwd_depthwise");
}
}  // namespace registers

template <typename T, bool kVec>
struct StagedKernel {
  static void launch(unsigned grid, size_t smem, cudaStream_t s, const ConvParams& p, const staged::Tiling& tl) {
    staged::kernel<T, kVec><<<grid, staged::kThreads, smem, s>>>(p, tl);
  }
};

template <typename T>
void launch_depthwise(const ConvParams& p, cudaStream_t stream) {
  if (registers::fits<T>(p)) return registers::launch<T>(p, stream);
  const staged::Tiling tl = staged::tiling<T>(p);
  const int64_t blocks = p.C_out * ceil_div(p.L, staged::kTB) * p.B;
  launch_rows<T, StagedKernel>(p, tl, blocks, sizeof(float) * tl.row, "conv_fwd_depthwise", stream);
}

}  // namespace

void launch_fwd_depthwise(const ConvParams& p, at::ScalarType dtype, cudaStream_t stream) {
  CAUSALCONV_CHECK(p.cin_g == 1, "causalconv: depthwise kernel needs one input channel per group");
  with_element_type(dtype, "the depthwise kernel", [&](auto elem) { launch_depthwise<decltype(elem)>(p, stream); });
}

}  // namespace causalconv
