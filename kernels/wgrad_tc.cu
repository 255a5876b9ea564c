// Tensor-core weight gradient (sm_90a, wgmma):
//   dw_k[i, o] = sum_{b, t} x[b, i, t + k*dilation + shift] * dy[b, o, t]   for every tap k.
//
// A block owns 128 input channels x BNO output channels of one group, all taps (one fp32
// accumulator set per tap), and a contiguous range of (batch, time-chunk) units of the
// reduction.  Per unit, a pipeline stage holds the dy tile [BNO][CT] (CT = one 128-byte
// row; K-major with the 128-byte swizzle: the MMA's B operand) and the x tile over
// [t0 + shift, t0 + CT + (K-1)*dilation + shift) for the 128 channels; tap k reads x at
// column offset k*dilation into the A registers, so all taps share one x tile.  In TF32
// mode the dy tile is rounded in place (round-to-nearest-even) once it lands, since the
// tensor cores would otherwise truncate it.  Partial sums go to the split's workspace
// slice; wgrad_reduce.cu adds the slices in a fixed order.
#include <ATen/ATen.h>

#include <algorithm>

#include "launchers.h"
#include "tc_common.cuh"

namespace causalconv {
namespace tc {
namespace {

template <typename T, int KT, int BNO>
struct WgradTraits {
  static constexpr int kThreads = 256;
  static constexpr int kBMI = 128;  // input channels: warpgroup w owns 64w .. 64w+63
  static constexpr int kCT = kRowElems<T>;
  static constexpr int kV = kChunkElems<T>;
  static constexpr int kKStep = Elem<T>::kKStep;
  static constexpr int kKSteps = kCT / kKStep;
  static constexpr int kMaxStages = 6;  // pipeline depth, as many as shared memory holds
  static constexpr int kDyBytes = BNO * 128;
  static constexpr int kGroupTaps = 2;  // taps per commit group (two groups' A fragments are live)
  static_assert(KT % (2 * kGroupTaps) == 0, "tap capacity must be an even number of commit groups");
  static_assert(KT * BNO / 2 <= 128, "accumulators must fit the register file");
};

constexpr int kWgradMaxSpan = 64;  // largest (K-1)*dilation this kernel stages

struct WgradPlan {
  int stages;      // pipeline depth
  int n_it, n_ot;  // tiles over input / output channels (per group)
  int row;         // elements per staged x row
  int x_offset;    // bytes from a stage's start to its x tile
  int stage_bytes;
  int64_t n_tiles, units, per_split;
  int splits;
};

template <class Tr, typename T, int BNO>
__device__ __forceinline__ void load_unit(const WgradParams& p, const WgradPlan& pl, int g, int it, int ot,
                                          int64_t u, uint32_t sbase) {
  const uint32_t n_tc = static_cast<uint32_t>(ceil_div(p.L, Tr::kCT));  // units fit 32 bits (host check)
  const uint32_t uu = static_cast<uint32_t>(u);
  const int64_t b = uu / n_tc, t0 = static_cast<int64_t>(uu % n_tc) * Tr::kCT;
  const int64_t C_out = static_cast<int64_t>(p.groups) * p.cout_g, C_in = static_cast<int64_t>(p.groups) * p.cin_g;
  // dy tile: row o holds dy[b, o, t0 .. t0 + CT); chunk c goes to its swizzled slot
  const T* dy = static_cast<const T*>(p.dy) + (b * C_out + static_cast<int64_t>(g) * p.cout_g) * p.L;
  for (int i = threadIdx.x; i < BNO * 8; i += Tr::kThreads) {
    const int o = i >> 3, c = i & 7;
    const int og = ot * BNO + o;
    const int64_t t = t0 + c * Tr::kV;
    const bool ok = og < p.cout_g && t < p.L;
    const T* src = ok ? dy + static_cast<int64_t>(og) * p.L + t : dy;
    ptx::cp_async_16(sbase + o * 128 + swizzle_chunk(o, c) * 16, src, ok ? 16u : 0u);
  }
  // x tile: rows are input channels, columns the window starting at a 16-byte boundary;
  // rows spread over warps, chunks over lanes
  const T* x = static_cast<const T*>(p.x) + (b * C_in + static_cast<int64_t>(g) * p.cin_g) * p.L;
  const int64_t a0 = floor_div(t0 + p.shift, Tr::kV) * Tr::kV;
  const int nch = pl.row / Tr::kV;
  const int warp = threadIdx.x >> 5, lane = threadIdx.x & 31;
  for (int r = warp; r < Tr::kBMI; r += Tr::kThreads / 32) {
    const int ig = it * Tr::kBMI + r;
    const T* xrow = x + static_cast<int64_t>(ig) * p.L;
    const uint32_t drow = sbase + pl.x_offset + static_cast<uint32_t>(r * pl.row * sizeof(T));
    for (int ch = lane; ch < nch; ch += 32) {
      const int64_t t = a0 + static_cast<int64_t>(ch) * Tr::kV;
      const bool ok = ig < p.cin_g && t >= 0 && t < p.L;
      ptx::cp_async_16(drow + ch * 16, ok ? xrow + t : x, ok ? 16u : 0u);
    }
  }
}

// TF32 operands must be rounded, not truncated: each thread rounds the dy chunks it
// copied itself, after its own copies have landed.
template <class Tr, int BNO>
__device__ __forceinline__ void round_dy_tf32(uint8_t* tile) {
  for (int i = threadIdx.x; i < BNO * 8; i += Tr::kThreads) {
    const int o = i >> 3, c = i & 7;
    float4* v = reinterpret_cast<float4*>(tile + o * 128 + swizzle_chunk(o, c) * 16);
    float4 f = *v;
    f.x = round_tf32(f.x);
    f.y = round_tf32(f.y);
    f.z = round_tf32(f.z);
    f.w = round_tf32(f.w);
    *v = f;
  }
}

template <typename T, int KT, int BNO>
__global__ void __launch_bounds__(256, 1) wgrad_kernel(WgradParams p, WgradPlan pl) {
  using Tr = WgradTraits<T, KT, BNO>;
  extern __shared__ __align__(16) uint8_t smem_raw[];
#if CAUSALCONV_HAS_WGMMA
  using Mma = wgmma::Mma<typename Elem<T>::Wg, BNO>;
  const uint32_t raw = ptx::smem_addr(smem_raw);
  const uint32_t base = (raw + 1023u) & ~1023u;
  uint8_t* base_ptr = smem_raw + (base - raw);

  int64_t tile = blockIdx.x % pl.n_tiles;
  const int64_t split = blockIdx.x / pl.n_tiles;
  const int ot = static_cast<int>(tile % pl.n_ot);
  tile /= pl.n_ot;
  const int it = static_cast<int>(tile % pl.n_it);
  const int g = static_cast<int>(tile / pl.n_it);
  const int64_t u0 = split * pl.per_split;
  const int S = static_cast<int>(std::min<int64_t>(pl.units, u0 + pl.per_split) - u0);

  const int lane = threadIdx.x & 31, wg = threadIdx.x >> 7, q = (threadIdx.x >> 5) & 3;
  float acc[KT][BNO / 2];
#pragma unroll
  for (int k = 0; k < KT; ++k)
#pragma unroll
    for (int j = 0; j < BNO / 2; ++j) acc[k][j] = 0.f;

  // Pipeline: nst stage buffers, units loaded nst-1 ahead, one barrier per unit.  The MMAs
  // of a unit run in commit groups of kGroupTaps taps whose A fragments alternate between
  // two register sets, so loading one set overlaps the other set's MMAs; wgmma_wait<1>
  // before reusing a set retires the group that last read it.  Every unit ends with all
  // its MMAs retired (ptxas serializes the MMAs of a pipeline that spans the loop), so
  // the buffer of unit s-1 is free once every warp has passed the barrier of unit s.
  const int nst = pl.stages;
  const int ahead = nst - 1;
  for (int s = 0; s < ahead; ++s) {
    if (s < S) load_unit<Tr, T, BNO>(p, pl, g, it, ot, u0 + s, base + s * pl.stage_bytes);
    ptx::cp_async_commit();
  }
  const int64_t n_tc = ceil_div(p.L, Tr::kCT);
  const int groups = static_cast<int>(ceil_div(p.K, Tr::kGroupTaps));  // commit groups per unit
  AFrag<T, false> a[2][Tr::kGroupTaps][Tr::kKSteps];
  for (int s = 0; s < S; ++s) {
    const int buf = s % nst;
    ptx::cp_async_wait_dyn(ahead - 1);  // unit s has landed (one commit per unit)
    if constexpr (std::is_same_v<T, float>) {
      if (p.precision == Precision::kTF32) round_dy_tf32<Tr, BNO>(base_ptr + buf * pl.stage_bytes);
    }
    ptx::fence_proxy_async();
    __syncthreads();
    if (s + ahead < S) {
      load_unit<Tr, T, BNO>(p, pl, g, it, ot, u0 + s + ahead, base + ((s + ahead) % nst) * pl.stage_bytes);
    }
    ptx::cp_async_commit();

    const int64_t t0 = static_cast<int64_t>(static_cast<uint32_t>(u0 + s) % static_cast<uint32_t>(n_tc)) * Tr::kCT;
    const int64_t ws0 = t0 + p.shift;
    const int off = static_cast<int>(ws0 - floor_div(ws0, Tr::kV) * Tr::kV);
    const T* xs = reinterpret_cast<const T*>(base_ptr + buf * pl.stage_bytes + pl.x_offset) +
                  (wg * 64 + q * 16) * pl.row + off;
    const uint32_t dy_tile = base + buf * pl.stage_bytes;
#pragma unroll
    for (int j = 0; j < KT / Tr::kGroupTaps; ++j) {
      if (j < groups) {
        auto& set = a[j & 1];
        if (j >= 2) ptx::wgmma_wait<1>();  // group j-2, which read this set, has retired
#pragma unroll
        for (int kk = 0; kk < Tr::kGroupTaps; ++kk) {
          // taps past K (a partial last group) reread tap K-1's columns, inside the row;
          // their sums are never stored
          const int kx = min(j * Tr::kGroupTaps + kk, p.K - 1);
#pragma unroll
          for (int ks = 0; ks < Tr::kKSteps; ++ks)
            set[kk][ks].load(xs + kx * p.dilation + ks * Tr::kKStep, pl.row, 1, lane);
        }
        ptx::wgmma_fence();
#pragma unroll
        for (int kk = 0; kk < Tr::kGroupTaps; ++kk) {
#pragma unroll
          for (int ks = 0; ks < Tr::kKSteps; ++ks) {
            Mma::run(acc[j * Tr::kGroupTaps + kk], set[kk][ks].hi, ptx::desc_kmajor_sw128(dy_tile + ks * 32));
          }
        }
        ptx::wgmma_commit();
      }
    }
    ptx::wgmma_wait<0>();
  }

  // acc[k][j]: row (input channel) 16q + lane/4 (+8), column (output channel) per the
  // wgmma accumulator layout; taps >= K are not written.
  const int64_t C_out = static_cast<int64_t>(p.groups) * p.cout_g;
#pragma unroll
  for (int k = 0; k < KT; ++k) {
    if (k >= p.K) continue;
#pragma unroll
    for (int j = 0; j < BNO / 2; ++j) {
      const int i = it * Tr::kBMI + wg * 64 + q * 16 + (lane >> 2) + ((j & 2) ? 8 : 0);
      const int o = ot * BNO + (j >> 2) * 8 + 2 * (lane & 3) + (j & 1);
      if (i < p.cin_g && o < p.cout_g) {
        p.ws[((split * C_out + static_cast<int64_t>(g) * p.cout_g + o) * p.cin_g + i) * p.K + k] = acc[k][j];
      }
    }
  }
#else
  __trap();  // dispatch only picks wgmma for sm_90a binaries
#endif
}

template <typename T, int KT, int BNO>
WgradPlan make_plan(const WgradParams& p, int sm_count) {
  using Tr = WgradTraits<T, KT, BNO>;
  WgradPlan pl{};
  pl.n_it = static_cast<int>(ceil_div(p.cin_g, Tr::kBMI));
  pl.n_ot = static_cast<int>(ceil_div(p.cout_g, BNO));
  // Row: CT columns, the halo of K-1 taps, alignment slack; a multiple of the chunk
  // whose count of 4-byte words is 4 x odd, which puts the 8 rows of an A fragment in
  // distinct banks.
  int row = Tr::kCT + (p.K - 1) * p.dilation + Tr::kV - 1;
  row = static_cast<int>(ceil_div(row, Tr::kV) * Tr::kV);
  const int words = row * static_cast<int>(sizeof(T)) / 4;
  if ((words / 4) % 2 == 0) row += 16 / static_cast<int>(sizeof(T));
  pl.row = row;
  pl.x_offset = (Tr::kDyBytes + 1023) / 1024 * 1024;
  pl.stage_bytes = pl.x_offset + static_cast<int>((Tr::kBMI * row * sizeof(T) + 1023) / 1024 * 1024);
  pl.stages = std::min(Tr::kMaxStages, (max_smem_optin() - 1024) / pl.stage_bytes);
  pl.n_tiles = static_cast<int64_t>(p.groups) * pl.n_it * pl.n_ot;
  pl.units = p.B * ceil_div(p.L, Tr::kCT);
  const int64_t n_out = static_cast<int64_t>(p.groups) * p.cout_g * p.cin_g * p.K;
  // One block per multiprocessor fits (shared memory), so exactly one wave: a second,
  // nearly empty wave would double the time.
  int64_t splits = std::max<int64_t>(1, sm_count / pl.n_tiles);
  splits = std::min<int64_t>({splits, pl.units, std::max<int64_t>(1, (int64_t{1} << 26) / n_out)});
  pl.per_split = ceil_div(pl.units, splits);
  pl.splits = static_cast<int>(ceil_div(pl.units, pl.per_split));
  return pl;
}

template <typename T, int KT, int BNO>
void launch(const WgradParams& p, const WgradPlan& pl, cudaStream_t stream) {
  using Tr = WgradTraits<T, KT, BNO>;
  const size_t smem = static_cast<size_t>(pl.stages) * pl.stage_bytes + 1024;
  TORCH_CHECK(pl.stages >= 2 && smem <= static_cast<size_t>(max_smem_optin()),
              "causalconv: weight-gradient pipeline needs 2 stages of ", pl.stage_bytes, " bytes of shared memory");
  const int64_t blocks = pl.n_tiles * pl.splits;
  TORCH_CHECK(blocks <= INT32_MAX && pl.units <= INT32_MAX,
              "causalconv: weight-gradient problem too large for one launch");
  auto kernel = wgrad_kernel<T, KT, BNO>;
  allow_max_smem<WgradTraits<T, KT, BNO>>(kernel);  // one instantiation per traits type
  kernel<<<static_cast<unsigned>(blocks), Tr::kThreads, smem, stream>>>(p, pl);
  CAUSALCONV_CHECK_LAUNCH("conv_wgrad_tc");
}

// Tiles: up to 4 taps with 64 output channels, up to 8 taps with 32.
template <typename T, typename F>
auto with_tile(const WgradParams& p, F&& f) {
  if (p.K <= 4) return f(std::integral_constant<int, 4>{}, std::integral_constant<int, 64>{});
  return f(std::integral_constant<int, 8>{}, std::integral_constant<int, 32>{});
}

template <typename T>
int splits_typed(const WgradParams& p, int sm_count) {
  return with_tile<T>(p, [&](auto kt, auto bno) { return make_plan<T, kt.value, bno.value>(p, sm_count).splits; });
}

template <typename T>
void launch_typed(const WgradParams& p, int sm_count, cudaStream_t stream) {
  with_tile<T>(p, [&](auto kt, auto bno) {
    const WgradPlan pl = make_plan<T, kt.value, bno.value>(p, sm_count);
    TORCH_CHECK(p.splits == pl.splits, "causalconv: workspace sized for ", p.splits, " splits, plan needs ",
                pl.splits);
    launch<T, kt.value, bno.value>(p, pl, stream);
    return 0;
  });
}

}  // namespace
}  // namespace tc

bool wgrad_tc_supports(const WgradParams& p) {
  return p.K <= 8 && static_cast<int64_t>(p.K - 1) * p.dilation <= tc::kWgradMaxSpan &&
         p.precision != Precision::kTF32x3;
}

int wgrad_tc_splits(const WgradParams& p, at::ScalarType dtype, int sm_count) {
  switch (dtype) {
    case at::kFloat: return tc::splits_typed<float>(p, sm_count);
    case at::kHalf: return tc::splits_typed<__half>(p, sm_count);
    default: return tc::splits_typed<__nv_bfloat16>(p, sm_count);
  }
}

void launch_wgrad_tc(const WgradParams& p, at::ScalarType dtype, int sm_count, cudaStream_t stream) {
  TORCH_CHECK(wgrad_tc_supports(p), "causalconv: tensor-core weight gradient does not cover this configuration");
  switch (dtype) {
    case at::kFloat: return tc::launch_typed<float>(p, sm_count, stream);
    case at::kHalf: return tc::launch_typed<__half>(p, sm_count, stream);
    case at::kBFloat16: return tc::launch_typed<__nv_bfloat16>(p, sm_count, stream);
    default: TORCH_CHECK(false, "causalconv: weight gradient supports float32, float16, bfloat16; got ", dtype);
  }
}

}  // namespace causalconv
