// Weight gradient on CUDA cores, for every configuration:
//   dw[o, i, k] = sum_{b, t} dy[b, o, t] * x[b, g*cin_g + i, t + k*dilation + shift].
//
// The reduction over (b, t) is split into contiguous ranges of (batch, 64-step chunk)
// units; each block sums one range for a 32 x 32 tile of (o, i) and a group of taps into
// its own slice of a float32 workspace, and split_reduce.cu adds the slices in a fixed
// order, so the result is bitwise reproducible (no atomics).
#include <ATen/ATen.h>

#include <algorithm>

#include "common.cuh"
#include "launchers.h"
#include "ptx.cuh"

namespace causalconv {
namespace {

constexpr int kThreads = 256;
constexpr int kOB = 32;  // output channels per tile: warp w owns 4w .. 4w+3
constexpr int kCB = 32;  // input channels per tile: lane l owns channel l
constexpr int kTC = 64;  // time steps per unit
constexpr int kDyRow = kOB + 4;  // dy staged time-major, padded: a warp's 4 channels are one 16-byte load
constexpr int kMaxTaps = 8;
constexpr int kMaxSpan = 192;
constexpr int kBatch = 8;  // global loads each thread issues before storing any (latency, not bandwidth, bound)

struct Plan {
  int kg, n_tg;      // taps per group, tap groups
  int n_ot, n_ct;    // tiles over output and input channels (per conv group)
  int xrow;          // floats per staged x row (odd: lanes read different rows)
  int64_t n_tiles;
  int64_t units, per_split;
  int splits;
};

Plan make_plan(const WgradParams& p, int sm_count) {
  Plan pl{};
  pl.kg = std::max(1, std::min({p.K, kMaxTaps, 1 + kMaxSpan / p.dilation}));
  pl.n_tg = static_cast<int>(ceil_div(p.K, pl.kg));
  pl.n_ot = static_cast<int>(ceil_div(p.cout_g, kOB));
  pl.n_ct = static_cast<int>(ceil_div(p.cin_g, kCB));
  pl.xrow = (kTC + (pl.kg - 1) * p.dilation) | 1;
  pl.n_tiles = static_cast<int64_t>(p.groups) * pl.n_ot * pl.n_ct * pl.n_tg;
  pl.units = p.B * ceil_div(p.L, kTC);
  const int64_t n_out = static_cast<int64_t>(p.groups) * p.cout_g * p.cin_g * p.K;
  int64_t splits = std::max<int64_t>(1, ceil_div(4LL * sm_count, pl.n_tiles));
  splits = std::min<int64_t>({splits, pl.units, std::max<int64_t>(1, (int64_t{1} << 26) / n_out)});
  pl.per_split = ceil_div(pl.units, splits);
  pl.splits = static_cast<int>(ceil_div(pl.units, pl.per_split));
  return pl;
}

// KG: the plan's taps per group, a template parameter so that the inner loop issues only the
// taps there are (a runtime bound under `#pragma unroll` leaves all kMaxTaps loads and FMAs
// in the loop, predicated off: on 3x96->160 K=5 the kernel took 90 us for 0.46 GFLOP, v19b
// on an H100).  The last group of a long kernel may hold fewer taps (nt < KG).
template <typename T, int KG>
__global__ void __launch_bounds__(kThreads) wgrad_kernel(WgradParams p, Plan pl) {
  __shared__ __align__(16) float dys[kTC][kDyRow];
  extern __shared__ float xs[];  // [kCB][xrow]
  ptx::griddep_launch_dependents();  // the split reduction after it may start (dependent_launch.cuh)

  int64_t bid = blockIdx.x;
  int64_t tile = bid % pl.n_tiles;
  const int split = static_cast<int>(bid / pl.n_tiles);
  const int ot = static_cast<int>(tile % pl.n_ot);
  tile /= pl.n_ot;
  const int ct = static_cast<int>(tile % pl.n_ct);
  tile /= pl.n_ct;
  const int tg = static_cast<int>(tile % pl.n_tg);
  const int g = static_cast<int>(tile / pl.n_tg);
  const int k0 = tg * KG, nt = min(KG, p.K - k0);

  const int warp = threadIdx.x / 32, lane = threadIdx.x % 32;
  const bool tf32 = p.precision == Precision::kTF32;
  const int64_t C_out = static_cast<int64_t>(p.groups) * p.cout_g, C_in = static_cast<int64_t>(p.groups) * p.cin_g;
  const int64_t n_tc = ceil_div(p.L, kTC);
  const int width = kTC + (nt - 1) * p.dilation;

  float acc[4][KG];
#pragma unroll
  for (int i = 0; i < 4; ++i)
#pragma unroll
    for (int k = 0; k < KG; ++k) acc[i][k] = 0.f;

  const int64_t u_end = std::min<int64_t>(pl.units, (split + 1) * pl.per_split);
  for (int64_t u = split * pl.per_split; u < u_end; ++u) {
    const int64_t b = u / n_tc, t0 = (u % n_tc) * kTC;
    const T* dy = static_cast<const T*>(p.dy) + (b * C_out + static_cast<int64_t>(g) * p.cout_g + ot * kOB) * p.L;
    const T* x = static_cast<const T*>(p.x) + (b * C_in + static_cast<int64_t>(g) * p.cin_g + ct * kCB) * p.L;
    // All of a thread's loads of a batch go out before its first store, so one global
    // latency is paid per batch rather than per element.
    float v[kBatch];
    static_assert(kOB * kTC == kBatch * kThreads, "dy tile is one batch");
#pragma unroll
    for (int r = 0; r < kBatch; ++r) {
      const int idx = threadIdx.x + r * kThreads, o = idx / kTC, tt = idx % kTC;
      const int64_t t = t0 + tt;
      v[r] = ot * kOB + o < p.cout_g && t < p.L ? operand(to_float(dy[o * p.L + t]), tf32) : 0.f;
    }
    __syncthreads();  // the previous unit's reads of dys and xs are done
#pragma unroll
    for (int r = 0; r < kBatch; ++r) {
      const int idx = threadIdx.x + r * kThreads;
      dys[idx % kTC][idx / kTC] = v[r];
    }
    const int64_t xs0 = t0 + static_cast<int64_t>(k0) * p.dilation + p.shift;
    for (int base = 0; base < kCB * width; base += kBatch * kThreads) {
#pragma unroll
      for (int r = 0; r < kBatch; ++r) {
        const int idx = base + threadIdx.x + r * kThreads, ci = idx / width, j = idx - ci * width;
        const int64_t t = xs0 + j;
        const bool ok = idx < kCB * width && ct * kCB + ci < p.cin_g && t >= 0 && t < p.L;
        v[r] = ok ? operand(to_float(x[ci * p.L + t]), tf32) : 0.f;
      }
#pragma unroll
      for (int r = 0; r < kBatch; ++r) {
        const int idx = base + threadIdx.x + r * kThreads, ci = idx / width, j = idx - ci * width;
        if (idx < kCB * width) xs[ci * pl.xrow + j] = v[r];
      }
    }
    __syncthreads();
    const float* xr = xs + lane * pl.xrow;
    for (int tt = 0; tt < kTC; ++tt) {
      const float4 d4 = *reinterpret_cast<const float4*>(&dys[tt][warp * 4]);
      const float dv[4] = {d4.x, d4.y, d4.z, d4.w};
#pragma unroll
      for (int k = 0; k < KG; ++k) {
        if (k < nt) {
          const float xv = xr[tt + k * p.dilation];
#pragma unroll
          for (int i = 0; i < 4; ++i) acc[i][k] = fmaf(dv[i], xv, acc[i][k]);
        }
      }
    }
  }

  const int c = ct * kCB + lane;
  if (c >= p.cin_g) return;
#pragma unroll
  for (int i = 0; i < 4; ++i) {
    const int o = ot * kOB + warp * 4 + i;
    if (o >= p.cout_g) continue;
    float* out = p.ws + ((static_cast<int64_t>(split) * C_out + static_cast<int64_t>(g) * p.cout_g + o) * p.cin_g + c) * p.K;
#pragma unroll
    for (int k = 0; k < KG; ++k)
      if (k < nt) out[k0 + k] = acc[i][k];
  }
}

template <typename T, int KG>
void launch_taps(const WgradParams& p, const Plan& pl, cudaStream_t stream) {
  const int64_t blocks = pl.n_tiles * pl.splits;
  CAUSALCONV_CHECK(blocks <= INT32_MAX, "causalconv: weight-gradient problem too large for one launch");
  const size_t smem = sizeof(float) * kCB * pl.xrow;
  wgrad_kernel<T, KG><<<static_cast<unsigned>(blocks), kThreads, smem, stream>>>(p, pl);
  CAUSALCONV_CHECK_LAUNCH("conv_wgrad_generic");
}

}  // namespace

int wgrad_generic_splits(const WgradParams& p, int sm_count) { return make_plan(p, sm_count).splits; }

void launch_wgrad_generic(const WgradParams& p, at::ScalarType dtype, int sm_count, cudaStream_t stream) {
  const Plan pl = make_plan(p, sm_count);
  CAUSALCONV_CHECK(p.splits == pl.splits, "causalconv: workspace sized for ", p.splits, " splits, plan needs ", pl.splits);
  static_assert(kMaxTaps == 8, "with_tap_group maps 1 to 8 taps");
  with_type_and_taps(dtype, pl.kg, "the CUDA-core weight gradient", [&](auto elem, auto taps) {
    launch_taps<decltype(elem), decltype(taps)::value>(p, pl, stream);
  });
}

}  // namespace causalconv
