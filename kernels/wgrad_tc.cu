// Tensor-core weight gradient (sm_90a: TMA, mbarriers, wgmma with both operands in shared
// memory):
//   dw[o, i, k] = sum_{b, t} dy[b, o, t] * x[b, i, t + k*dilation + shift]
// as a GEMM per block: M = 128 output channels (two consumer warpgroups of 64), N = a
// group of taps times a tile of input channels (n = tap * it_rows + channel; MN-major x,
// below: one instruction per 64-channel block, n = tap * 64 + channel), reduced over
// (batch, time) in chunks of one 128-byte row (32 fp32 or 64 16-bit steps).
//
// dy is the A operand, K-major (time contiguous) as it lies in memory; it arrives by TMA
// straight into the 128-byte-swizzled layout wgmma reads.  x cannot: each tap wants its
// tile at time t0 + shift + k*dilation, and a TMA copy must start on a 16-byte boundary.
// So TMA brings one aligned raw window of x per stage, covering the tile's taps
// (coordinates left of 0 or past L arrive as zeros: the causal padding), and three
// "shifter" warps rearrange it, in one of two ways:
// - K-major x (fp32, and 16-bit groups of fewer than 64 channels): the shifters write
//   each tap's tile from the window at the tap's offset, rounding to TF32 on the way in
//   fp32 mode (the tensor cores would truncate; dy is rounded in place).  A stage moves
//   taps x channels x 128 bytes through the shifters.
// - MN-major x (16-bit types, which wgmma may read transposed): the shifters transpose
//   the window once into time-major rows of 64 channels, the forward's x tile layout, and
//   every tap reads it from its own start row; one instruction covers all of a tile's
//   taps, its 64-channel column blocks `dilation` rows apart (the descriptor's leading
//   offset).  A stage moves only the window through the shifters: at K = 4 a third of
//   the K-major bytes (the v15 profile had the consumers waiting for shifted tiles in
//   half of all samples).
//
// Warp roles: one thread of warpgroup 0 issues the copies; warps 1-3 of warpgroup 0
// shift; warpgroups 1-2 issue the MMAs, keeping one stage's MMAs in flight while the next is
// issued.  Two rings: the copies' slots (dy tile + raw x window; `full` counts the bytes,
// `slot_free` the shifters' and the consumers' release) and the shifted x tiles (`ready`,
// `tile_free`).  Until v14 a stage was one buffer of all three, three of them fit, and the
// copy of stage s waited for the MMAs of s - 3: copy latency, shift and MMAs in one chain,
// ~2 us per stage in both dtypes where the MMAs need 0.7.  The copies' slots are 26 KB
// (fp32, 256 x-tile rows), so 4 fit beside three 32 KB x tiles.  Partial sums go to
// the split's workspace slice; split_reduce.cu adds the slices in a fixed order.
#include <ATen/ATen.h>

#include <algorithm>
#include <cstdio>
#include <cstdlib>
#include <cstring>

#include "launchers.h"
#include "tc_common.cuh"
#include "tensor_map.h"
#include "wgrad_plan.cuh"

namespace causalconv {
namespace tc {
namespace {

// x tiles in flight: the shifters may run two stages ahead of the MMAs.
constexpr int kWgradTiles = 3;

// The kernel's shape: NI columns per MMA instruction, CA instructions per step (MN-major
// x: one per 64-channel block; K-major: always one), x MN-major or K-major.
template <int NI, int CA, bool kMn>
struct WgradShape {
  static constexpr int kNI = NI, kCA = CA;
  static constexpr bool kMnX = kMn;
};

template <typename T, class Shape>
struct WgradTraits : WarpRoles<T> {
  static constexpr int kCT = kRowElems<T>;                  // reduction steps per stage
  static constexpr int kKStep = Elem<T>::kKStep;
  static constexpr int kKSteps = kCT / kKStep;
  static constexpr int kDyBytes = WarpRoles<T>::kBM * 128;
  static constexpr int kNI = Shape::kNI, kCA = Shape::kCA;
  static constexpr bool kMnX = Shape::kMnX;
  static constexpr int kMaxSlots = 8, kTiles = kWgradTiles;  // ring depths: copies (at most), x tiles
  static_assert(kNI % 64 == 0 && kNI * kCA <= 256, "wgmma N for the tap x channel tile, 128 accumulators");
  static_assert(kMnX ? sizeof(T) == 2 : kCA == 1, "only 16-bit operands may be MN-major");
  static_assert(kCT == 32 * (4 / sizeof(T)), "a shifter lane moves one 4-byte word of a row");
};

struct WgradPlan {
  int slots;       // depth of the copies' ring
  int taps;        // taps per tile (KT)
  int it_rows;     // input channels per tile (a multiple of 8: one swizzle atom)
  int window;      // elements per raw x row: the taps' span plus alignment slack
  int slot_bytes;  // dy tile and raw window; a multiple of 1024
  int tile_bytes;  // one x tile (B operand), a multiple of 1024
  int part_bytes;  // MN-major: one 64-channel block of it (window rows of 128 bytes)
  int n_kt, n_it, n_ot;
  WgradSplit split;
};

template <typename T, class Shape>
__global__ void __launch_bounds__(WgradTraits<T, Shape>::kThreads, 1)
    wgrad_kernel(const __grid_constant__ CUtensorMap map_dy, const __grid_constant__ CUtensorMap map_x,
                 WgradParams p, WgradPlan pl) {
  using Tr = WgradTraits<T, Shape>;
  extern __shared__ __align__(16) uint8_t smem_raw[];
#if CAUSALCONV_HAS_WGMMA
  ptx::griddep_launch_dependents();  // the split reduction after it may start (dependent_launch.cuh)
  using Wg = typename Elem<T>::Wg;
  using Mma = std::conditional_t<Tr::kMnX, wgmma::MmaSSMnB<Wg, Tr::kNI>, wgmma::MmaSS<Wg, Tr::kNI>>;
  const uint32_t raw = ptx::smem_addr(smem_raw);
  const uint32_t base = (raw + 1023u) & ~1023u;  // swizzle atoms are 1024-byte aligned
  uint8_t* base_ptr = smem_raw + (base - raw);
  // [x tiles][copy slots][barriers]
  const int nsl = pl.slots;
  const uint32_t slots_base = base + Tr::kTiles * pl.tile_bytes;
  const uint32_t bars = slots_base + nsl * pl.slot_bytes;
  auto full = [&](int sl) { return bars + 8u * sl; };
  auto slot_free = [&](int sl) { return bars + 8u * (nsl + sl); };
  auto ready = [&](int x) { return bars + 8u * (2 * nsl + x); };
  auto tile_free = [&](int x) { return bars + 8u * (2 * nsl + Tr::kTiles + x); };
  constexpr int kRawOffset = Tr::kDyBytes;  // in a copy slot

  const WgradBlock blk = decode_wgrad_block(p, pl.split, pl.n_ot, pl.n_it, pl.n_kt, pl.taps, Tr::kV);
  const int ot = blk.ot, it = blk.ct, g = blk.g, S = blk.S, k0 = blk.k0, taps = blk.taps, lead = blk.lead,
            off0 = blk.off0;
  const int64_t split = blk.split, u0 = blk.u0;
  const bool tf32 = std::is_same_v<T, float> && p.precision == Precision::kTF32;

  const int wg = threadIdx.x >> 7, warp = threadIdx.x >> 5, lane = threadIdx.x & 31;
  if (threadIdx.x == 0) {
    for (int sl = 0; sl < nsl; ++sl) {
      ptx::mbar_init(full(sl), 1);
      ptx::mbar_init(slot_free(sl), Tr::kShifters + 128 * Tr::kConsumers);
    }
    for (int x = 0; x < Tr::kTiles; ++x) {
      ptx::mbar_init(ready(x), Tr::kShifters);
      ptx::mbar_init(tile_free(x), 128 * Tr::kConsumers);
    }
    ptx::fence_mbar_init();
  }
  __syncthreads();

  const uint32_t n_tc = static_cast<uint32_t>(ceil_div(p.L, Tr::kCT));  // units fit 32 bits (host check)
  if (wg == 0) {
    if (warp == 0 && lane == 0) {
      // Producer: stage s reuses the copy slot of s - nsl once the shifters and both
      // consumers released it.
      ptx::tma_prefetch_descriptor(&map_dy);
      ptx::tma_prefetch_descriptor(&map_x);
      const int dy_row0 = g * p.cout_g + ot * Tr::kBM;
      const int x_row0 = g * p.cin_g + it * pl.it_rows;
      const uint32_t bytes = Tr::kDyBytes + pl.it_rows * pl.window * static_cast<int>(sizeof(T));
      Ring sr;  // copy slots
      uint32_t b = static_cast<uint32_t>(u0 / n_tc), tci = static_cast<uint32_t>(u0 % n_tc);  // unit u0 + s
      for (int s = 0; s < S; ++s, sr.next(nsl)) {
        ptx::mbar_wait(slot_free(sr.idx), sr.phase ^ 1);
        const int t0 = static_cast<int>(tci) * Tr::kCT;
        const uint32_t slot = slots_base + sr.idx * pl.slot_bytes;
        ptx::mbar_arrive_expect_tx(full(sr.idx), bytes);
        ptx::tma_load_2d(slot, &map_dy, t0, static_cast<int>(b) * (p.groups * p.cout_g) + dy_row0, full(sr.idx));
        ptx::tma_load_2d(slot + kRawOffset, &map_x, t0 + lead, static_cast<int>(b) * (p.groups * p.cin_g) + x_row0,
                         full(sr.idx));
        if (++tci == n_tc) {
          tci = 0;
          ++b;
        }
      }
    } else if (warp > 0) {
      const int sw = warp - 1, stid = threadIdx.x - 32;  // shifter warp, thread
      if constexpr (Tr::kMnX) {
        Ring sr, xr;  // copy slots, x tiles
        for (int s = 0; s < S; ++s, sr.next(nsl), xr.next(Tr::kTiles)) {
          ptx::mbar_wait(full(sr.idx), sr.phase);
          ptx::mbar_wait(tile_free(xr.idx), xr.phase ^ 1);
          const uint32_t raw = slots_base + sr.idx * pl.slot_bytes + kRawOffset;
          const uint32_t x_tile = base + xr.idx * pl.tile_bytes;
#pragma unroll
          for (int ca = 0; ca < Tr::kCA; ++ca) {
            // Channels past the group are other groups' (or TMA's zeros): their columns
            // are never stored, so they need no masking.
            transpose_window_b16<Tr::kShifters / 32>(raw + ca * 64 * pl.window * 2, x_tile + ca * pl.part_bytes,
                                                     pl.window, sw, lane, 64, pl.window, 0);
          }
          ptx::fence_proxy_async();  // the MMAs read through the async proxy
          ptx::mbar_arrive(ready(xr.idx));
          ptx::mbar_arrive(slot_free(sr.idx));
        }
        return;
      }
      // Shifters: row n = tap * it_rows + channel of the x tiles, in blocks of 8 rows per
      // warp (eight independent loads in flight), one 4-byte word per lane, stored at its
      // swizzled position; block rows start at multiples of 8, so row j of a block has
      // swizzle phase j.
      // Block blk = 8-row block rb of tap k, rb = blk % (it_rows / 8): the same walk every
      // stage, stepped without divisions (the v14 profile had a signed division per block
      // among the hottest instructions of the shifters, which the consumers wait on).
      const int blocks = taps * pl.it_rows / 8, bpt = pl.it_rows / 8, k_first = sw / bpt;
      constexpr int kWarps = Tr::kShifters / 32;
      const uint32_t word = static_cast<uint32_t>((lane & 3) * 4);
      Ring sr, xr;  // copy slots, x tiles
      for (int s = 0; s < S; ++s, sr.next(nsl), xr.next(Tr::kTiles)) {
        ptx::mbar_wait(full(sr.idx), sr.phase);
        ptx::mbar_wait(tile_free(xr.idx), xr.phase ^ 1);
        uint8_t* slot = base_ptr + (slots_base - base) + sr.idx * pl.slot_bytes;
        uint8_t* x_tile = base_ptr + xr.idx * pl.tile_bytes;
        const T* raw = reinterpret_cast<const T*>(slot + kRawOffset);
        int k = k_first, rb = sw - k_first * bpt;
        for (int blk = sw; blk < blocks; blk += kWarps) {
          const T* src = raw + rb * 8 * pl.window + off0 + k * p.dilation;
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
          uint8_t* dst = x_tile + blk * 8 * 128 + word;
#pragma unroll
          for (int j = 0; j < 8; ++j) *reinterpret_cast<uint32_t*>(dst + j * 128 + (((lane >> 2) ^ j) << 4)) = v[j];
          for (rb += kWarps; rb >= bpt; rb -= bpt) ++k;
        }
        if constexpr (std::is_same_v<T, float>) {
          if (tf32) round_tf32_in_place<Tr::kShifters>(reinterpret_cast<float4*>(slot), Tr::kDyBytes / 16, stid);
        }
        ptx::fence_proxy_async();  // the MMAs read through the async proxy
        ptx::mbar_arrive(ready(xr.idx));
        ptx::mbar_arrive(slot_free(sr.idx));  // the raw window is read (dy stays for the MMAs)
      }
    }
    return;
  }

  // Consumers: warpgroup c owns output rows 64c .. 64c+63 of the block's 128.
  const int c = wg - 1, q = warp & 3;
  float acc[Tr::kCA][Tr::kNI / 2];
#pragma unroll
  for (int ca = 0; ca < Tr::kCA; ++ca) {
#pragma unroll
    for (int j = 0; j < Tr::kNI / 2; ++j) acc[ca][j] = 0.f;
  }
  // MN-major x: tap k + 1's columns start `dilation` rows after tap k's.
  const uint32_t tap_stride = static_cast<uint32_t>(p.dilation) * 128u;
  Ring sr, xr;                // copy slots (dy), x tiles
  int prev_sl = -1, prev_x = -1;  // stage s - 1's, released once its MMAs retired
  for (int s = 0; s < S; ++s, sr.next(nsl), xr.next(Tr::kTiles)) {
    ptx::mbar_wait(ready(xr.idx), xr.phase);  // after full: the shifters waited for the copies
    const uint32_t dy_tile = slots_base + sr.idx * pl.slot_bytes + c * 64 * 128;
    const uint32_t x_tile = base + xr.idx * pl.tile_bytes;
    ptx::wgmma_fence();
    // Descriptors step by adding to their start-address field (bytes / 16): a K step is
    // 32 bytes of a dy row and, MN-major, kKStep rows of x.
    const uint64_t da = ptx::desc_kmajor_sw128(dy_tile);
    const uint64_t db = Tr::kMnX ? ptx::desc_mnmajor_sw128(x_tile + static_cast<uint32_t>(off0) * 128u, tap_stride)
                                 : ptx::desc_kmajor_sw128(x_tile);
#pragma unroll
    for (int ks = 0; ks < Tr::kKSteps; ++ks) {
      if constexpr (Tr::kMnX) {
#pragma unroll
        for (int ca = 0; ca < Tr::kCA; ++ca) {
          Mma::run(acc[ca], da + 2 * ks, db + ((ca * pl.part_bytes) >> 4) + ks * (Tr::kKStep * 128 / 16));
        }
      } else {
        Mma::run(acc[0], da + 2 * ks, db + 2 * ks);
      }
    }
    ptx::wgmma_commit();
    ptx::wgmma_wait<1>();  // stage s-1's MMAs have retired: release its dy and x tile
    if (prev_sl >= 0) {
      ptx::mbar_arrive(slot_free(prev_sl));
      ptx::mbar_arrive(tile_free(prev_x));
    }
    prev_sl = sr.idx;
    prev_x = xr.idx;
  }
  ptx::wgmma_wait<0>();

  // acc[ca][4j + e]: row (output channel) 16q + lane/4 (+8 for e >= 2), column n = 8j +
  // 2(lane%4) + (e&1) = tap * cw + input channel (of block ca, MN-major).
  const SliceIndex slice(p, split);
  const int cw = Tr::kMnX ? 64 : pl.it_rows;  // channels per tap in one instruction's columns
#pragma unroll
  for (int ca = 0; ca < Tr::kCA; ++ca) {
#pragma unroll
    for (int j = 0; j < Tr::kNI / 8; ++j) {
#pragma unroll
      for (int e = 0; e < 4; ++e) {
        const int o = ot * Tr::kBM + c * 64 + q * 16 + (lane >> 2) + ((e & 2) ? 8 : 0);
        const int n = j * 8 + 2 * (lane & 3) + (e & 1);
        const int kl = n / cw, i = it * pl.it_rows + ca * 64 + n % cw;
        // Tap-major, the lanes' 4 channels i (2 apart) of each of 8 rows share a sector.
        if (o < p.cout_g && i < p.cin_g && kl < taps)
          p.ws[slice(static_cast<int64_t>(g) * p.cout_g + o, i, k0 + kl)] = acc[ca][4 * j + e];
      }
    }
  }
#else
  __trap();  // dispatch only picks wgmma for sm_90a binaries
#endif
}

// Tile of the N dimension: `taps` taps of `it_rows` input channels and the raw x window
// those taps need.  K-major x: one instruction of n columns (64, 128, 192 or 256), the
// taps' channels padded up to it.  MN-major x: `ca` instructions of n = 64 * taps columns,
// one per 64-channel block (it_rows = 64 * ca).
struct NTile {
  int taps, it_rows, n, ca, window;
  int tile_bytes, part_bytes;  // one x tile; MN-major: one 64-channel block of it
  bool mn;
};

int raw_window(const WgradParams& p, int taps, int ct, int v) {
  return static_cast<int>(ceil_div(v - 1 + static_cast<int64_t>(taps - 1) * p.dilation + ct, v) * v);
}

// Both layouts pick by the same order: lowest cost over the whole problem (K-major: MMA
// columns; MN-major: below), then the widest tile, then the most taps per tile (the least
// raw window traffic), such that kWgradTiles x tiles and two copy slots fit.
bool better_tile(int64_t cost, int cols, int taps, int64_t best_cost, const NTile& best) {
  const int best_cols = best.n * best.ca;
  return best_cost < 0 || cost < best_cost ||
         (cost == best_cost && (cols > best_cols || (cols == best_cols && taps > best.taps)));
}

NTile pick_n_tile_kmajor(const WgradParams& p, int elem) {
  const int ct = 128 / elem, v = 16 / elem;
  const int budget = max_smem_optin() - 2048;
  NTile best{};
  int64_t best_cost = -1;
  for (int taps = 1; taps <= std::min(p.K, 32); ++taps) {
    const int window = raw_window(p, taps, ct, v);
    if (window > 256) break;  // the TMA box limit; wider spans take fewer taps per tile
    for (int rows = 8; taps * rows <= 256; rows += 8) {
      const int n = static_cast<int>(ceil_div(taps * rows, 64) * 64);
      const int slot = 128 * 128 + round_up_kb(static_cast<int64_t>(rows) * window * elem);  // dy + raw x
      if (kWgradTiles * n * 128 + 2 * slot > budget) continue;
      const int64_t cost = ceil_div(p.K, taps) * ceil_div(p.cin_g, rows) * n;
      if (better_tile(cost, n, taps, best_cost, best)) {
        best = {taps, rows, n, 1, window, n * 128, 0, false};
        best_cost = cost;
      }
    }
  }
  return best;
}

// CAUSALCONV_WGRAD_TILE=taps,blocks forces the 16-bit MN-major tile: `taps` taps per tile
// (1-4) and `blocks` 64-channel blocks per instruction set (1, 2 or 4), at most 4 x 64
// accumulator columns in all; CAUSALCONV_WGRAD_TILE=columns picks by MMA columns alone (the
// cost model before v19).  Unset, the cost also counts the shifters' transposes (below).
// A knob for measuring the tiles against each other (scripts/bwd_breakdown.py).
struct ForcedWgradTile {
  int taps = 0, ca = 0;  // 0: not forced
  bool count_transposes = true;
};

ForcedWgradTile forced_wgrad_tile(const WgradParams& p) {
  const char* v = std::getenv("CAUSALCONV_WGRAD_TILE");
  ForcedWgradTile f;
  if (v == nullptr || *v == '\0') return f;
  if (std::strcmp(v, "columns") == 0) {
    f.count_transposes = false;
    return f;
  }
  char tail = 0;
  const int n = std::sscanf(v, "%d,%d%c", &f.taps, &f.ca, &tail);
  CAUSALCONV_CHECK(n == 2 && f.taps >= 1 && f.taps <= 4 && (f.ca == 1 || f.ca == 2 || f.ca == 4) && f.taps * f.ca <= 4,
                   "causalconv: CAUSALCONV_WGRAD_TILE must be 'columns' or 'taps,blocks' with taps 1-4, blocks 1, "
                   "2 or 4 and taps x blocks <= 4, got '", v, "'");
  CAUSALCONV_CHECK(f.taps <= p.K, "causalconv: CAUSALCONV_WGRAD_TILE=", f.taps, ",", f.ca, " does not fit K = ", p.K,
                   " (taps <= K)");
  return f;
}

// The MN-major cost counts, per tile and stage, the larger of the MMA columns (64 per tap
// and channel block) and the shifters' transpose work, kTransposeCost columns per raw
// window row of 64 channels: the two roles overlap, so the slower one sets the stage time.
// kTransposeCost = 3 is from the v17 profile of the default problem (taps 4, one block: 256
// columns against 88 window rows, the consumers waiting for transposed tiles in a third of
// all samples, so the two about equal).  Counting columns alone (CAUSALCONV_WGRAD_TILE=
// columns, the model before v19) ties 4x512->512 K=3 between one tap of four blocks and
// three taps of one, and its tie-break takes the wider tile, whose shifters transpose four
// windows per stage for each tap's MMAs: dW 0.124 ms against 0.071 for three taps of one
// (v19b, H100).
constexpr int kTransposeCost = 3;

NTile pick_n_tile_mn(const WgradParams& p) {
  constexpr int ct = 64, v = 8, elem = 2;
  const int budget = max_smem_optin() - 2048;
  const ForcedWgradTile forced = forced_wgrad_tile(p);
  NTile best{};
  int64_t best_cost = -1;
  for (int taps = 1; taps <= std::min(p.K, 4); ++taps) {
    const int window = conflict_free_window_b16(raw_window(p, taps, ct, v));
    if (window > 256) break;
    for (int ca = 1; ca <= 4; ca *= 2) {
      if (taps * ca > 4) break;  // 256 accumulator columns
      if (forced.taps > 0 && (taps != forced.taps || ca != forced.ca)) continue;
      const int part = round_up_kb(static_cast<int64_t>(window) * 128);
      const int slot = 128 * 128 + round_up_kb(static_cast<int64_t>(ca) * 64 * window * elem);
      if (kWgradTiles * ca * part + 2 * slot > budget) continue;
      const int64_t stage = forced.count_transposes ? std::max(64 * taps * ca, kTransposeCost * ca * window)
                                                    : 64 * taps * ca;
      const int64_t cost = ceil_div(p.K, taps) * ceil_div(p.cin_g, 64 * ca) * stage;
      if (better_tile(cost, 64 * taps * ca, taps, best_cost, best)) {
        best = {taps, 64 * ca, 64 * taps, ca, window, ca * part, part, true};
        best_cost = cost;
      }
    }
  }
  CAUSALCONV_CHECK(forced.taps == 0 || best.n > 0, "causalconv: CAUSALCONV_WGRAD_TILE=", forced.taps, ",", forced.ca,
                   " does not fit K = ", p.K, ", dilation ", p.dilation, " (window <= 256, shared memory)");
  return best;
}

// MN-major whenever the operand type allows it and a group fills a 64-channel block.
NTile pick_n_tile(const WgradParams& p, int elem) {
  return elem == 2 && p.cin_g >= 64 ? pick_n_tile_mn(p) : pick_n_tile_kmajor(p, elem);
}

template <class Tr>
constexpr int kBarrierBytes = 8 * 2 * (Tr::kMaxSlots + Tr::kTiles);

template <typename T, class Shape>
WgradPlan make_plan(const WgradParams& p, const NTile& nt, int sm_count) {
  using Tr = WgradTraits<T, Shape>;
  WgradPlan pl{};
  pl.taps = nt.taps;
  pl.it_rows = nt.it_rows;
  pl.window = nt.window;
  pl.tile_bytes = nt.tile_bytes;
  pl.part_bytes = nt.part_bytes;
  pl.slot_bytes = Tr::kDyBytes + round_up_kb(static_cast<int64_t>(nt.it_rows) * nt.window * sizeof(T));
  pl.n_kt = static_cast<int>(ceil_div(p.K, nt.taps));
  pl.n_it = static_cast<int>(ceil_div(p.cin_g, nt.it_rows));
  pl.n_ot = static_cast<int>(ceil_div(p.cout_g, Tr::kBM));
  pl.slots = std::min(Tr::kMaxSlots,
                      (max_smem_optin() - 1024 - kBarrierBytes<Tr> - Tr::kTiles * pl.tile_bytes) / pl.slot_bytes);
  pl.split = plan_wgrad_split(p, static_cast<int64_t>(p.groups) * pl.n_kt * pl.n_it * pl.n_ot, Tr::kCT, sm_count);
  return pl;
}

template <typename T, class Shape>
void launch(const WgradParams& p, const WgradPlan& pl, at::ScalarType dtype, cudaStream_t stream) {
  using Tr = WgradTraits<T, Shape>;
  const size_t smem = static_cast<size_t>(Tr::kTiles) * pl.tile_bytes + static_cast<size_t>(pl.slots) * pl.slot_bytes +
                      kBarrierBytes<Tr> + 1024;
  CAUSALCONV_CHECK(pl.slots >= 2 && smem <= static_cast<size_t>(max_smem_optin()),
                   "causalconv: weight-gradient pipeline needs 2 copy slots of ", pl.slot_bytes, " bytes of shared memory");
  const int64_t blocks = pl.split.n_tiles * pl.split.splits;
  const int64_t C_out = static_cast<int64_t>(p.groups) * p.cout_g, C_in = static_cast<int64_t>(p.groups) * p.cin_g;
  CAUSALCONV_CHECK(blocks <= INT32_MAX && pl.split.units <= INT32_MAX && p.B * std::max(C_out, C_in) <= INT32_MAX &&
                       p.L + static_cast<int64_t>(p.K) * p.dilation <= INT32_MAX,
                   "causalconv: weight-gradient problem too large for 32-bit TMA coordinates");
  const CUtensorMap map_dy = make_row_tensor_map(p.dy, dtype, p.B * C_out, p.L, Tr::kCT, Tr::kBM, true);
  const CUtensorMap map_x = make_row_tensor_map(p.x, dtype, p.B * C_in, p.L, pl.window, pl.it_rows, false);
  auto kernel = wgrad_kernel<T, Shape>;
  allow_max_smem<Tr>(kernel);  // one instantiation per traits type
  kernel<<<static_cast<unsigned>(blocks), Tr::kThreads, smem, stream>>>(map_dy, map_x, p, pl);
  CAUSALCONV_CHECK_LAUNCH("conv_wgrad_tc");
}

// The one place a run-time N tile becomes a kernel template.
template <typename T, typename F>
auto with_shape(const NTile& nt, F&& f) {
  if constexpr (sizeof(T) == 2) {
    if (nt.mn) {
      switch (nt.n * 8 + nt.ca) {
        case 64 * 8 + 1: return f(WgradShape<64, 1, true>{});
        case 64 * 8 + 2: return f(WgradShape<64, 2, true>{});
        case 64 * 8 + 4: return f(WgradShape<64, 4, true>{});
        case 128 * 8 + 1: return f(WgradShape<128, 1, true>{});
        case 128 * 8 + 2: return f(WgradShape<128, 2, true>{});
        case 192 * 8 + 1: return f(WgradShape<192, 1, true>{});
        default:
          CAUSALCONV_CHECK(nt.n == 256 && nt.ca == 1, "causalconv: no weight-gradient kernel for ", nt.ca, " x ", nt.n,
                           " columns");
          return f(WgradShape<256, 1, true>{});
      }
    }
  }
  switch (nt.n) {
    case 64: return f(WgradShape<64, 1, false>{});
    case 128: return f(WgradShape<128, 1, false>{});
    case 192: return f(WgradShape<192, 1, false>{});
    default: return f(WgradShape<256, 1, false>{});
  }
}

template <typename T>
int splits_typed(const WgradParams& p, int sm_count) {
  const NTile nt = pick_n_tile(p, sizeof(T));
  return with_shape<T>(nt, [&](auto shape) { return make_plan<T, decltype(shape)>(p, nt, sm_count).split.splits; });
}

template <typename T>
void launch_typed(const WgradParams& p, at::ScalarType dtype, int sm_count, cudaStream_t stream) {
  const NTile nt = pick_n_tile(p, sizeof(T));
  CAUSALCONV_CHECK(nt.n > 0, "causalconv: no weight-gradient tile fits dilation ", p.dilation);
  with_shape<T>(nt, [&](auto shape) {
    using Shape = decltype(shape);
    const WgradPlan pl = make_plan<T, Shape>(p, nt, sm_count);
    CAUSALCONV_CHECK(p.splits == pl.split.splits, "causalconv: workspace sized for ", p.splits, " splits, plan needs ",
                     pl.split.splits);
    launch<T, Shape>(p, pl, dtype, stream);
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

// Tap-major partial sums by default: on an H100 the K7 d4 bf16 backward 0.200 -> 0.159 ms,
// the default problem 0.535 -> 0.506 (NOTES v31 measured); =0 keeps dw's own layout.
bool wgrad_tc_tap_major() { return env_switch("CAUSALCONV_WGRAD_TC_TAP_MAJOR"); }

void launch_wgrad_tc(const WgradParams& p, at::ScalarType dtype, int sm_count, cudaStream_t stream) {
  CAUSALCONV_CHECK(wgrad_tc_supports(p, dtype), "causalconv: tensor-core weight gradient does not cover this configuration");
  switch (dtype) {
    case at::kFloat: return tc::launch_typed<float>(p, dtype, sm_count, stream);
    case at::kHalf: return tc::launch_typed<__half>(p, dtype, sm_count, stream);
    case at::kBFloat16: return tc::launch_typed<__nv_bfloat16>(p, dtype, sm_count, stream);
    default: CAUSALCONV_CHECK(false, "causalconv: weight gradient supports float32, float16, bfloat16; got ", dtype);
  }
}

}  // namespace causalconv
