// fp32 (TF32) forward with x as the register operand, read at each tap's offset straight
// from a raw TMA window (sm_90a: TMA and bulk copies, mbarriers, wgmma with A in
// registers):
//   y[o, t] = bias[o] + sum_k sum_i w_k[o, i] * x[i, t + k*dilation + shift]
// as a GEMM per tile with the roles of fwd_tma.cu's swapped: M = time (kMI x 64 steps per
// consumer warpgroup, each warpgroup its own half of the tile), N = 128 output channels
// (64 for groups of 64 or fewer unless CAUSALCONV_RS_NARROW_TILES=0), reduced over (input
// channel, tap) in chunks of 32 channels.
//
// Why: fwd_tma.cu reads x as the B operand from shared memory, K-major, which x's layout
// is not, so shifter warps transpose every raw window into a swizzled tile first (~19 KB
// of the ~100 KB of shared-memory traffic per tap and block, and a barrier the consumers
// wait on).  As the A operand in registers, x needs no transpose: the fragment element
// (time row, channel column) is one 4-byte load from the raw window [channel][time] at the
// row's time plus the tap's offset, with no alignment to keep, rounded to TF32 in
// registers.  The weights are the B operand, N = output channels, K-major: the same
// weight image and one-tap ring as fwd_tma.cu.  Per tap and block (256 steps x 128
// channels x 32 input channels, 2.1 MFLOP): wgmma's weight reads 64 KB, the fragment
// loads 32 KB, the weight copy 16 KB, the raw windows ~9 KB: ~120 KB, where fwd_tma.cu
// moves ~130 KB for the same work.
//
// Raw windows: one TMA box per consumer warpgroup (its time half plus the taps' span,
// which one 256-element box could not hold for the whole tile), rows `window` elements
// apart with window = 8 (mod 16): the fragment's 32 lanes read time steps g and channels c
// (lane = 4g + c), words c * window + g, which then fall in 32 distinct banks.
//
// Roles: one producer thread issues the copies (raw windows first, then the stage's
// taps' weights into their slots); warps 1-3 have no work (there is nothing to transpose)
// and give their registers to the consumers; warpgroups 1-2 issue the MMAs, one commit
// group per k-step, kBufs in flight (fragment_depth()): the fragments of k-step j load
// while groups j - kBufs + 1 .. j - 1 run, into the registers group j - kBufs read.  Persistent grid, rings running on across tiles,
// every role walking the same (tile, stage, tap) sequence as in fwd_tma.cu.  The epilogue
// stores from the accumulators: a warp's store covers 4 output rows x 32 bytes of time.
// With CAUSALCONV_STREAM_K=1 the last waves' tiles are cut into segments of (chunk, tap)
// units, a cut tile's tail handing its partial sums to the head (stream_k.cuh).
// With CAUSALCONV_RS_MULTICAST=1 the blocks run in clusters of two on tiles of the same
// weights (neighbouring time tiles), each reading half of every weight tap from L2 and
// multicasting it into both blocks' slot: the weights' L2 traffic halves (at 256 steps per
// tile the weights are ~65% of the forward's L2 reads), a slot being refilled only once
// the consumers of both blocks have released it.
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

template <int MI, int Bufs, int N>
struct FwdRsTraits : WarpRoles<float> {
  static constexpr int kMI = MI;                             // m64 instructions per warpgroup and k-step
  static constexpr int kBufs = Bufs;                         // k-steps of fragments in flight
  static constexpr int kHalf = 64 * kMI;                     // time steps per consumer warpgroup
  static constexpr int kN = N;                               // output channels per tile (the image's tiles)
  static constexpr int kTile = kHalf * WarpRoles<float>::kConsumers;  // time steps per tile
  static constexpr int kCI = 32;                             // input channels per stage
  static constexpr int kKSteps = kCI / 8;
  static constexpr int kTapBytes = kN * 128;                 // one tap of the weight image
  static constexpr int kMaxTaps = 4;                         // taps per stage
  static constexpr int kMaxRaw = 4, kMaxSlots = 12;          // ring depths (at most): raw windows, weight taps
  static constexpr int kBarrierBytes = 8 * (2 * (kMaxRaw + kMaxSlots) + 1);  // + the skew barrier
  static constexpr int kCopyRegs = 40, kMmaRegs = 232;      // setmaxnreg budgets, as in wgrad_rs.cu
  // Epilogue through TMA stores (FwdRsPlan::tma_store): a slice is 16 time steps (one
  // warp's rows of an instruction row) x 32 output channels, 64-byte rows; two per warp.
  static constexpr int kSliceSteps = 16, kSliceChannels = 32;
  static constexpr int kSliceBytes = kSliceChannels * kSliceSteps * 4;
  static constexpr int kStageBytes = WarpRoles<float>::kConsumerWarps * 2 * kSliceBytes;
  static_assert(kSliceSteps * 4 == 64, "a slice row is one 64-byte swizzle row");
  static_assert(kN % kSliceChannels == 0, "whole slices per output-channel tile");
  static_assert(kCopyRegs * 128 + kMmaRegs * 256 <= 65536, "the register file");
  static_assert(kKSteps % kBufs == 0, "a k-step's fragment buffer is its index mod kBufs in every tap");
};

struct FwdRsPlan {
  const void* w;   // the weight image (128-row output-channel tiles)
  int n_ot, n_ic;  // output-channel tiles, input-channel chunks (per group)
  int tpg, ngroups;  // taps per stage, stages per chunk
  int window;      // raw row pitch (elements): a warpgroup's time half, the taps' span, alignment
  int half_bytes;  // one warpgroup's raw window
  int raw_bytes;   // both, a multiple of 1024
  int slots;       // weight-tap ring depth
  int raws;        // raw-window ring depth
  bool split_feed; // windows and weights issued by two producer threads (rs_split_feed())
  bool tma_store;  // the epilogue through shared memory and TMA stores (rs_tma_store())
  bool pair;       // clusters of two blocks sharing the weight copies (rs_multicast()): the
                   // walk's tiles are pairs, rank r of the cluster taking time slot 2i + r
  int skew;        // taps consumer warpgroup 1 issues before warpgroup 2 starts (fwd_tma.cu's knob)
  Stagger stagger; // the start-stagger knob (tc_common.cuh)
  int64_t n_tt, n_tiles;  // time tiles; tiles (pairs of tiles with pair) the blocks walk
  int64_t n_bt;           // (batch, time tile) slots per group and output-channel tile
  StreamKPlan sk;  // which blocks run which tiles, whole or in segments (stream_k.cuh)
};

// The tile a (whole or partial) segment belongs to: output-channel tile, first time step,
// group and batch, in the order the grid walks them (output-channel tile fastest, so that
// the blocks sharing an x window run it together).  With pl.pair the walk's index is a
// pair of tiles of one group and output-channel tile (they read the same weights) in
// consecutive (batch, time tile) slots, `rank` choosing one; an odd slot count leaves the
// last pair a tile past y's end, which reads zeros and stores nothing.
struct RsTile {
  int ot, g;
  int64_t t0, b;
};
template <int kTile>
__device__ __forceinline__ RsTile decode_tile(int64_t tile, const FwdRsPlan& pl, int groups, uint32_t rank) {
  RsTile d;
  d.ot = static_cast<int>(tile % pl.n_ot);
  if (pl.pair) {
    const int64_t rest = tile / pl.n_ot, pairs = (pl.n_bt + 1) / 2;
    const int64_t bt = rest % pairs * 2 + rank;
    d.g = static_cast<int>(rest / pairs);
    d.b = bt < pl.n_bt ? bt / pl.n_tt : 0;
    d.t0 = (bt < pl.n_bt ? bt % pl.n_tt : pl.n_tt) * kTile;
    return d;
  }
  d.t0 = (tile / pl.n_ot % pl.n_tt) * kTile;
  const int64_t rest = tile / pl.n_ot / pl.n_tt;
  d.g = static_cast<int>(rest % groups);
  d.b = rest / groups;
  return d;
}

// A segment's units are (input-channel chunk, tap) pairs, unit = ic * K + k, walked stage
// by stage as a whole tile is: stage j holds chunk j / ngroups and taps k0 .. k0 + nt - 1,
// of which taps kk_lo .. kk_hi - 1 (counted from k0) fall in the segment.
struct StageTaps {
  int ic, k0, kk_lo, kk_hi;
};
__device__ __forceinline__ int first_stage(int u, int K, int tpg, int ngroups) { return u / K * ngroups + u % K / tpg; }
__device__ __forceinline__ StageTaps stage_taps(int j, const Segment& seg, int K, int tpg, int ngroups) {
  StageTaps st;
  st.ic = j / ngroups;
  st.k0 = (j - st.ic * ngroups) * tpg;
  const int u = st.ic * K + st.k0;
  st.kk_lo = max(0, seg.u0 - u);
  st.kk_hi = min(min(tpg, K - st.k0), seg.u1 - u);
  return st;
}

#if CAUSALCONV_HAS_WGMMA
// The epilogue through shared memory (FwdRsPlan::tma_store).  Warp q of a consumer
// warpgroup holds, per instruction row mi, 16 time steps (from t_warp + 64mi) of all the
// tile's output channels: acc[mi][4jj + 2h + e] is time gl + 8h, channel 8jj + 2cl + e
// (lane = 4gl + cl).  Each slice of 32 channels goes to one of the warp's two buffers,
// channel rows of 64 bytes in the 64-byte swizzle, and lane 0 hands it to a TMA store,
// which writes it to y while the warp goes on, clipped at y's bounds (rows past the
// group are past C_out: make_plan allows this path only then).  The buffer is reused once
// the store two back has read it.
template <class Tr>
__device__ __forceinline__ void store_tile_tma(const float (&acc)[Tr::kMI][Tr::kN / 2], const ConvParams& p,
                                               const CUtensorMap* map_y, uint32_t stage0, uint8_t* stage0_ptr,
                                               int ot, int64_t t_warp, int g, int b, int lane, uint32_t& stores) {
  const int gl = lane >> 2, cl = lane & 3;
#pragma unroll
  for (int cb = 0; cb < Tr::kN / Tr::kSliceChannels; ++cb) {
    const int o_base = ot * Tr::kN + cb * Tr::kSliceChannels;
    if (o_base >= p.cout_g) break;
    float bias[4][2];  // loaded before the slice's stores, as the direct epilogue does
#pragma unroll
    for (int jj = 0; jj < 4; ++jj) {
#pragma unroll
      for (int e = 0; e < 2; ++e) {
        const int o = o_base + 8 * jj + 2 * cl + e;
        bias[jj][e] = p.bias && o < p.cout_g ? static_cast<const float*>(p.bias)[g * p.cout_g + o] : 0.f;
      }
    }
#pragma unroll
    for (int mi = 0; mi < Tr::kMI; ++mi) {
      const int64_t ts = t_warp + 64 * mi;
      if (ts >= p.L) break;
      const int buf = stores & 1;
      if (lane == 0) ptx::bulk_wait_group_read<1>();
      __syncwarp();
      uint8_t* stage = stage0_ptr + buf * Tr::kSliceBytes;
#pragma unroll
      for (int jj = 0; jj < 4; ++jj) {
#pragma unroll
        for (int e = 0; e < 2; ++e) {
#pragma unroll
          for (int h = 0; h < 2; ++h) {
            const int row = 8 * jj + 2 * cl + e, tt = gl + 8 * h;
            *reinterpret_cast<float*>(stage + swizzle64_offset(row, tt >> 2) + 4 * (tt & 3)) =
                acc[mi][4 * (4 * cb + jj) + 2 * h + e] + bias[jj][e];
          }
        }
      }
      ptx::fence_proxy_async();  // the TMA store reads through the async proxy
      __syncwarp();
      if (lane == 0) {
        ptx::tma_store_3d(map_y, stage0 + buf * Tr::kSliceBytes, static_cast<int>(ts), g * p.cout_g + o_base, b);
        ptx::bulk_commit_group();
      }
      ++stores;
    }
  }
}
#endif

#if CAUSALCONV_HAS_WGMMA
// One block's shared memory: [weight slots][raw windows][epilogue staging, with
// tma_store][barriers], the slots and atoms 1024-byte aligned.
struct RsSmem {
  uint32_t base, raw_base, staging, bars;
  int slots, raws;
  __device__ __forceinline__ uint32_t wfull(int w) const { return bars + 8u * w; }
  __device__ __forceinline__ uint32_t wempty(int w) const { return bars + 8u * (slots + w); }
  __device__ __forceinline__ uint32_t rawfull(int r) const { return bars + 8u * (2 * slots + r); }
  __device__ __forceinline__ uint32_t rawempty(int r) const { return bars + 8u * (2 * slots + raws + r); }
  __device__ __forceinline__ uint32_t skew_bar() const { return bars + 8u * (2 * slots + 2 * raws); }
};

// Producers: raw buffer r is reused once both consumers' groups that read it retired,
// weight slot w once the MMAs on its tap retired (in both blocks of a pair, each of which
// copies half of every tap into both).  With split_feed, thread 0 issues the windows and
// warp 1's first thread the weights, so that the weight ring fills as far ahead as its
// depth, not only as far as the window ring lets one thread get.
template <class Tr>
__device__ __forceinline__ void produce(const CUtensorMap& map_x, const ConvParams& p, const FwdRsPlan& pl,
                                        const RsSmem& sm, bool windows, bool weights, uint32_t rank) {
  const uint32_t part = pl.pair ? Tr::kTapBytes / 2 : Tr::kTapBytes;  // the bytes of a tap this block reads
  if (windows) ptx::tma_prefetch_descriptor(&map_x);
  stagger_wait(pl.stagger, pl.n_tiles);
  Ring wr, rr;
  SegmentWalk walk(pl.sk);
  bool image_ready = false;  // the weight image kernel ahead of this one has finished
  for (Segment seg; walk.next(pl.sk, seg);) {
    const RsTile d = decode_tile<Tr::kTile>(seg.tile, pl, p.groups, rank);
    const int ot = d.ot, g = d.g, b = static_cast<int>(d.b);
    const int64_t t0 = d.t0;
    const int64_t w_tile = (static_cast<int64_t>(g) * pl.n_ot + ot) * pl.n_ic;
    const int j_end = first_stage(seg.u1 - 1, p.K, pl.tpg, pl.ngroups) + 1;
    for (int j = first_stage(seg.u0, p.K, pl.tpg, pl.ngroups); j < j_end; ++j, rr.next(pl.raws)) {
      const StageTaps st = stage_taps(j, seg, p.K, pl.tpg, pl.ngroups);
      const int ic = st.ic, k0 = st.k0;
      if (windows) {
        ptx::mbar_wait(sm.rawempty(rr.idx), rr.phase ^ 1);
        const int64_t a0 = floor_div(t0 + static_cast<int64_t>(k0) * p.dilation + p.shift, 4) * 4;
        const uint32_t dst = sm.raw_base + rr.idx * pl.raw_bytes;
        ptx::mbar_arrive_expect_tx(sm.rawfull(rr.idx), 2 * pl.half_bytes);
        for (int h = 0; h < 2; ++h)
          ptx::tma_load_3d(dst + h * pl.half_bytes, &map_x, static_cast<int>(a0 + h * Tr::kHalf),
                           g * p.cin_g + ic * Tr::kCI, b, sm.rawfull(rr.idx));
      }
      if (!weights) continue;
      const int64_t w_off = ((w_tile + ic) * p.K + k0) * Tr::kTapBytes;
      if (!image_ready) ptx::griddep_wait();  // after the first window's copy went out, if one thread issues both
      image_ready = true;
      for (int kk = st.kk_lo; kk < st.kk_hi; ++kk, wr.next(pl.slots)) {
        ptx::mbar_wait(sm.wempty(wr.idx), wr.phase ^ 1);
        ptx::mbar_arrive_expect_tx(sm.wfull(wr.idx), Tr::kTapBytes);
        // The whole tap arrives: this block's part and, with pair, the other block's.
        const uint8_t* src = static_cast<const uint8_t*>(pl.w) + w_off + kk * Tr::kTapBytes + rank * part;
        const uint32_t dst = sm.base + wr.idx * Tr::kTapBytes + rank * part;
        if (pl.pair) ptx::bulk_load_multicast(dst, src, part, sm.wfull(wr.idx), 0x3);
        else ptx::bulk_load(dst, src, part, sm.wfull(wr.idx));
      }
    }
  }
}

// Consumers: warpgroup c owns time steps kHalf*c .. of the tile and its raw window half.
template <class Tr>
__device__ __forceinline__ void consume(const CUtensorMap& map_y, const ConvParams& p, const FwdRsPlan& pl,
                                        const RsSmem& sm, uint8_t* smem_raw, uint32_t raw0, uint32_t rank) {
  using Mma = wgmma::Mma<wgmma::Tf32, Tr::kN>;
  const int wg = threadIdx.x >> 7, warp = threadIdx.x >> 5, lane = threadIdx.x & 31;
  // A weight slot's release goes to both blocks of a pair: either block's next copy into it waits for both.
  auto release_slot = [&](int w) {
    ptx::mbar_arrive(sm.wempty(w));
    if (pl.pair) ptx::mbar_arrive_cluster(sm.wempty(w), rank ^ 1u);
  };
  // Lane 4g + cl of warp q holds A rows (time) 64mi + 16q + g and + 8, columns (input
  // channels) 8ks + cl and + 4: byte offsets from the half's start below.
  const int c = wg - 1, q = warp & 3, gl = lane >> 2, cl = lane & 3;
  const uint32_t lane_off = static_cast<uint32_t>(cl * pl.window + 16 * q + gl) * 4u + c * pl.half_bytes;
  const uint32_t ch4 = static_cast<uint32_t>(4 * pl.window) * 4u;  // columns + 4: 4 channels on
  float acc[Tr::kMI][Tr::kN / 2];
  uint32_t frag[Tr::kBufs][Tr::kMI][4];  // k-step j's in frag[j % kBufs]
  Ring wr, rr;
  int prev_w = -1, prev_r = -1;  // in flight: the previous tap's weight slot; the raw buffer of the stage it ended
  int skew_left = c == 0 ? pl.skew : 0;  // as in fwd_tma.cu
  const uint32_t stage0 = sm.staging + (warp - 4) * 2 * Tr::kSliceBytes;  // this warp's two slice buffers
  uint32_t stores = 0;  // the warp's TMA stores so far: they alternate between its buffers
  if (c == 1 && pl.skew > 0) ptx::mbar_wait(sm.skew_bar(), 0);
  SegmentWalk walk(pl.sk);
  for (Segment seg; walk.next(pl.sk, seg);) {
    const RsTile d = decode_tile<Tr::kTile>(seg.tile, pl, p.groups, rank);
    const int ot = d.ot, g = d.g;
    const int64_t t0 = d.t0, b = d.b;
#pragma unroll
    for (int mi = 0; mi < Tr::kMI; ++mi) {
#pragma unroll
      for (int i = 0; i < Tr::kN / 2; ++i) acc[mi][i] = 0.f;
    }
    const int j_end = first_stage(seg.u1 - 1, p.K, pl.tpg, pl.ngroups) + 1;
    for (int j = first_stage(seg.u0, p.K, pl.tpg, pl.ngroups); j < j_end; ++j, rr.next(pl.raws)) {
      const StageTaps st = stage_taps(j, seg, p.K, pl.tpg, pl.ngroups);
      const int k0 = st.k0;
      const int64_t ws0 = t0 + static_cast<int64_t>(k0) * p.dilation + p.shift;
      const int off = static_cast<int>(ws0 - floor_div(ws0, 4) * 4);
      const uint32_t xw = sm.raw_base + rr.idx * pl.raw_bytes + lane_off + off * 4;
      ptx::mbar_wait(sm.rawfull(rr.idx), rr.phase);
      for (int kk = st.kk_lo; kk < st.kk_hi; ++kk, wr.next(pl.slots)) {
        ptx::mbar_wait(sm.wfull(wr.idx), wr.phase);
        const uint64_t db = ptx::desc_kmajor_sw128(sm.base + wr.idx * Tr::kTapBytes);
        const uint32_t xt = xw + static_cast<uint32_t>(kk * p.dilation) * 4u;
#pragma unroll
        for (int ks = 0; ks < Tr::kKSteps; ++ks) {
          uint32_t(&a)[Tr::kMI][4] = frag[ks % Tr::kBufs];
#pragma unroll
          for (int mi = 0; mi < Tr::kMI; ++mi) {
            const uint32_t at = xt + ks * 2 * ch4 + mi * 256;  // 8 channels per k-step, 64 steps per instruction
            a[mi][0] = f32_bits(round_tf32(__uint_as_float(ptx::ld_shared_b32(at))));
            a[mi][1] = f32_bits(round_tf32(__uint_as_float(ptx::ld_shared_b32(at + 32))));  // time + 8
            a[mi][2] = f32_bits(round_tf32(__uint_as_float(ptx::ld_shared_b32(at + ch4))));
            a[mi][3] = f32_bits(round_tf32(__uint_as_float(ptx::ld_shared_b32(at + ch4 + 32))));
          }
          ptx::wgmma_fence();  // the fragments were written by ordinary instructions
#pragma unroll
          for (int mi = 0; mi < Tr::kMI; ++mi) Mma::run(acc[mi], a[mi], db + 2 * ks);  // 32 bytes of each weight row
          ptx::wgmma_commit();
          ptx::wgmma_wait<Tr::kBufs - 1>();  // group j - kBufs + 1 has retired: its fragments are free
          if (ks == Tr::kBufs - 2) {  // that group was the previous tap's last: its slot and window are free
            if (lane == 0 && prev_w >= 0) release_slot(prev_w);
            if (lane == 0 && prev_r >= 0) ptx::mbar_arrive(sm.rawempty(prev_r));
            prev_r = -1;
          }
        }
        prev_w = wr.idx;
        if (skew_left > 0 && --skew_left == 0 && lane == 0) ptx::mbar_arrive(sm.skew_bar());
      }
      prev_r = rr.idx;
    }
    ptx::wgmma_wait<0>();
    if (lane == 0) {
      release_slot(prev_w);
      ptx::mbar_arrive(sm.rawempty(prev_r));
    }
    prev_w = prev_r = -1;
    if (seg.u0 > 0) {  // a tail: its sums go to the block that runs the tile's head
      store_partial(pl.sk, c, acc);
      continue;
    }
    if (seg.u1 < pl.sk.units) add_partial(pl.sk, c, acc);  // a head
    if (pl.tma_store) {
      store_tile_tma<Tr>(acc, p, &map_y, stage0, smem_raw + (stage0 - raw0), ot, t0 + Tr::kHalf * c + 16 * q, g,
                         static_cast<int>(b), lane, stores);
      continue;
    }

    // acc[mi][4jj + e]: time kHalf*c + 64mi + 16q + g (+8 for e >= 2), output channel
    // 8jj + 2cl + (e & 1) of the tile.  Each chunk's bias loads go out before its stores:
    // issued beside them, each load would wait its full latency (a store to y may alias the
    // bias), 32 times per tile.  Chunks of 8 column blocks keep the depth-4 variant unspilled.
    constexpr int kChunk = Tr::kN / 8 < 8 ? Tr::kN / 8 : 8;
    float* y = static_cast<float*>(p.y) + b * p.sy_b + static_cast<int64_t>(g * p.cout_g) * p.sy_c;
#pragma unroll
    for (int j0 = 0; j0 < Tr::kN / 8; j0 += kChunk) {
      float bias[kChunk][2];
#pragma unroll
      for (int jj = 0; jj < kChunk; ++jj) {
#pragma unroll
        for (int e1 = 0; e1 < 2; ++e1) {
          const int o = ot * Tr::kN + 8 * (j0 + jj) + 2 * cl + e1;
          bias[jj][e1] = p.bias && o < p.cout_g ? static_cast<const float*>(p.bias)[g * p.cout_g + o] : 0.f;
        }
      }
#pragma unroll
      for (int jj = 0; jj < kChunk; ++jj) {
#pragma unroll
        for (int e1 = 0; e1 < 2; ++e1) {
          const int o = ot * Tr::kN + 8 * (j0 + jj) + 2 * cl + e1;
          if (o >= p.cout_g) continue;
          float* row = y + o * p.sy_c;
#pragma unroll
          for (int mi = 0; mi < Tr::kMI; ++mi) {
#pragma unroll
            for (int h = 0; h < 2; ++h) {
              const int64_t t = t0 + Tr::kHalf * c + 64 * mi + 16 * q + gl + 8 * h;
              if (t < p.L) row[t] = acc[mi][4 * (j0 + jj) + 2 * h + e1] + bias[jj][e1];
            }
          }
        }
      }
    }
  }
  // The staging buffers must outlive the stores that read them, and y must be written
  // when the kernel ends.
  if (pl.tma_store && lane == 0) ptx::bulk_wait_group_all();
}
#endif

template <int MI, int Bufs, int N>
__global__ void __launch_bounds__(FwdRsTraits<MI, Bufs, N>::kThreads, 1)
    fwd_rs_kernel(const __grid_constant__ CUtensorMap map_x, const __grid_constant__ CUtensorMap map_y, ConvParams p,
                  FwdRsPlan pl) {
  using Tr = FwdRsTraits<MI, Bufs, N>;
  extern __shared__ __align__(16) uint8_t smem_raw[];
#if CAUSALCONV_HAS_WGMMA
  const uint32_t raw0 = ptx::smem_addr(smem_raw);
  RsSmem sm;
  sm.base = (raw0 + 1023u) & ~1023u;  // swizzle atoms are 1024-byte aligned
  sm.slots = pl.slots;
  sm.raws = pl.raws;
  sm.raw_base = sm.base + pl.slots * Tr::kTapBytes;
  sm.staging = sm.raw_base + pl.raws * pl.raw_bytes;
  sm.bars = sm.staging + (pl.tma_store ? Tr::kStageBytes : 0);
  // With pl.pair a weight slot is filled half by each block of the cluster, so it is free
  // again once both blocks' consumers have released it.
  const uint32_t rank = pl.pair ? ptx::cluster_ctarank() : 0u;
  if (threadIdx.x == 0) {
    for (int w = 0; w < pl.slots; ++w) {
      ptx::mbar_init(sm.wfull(w), 1);
      ptx::mbar_init(sm.wempty(w), Tr::kConsumerWarps * (pl.pair ? 2 : 1));
    }
    for (int r = 0; r < pl.raws; ++r) {
      ptx::mbar_init(sm.rawfull(r), 1);
      ptx::mbar_init(sm.rawempty(r), Tr::kConsumerWarps);
    }
    ptx::mbar_init(sm.skew_bar(), 4);  // warpgroup 1's warps
    ptx::fence_mbar_init();
  }
  if (pl.pair) ptx::cluster_sync();  // the other block's copies and arrivals find the barriers set up
  else __syncthreads();

  if (threadIdx.x < 128) {
    ptx::setmaxnreg_dec<Tr::kCopyRegs>();
    const bool windows = threadIdx.x == 0, weights = threadIdx.x == (pl.split_feed ? 32 : 0);
    if (windows || weights) produce<Tr>(map_x, p, pl, sm, windows, weights, rank);
  } else {
    ptx::setmaxnreg_inc<Tr::kMmaRegs>();
    consume<Tr>(map_y, p, pl, sm, smem_raw, raw0, rank);
  }
  if (pl.pair) ptx::cluster_sync();  // no block leaves while the other may still arrive on its barriers
#else
  __trap();  // dispatch only picks this kernel for sm_90a binaries
#endif
}

// Tiles of time tile `tile` and output-channel tile `n`: output tiles x time tiles x groups x batch.
int64_t rs_tile_count(const ConvParams& p, int tile, int n) {
  return ceil_div(p.cout_g, n) * ceil_div(p.L, tile) * p.groups * p.B;
}

template <int MI, int Bufs, int N>
FwdRsPlan make_plan(const ConvParams& p, int smem_limit, bool pair) {
  using Tr = FwdRsTraits<MI, Bufs, N>;
  FwdRsPlan pl{};
  pl.n_ot = static_cast<int>(ceil_div(p.cout_g, Tr::kN));
  pl.n_ic = static_cast<int>(ceil_div(p.cin_g, Tr::kCI));
  pl.n_tt = ceil_div(p.L, Tr::kTile);
  pl.n_bt = p.B * pl.n_tt;
  pl.pair = pair;
  pl.n_tiles = pair ? pl.n_ot * p.groups * ceil_div(pl.n_bt, 2) : rs_tile_count(p, Tr::kTile, Tr::kN);
  // TMA stores write whole 32-channel boxes, clipped only at y's bounds, so a box must not
  // straddle two groups; y's rows must be 16-byte aligned.
  pl.tma_store = rs_tma_store() && (p.groups == 1 || p.cout_g % Tr::kSliceChannels == 0) && p.sy_c % 4 == 0 &&
                 p.sy_b % 4 == 0 && reinterpret_cast<uintptr_t>(p.y) % 16 == 0;
  const int avail = smem_limit - 1024 - Tr::kBarrierBytes - (pl.tma_store ? Tr::kStageBytes : 0);
  for (int tpg = std::min(p.K, Tr::kMaxTaps); tpg >= 1; --tpg) {
    // The half plus the taps' span from a 16-byte-aligned start, rounded up to 8 (mod 16).
    const int64_t span = 3 + static_cast<int64_t>(tpg - 1) * p.dilation + Tr::kHalf;
    const int64_t window = ceil_div(span - 8, 16) * 16 + 8;
    if (window > 256) continue;  // the TMA box limit: wide spans take fewer taps per stage
    const int half = static_cast<int>(Tr::kCI * window * 4);
    const int raw = static_cast<int>(ceil_div(2 * half, 1024) * 1024);
    const int slots = std::min(Tr::kMaxSlots, (avail - 2 * raw) / Tr::kTapBytes);
    if (slots < 2) continue;  // one tap retiring while the next runs
    pl.raws = 2;
    pl.tpg = tpg;
    pl.window = static_cast<int>(window);
    pl.half_bytes = half;
    pl.raw_bytes = raw;
    pl.slots = slots;
    break;
  }
  pl.ngroups = pl.tpg ? static_cast<int>(ceil_div(p.K, pl.tpg)) : 0;
  // A stage of one or two taps is consumed in a quarter to half the time of a four-tap one,
  // too soon for two windows in flight to cover a window's DRAM latency (NOTES v27: on
  // 16x64->64 K2 d512 the consumers spent a third of their samples waiting for windows and
  // weights); such stages get up to four windows, keeping four weight slots.
  pl.split_feed = rs_split_feed();
  if (pl.split_feed && pl.tpg >= 1 && pl.tpg <= 2) {
    for (int raws = Tr::kMaxRaw; raws > 2; --raws) {
      const int slots = std::min(Tr::kMaxSlots, (avail - raws * pl.raw_bytes) / Tr::kTapBytes);
      if (slots < 4) continue;
      pl.raws = raws;
      pl.slots = slots;
      break;
    }
  }
  return pl;
}

template <int MI, int Bufs, int N>
void launch(const ConvParams& p, int sms, cudaStream_t stream) {
  using Tr = FwdRsTraits<MI, Bufs, N>;
  const int smem_limit = max_smem_optin();
  // Pairs of blocks sharing the weight copies walk whole tiles only (no Stream-K).
  FwdRsPlan pl = make_plan<MI, Bufs, N>(p, smem_limit, rs_multicast() && stream_k_mode() == 0);
  CAUSALCONV_CHECK(pl.slots >= 2, "causalconv: no register-A forward pipeline fits dilation ", p.dilation);
  CAUSALCONV_CHECK(p.B <= INT32_MAX && p.C_in <= INT32_MAX && p.L + static_cast<int64_t>(p.K) * p.dilation <= INT32_MAX,
                   "causalconv: problem too large for 32-bit TMA coordinates");
  const size_t smem =
      static_cast<size_t>(pl.slots) * Tr::kTapBytes + static_cast<size_t>(pl.raws) * pl.raw_bytes + Tr::kBarrierBytes + 1024 +
      (pl.tma_store ? Tr::kStageBytes : 0);
  auto kernel = fwd_rs_kernel<MI, Bufs, N>;
  allow_max_smem<Tr>(kernel);  // one instantiation per traits type
  // The walkers: blocks, or with pairs clusters of two (as many as can be resident at once).
  int64_t walkers = std::min<int64_t>(pl.n_tiles, sms);
  if (pl.pair) {
    // The occupancy query is a driver call; remembered per device and instantiation for
    // the last shared-memory size, as a training loop repeats its shapes.
    static struct {
      size_t smem;
      int clusters;
    } seen[64] = {};
    int dev = 0;
    CAUSALCONV_CUDA_CHECK(cudaGetDevice(&dev));
    CAUSALCONV_CHECK(dev < 64, "causalconv: device index ", dev, " out of range");
    if (seen[dev].smem != smem) seen[dev] = {smem, max_active_clusters(kernel, 2, Tr::kThreads, smem)};
    const int clusters = seen[dev].clusters;
    if (clusters > 0) walkers = std::min<int64_t>(pl.n_tiles, clusters);
    else pl = make_plan<MI, Bufs, N>(p, smem_limit, false);  // no cluster fits: single blocks, the same smem
  }
  const int cluster = pl.pair ? 2 : 1;
  pl.sk = plan_stream_k(pl.n_tiles, pl.n_ic * p.K, walkers, Tr::kConsumers, Tr::kMI * Tr::kN / 2,
                        pl.pair ? 0 : stream_k_mode());
  pl.sk.shift = pl.pair ? 1 : 0;

  // The TF32-rounded image, and Stream-K's partial sums and flags after it, live in this
  // stream's scratch buffer, leased until the kernel is enqueued.  The flags are zeroed
  // before the image kernel, so that the forward stays its direct follower
  // (launch_dependent); image_bytes is a multiple of one 8 or 16 KB tap, so the partials stay
  // 16-byte aligned.
  const size_t image_bytes = static_cast<size_t>(weight_image_elems<float, Tr::kN>(p)) * sizeof(float);
  ScratchLease scratch(image_bytes + pl.sk.workspace_bytes(), stream);
  float* image = static_cast<float*>(scratch.data());
  attach_stream_k_workspace(pl.sk, image + image_bytes / sizeof(float), stream);
  write_weight_image<float, Precision::kTF32, Tr::kN>(p, image, nullptr, stream);
  pl.w = image;
  // At most what warpgroup 1 can issue alone: the weight slots and the first raws stages' taps.
  int first_taps = 0;
  for (int j = 0; j < std::min(pl.raws, pl.n_ic * pl.ngroups); ++j)
    first_taps += std::min(pl.tpg, p.K - (j % pl.ngroups) * pl.tpg);
  pl.skew = std::min({consumer_skew(), pl.slots, first_taps});
  const double tile_flops = 2.0 * Tr::kTile * Tr::kN * pl.n_ic * Tr::kCI * p.K;
  pl.stagger = start_stagger(tile_time_ns(tile_flops, sizeof(float), 1));

  const CUtensorMap map_x = make_bcl_tensor_map(p.x, at::kFloat, p.B, p.C_in, p.L, p.sx_b, p.sx_c, pl.window, Tr::kCI);
  CUtensorMap map_y{};
  if (pl.tma_store)
    map_y = make_bcl_tensor_map(p.y, at::kFloat, p.B, p.C_out, p.L, p.sy_b, p.sy_c, Tr::kSliceSteps, Tr::kSliceChannels,
                                true);
  launch_ex("conv_fwd_rs", true, cluster, kernel, walkers * cluster, Tr::kThreads, smem, stream, map_x, map_y, p, pl);
}

// Time tile: the fewest tile rounds over the multiprocessors, weighted by the tile's
// length plus a fixed per-tile cost, as fwd_tma.cu picks; 256 steps (two instructions per
// warpgroup and k-step) or 128.
template <int N>
void launch_time_tile(const ConvParams& p, int sms, cudaStream_t stream) {
  const int64_t cost256 = ceil_div(rs_tile_count(p, 256, N), sms) * (256 + 32);
  const int64_t cost128 = ceil_div(rs_tile_count(p, 128, N), sms) * (128 + 32);
  const bool deep = fragment_depth() == 4;
  if (cost256 <= cost128) deep ? launch<2, 4, N>(p, sms, stream) : launch<2, 2, N>(p, sms, stream);
  else deep ? launch<1, 4, N>(p, sms, stream) : launch<1, 2, N>(p, sms, stream);
}

}  // namespace
}  // namespace tc

bool fwd_rs_supports(const ConvParams& p, at::ScalarType dtype) {
  return dtype == at::kFloat && p.precision == Precision::kTF32 && fwd_tma_supports(p, dtype);
}

// Output-channel tile: 128, or 64 for groups of 64 output channels or fewer when
// rs_narrow_tiles() allows it (half the MMA columns, weight copies and epilogue of a
// 128-channel tile, where half of those would be padding).
void launch_fwd_rs(const ConvParams& p, at::ScalarType dtype, int sms, cudaStream_t stream) {
  CAUSALCONV_CHECK(fwd_rs_supports(p, dtype), "causalconv: the register-A TMA forward is for TF32 float32 only");
  if (p.cout_g <= 64 && tc::rs_narrow_tiles()) tc::launch_time_tile<64>(p, sms, stream);
  else tc::launch_time_tile<128>(p, sms, stream);
}

}  // namespace causalconv
