// Weight gradient of a depthwise convolution (one input channel per group, any channel
// multiplier), on CUDA cores:
//   dw[o, 0, k] = sum_{b, t} dy[b, o, t] * x[b, o / cout_g, t + k*dilation + shift].
//
// Why its own kernels: wgrad_generic.cu tiles 32 output x 32 input channels per block, so with
// one input channel per group 31 of every 32 lanes, and all but cout_g of its 32 output rows,
// multiply padding (a depthwise layer with cout_g = 1 kept 1 of 256 threads busy).  Here a
// block reduces one output channel over a range of (batch, chunk) units for up to kMaxTaps
// taps, keeps one fp32 sum per tap and thread, and adds the threads' sums in a fixed order (a
// shuffle tree per warp, then the warps in order) into its split's slice of the workspace;
// split_reduce.cu adds the slices in order, so dw is bitwise reproducible without atomics.
//
// Three kernels, one plan:
// - staged (rows of x and dy 16-byte aligned, the taps' span short enough for a shared-memory
//   window): each unit's dy chunk and the x window under its taps go to shared memory by
//   16-byte cp.async with zero fill outside the sequence, two units in flight per block, and
//   the sums read both from there.  The direct kernel below reads 2 bytes a lane in 16-bit
//   and was bound by the latency of too few bytes in flight (an 8x1536 K4 L2048 bf16 layer
//   in 155 us on an H100 against a 24 us floor at 4.2 TB/s; NOTES v34 and v35 measured).
// - direct (anything else: views off a 16-byte boundary, lengths not a multiple of 16 bytes,
//   wide dilations): each thread loads dy and the taps' x values at its own steps.
// - registers (opt-in, CAUSALCONV_DEPTHWISE_REGISTERS=1, until it has run on a GPU; dilation
//   1, up to 8 taps, the staged kernel's alignment): a unit is one 16-byte chunk of dy per
//   thread and the x window under its taps, the thread's own x chunk and the ones before it
//   from the lanes below (chunks.cuh), two units' loads in flight before the first multiply;
//   no shared memory and no barrier but the final reduction's; ~7 instructions per step at
//   K = 4 where the staged kernel's 1 + K scalar shared loads per step come to ~14.
#include <ATen/ATen.h>

#include <algorithm>

#include "chunks.cuh"
#include "common.cuh"
#include "launchers.h"
#include "ptx.cuh"

namespace causalconv {
namespace {

constexpr int kThreads = 256, kWarps = kThreads / 32;
constexpr int kMaxTaps = 8;                 // taps per block (accumulators per thread)
constexpr int kMaxProducts = 256;           // a thread's sum runs over at most this many products

// Direct kernel: 4 steps per thread and unit, kThreads apart.
constexpr int kPer = 4;
constexpr int kChunk = kThreads * kPer;
// Staged kernel: 8 steps per thread and unit, two units in flight per block.
constexpr int kStagedPer = 8;
constexpr int kStagedChunk = kThreads * kStagedPer;
constexpr int kStages = 2;
// Dynamic shared memory without the opt-in attribute: fp32 windows up to ~2000 steps of tap
// span, 16-bit ones up to ~8000.
constexpr size_t kStagedMaxBytes = 48 * 1024;

struct Plan {
  int kg, n_tg;         // taps per block, tap groups
  bool registers;       // the register kernel (one tap group)
  int chunk;            // steps per unit
  int64_t n_chunks;     // chunks per sequence
  int64_t units, per_split;
  int splits;
  int x_elems;          // staged: elements of a stage's x window (0 for the direct kernel)
};

template <typename T>
constexpr int kVec = 16 / static_cast<int>(sizeof(T));  // elements per 16-byte copy

// Rows of x and dy read 16 bytes at a time: both start on a 16-byte boundary (rows are
// contiguous) and L is a multiple of 16 bytes' worth of elements.
bool rows_aligned(const WgradParams& p, at::ScalarType dtype) {
  const int vec = 16 / static_cast<int>(c10::elementSize(dtype));
  return reinterpret_cast<uintptr_t>(p.x) % 16 == 0 && reinterpret_cast<uintptr_t>(p.dy) % 16 == 0 && p.L % vec == 0;
}

// The register kernel: aligned rows, the causal window at dilation 1 (the tap span within the
// chunks beside a thread's own), taps in one group.
bool registers_fit(const WgradParams& p, at::ScalarType dtype) {
  return rows_aligned(p, dtype) && p.K <= kMaxTaps && (p.K == 1 || p.dilation == 1) &&
         p.shift == -(p.K - 1) * p.dilation && chunks::enabled();  // the environment read last
}

// The staged kernel's x window per stage: the chunk, the taps' span and up to a copy's worth of
// misalignment in front, in whole copies; 0 where the staged kernel cannot run.
int staged_x_elems(const WgradParams& p, int kg, at::ScalarType dtype) {
  const int e = static_cast<int>(c10::elementSize(dtype)), vec = 16 / e;
  const bool aligned = rows_aligned(p, dtype);
  const int64_t span = static_cast<int64_t>(kg - 1) * p.dilation;
  const int64_t x_elems = ceil_div(vec - 1 + kStagedChunk + span, vec) * vec;
  const int64_t bytes = static_cast<int64_t>(kStages) * (kStagedChunk + x_elems) * e;
  return aligned && bytes <= static_cast<int64_t>(kStagedMaxBytes) ? static_cast<int>(x_elems) : 0;
}

Plan make_plan(const WgradParams& p, at::ScalarType dtype, int sm_count) {
  Plan pl{};
  pl.kg = std::min(p.K, kMaxTaps);
  pl.n_tg = static_cast<int>(ceil_div(p.K, pl.kg));
  pl.registers = registers_fit(p, dtype);
  pl.x_elems = pl.registers ? 0 : staged_x_elems(p, pl.kg, dtype);
  pl.chunk = pl.registers ? kThreads * (16 / static_cast<int>(c10::elementSize(dtype)))
             : pl.x_elems > 0 ? kStagedChunk
                              : kChunk;
  pl.n_chunks = ceil_div(p.L, pl.chunk);
  pl.units = p.B * pl.n_chunks;
  const int64_t c_out = static_cast<int64_t>(p.groups) * p.cout_g;
  const int64_t items = c_out * pl.n_tg;
  const int64_t max_units = kMaxProducts / (pl.chunk / kThreads);
  // Enough blocks for ~32 per multiprocessor (several waves of those resident, short tails), and
  // short enough runs per thread for fp32 sums; the workspace stays below 2^26 floats.
  int64_t splits = std::max<int64_t>(ceil_div(32LL * sm_count, items), ceil_div(pl.units, max_units));
  splits = std::min<int64_t>({splits, pl.units, std::max<int64_t>(1, (int64_t{1} << 26) / (c_out * p.K))});
  splits = std::max<int64_t>(splits, 1);
  pl.per_split = ceil_div(pl.units, splits);
  pl.splits = static_cast<int>(ceil_div(pl.units, pl.per_split));
  return pl;
}

// Which output channel, tap group and split a block owns.  Output channel fastest: the cout_g
// blocks that read one x row run side by side.
struct BlockItem {
  int64_t o, c;   // output channel, its group's input channel
  int k0, nt;     // first tap, taps in this group
  int split;
};

__device__ __forceinline__ BlockItem block_item(const WgradParams& p, const Plan& pl, int kg) {
  const int64_t c_out = static_cast<int64_t>(p.groups) * p.cout_g;
  int64_t item = blockIdx.x;
  BlockItem it;
  it.o = item % c_out;
  item /= c_out;
  const int tg = static_cast<int>(item % pl.n_tg);
  it.split = static_cast<int>(item / pl.n_tg);
  it.k0 = tg * kg;
  it.nt = min(kg, p.K - it.k0);
  it.c = it.o / p.cout_g;
  return it;
}

// The block's per-tap sums, added in a fixed order (a shuffle tree per warp, then the warps in
// order), into its split's slice of the workspace.
template <int KG>
__device__ __forceinline__ void store_block_sums(const WgradParams& p, const BlockItem& it, const float (&acc)[KG]) {
  __shared__ float warp_sums[kWarps][KG];
  const int warp = threadIdx.x / 32, lane = threadIdx.x % 32;
#pragma unroll
  for (int k = 0; k < KG; ++k) {
    float v = acc[k];
#pragma unroll
    for (int off = 16; off > 0; off /= 2) v += __shfl_down_sync(0xffffffffu, v, off);
    if (lane == 0) warp_sums[warp][k] = v;
  }
  __syncthreads();
  if (threadIdx.x < it.nt) {
    const int k = threadIdx.x;
    float s = 0.f;
#pragma unroll
    for (int w = 0; w < kWarps; ++w) s += warp_sums[w][k];
    const int64_t c_out = static_cast<int64_t>(p.groups) * p.cout_g;
    p.ws[(static_cast<int64_t>(it.split) * c_out + it.o) * p.K + it.k0 + k] = s;
  }
}

// KG: the plan's taps per block, a template parameter so that the loops hold only the taps
// there are (as in wgrad_generic.cu); the last group of a long kernel may hold fewer (nt).
template <typename T, int KG>
__global__ void __launch_bounds__(kThreads, 3) wgrad_depthwise_kernel(WgradParams p, Plan pl) {
  ptx::griddep_launch_dependents();  // the split reduction after it may start (dependent_launch.cuh)
  const BlockItem it = block_item(p, pl, KG);
  const int64_t c_out = static_cast<int64_t>(p.groups) * p.cout_g;
  const int nt = it.nt;
  const bool tf32 = p.precision == Precision::kTF32;

  float acc[KG];
#pragma unroll
  for (int k = 0; k < KG; ++k) acc[k] = 0.f;

  const int64_t u_end = std::min<int64_t>(pl.units, (it.split + 1) * pl.per_split);
  const int64_t tap0 = static_cast<int64_t>(it.k0) * p.dilation + p.shift;  // first tap's offset
  const int64_t span = static_cast<int64_t>(nt - 1) * p.dilation;           // first to last tap
  for (int64_t u = it.split * pl.per_split; u < u_end; ++u) {
    const int64_t b = u / pl.n_chunks, c0 = (u % pl.n_chunks) * kChunk;
    const T* dy = static_cast<const T*>(p.dy) + (b * c_out + it.o) * p.L + c0;
    const T* x = static_cast<const T*>(p.x) + (b * p.groups + it.c) * p.L;
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
  store_block_sums<KG>(p, it, acc);
}

// Shared memory per stage: dy's chunk (kStagedChunk elements), then the x window (pl.x_elems),
// which starts `lead` elements before the first tap's first step so that every copy is aligned.
template <typename T, int KG>
__global__ void __launch_bounds__(kThreads, 4) wgrad_depthwise_staged_kernel(WgradParams p, Plan pl) {
  extern __shared__ __align__(16) unsigned char smem_raw[];
  T* const smem = reinterpret_cast<T*>(smem_raw);
  ptx::griddep_launch_dependents();  // the split reduction after it may start (dependent_launch.cuh)
  constexpr int V = kVec<T>;
  const BlockItem it = block_item(p, pl, KG);
  const int64_t c_out = static_cast<int64_t>(p.groups) * p.cout_g;
  const int nt = it.nt, dil = p.dilation;
  const bool tf32 = p.precision == Precision::kTF32;
  const int64_t tap0 = static_cast<int64_t>(it.k0) * dil + p.shift;  // first tap's offset
  const int lead = static_cast<int>(tap0 - floor_div(tap0, V) * V);
  const int x_vecs = static_cast<int>(ceil_div(lead + kStagedChunk + static_cast<int64_t>(nt - 1) * dil, V));
  const int stage_elems = kStagedChunk + pl.x_elems;

  // Zero fill outside [0, L): L is a multiple of V and every copy starts on a multiple of V,
  // so a copy lies wholly inside or wholly outside the sequence.
  auto issue = [&](int64_t u, int slot) {
    const int64_t b = u / pl.n_chunks, c0 = (u % pl.n_chunks) * kStagedChunk;
    const T* dy = static_cast<const T*>(p.dy) + (b * c_out + it.o) * p.L;
    const T* x = static_cast<const T*>(p.x) + (b * p.groups + it.c) * p.L;
    const uint32_t dst = ptx::smem_addr(smem + slot * stage_elems);
    for (int i = threadIdx.x; i < kStagedChunk / V; i += kThreads) {
      const int64_t t = c0 + static_cast<int64_t>(i) * V;
      const bool in = t < p.L;
      ptx::cp_async_16(dst + i * 16, in ? dy + t : dy, in ? 16 : 0);
    }
    const int64_t a0 = c0 + tap0 - lead;
    for (int i = threadIdx.x; i < x_vecs; i += kThreads) {
      const int64_t s = a0 + static_cast<int64_t>(i) * V;
      const bool in = s >= 0 && s < p.L;
      ptx::cp_async_16(dst + (kStagedChunk + i * V) * static_cast<uint32_t>(sizeof(T)), in ? x + s : x, in ? 16 : 0);
    }
  };

  float acc[KG];
#pragma unroll
  for (int k = 0; k < KG; ++k) acc[k] = 0.f;

  const int64_t u0 = static_cast<int64_t>(it.split) * pl.per_split;
  const int n = static_cast<int>(std::min<int64_t>(pl.units, u0 + pl.per_split) - u0);
#pragma unroll
  for (int i = 0; i < kStages; ++i) {
    if (i < n) issue(u0 + i, i);
    ptx::cp_async_commit();  // empty groups keep the wait count below uniform
  }
  for (int i = 0; i < n; ++i) {
    ptx::cp_async_wait<kStages - 1>();
    __syncthreads();
    const T* dys = smem + (i % kStages) * stage_elems;
    const T* xs = dys + kStagedChunk + lead;
    // Steps past the sequence's end are skipped, not multiplied by zero: x there is real data
    // (a tap reaches back), and 0 * inf would make a NaN the exact gradient does not have.
    const int64_t c0 = ((u0 + i) % pl.n_chunks) * kStagedChunk;
    const int valid = static_cast<int>(std::min<int64_t>(kStagedChunk, p.L - c0));
#pragma unroll
    for (int j = 0; j < kStagedPer; ++j) {
      const int t = threadIdx.x + j * kThreads;
      if (t < valid) {
        const float dv = operand(to_float(dys[t]), tf32);
#pragma unroll
        for (int k = 0; k < KG; ++k)
          if (k < nt) acc[k] = fmaf(dv, operand(to_float(xs[t + k * dil]), tf32), acc[k]);
      }
    }
    __syncthreads();  // the slot is free for the unit kStages ahead
    if (i + kStages < n) issue(u0 + i + kStages, i % kStages);
    ptx::cp_async_commit();
  }
  store_block_sums<KG>(p, it, acc);
}

// A unit is one 16-byte chunk of dy per thread (pl.chunk = kThreads * V steps) and the x
// window under the taps; kInFlight units' loads go out before the first of them is used.
// KG is K here (one tap group).
template <typename T, int KG>
__global__ void __launch_bounds__(kThreads, 4) wgrad_depthwise_registers_kernel(WgradParams p, Plan pl) {
  ptx::griddep_launch_dependents();  // the split reduction after it may start (dependent_launch.cuh)
  using W = chunks::Window<T, KG>;
  constexpr int kInFlight = 2;
  const BlockItem it = block_item(p, pl, KG);
  const int64_t c_out = static_cast<int64_t>(p.groups) * p.cout_g;
  const bool tf32 = p.precision == Precision::kTF32;
  const int lane = threadIdx.x & 31;
  const int64_t n_vec = p.L / W::V;  // 16-byte chunks per row

  float acc[KG];
#pragma unroll
  for (int k = 0; k < KG; ++k) acc[k] = 0.f;

  const int64_t u_end = std::min<int64_t>(pl.units, (it.split + 1) * pl.per_split);
  for (int64_t u0 = it.split * pl.per_split; u0 < u_end; u0 += kInFlight) {
    uint4 dv[kInFlight], xv[kInFlight], edge[kInFlight][W::kEdges];
    int64_t c[kInFlight];
#pragma unroll
    for (int i = 0; i < kInFlight; ++i) {
      // A unit past the split's end (uniform over the block) adds nothing: its chunk is past
      // the row, and the row is batch 0's, whose chunks before it the edge lanes may read.
      const int64_t u = u0 + i;
      const bool real = u < u_end;
      const int64_t b = real ? u / pl.n_chunks : 0;
      c[i] = real ? (u % pl.n_chunks) * kThreads + threadIdx.x : n_vec;
      const T* dy = static_cast<const T*>(p.dy) + (b * c_out + it.o) * p.L;
      const T* x = static_cast<const T*>(p.x) + (b * p.groups + it.c) * p.L;
      dv[i] = chunks::load(dy, c[i], n_vec);
      xv[i] = chunks::load(x, c[i], n_vec);
      W::template load_edges<false>(edge[i], x, c[i], n_vec, lane);
    }
#pragma unroll
    for (int i = 0; i < kInFlight; ++i) {
      float win[W::kElems], d[W::V];
      W::template fill<false>(win, xv[i], edge[i], lane, tf32);  // every lane takes part
      // Steps past the sequence are skipped, not multiplied: x under their taps may be real
      // data, and 0 * inf would make a NaN the exact gradient does not have.
      if (c[i] >= n_vec) continue;
      chunks::unpack<T>(dv[i], d, tf32);
#pragma unroll
      for (int j = 0; j < W::V; ++j)
#pragma unroll
        for (int k = 0; k < KG; ++k) acc[k] = fmaf(d[j], win[W::template at<false>(j, k)], acc[k]);
    }
  }
  store_block_sums<KG>(p, it, acc);
}

template <typename T, int KG>
void launch_taps(const WgradParams& p, const Plan& pl, cudaStream_t stream) {
  const int64_t blocks = static_cast<int64_t>(p.groups) * p.cout_g * pl.n_tg * pl.splits;
  CAUSALCONV_CHECK(blocks <= INT32_MAX, "causalconv: depthwise weight-gradient problem too large for one launch");
  if (pl.registers) {
    wgrad_depthwise_registers_kernel<T, KG><<<static_cast<unsigned>(blocks), kThreads, 0, stream>>>(p, pl);
    CAUSALCONV_CHECK_LAUNCH("conv_wgrad_depthwise_registers");
  } else if (pl.x_elems > 0) {
    const size_t smem = static_cast<size_t>(kStages) * (kStagedChunk + pl.x_elems) * sizeof(T);
    wgrad_depthwise_staged_kernel<T, KG><<<static_cast<unsigned>(blocks), kThreads, smem, stream>>>(p, pl);
    CAUSALCONV_CHECK_LAUNCH("conv_wgrad_depthwise_staged");
  } else {
    wgrad_depthwise_kernel<T, KG><<<static_cast<unsigned>(blocks), kThreads, 0, stream>>>(p, pl);
    CAUSALCONV_CHECK_LAUNCH("conv_wgrad_depthwise");
  }
}

}  // namespace

int wgrad_depthwise_splits(const WgradParams& p, at::ScalarType dtype, int sm_count) {
  return make_plan(p, dtype, sm_count).splits;
}

void launch_wgrad_depthwise(const WgradParams& p, at::ScalarType dtype, int sm_count, cudaStream_t stream) {
  CAUSALCONV_CHECK(p.cin_g == 1, "causalconv: the depthwise weight gradient needs one input channel per group, got ",
                   p.cin_g);
  const Plan pl = make_plan(p, dtype, sm_count);
  CAUSALCONV_CHECK(p.splits == pl.splits, "causalconv: workspace sized for ", p.splits, " splits, plan needs ", pl.splits);
  CAUSALCONV_CHECK(!p.tap_major, "causalconv: the depthwise weight gradient writes dw's own layout");
  static_assert(kMaxTaps == 8, "with_tap_group maps 1 to 8 taps");
  with_type_and_taps(dtype, pl.kg, "the depthwise weight gradient", [&](auto elem, auto taps) {
    launch_taps<decltype(elem), decltype(taps)::value>(p, pl, stream);
  });
}

}  // namespace causalconv
