// Tensor-core forward on sm_90a, warp-specialized: TMA and bulk copies, mbarriers, wgmma
// with both operands in shared memory.
//   y[o, t] = bias[o] + sum_k sum_i w_k[o, i] * x[i, t + k*dilation + shift]
// as a GEMM per tile: M = 128 output channels (two consumer warpgroups of 64), N = kN
// time steps, reduced over (input channel, tap): a stage holds one 128-byte row of input
// channels (32 fp32 or 64 16-bit) for a group of up to four taps.
//
// A, the weights: the image of weight_image.cuh (K-major, 128-byte swizzle, TF32-rounded),
// one bulk copy per stage.  B, x: wgmma reads it K-major (channels contiguous), but x lies
// time-contiguous, and the MMA cannot transpose a TF32 operand.  So TMA brings the stage's
// 16-byte-aligned raw window [channels][window] (zeros outside [0, L): the causal
// padding), and three "shifter" warps write its transpose, row r = time a0 + r, in the
// 128-byte-swizzled layout, rounding to TF32 in fp32 mode and zeroing channels past the
// group.  Every tap reads that one tile from its own start row, off + k*dilation: the
// swizzle is a function of the absolute shared-memory address, so a descriptor may start
// at any 128-byte row (measured for the v5 kernel, docs/benchmarks/NOTES.md).
//
// Roles as in wgrad_tc.cu: one producer thread (warp 0) issues the copies; warps 1-3
// transpose; warpgroups 1-2 issue the MMAs, keeping one stage in flight while the next is
// issued.  The grid is persistent: a block walks tiles blockIdx.x, blockIdx.x + gridDim.x,
// ..., and the ring runs on across tiles, so the next tile's copies overlap this tile's
// epilogue.  Every role walks the same (tile, stage) sequence, counted by s.
#include <ATen/ATen.h>

#include <algorithm>

#include "launchers.h"
#include "scratch.h"
#include "tc_common.cuh"
#include "tensor_map.h"
#include "weight_image.cuh"

namespace causalconv {
namespace tc {
namespace {

template <typename T, int N>
struct FwdTmaTraits {
  static constexpr int kConsumers = 2;                     // warpgroups issuing MMAs
  static constexpr int kThreads = 128 * (kConsumers + 1);  // plus the producer warpgroup
  static constexpr int kShifters = 96;                     // producer warps 1-3
  static constexpr int kBM = 64 * kConsumers;              // output channels per tile
  static constexpr int kCI = kRowElems<T>;                 // input channels per stage
  static constexpr int kV = kChunkElems<T>;                // TMA start granularity (16 bytes)
  static constexpr int kKSteps = kCI / Elem<T>::kKStep;
  static constexpr int kTapBytes = kBM * 128;              // one tap of the weight image
  static constexpr int kMaxTaps = 4, kMaxStages = 4, kMaxRaw = 2;
  static constexpr int kBarrierBytes = 8 * (3 * kMaxStages + 2 * kMaxRaw);
  static_assert(N % 64 == 0 && N <= 192, "a time tile plus its halo must fit one 256-wide TMA box");
};

struct FwdTmaPlan {
  const void* w;     // the weight image (128-row output-channel tiles)
  int n_ot, n_ic;    // output-channel tiles, input-channel chunks (per group)
  int tpg, ngroups;  // taps per stage, tap groups
  int window;        // raw x row (elements): the tile, the taps' span, alignment slack
  int stage_bytes;   // tpg taps of weights, then the transposed tile (window rows)
  int raw_bytes;     // one raw window
  int stages, nraw;  // ring depths
  int64_t n_tt, n_tiles;
};

struct TileCoord {
  int ot, g;
  int64_t t0, b;
};

__device__ __forceinline__ TileCoord decode_tile(int64_t tile, const FwdTmaPlan& pl, int groups, int n) {
  TileCoord c;
  c.ot = static_cast<int>(tile % pl.n_ot);  // output tiles of one x window run side by side
  tile /= pl.n_ot;
  c.t0 = (tile % pl.n_tt) * n;
  tile /= pl.n_tt;
  c.g = static_cast<int>(tile % groups);
  c.b = tile / groups;
  return c;
}

// Position in a ring of n buffers: the buffer, and the parity of its current round.  A
// consumer of buffer i waits for the round's phase of i's "full" barrier; a producer waits
// for the previous round's phase of its "empty" barrier, with parity phase ^ 1, which a
// freshly initialized barrier reports as complete: the first round needs no release.
struct Ring {
  int idx = 0;
  uint32_t phase = 0;
  __device__ __forceinline__ void next(int n) {
    if (++idx == n) {
      idx = 0;
      phase ^= 1;
    }
  }
};

// The MMAs of one stage's first NT taps as one commit group: tap k reads weights at
// wt + k * tap bytes and x from the tile at row k * dilation past xt.
template <class Mma, class Tr, int NT>
__device__ __forceinline__ void issue_taps(float (&acc)[Mma::kAcc], uint32_t wt, uint32_t xt, int dilation) {
#if CAUSALCONV_HAS_WGMMA
  ptx::wgmma_fence();
#pragma unroll
  for (int kl = 0; kl < NT; ++kl)
#pragma unroll
    for (int ks = 0; ks < Tr::kKSteps; ++ks)
      Mma::run(acc, ptx::desc_kmajor_sw128(wt + kl * Tr::kTapBytes + ks * 32),
               ptx::desc_kmajor_sw128(xt + kl * dilation * 128 + ks * 32));
  ptx::wgmma_commit();
#endif
}

template <typename T, int N>
__global__ void __launch_bounds__(FwdTmaTraits<T, N>::kThreads, 1)
    fwd_tma_kernel(const __grid_constant__ CUtensorMap map_x, ConvParams p, FwdTmaPlan pl) {
  using Tr = FwdTmaTraits<T, N>;
  extern __shared__ __align__(16) uint8_t smem_raw[];
#if CAUSALCONV_HAS_WGMMA
  using Mma = wgmma::MmaSS<typename Elem<T>::Wg, N>;
  const uint32_t raw0 = ptx::smem_addr(smem_raw);
  const uint32_t base = (raw0 + 1023u) & ~1023u;  // swizzle atoms are 1024-byte aligned
  uint8_t* base_ptr = smem_raw + (base - raw0);
  const int nst = pl.stages, nraw = pl.nraw;
  const uint32_t raw_base = base + nst * pl.stage_bytes;
  const uint32_t bars = raw_base + nraw * pl.raw_bytes;
  auto wfull = [&](int st) { return bars + 8u * st; };             // weights landed
  auto ready = [&](int st) { return bars + 8u * (nst + st); };     // transposed tile written
  auto empty = [&](int st) { return bars + 8u * (2 * nst + st); }; // consumers done with the stage
  auto rawfull = [&](int r) { return bars + 8u * (3 * nst + r); };
  auto rawempty = [&](int r) { return bars + 8u * (3 * nst + nraw + r); };
  const int tile_off = pl.tpg * Tr::kTapBytes;  // the transposed x tile inside a stage
  const int S = pl.n_ic * pl.ngroups;           // stages per tile

  const int wg = threadIdx.x >> 7, warp = threadIdx.x >> 5, lane = threadIdx.x & 31;
  if (threadIdx.x == 0) {
    for (int st = 0; st < nst; ++st) {
      ptx::mbar_init(wfull(st), 1);
      ptx::mbar_init(ready(st), Tr::kShifters);
      ptx::mbar_init(empty(st), 128 * Tr::kConsumers);
    }
    for (int r = 0; r < nraw; ++r) {
      ptx::mbar_init(rawfull(r), 1);
      ptx::mbar_init(rawempty(r), Tr::kShifters);
    }
    ptx::fence_mbar_init();
  }
  __syncthreads();

  if (wg == 0) {
    if (warp == 0) {
      if (lane != 0) return;
      // Producer: the raw buffer of stage s is reused once the shifters released
      // s - nraw, the stage buffer once the consumers released s - nst.
      ptx::tma_prefetch_descriptor(&map_x);
      const uint32_t raw_bytes = Tr::kCI * pl.window * static_cast<uint32_t>(sizeof(T));
      Ring sr, rr;  // stage ring, raw-window ring
      for (int64_t tile = blockIdx.x; tile < pl.n_tiles; tile += gridDim.x) {
        const TileCoord tc = decode_tile(tile, pl, p.groups, N);
        const int64_t w_tile = (static_cast<int64_t>(tc.g) * pl.n_ot + tc.ot) * pl.n_ic;
        for (int j = 0; j < S; ++j, sr.next(nst), rr.next(nraw)) {
          const int ic = j / pl.ngroups, k0 = (j - ic * pl.ngroups) * pl.tpg, nt = min(pl.tpg, p.K - k0);
          // The raw window first: it waits only for the shifters, and the shifters then
          // transpose while the weights wait for the consumers' release (issuing the
          // weights first put that release in front of the window, and in the profile
          // the shifters stood waiting for it).
          ptx::mbar_wait(rawempty(rr.idx), rr.phase ^ 1);
          const int64_t a0 = floor_div(tc.t0 + static_cast<int64_t>(k0) * p.dilation + p.shift, Tr::kV) * Tr::kV;
          ptx::mbar_arrive_expect_tx(rawfull(rr.idx), raw_bytes);
          ptx::tma_load_3d(raw_base + rr.idx * pl.raw_bytes, &map_x, static_cast<int>(a0),
                           tc.g * p.cin_g + ic * Tr::kCI, static_cast<int>(tc.b), rawfull(rr.idx));
          ptx::mbar_wait(empty(sr.idx), sr.phase ^ 1);
          const uint32_t wbytes = nt * Tr::kTapBytes;
          ptx::mbar_arrive_expect_tx(wfull(sr.idx), wbytes);
          ptx::bulk_load(base + sr.idx * pl.stage_bytes,
                         static_cast<const uint8_t*>(pl.w) + ((w_tile + ic) * p.K + k0) * Tr::kTapBytes, wbytes,
                         wfull(sr.idx));
        }
      }
      return;
    }
    // Shifters: row r of the tile holds the kCI channels of time a0 + r; a thread writes
    // one 16-byte chunk (kV channels) of a row per step, lanes on consecutive rows, so
    // the raw reads are consecutive words and the eight rows of a swizzle atom hit
    // distinct bank groups.
    const int tid = threadIdx.x - 32;
    const bool tf32 = std::is_same_v<T, float> && p.precision == Precision::kTF32;
    Ring sr, rr;
    for (int64_t tile = blockIdx.x; tile < pl.n_tiles; tile += gridDim.x) {
      for (int j = 0; j < S; ++j, sr.next(nst), rr.next(nraw)) {
        const int valid = p.cin_g - (j / pl.ngroups) * Tr::kCI;  // channels of the chunk inside the group
        ptx::mbar_wait(rawfull(rr.idx), rr.phase);
        ptx::mbar_wait(empty(sr.idx), sr.phase ^ 1);
        const T* src = reinterpret_cast<const T*>(base_ptr + (raw_base - base) + rr.idx * pl.raw_bytes);
        uint8_t* dst = base_ptr + sr.idx * pl.stage_bytes + tile_off;
#pragma unroll 1
        for (int ch = 0; ch < Tr::kCI / Tr::kV; ++ch) {
          const int c0 = ch * Tr::kV;
#pragma unroll 2
          for (int row = tid; row < pl.window; row += Tr::kShifters) {
            uint32_t v[4];
#pragma unroll
            for (int e = 0; e < 4; ++e) {
              if constexpr (std::is_same_v<T, float>) {
                const int c = c0 + e;
                const float f = c < valid ? src[c * pl.window + row] : 0.f;
                v[e] = f32_bits(tf32 ? round_tf32(f) : f);
              } else {
                const int c = c0 + 2 * e;
                const T zero = from_float<T>(0.f);
                v[e] = pack2(c < valid ? src[c * pl.window + row] : zero,
                             c + 1 < valid ? src[(c + 1) * pl.window + row] : zero);
              }
            }
            *reinterpret_cast<uint4*>(dst + row * 128 + (swizzle_chunk(row, ch) << 4)) =
                make_uint4(v[0], v[1], v[2], v[3]);
          }
        }
        ptx::fence_proxy_async();  // the MMAs read through the async proxy
        ptx::mbar_arrive(rawempty(rr.idx));
        ptx::mbar_arrive(ready(sr.idx));
      }
    }
    return;
  }

  // Consumers: warpgroup c owns output channels 64c .. 64c+63 of the tile's 128.
  const int c = wg - 1, q = warp & 3;
  float acc[N / 2];
  Ring sr;
  for (int64_t tile = blockIdx.x; tile < pl.n_tiles; tile += gridDim.x) {
    const TileCoord tc = decode_tile(tile, pl, p.groups, N);
#pragma unroll
    for (int i = 0; i < N / 2; ++i) acc[i] = 0.f;
    int prev = -1;
    for (int j = 0; j < S; ++j, sr.next(nst)) {
      const int ic = j / pl.ngroups, k0 = (j - ic * pl.ngroups) * pl.tpg, nt = min(pl.tpg, p.K - k0);
      const int st = sr.idx;
      const int64_t ws0 = tc.t0 + static_cast<int64_t>(k0) * p.dilation + p.shift;
      const int off = static_cast<int>(ws0 - floor_div(ws0, Tr::kV) * Tr::kV);
      const uint32_t wt = base + st * pl.stage_bytes + c * 64 * 128;
      const uint32_t xt = base + st * pl.stage_bytes + tile_off + off * 128;
      ptx::mbar_wait(wfull(st), sr.phase);
      ptx::mbar_wait(ready(st), sr.phase);
      // One straight run of MMAs per tap count, fenced and committed inside its branch: a
      // run-time loop, or a branch between the fence and the commit, makes ptxas wait for
      // each MMA before issuing the next (C7520).
      switch (nt) {
        case 1: issue_taps<Mma, Tr, 1>(acc, wt, xt, p.dilation); break;
        case 2: issue_taps<Mma, Tr, 2>(acc, wt, xt, p.dilation); break;
        case 3: issue_taps<Mma, Tr, 3>(acc, wt, xt, p.dilation); break;
        default: issue_taps<Mma, Tr, 4>(acc, wt, xt, p.dilation); break;
      }
      ptx::wgmma_wait<1>();  // the previous stage's MMAs have retired: release its buffer
      if (prev >= 0) ptx::mbar_arrive(empty(prev));
      prev = st;
    }
    ptx::wgmma_wait<0>();
    ptx::mbar_arrive(empty(prev));

    // acc[4j + e]: output channel 16q + lane/4 (+8 for e >= 2), time 8j + 2(lane%4) + (e&1):
    // pairs of consecutive times, stored together.
    const int o_base = tc.ot * Tr::kBM + c * 64 + q * 16 + (lane >> 2);
    float bias[2] = {0.f, 0.f};
#pragma unroll
    for (int h = 0; h < 2; ++h) {
      const int o = o_base + 8 * h;
      if (p.bias && o < p.cout_g) bias[h] = to_float(static_cast<const T*>(p.bias)[tc.g * p.cout_g + o]);
    }
    T* y = static_cast<T*>(p.y) + tc.b * p.sy_b;
#pragma unroll
    for (int jj = 0; jj < N / 8; ++jj) {
      const int64_t t = tc.t0 + jj * 8 + 2 * (lane & 3);
      if (t >= p.L) continue;  // L is even, so t + 1 < L too
#pragma unroll
      for (int h = 0; h < 2; ++h) {
        const int o = o_base + 8 * h;
        if (o >= p.cout_g) continue;
        T* dst = y + static_cast<int64_t>(tc.g * p.cout_g + o) * p.sy_c + t;
        const float v0 = acc[4 * jj + 2 * h] + bias[h], v1 = acc[4 * jj + 2 * h + 1] + bias[h];
        if constexpr (std::is_same_v<T, float>) {
          *reinterpret_cast<float2*>(dst) = make_float2(v0, v1);
        } else {
          *reinterpret_cast<uint32_t*>(dst) = pack2(from_float<T>(v0), from_float<T>(v1));
        }
      }
    }
  }
#else
  __trap();  // dispatch only picks this kernel for sm_90a binaries
#endif
}

// Shared-memory layout of one launch for time tile n; stages == 0 when none fits.
template <typename T, int N>
FwdTmaPlan make_plan(const ConvParams& p, int smem_limit) {
  using Tr = FwdTmaTraits<T, N>;
  FwdTmaPlan pl{};
  pl.n_ot = static_cast<int>(ceil_div(p.cout_g, Tr::kBM));
  pl.n_ic = static_cast<int>(ceil_div(p.cin_g, Tr::kCI));
  pl.n_tt = ceil_div(p.L, N);
  pl.n_tiles = static_cast<int64_t>(pl.n_ot) * pl.n_tt * p.groups * p.B;
  const int avail = smem_limit - 1024 - Tr::kBarrierBytes;
  for (int tpg = std::min(p.K, Tr::kMaxTaps); tpg >= 1; --tpg) {
    const int64_t window = ceil_div(Tr::kV - 1 + static_cast<int64_t>(tpg - 1) * p.dilation + N, Tr::kV) * Tr::kV;
    if (window > 256) continue;  // the TMA box limit: wide spans take fewer taps per stage
    const int tile = static_cast<int>(ceil_div(window * 128, 1024) * 1024);
    const int stage = tpg * Tr::kTapBytes + tile;
    const int raw = static_cast<int>(ceil_div(Tr::kCI * window * static_cast<int64_t>(sizeof(T)), 1024) * 1024);
    if (2 * stage + raw > avail) continue;
    pl.tpg = tpg;
    pl.window = static_cast<int>(window);
    pl.stage_bytes = stage;
    pl.raw_bytes = raw;
    pl.nraw = 2 * stage + 2 * raw <= avail ? 2 : 1;
    pl.stages = std::min(Tr::kMaxStages, (avail - pl.nraw * raw) / stage);
    break;
  }
  pl.ngroups = pl.tpg ? static_cast<int>(ceil_div(p.K, pl.tpg)) : 0;
  return pl;
}

template <typename T, int N>
void launch(const ConvParams& p, at::ScalarType dtype, int sms, cudaStream_t stream) {
  using Tr = FwdTmaTraits<T, N>;
  constexpr Precision kImage = std::is_same_v<T, float> ? Precision::kTF32 : Precision::kNative;
  const int smem_limit = max_smem_optin();
  FwdTmaPlan pl = make_plan<T, N>(p, smem_limit);
  TORCH_CHECK(pl.stages >= 2, "causalconv: no TMA forward pipeline fits dilation ", p.dilation);
  TORCH_CHECK(p.B <= INT32_MAX && p.C_in <= INT32_MAX && p.L + static_cast<int64_t>(p.K) * p.dilation <= INT32_MAX,
              "causalconv: problem too large for 32-bit TMA coordinates");
  const size_t smem = static_cast<size_t>(pl.stages) * pl.stage_bytes +
                      static_cast<size_t>(pl.nraw) * pl.raw_bytes + Tr::kBarrierBytes + 1024;

  // The image lives in this stream's scratch buffer, leased until the kernel is enqueued.
  const int64_t image = weight_image_elems<T, Tr::kBM>(p);
  ScratchLease scratch(static_cast<size_t>(image) * sizeof(T), stream);
  write_weight_image<T, kImage, Tr::kBM>(p, static_cast<T*>(scratch.data()), nullptr, stream);
  pl.w = scratch.data();

  const CUtensorMap map_x = make_bcl_tensor_map(p.x, dtype, p.B, p.C_in, p.L, p.sx_b, p.sx_c, pl.window, Tr::kCI);
  const int64_t grid = std::min<int64_t>(pl.n_tiles, sms);
  auto kernel = fwd_tma_kernel<T, N>;
  allow_max_smem<FwdTmaTraits<T, N>>(kernel);  // one instantiation per traits type
  kernel<<<static_cast<unsigned>(grid), Tr::kThreads, smem, stream>>>(map_x, p, pl);
  CAUSALCONV_CHECK_LAUNCH("conv_fwd_tma");
}

// Time tile: the fewest tile rounds over the multiprocessors, weighted by the tile's
// length plus a fixed per-stage cost (~32 columns' worth), the longest tile on ties.
int pick_time_tile(const ConvParams& p, int sms) {
  int best = 192;
  int64_t best_cost = -1;
  for (int n : {192, 128, 64}) {
    const int64_t tiles = ceil_div(p.cout_g, 128) * ceil_div(p.L, n) * p.groups * p.B;
    const int64_t cost = ceil_div(tiles, sms) * (n + 32);
    if (best_cost < 0 || cost < best_cost) {
      best = n;
      best_cost = cost;
    }
  }
  return best;
}

// The one place a run-time time tile becomes a kernel template.
template <typename T>
void launch_typed(const ConvParams& p, at::ScalarType dtype, int sms, cudaStream_t stream) {
  switch (pick_time_tile(p, sms)) {
    case 64: return launch<T, 64>(p, dtype, sms, stream);
    case 128: return launch<T, 128>(p, dtype, sms, stream);
    default: return launch<T, 192>(p, dtype, sms, stream);
  }
}

}  // namespace
}  // namespace tc

bool fwd_tma_supports(const ConvParams& p, at::ScalarType dtype) {
  const int64_t elem = c10::elementSize(dtype);
  return p.precision != Precision::kTF32x3 && p.sx_t == 1 && (p.sx_c * elem) % 16 == 0 && (p.sx_b * elem) % 16 == 0 &&
         p.L % 2 == 0 && reinterpret_cast<uintptr_t>(p.x) % 16 == 0 && p.sy_c == p.L && p.sy_b == p.C_out * p.L;
}

void launch_fwd_tma(const ConvParams& p, at::ScalarType dtype, int sms, cudaStream_t stream) {
  TORCH_CHECK(fwd_tma_supports(p, dtype), "causalconv: the TMA forward does not cover this configuration");
  switch (dtype) {
    case at::kFloat: return tc::launch_typed<float>(p, dtype, sms, stream);
    case at::kHalf: return tc::launch_typed<__half>(p, dtype, sms, stream);
    case at::kBFloat16: return tc::launch_typed<__nv_bfloat16>(p, dtype, sms, stream);
    default: TORCH_CHECK(false, "causalconv: the TMA forward supports float32, float16, bfloat16; got ", dtype);
  }
}

}  // namespace causalconv
