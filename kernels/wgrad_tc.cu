// Tensor-core weight gradient (sm_90a: TMA, mbarriers, wgmma with both operands in shared
// memory):
//   dw[o, i, k] = sum_{b, t} dy[b, o, t] * x[b, i, t + k*dilation + shift]
// as a GEMM per block: M = 128 output channels (two consumer warpgroups of 64), N = a
// group of taps times a tile of input channels (n = tap * it_rows + channel), reduced over
// (batch, time) in chunks of one 128-byte row (32 fp32 or 64 16-bit steps).
//
// Both operands are K-major (time contiguous), as dy and x lie in memory.  dy arrives by
// TMA straight into the 128-byte-swizzled layout wgmma reads.  x cannot: each tap wants
// its tile at time t0 + shift + k*dilation, and a TMA copy must start on a 16-byte
// boundary.  So TMA brings one aligned raw window of x per stage, covering the tile's taps
// (coordinates left of 0 or past L arrive as zeros: the causal padding), and three
// "shifter" warps write each tap's tile from it at the tap's offset, rounding to TF32 on
// the way in fp32 mode (the tensor cores would truncate; dy is rounded in place).
//
// Warp roles: one thread of warpgroup 0 issues the copies for a ring of stages (`full`
// counts the bytes, `empty` the consumers' release); warps 1-3 of warpgroup 0 shift
// (`ready`); warpgroups 1-2 issue the MMAs, keeping one stage's MMAs in flight while the
// next is issued.  Partial sums go to the split's workspace slice; wgrad_reduce.cu adds
// the slices in a fixed order.
#include <ATen/ATen.h>

#include <algorithm>

#include "launchers.h"
#include "tc_common.cuh"
#include "tensor_map.h"

namespace causalconv {
namespace tc {
namespace {

template <typename T, int N>
struct WgradTraits : WarpRoles<T> {
  static constexpr int kCT = kRowElems<T>;                  // reduction steps per stage
  static constexpr int kKStep = Elem<T>::kKStep;
  static constexpr int kKSteps = kCT / kKStep;
  static constexpr int kDyBytes = WarpRoles<T>::kBM * 128;
  static constexpr int kTileBytes = N * 128;                // the taps' x tiles (B operand)
  static constexpr int kMaxStages = 8;
  static_assert(N % 64 == 0 && N <= 256, "wgmma N for the tap x channel tile");
  static_assert(kCT == 32 * (4 / sizeof(T)), "a shifter lane moves one 4-byte word of a row");
};

struct WgradPlan {
  int stages;
  int taps;        // taps per tile (KT)
  int it_rows;     // input channels per tile (a multiple of 8: one swizzle atom)
  int window;      // elements per raw x row: the taps' span plus alignment slack
  int stage_bytes; // dy tile, x tiles, raw window; a multiple of 1024
  int n_kt, n_it, n_ot;
  int64_t n_tiles, units, per_split;
  int splits;
};

template <typename T, int N>
__global__ void __launch_bounds__(WgradTraits<T, N>::kThreads, 1)
    wgrad_kernel(const __grid_constant__ CUtensorMap map_dy, const __grid_constant__ CUtensorMap map_x,
                 WgradParams p, WgradPlan pl) {
  using Tr = WgradTraits<T, N>;
  extern __shared__ __align__(16) uint8_t smem_raw[];
#if CAUSALCONV_HAS_WGMMA
  using Mma = wgmma::MmaSS<typename Elem<T>::Wg, N>;
  const uint32_t raw = ptx::smem_addr(smem_raw);
  const uint32_t base = (raw + 1023u) & ~1023u;  // swizzle atoms are 1024-byte aligned
  uint8_t* base_ptr = smem_raw + (base - raw);
  const int nst = pl.stages;
  const uint32_t bars = base + nst * pl.stage_bytes;  // full[nst], ready[nst], empty[nst]
  auto full = [&](int st) { return bars + 8u * st; };
  auto ready = [&](int st) { return bars + 8u * (nst + st); };
  auto empty = [&](int st) { return bars + 8u * (2 * nst + st); };
  constexpr int kRawOffset = Tr::kDyBytes + Tr::kTileBytes;

  int64_t tile = blockIdx.x % pl.n_tiles;
  const int64_t split = blockIdx.x / pl.n_tiles;
  const int ot = static_cast<int>(tile % pl.n_ot);
  tile /= pl.n_ot;
  const int it = static_cast<int>(tile % pl.n_it);
  tile /= pl.n_it;
  const int kt = static_cast<int>(tile % pl.n_kt);
  const int g = static_cast<int>(tile / pl.n_kt);
  const int64_t u0 = split * pl.per_split;
  const int S = static_cast<int>(std::min<int64_t>(pl.units, u0 + pl.per_split) - u0);
  const int k0 = kt * pl.taps, taps = min(pl.taps, p.K - k0);  // this tile's taps
  // The raw window starts at t0 + lead (a 16-byte boundary); tap k's tile at offset
  // off0 + k*dilation inside it.
  const int lead = static_cast<int>(floor_div(p.shift + k0 * p.dilation, Tr::kV) * Tr::kV);
  const int off0 = p.shift + k0 * p.dilation - lead;
  const bool tf32 = std::is_same_v<T, float> && p.precision == Precision::kTF32;

  const int wg = threadIdx.x >> 7, warp = threadIdx.x >> 5, lane = threadIdx.x & 31;
  if (threadIdx.x == 0) {
    for (int st = 0; st < nst; ++st) {
      ptx::mbar_init(full(st), 1);
      ptx::mbar_init(ready(st), Tr::kShifters);
      ptx::mbar_init(empty(st), 128 * Tr::kConsumers);
    }
    ptx::fence_mbar_init();
  }
  __syncthreads();

  const uint32_t n_tc = static_cast<uint32_t>(ceil_div(p.L, Tr::kCT));  // units fit 32 bits (host check)
  if (wg == 0) {
    if (warp == 0 && lane == 0) {
      // Producer: stage s reuses the buffer of s - nst once both consumers released it.
      ptx::tma_prefetch_descriptor(&map_dy);
      ptx::tma_prefetch_descriptor(&map_x);
      const int dy_row0 = g * p.cout_g + ot * Tr::kBM;
      const int x_row0 = g * p.cin_g + it * pl.it_rows;
      const uint32_t bytes = Tr::kDyBytes + pl.it_rows * pl.window * static_cast<int>(sizeof(T));
      for (int s = 0; s < S; ++s) {
        const int st = s % nst;
        if (s >= nst) ptx::mbar_wait(empty(st), ((s / nst) - 1) & 1);
        const uint32_t uu = static_cast<uint32_t>(u0 + s);
        const int b = static_cast<int>(uu / n_tc), t0 = static_cast<int>(uu % n_tc) * Tr::kCT;
        const uint32_t stage = base + st * pl.stage_bytes;
        ptx::mbar_arrive_expect_tx(full(st), bytes);
        ptx::tma_load_2d(stage, &map_dy, t0, b * static_cast<int>(p.groups * p.cout_g) + dy_row0, full(st));
        ptx::tma_load_2d(stage + kRawOffset, &map_x, t0 + lead, b * static_cast<int>(p.groups * p.cin_g) + x_row0,
                         full(st));
      }
    } else if (warp > 0) {
      // Shifters: row n = tap * it_rows + channel of the x tiles, in blocks of 8 rows per
      // warp (eight independent loads in flight), one 4-byte word per lane, stored at its
      // swizzled position; block rows start at multiples of 8, so row j of a block has
      // swizzle phase j.
      const int blocks = taps * pl.it_rows / 8;
      const uint32_t word = static_cast<uint32_t>((lane & 3) * 4);
      for (int s = 0; s < S; ++s) {
        const int st = s % nst;
        ptx::mbar_wait(full(st), (s / nst) & 1);
        uint8_t* stage = base_ptr + st * pl.stage_bytes;
        const T* raw = reinterpret_cast<const T*>(stage + kRawOffset);
        for (int blk = warp - 1; blk < blocks; blk += Tr::kShifters / 32) {
          const int n0 = blk * 8, k = n0 / pl.it_rows, r0 = n0 - k * pl.it_rows;
          const T* src = raw + r0 * pl.window + off0 + k * p.dilation;
          uint32_t v[8];
#pragma unroll
          for (int j = 0; j < 8; ++j) {
            if constexpr (std::is_same_v<T, float>) {
              const float f = src[j * pl.window + lane];
              v[j] = f32_bits(tf32 ? round_tf32(f) : f);
            } else {
              v[j] = pack2(src[j * pl.window + 2 * lane], src[j * pl.window + 2 * lane + 1]);
            }
          }
          uint8_t* dst = stage + Tr::kDyBytes + n0 * 128 + word;
#pragma unroll
          for (int j = 0; j < 8; ++j) *reinterpret_cast<uint32_t*>(dst + j * 128 + (((lane >> 2) ^ j) << 4)) = v[j];
        }
        if constexpr (std::is_same_v<T, float>) {
          if (tf32) {
            float4* dyv = reinterpret_cast<float4*>(stage);
#pragma unroll 4
            for (int i = threadIdx.x - 32; i < Tr::kDyBytes / 16; i += Tr::kShifters) {
              float4 f = dyv[i];
              f.x = round_tf32(f.x);
              f.y = round_tf32(f.y);
              f.z = round_tf32(f.z);
              f.w = round_tf32(f.w);
              dyv[i] = f;
            }
          }
        }
        ptx::fence_proxy_async();  // the MMAs read through the async proxy
        ptx::mbar_arrive(ready(st));
      }
    }
    return;
  }

  // Consumers: warpgroup c owns output rows 64c .. 64c+63 of the block's 128.
  const int c = wg - 1, q = warp & 3;
  float acc[N / 2];
#pragma unroll
  for (int j = 0; j < N / 2; ++j) acc[j] = 0.f;
  for (int s = 0; s < S; ++s) {
    const int st = s % nst;
    ptx::mbar_wait(ready(st), (s / nst) & 1);
    const uint32_t dy_tile = base + st * pl.stage_bytes + c * 64 * 128;
    const uint32_t x_tile = base + st * pl.stage_bytes + Tr::kDyBytes;
    ptx::wgmma_fence();
#pragma unroll
    for (int ks = 0; ks < Tr::kKSteps; ++ks) {
      Mma::run(acc, ptx::desc_kmajor_sw128(dy_tile + ks * 32), ptx::desc_kmajor_sw128(x_tile + ks * 32));
    }
    ptx::wgmma_commit();
    ptx::wgmma_wait<1>();  // stage s-1's MMAs have retired: release its buffer
    if (s > 0) ptx::mbar_arrive(empty((s - 1) % nst));
  }
  ptx::wgmma_wait<0>();

  // acc[4j + e]: row (output channel) 16q + lane/4 (+8 for e >= 2), column n = 8j +
  // 2(lane%4) + (e&1) = tap * it_rows + input channel.
  const int64_t C_out = static_cast<int64_t>(p.groups) * p.cout_g;
#pragma unroll
  for (int j = 0; j < N / 8; ++j) {
#pragma unroll
    for (int e = 0; e < 4; ++e) {
      const int o = ot * Tr::kBM + c * 64 + q * 16 + (lane >> 2) + ((e & 2) ? 8 : 0);
      const int n = j * 8 + 2 * (lane & 3) + (e & 1);
      const int kl = n / pl.it_rows, i = it * pl.it_rows + n % pl.it_rows;
      if (o < p.cout_g && i < p.cin_g && kl < taps) {
        p.ws[((split * C_out + static_cast<int64_t>(g) * p.cout_g + o) * p.cin_g + i) * p.K + k0 + kl] = acc[4 * j + e];
      }
    }
  }
#else
  __trap();  // dispatch only picks wgmma for sm_90a binaries
#endif
}

// Tile of the N dimension: `taps` taps of `it_rows` input channels, padded up to the
// wgmma width n (64, 128, 192 or 256), and the raw x window those taps need.
struct NTile {
  int taps, it_rows, n, window;
};

int raw_window(const WgradParams& p, int taps, int ct, int v) {
  return static_cast<int>(ceil_div(v - 1 + static_cast<int64_t>(taps - 1) * p.dilation + ct, v) * v);
}

// Fewest MMA columns over the whole problem, then the widest n, then the most taps per
// tile (the least raw window traffic); a stage must leave room for two in shared memory.
NTile pick_n_tile(const WgradParams& p, int elem) {
  const int ct = 128 / elem, v = 16 / elem;
  const int max_stage = (max_smem_optin() - 2048) / 2;
  NTile best{0, 0, 0, 0};
  int64_t best_cost = -1;
  for (int taps = 1; taps <= std::min(p.K, 32); ++taps) {
    const int window = raw_window(p, taps, ct, v);
    if (window > 256) break;  // the TMA box limit; wider spans take fewer taps per tile
    for (int rows = 8; taps * rows <= 256; rows += 8) {
      const int n = static_cast<int>(ceil_div(taps * rows, 64) * 64);
      const int stage = 2 * 128 * 64 + n * 128 + static_cast<int>(ceil_div(rows * window * elem, 1024) * 1024);
      if (stage > max_stage) continue;
      const int64_t cost = ceil_div(p.K, taps) * ceil_div(p.cin_g, rows) * n;
      const bool better = best_cost < 0 || cost < best_cost ||
                          (cost == best_cost && (n > best.n || (n == best.n && taps > best.taps)));
      if (better) {
        best = {taps, rows, n, window};
        best_cost = cost;
      }
    }
  }
  return best;
}

template <typename T, int N>
WgradPlan make_plan(const WgradParams& p, const NTile& nt, int sm_count) {
  using Tr = WgradTraits<T, N>;
  WgradPlan pl{};
  pl.taps = nt.taps;
  pl.it_rows = nt.it_rows;
  pl.window = nt.window;
  pl.stage_bytes = Tr::kDyBytes + Tr::kTileBytes +
                   static_cast<int>(ceil_div(nt.it_rows * nt.window * static_cast<int>(sizeof(T)), 1024) * 1024);
  pl.n_kt = static_cast<int>(ceil_div(p.K, nt.taps));
  pl.n_it = static_cast<int>(ceil_div(p.cin_g, nt.it_rows));
  pl.n_ot = static_cast<int>(ceil_div(p.cout_g, Tr::kBM));
  pl.stages = std::min(Tr::kMaxStages, (max_smem_optin() - 1024 - 3 * 8 * Tr::kMaxStages) / pl.stage_bytes);
  pl.n_tiles = static_cast<int64_t>(p.groups) * pl.n_kt * pl.n_it * pl.n_ot;
  pl.units = p.B * ceil_div(p.L, Tr::kCT);
  const int64_t n_out = static_cast<int64_t>(p.groups) * p.cout_g * p.cin_g * p.K;
  // One block per multiprocessor (shared memory), so exactly one wave: a second, nearly
  // empty wave would double the time.
  int64_t splits = std::max<int64_t>(1, sm_count / pl.n_tiles);
  splits = std::min<int64_t>({splits, pl.units, std::max<int64_t>(1, (int64_t{1} << 26) / n_out)});
  pl.per_split = ceil_div(pl.units, splits);
  pl.splits = static_cast<int>(ceil_div(pl.units, pl.per_split));
  return pl;
}

template <typename T, int N>
void launch(const WgradParams& p, const WgradPlan& pl, at::ScalarType dtype, cudaStream_t stream) {
  using Tr = WgradTraits<T, N>;
  const size_t smem = static_cast<size_t>(pl.stages) * pl.stage_bytes + 3 * 8 * pl.stages + 1024;
  TORCH_CHECK(pl.stages >= 2 && smem <= static_cast<size_t>(max_smem_optin()),
              "causalconv: weight-gradient pipeline needs 2 stages of ", pl.stage_bytes, " bytes of shared memory");
  const int64_t blocks = pl.n_tiles * pl.splits;
  const int64_t C_out = static_cast<int64_t>(p.groups) * p.cout_g, C_in = static_cast<int64_t>(p.groups) * p.cin_g;
  TORCH_CHECK(blocks <= INT32_MAX && pl.units <= INT32_MAX && p.B * std::max(C_out, C_in) <= INT32_MAX &&
                  p.L + static_cast<int64_t>(p.K) * p.dilation <= INT32_MAX,
              "causalconv: weight-gradient problem too large for 32-bit TMA coordinates");
  const CUtensorMap map_dy = make_row_tensor_map(p.dy, dtype, p.B * C_out, p.L, Tr::kCT, Tr::kBM, true);
  const CUtensorMap map_x = make_row_tensor_map(p.x, dtype, p.B * C_in, p.L, pl.window, pl.it_rows, false);
  auto kernel = wgrad_kernel<T, N>;
  allow_max_smem<WgradTraits<T, N>>(kernel);  // one instantiation per traits type
  kernel<<<static_cast<unsigned>(blocks), Tr::kThreads, smem, stream>>>(map_dy, map_x, p, pl);
  CAUSALCONV_CHECK_LAUNCH("conv_wgrad_tc");
}

// The one place a run-time N tile becomes a kernel template.
template <typename F>
auto with_n(int n, F&& f) {
  switch (n) {
    case 64: return f(std::integral_constant<int, 64>{});
    case 128: return f(std::integral_constant<int, 128>{});
    case 192: return f(std::integral_constant<int, 192>{});
    default: return f(std::integral_constant<int, 256>{});
  }
}

template <typename T>
int splits_typed(const WgradParams& p, int sm_count) {
  const NTile nt = pick_n_tile(p, sizeof(T));
  return with_n(nt.n, [&](auto n) { return make_plan<T, n.value>(p, nt, sm_count).splits; });
}

template <typename T>
void launch_typed(const WgradParams& p, at::ScalarType dtype, int sm_count, cudaStream_t stream) {
  const NTile nt = pick_n_tile(p, sizeof(T));
  TORCH_CHECK(nt.n > 0, "causalconv: no weight-gradient tile fits dilation ", p.dilation);
  with_n(nt.n, [&](auto n) {
    const WgradPlan pl = make_plan<T, n.value>(p, nt, sm_count);
    TORCH_CHECK(p.splits == pl.splits, "causalconv: workspace sized for ", p.splits, " splits, plan needs ",
                pl.splits);
    launch<T, n.value>(p, pl, dtype, stream);
    return 0;
  });
}

}  // namespace
}  // namespace tc

bool wgrad_tc_supports(const WgradParams& p, at::ScalarType dtype) {
  const int64_t elem = c10::elementSize(dtype);
  return p.precision != Precision::kTF32x3 && (p.L * elem) % 16 == 0 &&
         reinterpret_cast<uintptr_t>(p.x) % 16 == 0 && reinterpret_cast<uintptr_t>(p.dy) % 16 == 0;
}

int wgrad_tc_splits(const WgradParams& p, at::ScalarType dtype, int sm_count) {
  switch (dtype) {
    case at::kFloat: return tc::splits_typed<float>(p, sm_count);
    case at::kHalf: return tc::splits_typed<__half>(p, sm_count);
    default: return tc::splits_typed<__nv_bfloat16>(p, sm_count);
  }
}

void launch_wgrad_tc(const WgradParams& p, at::ScalarType dtype, int sm_count, cudaStream_t stream) {
  TORCH_CHECK(wgrad_tc_supports(p, dtype), "causalconv: tensor-core weight gradient does not cover this configuration");
  switch (dtype) {
    case at::kFloat: return tc::launch_typed<float>(p, dtype, sm_count, stream);
    case at::kHalf: return tc::launch_typed<__half>(p, dtype, sm_count, stream);
    case at::kBFloat16: return tc::launch_typed<__nv_bfloat16>(p, dtype, sm_count, stream);
    default: TORCH_CHECK(false, "causalconv: weight gradient supports float32, float16, bfloat16; got ", dtype);
  }
}

}  // namespace causalconv
