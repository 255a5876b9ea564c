// Tensor-core forward on sm_90a, warp-specialized: TMA and bulk copies, mbarriers, wgmma
// with both operands in shared memory.
//   y[o, t] = bias[o] + sum_k sum_i w_k[o, i] * x[i, t + k*dilation + shift]
// as a GEMM per tile: M = 128 output channels (two consumer warpgroups of 64), N = kN
// time steps, reduced over (input channel, tap) in chunks of one 128-byte row of input
// channels (32 fp32 or 64 16-bit).  An x stage holds such a chunk for a group of up to
// four taps; the weights run through their own, finer ring, one tap (16 KB) per slot.
//
// A, the weights: the image of weight_image.cuh (K-major, 128-byte swizzle, TF32-rounded),
// one bulk copy per tap.  Why a ring of taps: four taps of weights are 64 KB, so only two
// such stages fit beside the x buffers, and a stage was refilled only after all 16 of its
// MMAs had retired.  A 16 KB slot is refilled as soon as its own tap's MMAs retire, and
// 7 taps of weights are in flight (fp32 0.619 -> 0.582 ms on the default problem).
//
// B, x: wgmma reads it K-major (channels contiguous), but x lies time-contiguous, and the
// MMA cannot transpose a TF32 operand.  So TMA brings the stage's 16-byte-aligned raw
// window [channels][window] (zeros outside [0, L): the causal padding) into one of two
// raw buffers, and "shifter" warps (three; seven in fp32) write its transpose, row r =
// time a0 + r, in the 128-byte-swizzled layout, rounding to TF32 in fp32 mode and zeroing
// channels past the group.  Every tap reads that one tile from its own start row,
// off + k*dilation: the swizzle is a function of the absolute shared-memory address, so a
// descriptor may start at any 128-byte row (measured for the v5 kernel, NOTES.md).
//
// Roles as in wgrad_tc.cu: one producer thread (warp 0) issues the copies; warps 1-3 (and
// in fp32 warpgroup 3) transpose; warpgroups 1-2 issue the MMAs, one tap per commit group,
// keeping one tap in flight while the next is issued.  The grid is persistent: a block walks tiles
// blockIdx.x, blockIdx.x + gridDim.x, ..., and the rings run on across tiles, so the
// next tile's copies overlap this tile's epilogue.  Every role walks the same (tile,
// x stage, tap) sequence.
#include <ATen/ATen.h>

#include <algorithm>

#include "launchers.h"
#include "scratch.h"
#include "stream_k.cuh"
#include "tc_common.cuh"
#include "tensor_map.h"
#include "weight_image.cuh"

namespace causalconv {
namespace tc {
namespace {

template <typename T, int N, bool kSplitParts>
struct FwdTmaTraits : WarpRoles<T> {
  static constexpr int kCI = kRowElems<T>;                       // input channels per stage
  static constexpr int kKSteps = kCI / Elem<T>::kKStep;
  // The 3xTF32 split keeps both operands as two TF32 parts, hi and lo (x tiles and weight
  // slots hold both), and runs three MMAs per step: lo*hi + hi*lo + hi*hi.
  static constexpr bool kSplit = kSplitParts;
  static constexpr int kParts = kSplit ? 2 : 1;
  static constexpr int kTapBytes = WarpRoles<T>::kBM * 128;      // one part of one tap of the weight image
  static constexpr int kSlotBytes = kTapBytes * kParts;          // one weight slot: a tap, all parts
  static constexpr int kMaxTaps = 4;                             // taps per x stage
  // fp32 adds a fourth warpgroup of shifters (warpgroup 3): its element-wise transpose
  // kept the three shifter warps 100% busy and the consumers ~30% of their time waiting
  // for the tile (ncu, default problem), while the 16-bit types' matrix-transpose
  // instructions need no more than three warps.
  // Not with the split: its consumers hold a second accumulator set (below), which needs
  // the registers of a 384-thread block, and their three MMAs per step leave the
  // shifters three times as long per tile.
  static constexpr int kExtraShifterGroups = std::is_same_v<T, float> && !kSplit ? 1 : 0;
  static constexpr int kThreads = WarpRoles<T>::kThreads + 128 * kExtraShifterGroups;
  static constexpr int kShifters = WarpRoles<T>::kShifters + 128 * kExtraShifterGroups;
  // Ring depths: x tiles; raw windows, two so that the next one lands while the shifters
  // transpose this one (with one, load and transpose ran in series: fp32 0.584 -> 0.530 ms
  // with two on the default problem, no gain from three); weight taps, at most.
  static constexpr int kTiles = 2, kRaw = 2, kMaxSlots = 12;
  static constexpr int kBarrierBytes = 8 * (2 * (kTiles + kRaw + kMaxSlots) + 1);  // + the skew barrier
  // Epilogue staging for the 16-bit types, 1 KB per consumer warp: 16 output channels x
  // 64 bytes of time.  fp32 stores straight from the accumulators: a lane's pair of
  // elements is 8 bytes, four lanes fill one 32-byte sector, so its direct stores waste
  // nothing, and staging only added shared-memory traffic (~12 KB per tap, v12 profile).
  static constexpr bool kStaged = sizeof(T) == 2;
  // Stream-K segments (CAUSALCONV_STREAM_K=2) for the 16-bit types: fp32 TF32 has the
  // raw-window forward for that (fwd_rs.cu), and the hand-over's code cost this kernel's
  // fp32 consumers spills at 512 threads.
  static constexpr bool kStreamK = sizeof(T) == 2;
  using Walk = std::conditional_t<kStreamK, SegmentWalk, WholeTiles>;
  // One such buffer per warp: a slice waits until the TMA store of the previous one has
  // read it.  Two buffers (the next slice written while the last store still reads)
  // measured ~1% slower in bf16 and fp16 (v16): their 8 KB cost one weight slot (6 not 7).
  static constexpr int kStageBuffers = 1;
  static constexpr int kStageRowBytes = 64;
  static constexpr int kWarpStageBytes = 16 * kStageRowBytes;
  static constexpr int kStageBytes = kStaged ? WarpRoles<T>::kConsumerWarps * kStageBuffers * kWarpStageBytes : 0;
  // Up to 192 steps a tile plus its taps' span fits one 256-wide TMA box; 256-step tiles
  // (16-bit only: fp32's 512 threads leave no room for 128 accumulators) take two boxes
  // per raw window.
  static_assert(N % 64 == 0 && (N <= 192 || (N == 256 && sizeof(T) == 2)), "time tiles of 64 to 192, or 256 in 16-bit");
  // The split's consumers keep a stage's products in a chain accumulator of their own and
  // add it to the tile's totals with fp32 adds (the tensor cores' accumulation truncates,
  // and over a tile's hundreds of chained MMAs that bias exceeded fp32 accuracy, NOTES
  // v2): 2 x N/2 accumulators, which fit a 384-thread block's 168 registers for N <= 128.
  static_assert(!kSplit || (std::is_same_v<T, float> && N <= 128), "the 3xTF32 split is fp32 with N <= 128");
};

struct FwdTmaPlan {
  const void* w;     // the weight image (128-row output-channel tiles)
  const void* w_lo;  // its lo part (3xTF32 split), laid out as w
  int n_ot, n_ic;    // output-channel tiles, input-channel chunks (per group)
  int tpg, ngroups;  // taps per x stage, x stages per chunk
  int window;        // raw x row (elements): the tile, the taps' span, alignment slack
  int box, boxes;    // the window arrives as `boxes` TMA boxes (1 or 2) of `box` elements
  int tile_bytes;    // one transposed x tile, all parts
  int part_bytes;    // one part of it (window rows of 128 bytes)
  int raw_bytes;     // one raw window
  int slots, nraw;   // ring depths: weight taps, raw windows (x tiles: kTiles)
  bool tma_store;    // 16-bit epilogue through TMA stores (map_y)
  int skew;          // taps consumer warpgroup 1 issues before warpgroup 2 starts (below)
  Stagger stagger;   // the start-stagger knob (tc_common.cuh)
  int csplits;       // blocks per tile, each over ic_per input-channel chunks (p.ws)
  int ic_per;
  int64_t n_tt, n_tiles, n_items;  // n_items = n_tiles x csplits
  StreamKPlan sk;    // which blocks run which items, whole or in segments of stages (stream_k.cuh)
};

// A block's unit of work: one tile's reduction over the input-channel chunks ic0 ..
// ic0 + S / ngroups - 1 (all of them without the channel split), S x stages; cs is the split.
struct WorkItem {
  int ot, g, ic0, S, cs;
  int64_t t0, b;
};

__device__ __forceinline__ WorkItem decode_item(int64_t item, const FwdTmaPlan& pl, int groups, int n) {
  WorkItem c;
  int64_t tile = item % pl.n_tiles;
  c.cs = static_cast<int>(item / pl.n_tiles);
  c.ot = static_cast<int>(tile % pl.n_ot);  // output tiles of one x window run side by side
  tile /= pl.n_ot;
  c.t0 = (tile % pl.n_tt) * n;
  tile /= pl.n_tt;
  c.g = static_cast<int>(tile % groups);
  c.b = tile / groups;
  c.ic0 = c.cs * pl.ic_per;
  c.S = (min(pl.n_ic, c.ic0 + pl.ic_per) - c.ic0) * pl.ngroups;
  return c;
}

// The MMAs of one tap as one commit group: weights at wt, x from the tile row at xt, and
// with the split their lo parts Tr::kTapBytes and x_lo bytes further on.
template <class Mma, class Tr>
__device__ __forceinline__ void issue_tap(float (&acc)[Mma::kAcc], uint32_t wt, uint32_t xt, uint32_t x_lo) {
#if CAUSALCONV_HAS_WGMMA
  ptx::wgmma_fence();
#pragma unroll
  for (int ks = 0; ks < Tr::kKSteps; ++ks) {
    const uint64_t w_hi = ptx::desc_kmajor_sw128(wt + ks * 32), x_hi = ptx::desc_kmajor_sw128(xt + ks * 32);
    if constexpr (Tr::kSplit) {  // the small products first
      Mma::run(acc, ptx::desc_kmajor_sw128(wt + Tr::kTapBytes + ks * 32), x_hi);
      Mma::run(acc, w_hi, ptx::desc_kmajor_sw128(xt + x_lo + ks * 32));
    }
    Mma::run(acc, w_hi, x_hi);
  }
  ptx::wgmma_commit();
#endif
}

// The fp32 shifters' share of one stage.  A unit is a 4 x 4 block: time steps 4tb ..
// 4tb+3 of channels 4ch .. 4ch+3, read as four 16-byte rows of the raw window, transposed
// in registers and written as four 16-byte chunks of tile rows: 8 memory instructions per
// 64 bytes where one 4-byte load per element took 20.  Eight lanes (one shared-memory
// phase of 16-byte accesses) take the eight chunks ch = lane of a row on eight different
// time blocks, tb = 8m + (lane + s) % 8: with a window of 8n elements the loads then fall
// in eight distinct bank groups (chunk (4ch + e) * window / 4 + tb, mod 8), and so do the
// stores (chunk ch ^ (row % 8) of rows 4tb + j).  Octet q of the shifters takes m = q / 8,
// s = q % 8.  With the split the lo parts go to the same place part_bytes further on.
template <class Tr>
__device__ __forceinline__ void transpose_window_f32(const float* src, uint8_t* dst, int part_bytes, int window,
                                                     int tid, int valid, bool tf32) {
  static_assert(Tr::kCI == 32 && Tr::kShifters % 8 == 0, "eight 4-channel chunks per row, whole octets");
  const int ch = tid & 7, blocks = window / 4;
  const int octets = 8 * ((blocks + 7) / 8);
#pragma unroll 2
  for (int q = tid >> 3; q < octets; q += Tr::kShifters / 8) {
    const int tb = (q & ~7) + ((ch + q) & 7);
    if (tb >= blocks) continue;
    float4 v[4];
#pragma unroll
    for (int e = 0; e < 4; ++e) {
      const int c = 4 * ch + e;
      v[e] = c < valid ? *reinterpret_cast<const float4*>(src + c * window + 4 * tb) : make_float4(0.f, 0.f, 0.f, 0.f);
    }
    const float(*f)[4] = reinterpret_cast<const float(*)[4]>(v);
#pragma unroll
    for (int j = 0; j < 4; ++j) {
      uint32_t out[4], lo[4];
#pragma unroll
      for (int e = 0; e < 4; ++e) {
        if constexpr (Tr::kSplit) tf32_parts<true>(f[e][j], out[e], lo[e]);
        else out[e] = f32_bits(tf32 ? round_tf32(f[e][j]) : f[e][j]);
      }
      const int row = 4 * tb + j;
      uint8_t* chunk = dst + row * 128 + (swizzle_chunk(row, ch) << 4);
      *reinterpret_cast<uint4*>(chunk) = make_uint4(out[0], out[1], out[2], out[3]);
      if constexpr (Tr::kSplit) *reinterpret_cast<uint4*>(chunk + part_bytes) = make_uint4(lo[0], lo[1], lo[2], lo[3]);
    }
  }
}

// 16 bytes of one output row starting at time t, `left` = L - t > 0 steps still inside:
// one vector store when all of it is inside and the address is 16-byte aligned (y rows
// are whenever L * sizeof(T) is a multiple of 16), element by element otherwise.
template <typename T>
__device__ __forceinline__ void store_chunk(T* dst, uint4 val, int64_t left) {
  constexpr int kV = 16 / sizeof(T);
  if (left >= kV && reinterpret_cast<uintptr_t>(dst) % 16 == 0) {
    *reinterpret_cast<uint4*>(dst) = val;
    return;
  }
  const T* v = reinterpret_cast<const T*>(&val);
#pragma unroll
  for (int e = 0; e < kV; ++e)
    if (e < left) dst[e] = v[e];
}

// fp32 epilogue: each lane's pairs (output channel, two adjacent time steps) stored as
// 8-byte stores; L is even (fwd_tma_supports), so a pair is inside or outside as a whole.
template <typename T, int N>
__device__ __forceinline__ void store_tile_direct(const float (&acc)[N / 2], const float (&bias)[2], T* y,
                                                  const ConvParams& p, int o_base, int64_t t0, int lane) {
  static_assert(sizeof(T) == 4, "16-bit outputs are staged");
#pragma unroll
  for (int h = 0; h < 2; ++h) {
    const int o = o_base + (lane >> 2) + 8 * h;
    if (o >= p.cout_g) continue;
    T* row = y + o * p.sy_c;
#pragma unroll
    for (int j = 0; j < N / 8; ++j) {
      const int64_t t = t0 + 8 * j + 2 * (lane & 3);
      if (t >= p.L) break;
      const float2 v = make_float2(acc[4 * j + 2 * h] + bias[h], acc[4 * j + 2 * h + 1] + bias[h]);
      if (reinterpret_cast<uintptr_t>(row + t) % 8 == 0) {
        *reinterpret_cast<float2*>(row + t) = v;
      } else {
        row[t] = v.x;
        row[t + 1] = v.y;
      }
    }
  }
}

// 16-bit epilogue.  Stored straight from the accumulators, every warp instruction would
// touch 8 rows of y with 4 bytes each (v9/v10 profile: the epilogue ~16% of all samples
// while the block's tensor cores idle).  So each warp stages 64 bytes of time of its 16
// channels in shared memory (stage: its kStageBuffers 1 KB buffers, as a shared address and a
// pointer) and writes them out.  With a y map (map_y, coordinates of the warp's first
// channel row c1 and batch c2) one lane hands each slice to a TMA store, which reads it
// while the warp goes on (the v14 bf16 profile had the consumers ~19% of their time in
// the epilogue, most of it reading back and storing); otherwise the warp reads the slice
// back and stores it as 16-byte stores, 4 lanes per row.
template <class Tr, typename T, int NA>
__device__ __forceinline__ void store_tile_staged(const float (&acc)[NA], const float (&bias)[2], T* y,
                                                  const ConvParams& p, int o_base, int64_t t0, uint32_t stage0,
                                                  uint8_t* stage_ptr, int lane, const CUtensorMap* map_y, int c1,
                                                  int c2, uint32_t& stores) {
  static_assert(Tr::kStageRowBytes == 64, "rows of the TMA store's 64-byte swizzle");
  constexpr int kSlice = Tr::kStageRowBytes / sizeof(T);  // time steps per staged slice
#pragma unroll
  for (int sl = 0; sl < 2 * NA / kSlice; ++sl) {
    const int64_t ts = t0 + sl * kSlice;
    // `stores` counts the warp's TMA stores over all its tiles; they rotate over the
    // buffers, so this one was last read by the store kStageBuffers - 1 before the most
    // recent one.
    const uint32_t stage = map_y ? stage0 + (stores % Tr::kStageBuffers) * Tr::kWarpStageBytes : stage0;
#if CAUSALCONV_HAS_WGMMA
    if (map_y && (ts >= p.L || o_base >= p.cout_g)) break;  // nothing of the rest is inside y
    if (map_y && lane == 0) ptx::bulk_wait_group_read<Tr::kStageBuffers - 1>();
#endif
    __syncwarp();  // (without a map: the previous slice has been read back)
    // One 8x8 matrix per (column block, row half): lane t's packed pair is row t/4,
    // elements 2(t%4), 2(t%4)+1, the stmatrix fragment; matrix m of a store is row half
    // m%2 of column block 2*pair + m/2.
#pragma unroll
    for (int pair = 0; pair < kSlice / 16; ++pair) {
      uint32_t v[4];
#pragma unroll
      for (int m = 0; m < 4; ++m) {
        const int jj = sl * (kSlice / 8) + 2 * pair + (m >> 1), h = m & 1;
        v[m] = pack2(from_float<T>(acc[4 * jj + 2 * h] + bias[h]), from_float<T>(acc[4 * jj + 2 * h + 1] + bias[h]));
      }
      const int m = lane >> 3, row = 8 * (m & 1) + (lane & 7);
      ptx::stmatrix_x4(stage + swizzle64_offset(row, 2 * pair + (m >> 1)), v);
    }
#if CAUSALCONV_HAS_WGMMA
    if (map_y) {
      ptx::fence_proxy_async();  // the TMA store reads through the async proxy
      __syncwarp();
      if (lane == 0) {
        ptx::tma_store_3d(map_y, stage, static_cast<int>(ts), c1, c2);
        ptx::bulk_commit_group();
      }
      ++stores;
      continue;
    }
#endif
    __syncwarp();
    // Read back: 16 rows x 4 chunks of 16 bytes, two per lane.
#pragma unroll
    for (int k = 0; k < 2; ++k) {
      const int idx = lane + 32 * k, row = idx >> 2, chunk = idx & 3;
      const uint4 val = *reinterpret_cast<const uint4*>(stage_ptr + swizzle64_offset(row, chunk));
      const int o = o_base + row;
      const int64_t t = ts + chunk * Tr::kV;
      if (o < p.cout_g && t < p.L) store_chunk(y + o * p.sy_c + t, val, p.L - t);
    }
  }
}

template <typename T, int N, bool kSplit>
__global__ void __launch_bounds__(FwdTmaTraits<T, N, kSplit>::kThreads, 1)
    fwd_tma_kernel(const __grid_constant__ CUtensorMap map_x, const __grid_constant__ CUtensorMap map_y, ConvParams p,
                   FwdTmaPlan pl) {
  using Tr = FwdTmaTraits<T, N, kSplit>;
  extern __shared__ __align__(16) uint8_t smem_raw[];
#if CAUSALCONV_HAS_WGMMA
  ptx::griddep_launch_dependents();  // the channel split's reduction may start (dependent_launch.cuh)
  using Mma = wgmma::MmaSS<typename Elem<T>::Wg, N>;
  const uint32_t raw0 = ptx::smem_addr(smem_raw);
  const uint32_t base = (raw0 + 1023u) & ~1023u;  // swizzle atoms are 1024-byte aligned
  uint8_t* base_ptr = smem_raw + (base - raw0);
  const int nslots = pl.slots, nraw = pl.nraw;
  // [weight slots][x tiles][raw windows][epilogue staging][barriers], each buffer 1024-byte
  // aligned
  const uint32_t tiles_base = base + nslots * Tr::kSlotBytes;
  const uint32_t raw_base = tiles_base + Tr::kTiles * pl.tile_bytes;
  const uint32_t staging = raw_base + nraw * pl.raw_bytes;
  const uint32_t bars = staging + Tr::kStageBytes;
  auto wfull = [&](int w) { return bars + 8u * w; };                 // a tap's weights landed
  auto wempty = [&](int w) { return bars + 8u * (nslots + w); };     // consumers done with the tap
  auto ready = [&](int x) { return bars + 8u * (2 * nslots + x); };  // transposed tile written
  auto xempty = [&](int x) { return bars + 8u * (2 * nslots + Tr::kTiles + x); };
  auto rawfull = [&](int r) { return bars + 8u * (2 * nslots + 2 * Tr::kTiles + r); };
  auto rawempty = [&](int r) { return bars + 8u * (2 * nslots + 2 * Tr::kTiles + nraw + r); };
  const uint32_t skew_bar = bars + 8u * (2 * nslots + 2 * Tr::kTiles + 2 * nraw);

  const int wg = threadIdx.x >> 7, warp = threadIdx.x >> 5, lane = threadIdx.x & 31;
  if (threadIdx.x == 0) {
    for (int w = 0; w < nslots; ++w) {
      ptx::mbar_init(wfull(w), 1);
      ptx::mbar_init(wempty(w), Tr::kConsumerWarps);
    }
    for (int x = 0; x < Tr::kTiles; ++x) {
      ptx::mbar_init(ready(x), Tr::kShifters);
      ptx::mbar_init(xempty(x), Tr::kConsumerWarps);
    }
    for (int r = 0; r < nraw; ++r) {
      ptx::mbar_init(rawfull(r), 1);
      ptx::mbar_init(rawempty(r), Tr::kShifters);
    }
    ptx::mbar_init(skew_bar, 4);  // warpgroup 1's warps
    ptx::fence_mbar_init();
  }
  __syncthreads();

  if (wg == 0 || wg > Tr::kConsumers) {
    if (warp == 0) {
      if (lane != 0) return;
      // Producer: raw buffer r is reused once the shifters released it, weight slot w
      // once the consumers' MMAs on its tap retired.
      ptx::tma_prefetch_descriptor(&map_x);
      stagger_wait(pl.stagger, pl.n_items);
      const uint32_t raw_bytes = Tr::kCI * pl.window * static_cast<uint32_t>(sizeof(T));
      const uint32_t box_bytes = Tr::kCI * pl.box * static_cast<uint32_t>(sizeof(T));
      Ring wr, rr;  // weight-slot ring, raw-window ring
      bool image_ready = false;  // the weight image kernel ahead of this one has finished
      typename Tr::Walk walk(pl.sk);
      for (Segment seg; walk.next(pl.sk, seg);) {
        const WorkItem tc = decode_item(seg.tile, pl, p.groups, N);
        const int64_t w_tile = (static_cast<int64_t>(tc.g) * pl.n_ot + tc.ot) * pl.n_ic;
        for (int j = seg.u0, j_end = min(tc.S, seg.u1); j < j_end; ++j, rr.next(nraw)) {
          const int jc = j / pl.ngroups, ic = tc.ic0 + jc, k0 = (j - jc * pl.ngroups) * pl.tpg,
                    nt = min(pl.tpg, p.K - k0);
          // The raw window first: it waits only for the shifters, who then transpose
          // while the taps wait for their slots.
          ptx::mbar_wait(rawempty(rr.idx), rr.phase ^ 1);
          const int64_t a0 = floor_div(tc.t0 + static_cast<int64_t>(k0) * p.dilation + p.shift, Tr::kV) * Tr::kV;
          ptx::mbar_arrive_expect_tx(rawfull(rr.idx), raw_bytes);
          for (int bx = 0; bx < pl.boxes; ++bx)
            ptx::tma_load_3d(raw_base + rr.idx * pl.raw_bytes + bx * box_bytes, &map_x, static_cast<int>(a0) + bx * pl.box,
                             tc.g * p.cin_g + ic * Tr::kCI, static_cast<int>(tc.b), rawfull(rr.idx));
          const int64_t w_off = ((w_tile + ic) * p.K + k0) * Tr::kTapBytes;
          if (!image_ready) ptx::griddep_wait();  // after the first window's copy went out
          image_ready = true;
          for (int kk = 0; kk < nt; ++kk, wr.next(nslots)) {
            const uint32_t slot = base + wr.idx * Tr::kSlotBytes;
            const int64_t src = w_off + kk * Tr::kTapBytes;
            ptx::mbar_wait(wempty(wr.idx), wr.phase ^ 1);
            ptx::mbar_arrive_expect_tx(wfull(wr.idx), Tr::kSlotBytes);
            ptx::bulk_load(slot, static_cast<const uint8_t*>(pl.w) + src, Tr::kTapBytes, wfull(wr.idx));
            if constexpr (Tr::kSplit)
              ptx::bulk_load(slot + Tr::kTapBytes, static_cast<const uint8_t*>(pl.w_lo) + src, Tr::kTapBytes,
                             wfull(wr.idx));
          }
        }
      }
      return;
    }
    // Shifters: row r of the tile holds the kCI channels of time a0 + r.  16-bit types
    // move 8x8 blocks with the matrix-transpose instructions, fp32 4x4 blocks through
    // registers.
    const int tid = wg == 0 ? threadIdx.x - 32 : threadIdx.x - 128 * (Tr::kConsumers + 1) + WarpRoles<T>::kShifters;
    const bool tf32 = std::is_same_v<T, float> && p.precision != Precision::kNative;
    Ring xr, rr;
    typename Tr::Walk walk(pl.sk);
    for (Segment seg; walk.next(pl.sk, seg);) {
      const WorkItem tc = decode_item(seg.tile, pl, p.groups, N);
      for (int j = seg.u0, j_end = min(tc.S, seg.u1); j < j_end; ++j, xr.next(Tr::kTiles), rr.next(nraw)) {
        const int valid = p.cin_g - (tc.ic0 + j / pl.ngroups) * Tr::kCI;  // channels of the chunk inside the group
        ptx::mbar_wait(rawfull(rr.idx), rr.phase);
        ptx::mbar_wait(xempty(xr.idx), xr.phase ^ 1);
        if constexpr (sizeof(T) == 2) {
          static_assert(Tr::kExtraShifterGroups == 0, "16-bit shifters are warps 1-3 (shifter warp = warp - 1)");
          transpose_window_b16<Tr::kShifters / 32>(raw_base + rr.idx * pl.raw_bytes, tiles_base + xr.idx * pl.tile_bytes,
                                                   pl.window, warp - 1, lane, valid, pl.box,
                                                   Tr::kCI * pl.box * static_cast<uint32_t>(sizeof(T)));
        } else {
          transpose_window_f32<Tr>(
              reinterpret_cast<const float*>(base_ptr + (raw_base - base) + rr.idx * pl.raw_bytes),
              base_ptr + (tiles_base - base) + xr.idx * pl.tile_bytes, pl.part_bytes, pl.window, tid, valid, tf32);
        }
        ptx::fence_proxy_async();  // the MMAs read through the async proxy
        ptx::mbar_arrive(rawempty(rr.idx));
        ptx::mbar_arrive(ready(xr.idx));
      }
    }
    return;
  }

  // Consumers: warpgroup c owns output channels 64c .. 64c+63 of the tile's 128.  After
  // issuing a tap they wait for the previous one to retire and release its weight slot,
  // and the previous x tile once its last tap has retired: one lane per warp arrives.
  // With the split, a stage's MMAs accumulate in `chain`, which the stage's end waits
  // for and adds to acc (up to 4 taps x 4 steps x 3 products: chains of at most 48 MMAs).
  const int c = wg - 1, q = warp & 3;
  float acc[N / 2], part[N / 2];  // part: unused without the split
  float(&chain)[N / 2] = Tr::kSplit ? part : acc;
  uint32_t stores = 0;  // the warp's TMA stores of y so far
  // Skew: in lockstep both warpgroups reach a tile's end together and the tensor cores idle
  // through their epilogues.  With warpgroup 2 started pl.skew taps behind, each one's
  // epilogue overlaps the other's MMAs, which then run alone at the full rate; the rings
  // keep the distance bounded (the host keeps skew within the weight slots and x tiles
  // one warpgroup may hold alone).
  int skew_left = c == 0 ? pl.skew : 0;
  if (c == 1 && pl.skew > 0) ptx::mbar_wait(skew_bar, 0);
  Ring wr, xr;
  typename Tr::Walk walk(pl.sk);
  for (Segment seg; walk.next(pl.sk, seg);) {
    const WorkItem tc = decode_item(seg.tile, pl, p.groups, N);
#pragma unroll
    for (int i = 0; i < N / 2; ++i) chain[i] = acc[i] = 0.f;
    int prev_w = -1, done_x = -1;  // in flight: the previous tap's slot; the x tile it finished
    for (int j = seg.u0, j_end = min(tc.S, seg.u1); j < j_end; ++j, xr.next(Tr::kTiles)) {
      const int jc = j / pl.ngroups, k0 = (j - jc * pl.ngroups) * pl.tpg, nt = min(pl.tpg, p.K - k0);
      const int64_t ws0 = tc.t0 + static_cast<int64_t>(k0) * p.dilation + p.shift;
      const int off = static_cast<int>(ws0 - floor_div(ws0, Tr::kV) * Tr::kV);
      const uint32_t xt = tiles_base + xr.idx * pl.tile_bytes + off * 128;
      ptx::mbar_wait(ready(xr.idx), xr.phase);
      for (int kk = 0; kk < nt; ++kk, wr.next(nslots)) {
        ptx::mbar_wait(wfull(wr.idx), wr.phase);
        issue_tap<Mma, Tr>(chain, base + wr.idx * Tr::kSlotBytes + c * 64 * 128, xt + kk * p.dilation * 128,
                           pl.part_bytes);
        ptx::wgmma_wait<1>();  // the previous tap's MMAs have retired
        if (lane == 0) {
          if (prev_w >= 0) ptx::mbar_arrive(wempty(prev_w));
          if (done_x >= 0) ptx::mbar_arrive(xempty(done_x));
        }
        prev_w = wr.idx;
        done_x = -1;
        if (skew_left > 0 && --skew_left == 0 && lane == 0) ptx::mbar_arrive(skew_bar);
      }
      done_x = xr.idx;
      if constexpr (Tr::kSplit) {
        ptx::wgmma_wait<0>();
        if (lane == 0) {
          ptx::mbar_arrive(wempty(prev_w));
          ptx::mbar_arrive(xempty(done_x));
        }
        prev_w = done_x = -1;
#pragma unroll
        for (int i = 0; i < N / 2; ++i) {
          acc[i] += part[i];
          part[i] = 0.f;
        }
      }
    }
    if constexpr (!Tr::kSplit) {
      ptx::wgmma_wait<0>();
      if (lane == 0) {
        ptx::mbar_arrive(wempty(prev_w));
        ptx::mbar_arrive(xempty(done_x));
      }
    }
    if constexpr (Tr::kStreamK) {  // a tail hands its sums to the block that runs the tile's head
      float(&acc2)[1][N / 2] = *reinterpret_cast<float(*)[1][N / 2]>(&acc);
      if (seg.u0 > 0) {
        store_partial(pl.sk, c, acc2);
        continue;
      }
      if (seg.u1 < pl.sk.units) add_partial(pl.sk, c, acc2);
    }

    // acc[4j + e]: output channel 16q + lane/4 (+8 for e >= 2), time 8j + 2(lane%4) + (e&1).
    const int o_base = tc.ot * Tr::kBM + c * 64 + q * 16;  // the warp's first output channel
    float bias[2] = {0.f, 0.f};
#pragma unroll
    for (int h = 0; h < 2; ++h) {
      const int o = o_base + (lane >> 2) + 8 * h;
      if (p.bias && o < p.cout_g && tc.cs == 0) bias[h] = to_float(static_cast<const T*>(p.bias)[tc.g * p.cout_g + o]);
    }
    // With the channel split (fp32 only) the partial sums go to slice cs of the workspace,
    // laid out as y (contiguous: fwd_tma_supports).
    T* y = (pl.csplits > 1 ? reinterpret_cast<T*>(p.ws) + tc.cs * p.B * p.sy_b : static_cast<T*>(p.y)) +
           tc.b * p.sy_b + static_cast<int64_t>(tc.g * p.cout_g) * p.sy_c;
    if constexpr (Tr::kStaged) {
      const uint32_t stage = staging + (warp - 4) * Tr::kStageBuffers * Tr::kWarpStageBytes;
      store_tile_staged<Tr>(acc, bias, y, p, o_base, tc.t0, stage, base_ptr + (stage - base), lane,
                            pl.tma_store ? &map_y : nullptr, tc.g * p.cout_g + o_base, static_cast<int>(tc.b), stores);
    } else {
      store_tile_direct<T, N>(acc, bias, y, p, o_base, tc.t0, lane);
    }
  }
  // The staging buffers must outlive the stores that read them, and y must be written
  // when the kernel ends.
  if (Tr::kStaged && pl.tma_store && lane == 0) ptx::bulk_wait_group_all();
#else
  __trap();  // dispatch only picks this kernel for sm_90a binaries
#endif
}

// Tiles of time tile n: 128-channel output tiles x time tiles x groups x batch.
int64_t tile_count(const ConvParams& p, int n) {
  return ceil_div(p.cout_g, WarpRoles<float>::kBM) * ceil_div(p.L, n) * p.groups * p.B;
}

// Shared-memory layout of one launch for time tile n; slots == 0 when none fits.
template <typename T, int N, bool kSplit>
FwdTmaPlan make_plan(const ConvParams& p, int smem_limit) {
  using Tr = FwdTmaTraits<T, N, kSplit>;
  FwdTmaPlan pl{};
  pl.n_ot = static_cast<int>(ceil_div(p.cout_g, Tr::kBM));
  pl.n_ic = static_cast<int>(ceil_div(p.cin_g, Tr::kCI));
  pl.n_tt = ceil_div(p.L, N);
  pl.n_tiles = tile_count(p, N);
  const int avail = smem_limit - 1024 - Tr::kBarrierBytes - Tr::kStageBytes;
  for (int tpg = std::min(p.K, Tr::kMaxTaps); tpg >= 1; --tpg) {
    // A multiple of 8 elements (not only of kV): fp32's transpose needs it to be free of
    // bank conflicts.  Two boxes split the span evenly, each a conflict-free pitch.
    const int boxes = N > 192 ? 2 : 1;
    const int64_t span = Tr::kV - 1 + static_cast<int64_t>(tpg - 1) * p.dilation + N;
    int64_t box = ceil_div(ceil_div(span, boxes), 8) * 8;
    if (box > 256) continue;  // the TMA box limit: wide spans take fewer taps per stage
    if constexpr (sizeof(T) == 2) box = conflict_free_window_b16(static_cast<int>(box));
    const int64_t window = box * boxes;
    const int part = static_cast<int>(ceil_div(window * 128, 1024) * 1024);
    const int tile = part * Tr::kParts;
    const int raw = static_cast<int>(ceil_div(Tr::kCI * window * static_cast<int64_t>(sizeof(T)), 1024) * 1024);
    const int slots = std::min(Tr::kMaxSlots, (avail - Tr::kTiles * tile - Tr::kRaw * raw) / Tr::kSlotBytes);
    if (slots < 2) continue;  // one tap retiring while the next runs
    pl.tpg = tpg;
    pl.window = static_cast<int>(window);
    pl.box = static_cast<int>(box);
    pl.boxes = boxes;
    pl.part_bytes = part;
    pl.tile_bytes = tile;
    pl.raw_bytes = raw;
    pl.nraw = Tr::kRaw;
    pl.slots = slots;
    break;
  }
  pl.ngroups = pl.tpg ? static_cast<int>(ceil_div(p.K, pl.tpg)) : 0;
  pl.csplits = p.csplits;
  pl.ic_per = static_cast<int>(ceil_div(pl.n_ic, p.csplits));
  pl.n_items = pl.n_tiles * p.csplits;
  return pl;
}

template <typename T, int N, bool kSplit>
void launch(const ConvParams& p, at::ScalarType dtype, int sms, cudaStream_t stream) {
  using Tr = FwdTmaTraits<T, N, kSplit>;
  constexpr Precision kImage =
      kSplit ? Precision::kTF32x3 : (std::is_same_v<T, float> ? Precision::kTF32 : Precision::kNative);
  const int smem_limit = max_smem_optin();
  FwdTmaPlan pl = make_plan<T, N, kSplit>(p, smem_limit);
  CAUSALCONV_CHECK(pl.slots >= 2, "causalconv: no TMA forward pipeline fits dilation ", p.dilation);
  CAUSALCONV_CHECK(p.csplits == 1 || (!Tr::kStaged && p.ws != nullptr && (pl.ic_per * (p.csplits - 1) < pl.n_ic)),
                   "causalconv: a channel split of ", p.csplits, " needs fp32, a workspace and a chunk per split");
  CAUSALCONV_CHECK(p.B <= INT32_MAX && p.C_in <= INT32_MAX && p.C_out <= INT32_MAX &&
                       p.L + static_cast<int64_t>(p.K) * p.dilation <= INT32_MAX,
                   "causalconv: problem too large for 32-bit TMA coordinates");
  const size_t smem = static_cast<size_t>(pl.slots) * Tr::kSlotBytes + static_cast<size_t>(Tr::kTiles) * pl.tile_bytes +
                      static_cast<size_t>(pl.nraw) * pl.raw_bytes + Tr::kStageBytes + Tr::kBarrierBytes + 1024;

  const int64_t grid = std::min<int64_t>(pl.n_items, sms);
  // Stream-K (CAUSALCONV_STREAM_K=2: every item's stages shared out over the grid), for
  // the 16-bit types (whose items are whole tiles: the channel split is fp32's).
  const int sk_mode = Tr::kStreamK && stream_k_mode() == 2 ? 2 : 0;
  pl.sk = plan_stream_k(pl.n_items, pl.ic_per * pl.ngroups, grid, Tr::kConsumers, N / 2, sk_mode);

  // The image (its hi and lo parts with the split), and Stream-K's partial sums and flags
  // after it, live in this stream's scratch buffer, leased until the kernel is enqueued;
  // the flags are zeroed before the image kernel, so that the forward stays its direct
  // follower (launch_dependent).  The image is whole 16 KB taps: the partials stay aligned.
  const int64_t image = weight_image_elems<T, Tr::kBM>(p);
  const size_t image_bytes = static_cast<size_t>(image) * Tr::kParts * sizeof(T);
  ScratchLease scratch(image_bytes + pl.sk.workspace_bytes(), stream);
  T* hi = static_cast<T*>(scratch.data());
  T* lo = kSplit ? hi + image : nullptr;
  attach_stream_k_workspace(pl.sk, static_cast<uint8_t*>(scratch.data()) + image_bytes, stream);
  write_weight_image<T, kImage, Tr::kBM>(p, hi, lo, stream);
  pl.w = hi;
  pl.w_lo = lo;

  const CUtensorMap map_x = make_bcl_tensor_map(p.x, dtype, p.B, p.C_in, p.L, p.sx_b, p.sx_c, pl.box, Tr::kCI);
  // TMA stores of 16 channels x 64 bytes write whole boxes, clipped only at the tensor's
  // bounds, so a warp's 16 channels must not straddle two groups; y's rows must be
  // 16-byte aligned.
  const int64_t row_bytes = p.L * static_cast<int64_t>(sizeof(T));
  pl.tma_store = Tr::kStaged && (p.groups == 1 || p.cout_g % 16 == 0) && row_bytes % 16 == 0 &&
                 reinterpret_cast<uintptr_t>(p.y) % 16 == 0;
  CUtensorMap map_y{};
  if (pl.tma_store)
    map_y = make_bcl_tensor_map(p.y, dtype, p.B, p.C_out, p.L, p.sy_b, p.sy_c, Tr::kStageRowBytes / sizeof(T), 16, true);
  // At most what warpgroup 1 can issue before warpgroup 2 releases anything: the weight
  // slots, and the taps of the first kTiles stages (x tiles), which are within the first
  // tile (every block has at least one).
  int first_taps = 0;
  const int first_stages = (pl.n_ic - (p.csplits - 1) * pl.ic_per) * pl.ngroups;  // the fewest of any item
  for (int j = 0; j < std::min(Tr::kTiles, first_stages); ++j)
    first_taps += std::min(pl.tpg, p.K - (j % pl.ngroups) * pl.tpg);
  // (A Stream-K tail may hold fewer: no skew then.)
  pl.skew = pl.sk.sk_units > 0 ? 0 : std::min({consumer_skew(), pl.slots, first_taps});
  const double item_flops = 2.0 * Tr::kBM * N * pl.ic_per * Tr::kCI * p.K;
  pl.stagger = start_stagger(tile_time_ns(item_flops, sizeof(T), Tr::kSplit ? 3 : 1));
  auto kernel = fwd_tma_kernel<T, N, kSplit>;
  allow_max_smem<Tr>(kernel);  // one instantiation per traits type
  launch_dependent("conv_fwd_tma", kernel, grid, Tr::kThreads, smem, stream, map_x, map_y, p, pl);
}

// Time tile: the fewest tile rounds over the multiprocessors, weighted by the tile's
// length plus a fixed per-stage cost (~32 columns' worth), the longest tile on ties.  The
// split's registers allow at most 128; 256 is for the 16-bit types (unless
// CAUSALCONV_WIDE_TILES=0).
int pick_time_tile(const ConvParams& p, int sms, bool split, bool wide = false) {
  const int longest = split ? 128 : wide ? 256 : 192;
  int best = longest;
  int64_t best_cost = -1;
  for (int n : {256, 192, 128, 64}) {
    if (n > longest) continue;
    const int64_t cost = ceil_div(tile_count(p, n), sms) * (n + 32);
    if (best_cost < 0 || cost < best_cost) {
      best = n;
      best_cost = cost;
    }
  }
  return best;
}

// Channel split: a grid of fewer tiles than a quarter of the multiprocessors leaves most of
// them idle while each block walks every input-channel chunk in series (L = 64, 256 -> 256:
// two tiles, ~15 us of kernel for 34 MFLOP, v18 on an H100).  Up to sms / tiles blocks then
// share a tile, each over a run of chunks, and one more launch adds their fp32 partial
// sums.  fp32 only: its epilogue stores fp32 pairs straight from the accumulators, which
// the workspace takes as y would (the 16-bit types stage converted halves).  The
// workspace stays below 2^26 floats.  CAUSALCONV_CHANNEL_SPLIT=0 turns it off.
int channel_splits(const ConvParams& p, at::ScalarType dtype, int sms) {
  if (dtype != at::kFloat || !channel_split_enabled()) return 1;
  const int64_t tiles = tile_count(p, pick_time_tile(p, sms, p.precision == Precision::kTF32x3));
  if (tiles * 4 > sms) return 1;
  const int64_t n_ic = ceil_div(p.cin_g, kRowElems<float>);
  int64_t splits = std::min<int64_t>(n_ic, sms / tiles);
  splits = std::min<int64_t>(splits, std::max<int64_t>(1, (int64_t{1} << 26) / (p.B * p.C_out * p.L)));
  if (splits <= 1) return 1;
  return static_cast<int>(ceil_div(n_ic, ceil_div(n_ic, splits)));  // no split without chunks
}

// The one place a run-time time tile and precision become a kernel template.
template <typename T>
void launch_typed(const ConvParams& p, at::ScalarType dtype, int sms, cudaStream_t stream) {
  if constexpr (std::is_same_v<T, float>) {
    if (p.precision == Precision::kTF32x3) {
      switch (pick_time_tile(p, sms, true)) {
        case 64: return launch<T, 64, true>(p, dtype, sms, stream);
        default: return launch<T, 128, true>(p, dtype, sms, stream);
      }
    }
  }
  constexpr bool kHalf = sizeof(T) == 2;
  const bool wide = wide_tiles_enabled();  // read for every dtype, so that a bad value always says so
  switch (pick_time_tile(p, sms, false, kHalf && wide)) {
    case 64: return launch<T, 64, false>(p, dtype, sms, stream);
    case 128: return launch<T, 128, false>(p, dtype, sms, stream);
    case 256:
      if constexpr (kHalf) return launch<T, 256, false>(p, dtype, sms, stream);
      [[fallthrough]];
    default: return launch<T, 192, false>(p, dtype, sms, stream);
  }
}

}  // namespace
}  // namespace tc

bool fwd_tma_supports(const ConvParams& p, at::ScalarType dtype) {
  const int64_t elem = c10::elementSize(dtype);
  return p.sx_t == 1 && (p.sx_c * elem) % 16 == 0 && (p.sx_b * elem) % 16 == 0 &&
         p.L % 2 == 0 && reinterpret_cast<uintptr_t>(p.x) % 16 == 0 && p.sy_c == p.L && p.sy_b == p.C_out * p.L;
}

int fwd_tma_channel_splits(const ConvParams& p, at::ScalarType dtype, int sms) {
  return fwd_tma_supports(p, dtype) ? tc::channel_splits(p, dtype, sms) : 1;
}

void launch_fwd_tma(const ConvParams& p, at::ScalarType dtype, int sms, cudaStream_t stream) {
  CAUSALCONV_CHECK(fwd_tma_supports(p, dtype), "causalconv: the TMA forward does not cover this configuration");
  switch (dtype) {
    case at::kFloat: return tc::launch_typed<float>(p, dtype, sms, stream);
    case at::kHalf: return tc::launch_typed<__half>(p, dtype, sms, stream);
    case at::kBFloat16: return tc::launch_typed<__nv_bfloat16>(p, dtype, sms, stream);
    default: CAUSALCONV_CHECK(false, "causalconv: the TMA forward supports float32, float16, bfloat16; got ", dtype);
  }
}

}  // namespace causalconv
