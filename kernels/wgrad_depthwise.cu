// Weight gradient of a depthwise convolution (one input channel per group, any channel
// multiplier), on CUDA cores:
//   dw[o, 0, k] = sum_{b, t} dy[b, o, t] * x[b, o / cout_g, t + k*dilation + shift].
//
// Why its own kernel: wgrad_generic.cu tiles 32 output x 32 input channels per block, so with
// one input channel per group 31 of every 32 lanes, and all but cout_g of its 32 output rows,
// multiply padding (a depthwise layer with cout_g = 1 kept 1 of 256 threads busy).  Here a
// block reduces one output channel over a range of (batch, 1024-step chunk) units for up to
// kMaxTaps taps: each thread loads dy and the taps' x values at its own steps (consecutive
// across a warp, so every load is coalesced, and the taps' overlapping x reads mostly hit L1),
// keeps one fp32 sum per tap, and the block adds the threads' sums in a fixed order (a
// shuffle tree per warp, then the warps in order) into its split's slice of the workspace;
// split_reduce.cu adds the slices in order, so dw is bitwise reproducible without atomics.
// x and dy are read once from DRAM, but the kernel is not yet bound by their bytes: on an H100
// it ran an 8x1536 K4 L2048 bf16 layer in 155 us against a 24 us floor (NOTES v34 and v35
// measured: too few bytes in flight per multiprocessor).
#include <ATen/ATen.h>

#include <algorithm>

#include "common.cuh"
#include "launchers.h"
#include "ptx.cuh"

namespace causalconv {
namespace {

constexpr int kThreads = 256, kWarps = kThreads / 32;
constexpr int kPer = 4;                     // steps per thread and unit, kThreads apart
constexpr int kChunk = kThreads * kPer;     // steps per unit
constexpr int kMaxTaps = 8;                 // taps per block (accumulators per thread)
constexpr int64_t kMaxUnitsPerSplit = 64;   // a thread's sum runs over at most 256 products

struct Plan {
  int kg, n_tg;         // taps per block, tap groups
  int64_t n_chunks;     // 1024-step chunks per sequence
  int64_t units, per_split;
  int splits;
};

Plan make_plan(const WgradParams& p, int sm_count) {
  Plan pl{};
  pl.kg = std::min(p.K, kMaxTaps);
  pl.n_tg = static_cast<int>(ceil_div(p.K, pl.kg));
  pl.n_chunks = ceil_div(p.L, kChunk);
  pl.units = p.B * pl.n_chunks;
  const int64_t c_out = static_cast<int64_t>(p.groups) * p.cout_g;
  const int64_t items = c_out * pl.n_tg;
  // Enough blocks for ~32 per multiprocessor (several waves of 8 resident, short tails), and
  // short enough runs per thread for fp32 sums; the workspace stays below 2^26 floats.
  int64_t splits = std::max<int64_t>(ceil_div(32LL * sm_count, items), ceil_div(pl.units, kMaxUnitsPerSplit));
  splits = std::min<int64_t>({splits, pl.units, std::max<int64_t>(1, (int64_t{1} << 26) / (c_out * p.K))});
  splits = std::max<int64_t>(splits, 1);
  pl.per_split = ceil_div(pl.units, splits);
  pl.splits = static_cast<int>(ceil_div(pl.units, pl.per_split));
  return pl;
}

// KG: the plan's taps per block, a template parameter so that the loops hold only the taps
// there are (as in wgrad_generic.cu); the last group of a long kernel may hold fewer (nt).
template <typename T, int KG>
__global__ void __launch_bounds__(kThreads, 3) wgrad_depthwise_kernel(WgradParams p, Plan pl) {
  __shared__ float warp_sums[kWarps][KG];
  ptx::griddep_launch_dependents();  // the split reduction after it may start (dependent_launch.cuh)

  // Output channel fastest: the cout_g blocks that read one x row run side by side.
  const int64_t c_out = static_cast<int64_t>(p.groups) * p.cout_g;
  int64_t item = blockIdx.x;
  const int64_t o = item % c_out;
  item /= c_out;
  const int tg = static_cast<int>(item % pl.n_tg);
  const int split = static_cast<int>(item / pl.n_tg);
  const int k0 = tg * KG, nt = min(KG, p.K - k0);
  const int64_t c = o / p.cout_g;  // the group's input channel
  const bool tf32 = p.precision == Precision::kTF32;

  float acc[KG];
#pragma unroll
  for (int k = 0; k < KG; ++k) acc[k] = 0.f;

  const int64_t u_end = std::min<int64_t>(pl.units, (split + 1) * pl.per_split);
  const int64_t tap0 = static_cast<int64_t>(k0) * p.dilation + p.shift;  // first tap's offset
  const int64_t span = static_cast<int64_t>(nt - 1) * p.dilation;        // first to last tap
  for (int64_t u = split * pl.per_split; u < u_end; ++u) {
    const int64_t b = u / pl.n_chunks, c0 = (u % pl.n_chunks) * kChunk;
    const T* dy = static_cast<const T*>(p.dy) + (b * c_out + o) * p.L + c0;
    const T* x = static_cast<const T*>(p.x) + (b * p.groups + c) * p.L;
    // Every load of the unit goes out before the first multiply: one latency per unit.
    float dv[kPer], xv[kPer][KG];
    // Inside the sequence for every step and tap (all but a sequence's first and last
    // chunks): no bounds to check, 32-bit offsets from the chunk's pointers.  On an H100 (NOTES
    // v34 and v35 measured) it took long sequences' dw 15-29% down, and cost the 2-tap kernel
    // half its occupancy in registers (+19%).
    if (c0 + kChunk <= p.L && c0 + tap0 >= 0 && c0 + kChunk + tap0 + span <= p.L && span < (int64_t{1} << 30)) {
      const T* xs = x + c0 + tap0;
#pragma unroll
      for (int j = 0; j < kPer; ++j) {
        const int t = threadIdx.x + j * kThreads;
        dv[j] = operand(to_float(dy[t]), tf32);
#pragma unroll
        for (int k = 0; k < KG; ++k) xv[j][k] = k < nt ? operand(to_float(xs[t + k * p.dilation]), tf32) : 0.f;
      }
    } else {
#pragma unroll
      for (int j = 0; j < kPer; ++j) {
        const int64_t t = c0 + threadIdx.x + j * kThreads;
        const bool in = t < p.L;
        dv[j] = in ? operand(to_float(dy[t - c0]), tf32) : 0.f;
#pragma unroll
        for (int k = 0; k < KG; ++k) {
          const int64_t s = t + tap0 + static_cast<int64_t>(k) * p.dilation;
          xv[j][k] = in && k < nt && s >= 0 && s < p.L ? operand(to_float(x[s]), tf32) : 0.f;
        }
      }
    }
#pragma unroll
    for (int j = 0; j < kPer; ++j)
#pragma unroll
      for (int k = 0; k < KG; ++k) acc[k] = fmaf(dv[j], xv[j][k], acc[k]);
  }

  const int warp = threadIdx.x / 32, lane = threadIdx.x % 32;
#pragma unroll
  for (int k = 0; k < KG; ++k) {
    float v = acc[k];
#pragma unroll
    for (int off = 16; off > 0; off /= 2) v += __shfl_down_sync(0xffffffffu, v, off);
    if (lane == 0) warp_sums[warp][k] = v;
  }
  __syncthreads();
  if (threadIdx.x < nt) {
    const int k = threadIdx.x;
    float s = 0.f;
#pragma unroll
    for (int w = 0; w < kWarps; ++w) s += warp_sums[w][k];
    p.ws[(static_cast<int64_t>(split) * c_out + o) * p.K + k0 + k] = s;
  }
}

template <typename T, int KG>
void launch_taps(const WgradParams& p, const Plan& pl, cudaStream_t stream) {
  const int64_t blocks = static_cast<int64_t>(p.groups) * p.cout_g * pl.n_tg * pl.splits;
  CAUSALCONV_CHECK(blocks <= INT32_MAX, "causalconv: depthwise weight-gradient problem too large for one launch");
  wgrad_depthwise_kernel<T, KG><<<static_cast<unsigned>(blocks), kThreads, 0, stream>>>(p, pl);
  CAUSALCONV_CHECK_LAUNCH("conv_wgrad_depthwise");
}

}  // namespace

int wgrad_depthwise_splits(const WgradParams& p, int sm_count) { return make_plan(p, sm_count).splits; }

void launch_wgrad_depthwise(const WgradParams& p, at::ScalarType dtype, int sm_count, cudaStream_t stream) {
  CAUSALCONV_CHECK(p.cin_g == 1, "causalconv: the depthwise weight gradient needs one input channel per group, got ",
                   p.cin_g);
  const Plan pl = make_plan(p, sm_count);
  CAUSALCONV_CHECK(p.splits == pl.splits, "causalconv: workspace sized for ", p.splits, " splits, plan needs ", pl.splits);
  CAUSALCONV_CHECK(!p.tap_major, "causalconv: the depthwise weight gradient writes dw's own layout");
  static_assert(kMaxTaps == 8, "with_tap_group maps 1 to 8 taps");
  with_element_type(dtype, "the depthwise weight gradient", [&](auto elem) {
    using T = decltype(elem);
    with_tap_group(pl.kg, "the depthwise weight gradient",
                   [&](auto taps) { launch_taps<T, decltype(taps)::value>(p, pl, stream); });
  });
}

}  // namespace causalconv
