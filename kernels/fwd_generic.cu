// CUDA-core forward kernels: correct for every configuration the API accepts, and the
// fallback for whatever the tensor-core kernels do not cover.
//
// A block owns a tile of outputs for one (batch, group).  For each step it stages kCI
// input channels of x over the tile's window, halo included, into shared memory once
// (16-byte loads where the rows are aligned, zeros outside [0, L)), stages the matching
// weights, and every thread accumulates its outputs in fp32 from shared memory.  Taps are
// taken in groups whose window span (taps-1)*dilation fits the buffer, so a huge
// dilation costs extra passes instead of an unbounded halo.
#include <ATen/ATen.h>

#include <algorithm>

#include "common.cuh"
#include "launchers.h"
#include "row_loads.cuh"

namespace causalconv {
namespace {

constexpr int kThreads = 256;

// ---------------------------------------------------------------------------------
// Dense / grouped: a block computes kOB output channels x kTB time steps.  Warp w owns
// channels 4w..4w+3; lane l owns times l, l+32, l+64, l+96 (so shared-memory reads and
// global stores are consecutive across the warp).
namespace dense {
constexpr int kOB = 32;
constexpr int kTB = 128;
constexpr int kCI = 8;
constexpr int kMaxSpan = 768;
constexpr int kMaxTaps = 16;

struct Tiling {
  int tpg;  // taps per group
  int row;  // floats per staged x row
};

template <typename T>
Tiling tiling(const ConvParams& p) {
  constexpr int V = 16 / sizeof(T);
  Tiling t;
  t.tpg = std::max(1, std::min({p.K, kMaxTaps, 1 + kMaxSpan / p.dilation}));
  t.row = kTB + (t.tpg - 1) * p.dilation + 2 * V;
  return t;
}

template <typename T>
size_t smem_bytes(const Tiling& t) {
  return sizeof(float) * (static_cast<size_t>(kCI) * t.row + static_cast<size_t>(kCI) * t.tpg * kOB);
}

template <typename T, bool kVec>
__global__ void __launch_bounds__(kThreads) kernel(ConvParams p, Tiling tl) {
  constexpr int V = 16 / sizeof(T);
  extern __shared__ float smem[];
  float* xs = smem;                // [kCI][row]
  float* ws = smem + kCI * tl.row;  // [kCI][tpg][kOB]

  const int64_t n_ot = ceil_div(p.cout_g, kOB);
  const int64_t n_tt = ceil_div(p.L, kTB);
  int64_t bid = blockIdx.x;
  const int ot = static_cast<int>(bid % n_ot);
  bid /= n_ot;
  const int g = static_cast<int>(bid % p.groups);
  bid /= p.groups;
  const int64_t t0 = (bid % n_tt) * kTB;
  const int64_t b = bid / n_tt;

  const int warp = threadIdx.x / 32, lane = threadIdx.x % 32;
  const bool tf32 = p.precision == Precision::kTF32;
  const T* x = static_cast<const T*>(p.x) + b * p.sx_b + static_cast<int64_t>(g) * p.cin_g * p.sx_c;
  const T* w = static_cast<const T*>(p.w);

  float acc[4][4];
#pragma unroll
  for (int i = 0; i < 4; ++i)
#pragma unroll
    for (int j = 0; j < 4; ++j) acc[i][j] = 0.f;

  for (int k0 = 0; k0 < p.K; k0 += tl.tpg) {
    const auto [nt, off, nchunks, a0] = tap_group_window<T>(p, t0, k0, tl.tpg, kTB);

    for (int c0 = 0; c0 < p.cin_g; c0 += kCI) {
      __syncthreads();  // the previous step's readers are done with xs / ws
      for (int idx = threadIdx.x; idx < kCI * nchunks; idx += kThreads) {
        const int ci = idx / nchunks, ch = idx - ci * nchunks;
        float* dst = xs + ci * tl.row + ch * V;
        if (c0 + ci < p.cin_g) {
          stage_row_chunk<T, kVec>(dst, x + (c0 + ci) * p.sx_c, p.sx_t, a0 + static_cast<int64_t>(ch) * V, p.L,
                                   tf32);
        } else {
#pragma unroll
          for (int e = 0; e < V; ++e) dst[e] = 0.f;
        }
      }
      for (int idx = threadIdx.x; idx < kCI * nt * kOB; idx += kThreads) {
        const int o = idx % kOB, k = (idx / kOB) % nt, ci = idx / (kOB * nt);
        const bool ok = (ot * kOB + o < p.cout_g) && (c0 + ci < p.cin_g);
        // transposed: an input gradient's weights read from the forward's (ConvParams::w_transposed);
        // consecutive o are then K elements apart, closer than the forward layout's cin_g * K
        const int64_t og = static_cast<int64_t>(ot) * kOB + o, ic = c0 + ci;
        const int64_t src = p.w_transposed ? ((g * p.cin_g + ic) * p.cout_g + og) * p.K + (p.K - 1 - k0 - k)
                                           : ((g * p.cout_g + og) * p.cin_g + ic) * p.K + k0 + k;
        ws[(ci * tl.tpg + k) * kOB + o] = ok ? operand(to_float(w[src]), tf32) : 0.f;
      }
      __syncthreads();

      const int cmax = min(kCI, p.cin_g - c0);
      for (int ci = 0; ci < cmax; ++ci) {
        const float* xr = xs + ci * tl.row + off + lane;
        for (int k = 0; k < nt; ++k) {
          const float4 wv = *reinterpret_cast<const float4*>(ws + (ci * tl.tpg + k) * kOB + warp * 4);
          const float* xk = xr + k * p.dilation;
          float xv[4];
#pragma unroll
          for (int j = 0; j < 4; ++j) xv[j] = xk[32 * j];
#pragma unroll
          for (int j = 0; j < 4; ++j) {
            acc[0][j] = fmaf(wv.x, xv[j], acc[0][j]);
            acc[1][j] = fmaf(wv.y, xv[j], acc[1][j]);
            acc[2][j] = fmaf(wv.z, xv[j], acc[2][j]);
            acc[3][j] = fmaf(wv.w, xv[j], acc[3][j]);
          }
        }
      }
    }
  }

  T* y = static_cast<T*>(p.y) + b * p.sy_b;
  const T* bias = static_cast<const T*>(p.bias);
#pragma unroll
  for (int i = 0; i < 4; ++i) {
    const int o = ot * kOB + warp * 4 + i;
    if (o >= p.cout_g) continue;
    const int64_t oc = static_cast<int64_t>(g) * p.cout_g + o;
    const float bv = bias ? to_float(bias[oc]) : 0.f;
#pragma unroll
    for (int j = 0; j < 4; ++j) {
      const int64_t t = t0 + lane + 32 * j;
      if (t < p.L) y[oc * p.sy_c + t] = from_float<T>(acc[i][j] + bv);
    }
  }
}
}  // namespace dense

template <typename T, bool kVec>
struct DenseKernel {
  static void launch(unsigned grid, size_t smem, cudaStream_t s, const ConvParams& p, const dense::Tiling& tl) {
    dense::kernel<T, kVec><<<grid, kThreads, smem, s>>>(p, tl);
  }
};
template <typename T>
void launch_dense(const ConvParams& p, cudaStream_t stream) {
  const dense::Tiling tl = dense::tiling<T>(p);
  const int64_t blocks = ceil_div(p.cout_g, dense::kOB) * p.groups * ceil_div(p.L, dense::kTB) * p.B;
  launch_rows<T, DenseKernel>(p, tl, blocks, dense::smem_bytes<T>(tl), "conv_fwd_generic", stream);
}

}  // namespace

void launch_fwd_generic(const ConvParams& p, at::ScalarType dtype, cudaStream_t stream) {
  switch (dtype) {
    case at::kFloat: return launch_dense<float>(p, stream);
    case at::kHalf: return launch_dense<__half>(p, stream);
    case at::kBFloat16: return launch_dense<__nv_bfloat16>(p, stream);
    default: CAUSALCONV_CHECK(false, "causalconv: generic kernel supports float32, float16, bfloat16; got ", dtype);
  }
}

}  // namespace causalconv
