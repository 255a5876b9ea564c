// Stream-K tail for a persistent tensor-core kernel: balancing the last waves of tiles.
//
// A persistent grid of G blocks walking T tiles runs ceil(T / G) tile lengths, where the
// work is T / G: the default problem's fp32 forward has 2048 tiles on 132 multiprocessors,
// 15.5 waves run as 16 (3% idle).  So the last one or two waves' tiles (between G and 2G
// of them) are cut along their reduction into units (one tap of one input-channel chunk)
// and the units are dealt out evenly, contiguously, over the grid: block b takes units
// [b * U / G, (b + 1) * U / G) of them, tile by tile.  The tiles before run whole, tile
// blockIdx.x + i * G as before.
//
// Each block's share is at least one tile's units, so a tile is cut at most once: its
// head (from unit 0) is the last segment of block b, its tail the first segment of block
// b + 1.  The tail runs first (at the start of b + 1's share, the head at the end of b's),
// stores its partial sums in slot b + 1 of a workspace and raises the slot's flag; the
// head waits for the flag, adds the partial sums to its own and writes the tile.  The
// order of the sum is fixed by the plan, so results are the same run to run.  A block
// waits only on a block of a higher index whose share begins with that tail, so a grid
// that does not fit the GPU at once still completes (blocks start in index order).
#pragma once
#include <cstdint>

#include "common.cuh"
#include "ptx.cuh"

namespace causalconv {
namespace tc {

struct StreamKPlan {
  int units = 1;          // reduction units per tile
  int64_t n_tiles = 0;
  int64_t dp_tiles = 0;   // tiles run whole: blockIdx.x + i * gridDim.x
  int64_t sk_units = 0;   // the remaining tiles' units, shared out over the grid
  int64_t grid = 0;
  int groups = 0;         // consumer warpgroups per block, each handing over its own accumulators
  int per_thread = 0;     // accumulators per consumer thread
  int shift = 0;          // log2 of the blocks that walk one sequence of tiles together (a
                          // cluster's blocks, each taking its own part of every tile); whole tiles only
  float* partials = nullptr;  // [block][warpgroup][per_thread / 4][128 threads] float4: the tail it computed first
  int* flags = nullptr;       // [block][warpgroup]: that tail's partial sums are written

  // Workspace bytes for the partial sums and flags, 0 without Stream-K.
  size_t workspace_bytes() const {
    return sk_units == 0 ? 0 : static_cast<size_t>(grid) * groups * (128 * per_thread * sizeof(float) + sizeof(int));
  }
};

// One block's piece of one tile: reduction units [u0, u1).
struct Segment {
  int64_t tile;
  int u0, u1;
};

// The segments of this block, in the order every role of the block walks them.
class SegmentWalk {
 public:
  __device__ __forceinline__ explicit SegmentWalk(const StreamKPlan& s)
      : next_tile_(blockIdx.x >> s.shift),
        pos_(s.sk_units * blockIdx.x / gridDim.x),
        end_(s.sk_units * (blockIdx.x + 1) / gridDim.x) {}

  __device__ __forceinline__ bool next(const StreamKPlan& s, Segment& seg) {
    if (next_tile_ < s.dp_tiles) {
      seg = Segment{next_tile_, 0, s.units};
      next_tile_ += gridDim.x >> s.shift;
      return true;
    }
    if (pos_ >= end_) return false;
    seg.tile = s.dp_tiles + pos_ / s.units;
    seg.u0 = static_cast<int>(pos_ % s.units);
    seg.u1 = static_cast<int>(min(static_cast<int64_t>(s.units), seg.u0 + (end_ - pos_)));
    pos_ += seg.u1 - seg.u0;
    return true;
  }

 private:
  int64_t next_tile_, pos_, end_;
};

// SegmentWalk for a plan known to have no Stream-K part (every tile whole), in one
// register pair: for kernels whose consumers have none to spare (fwd_tma.cu's fp32 ones).
class WholeTiles {
 public:
  __device__ __forceinline__ explicit WholeTiles(const StreamKPlan&) : next_tile_(blockIdx.x) {}

  __device__ __forceinline__ bool next(const StreamKPlan& s, Segment& seg) {
    if (next_tile_ >= s.dp_tiles) return false;
    seg = Segment{next_tile_, 0, s.units};
    next_tile_ += gridDim.x;
    return true;
  }

 private:
  int64_t next_tile_;
};

// The plan for T tiles of `units` each on `grid` blocks whose `groups` consumer warpgroups
// hold `per_thread` accumulators per thread (mode: stream_k_mode()).  Mode 1 takes the last
// one or two waves when that shortens the longest block's work by at least 1%, counting for
// each block one more tile end (the tail's partial store, ~an epilogue, taken as an eighth
// of a tile), and keeps whole waves whole; mode 2 takes every tile.  Off (every tile whole)
// in mode 0 and with fewer tiles than blocks.
inline StreamKPlan plan_stream_k(int64_t n_tiles, int units, int64_t grid, int groups, int per_thread, int mode) {
  StreamKPlan s;
  s.units = units;
  s.n_tiles = n_tiles;
  s.dp_tiles = n_tiles;
  s.grid = grid;
  s.groups = groups;
  s.per_thread = per_thread;
  const int64_t waves = n_tiles / grid;
  if (mode == 0 || waves < 1) return s;
  if (mode == 2) {  // every tile's units shared out: each block's share still spans a tile or more
    s.dp_tiles = 0;
    s.sk_units = n_tiles * units;
    return s;
  }
  if (n_tiles % grid == 0) return s;
  const int64_t dp = (waves - 1) * grid, sk = (n_tiles - dp) * units;
  const int64_t whole = (waves + 1) * units;
  const int64_t split = (waves - 1) * units + ceil_div(sk, grid) + units / 8 + 1;
  if (split * 100 > whole * 99) return s;
  s.dp_tiles = dp;
  s.sk_units = sk;
  return s;
}

// Points the plan at its workspace (workspace_bytes() at `ws`, 16-byte aligned) and zeroes
// the flags on `stream`.  Nothing without Stream-K.
inline void attach_stream_k_workspace(StreamKPlan& s, void* ws, cudaStream_t stream) {
  if (s.sk_units == 0) return;
  s.partials = static_cast<float*>(ws);
  s.flags = reinterpret_cast<int*>(s.partials + s.grid * s.groups * 128 * s.per_thread);
  CAUSALCONV_CUDA_CHECK(cudaMemsetAsync(s.flags, 0, s.grid * s.groups * sizeof(int), stream));
}

// The tail's side, by all 128 threads of consumer warpgroup c (hardware barrier 1 + c):
// the accumulators (kRows x kCols = s.per_thread) into this block's slot as float4 columns
// (each thread's 16 bytes side by side, so a warp's stores are contiguous), then the flag.
template <int kRows, int kCols>
__device__ __forceinline__ void store_partial(const StreamKPlan& s, int c, const float (&acc)[kRows][kCols]) {
  static_assert(kCols % 4 == 0, "float4 columns");
  const int t = threadIdx.x & 127, slot = blockIdx.x * s.groups + c;
  float4* dst = reinterpret_cast<float4*>(s.partials) + static_cast<int64_t>(slot) * 128 * (kRows * kCols / 4) + t;
#pragma unroll
  for (int r = 0; r < kRows; ++r) {
#pragma unroll
    for (int i = 0; i < kCols; i += 4)
      __stcg(dst + (r * kCols + i) / 4 * 128, make_float4(acc[r][i], acc[r][i + 1], acc[r][i + 2], acc[r][i + 3]));
  }
  __threadfence();
  ptx::named_barrier_sync(1 + c, 128);  // every thread's stores before the flag's release
  if (t == 0) ptx::st_release_gpu(s.flags + slot, 1);
}

// The head's side: waits for the tail of this tile (the next block's slot) and adds it.
template <int kRows, int kCols>
__device__ __forceinline__ void add_partial(const StreamKPlan& s, int c, float (&acc)[kRows][kCols]) {
  const int t = threadIdx.x & 127, slot = (blockIdx.x + 1) * s.groups + c;
  if (t == 0) {
    while (ptx::ld_acquire_gpu(s.flags + slot) == 0) __nanosleep(256);
  }
  ptx::named_barrier_sync(1 + c, 128);  // the acquire before every thread's loads
  const float4* src = reinterpret_cast<const float4*>(s.partials) + static_cast<int64_t>(slot) * 128 * (kRows * kCols / 4) + t;
#pragma unroll
  for (int r = 0; r < kRows; ++r) {
#pragma unroll
    for (int i = 0; i < kCols; i += 4) {
      const float4 v = __ldcg(src + (r * kCols + i) / 4 * 128);  // L2: written by another block
      acc[r][i] += v.x;
      acc[r][i + 1] += v.y;
      acc[r][i + 2] += v.z;
      acc[r][i + 3] += v.w;
    }
  }
}

}  // namespace tc
}  // namespace causalconv
