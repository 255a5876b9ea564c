// How the tensor-core weight gradients (wgrad_tc.cu, wgrad_rs.cu) split their reduction
// over (batch, time) across blocks: the same rule for both, so that their workspaces have
// the same layout and split_reduce.cu adds either.
#pragma once
#include <algorithm>
#include <cstdint>

#include "common.cuh"
#include "launchers.h"

namespace causalconv {

struct WgradSplit {
  int64_t n_tiles;    // output tiles (blocks per split)
  int64_t units;      // reduction units: (batch, stage of steps_per_unit time steps)
  int64_t per_split;  // units per block
  int splits;
};

// One block per multiprocessor (shared memory), so the splits fill exactly one wave: a
// second, nearly empty wave would double the time.  The workspace (splits x dw) stays
// below 2^26 floats unless one split already exceeds it.
inline WgradSplit plan_wgrad_split(const WgradParams& p, int64_t n_tiles, int steps_per_unit, int sm_count) {
  WgradSplit s{};
  s.n_tiles = n_tiles;
  s.units = p.B * ceil_div(p.L, steps_per_unit);
  const int64_t n_out = static_cast<int64_t>(p.groups) * p.cout_g * p.cin_g * p.K;
  int64_t splits = std::max<int64_t>(1, sm_count / n_tiles);
  splits = std::min<int64_t>({splits, s.units, std::max<int64_t>(1, (int64_t{1} << 26) / n_out)});
  s.per_split = ceil_div(s.units, splits);
  s.splits = static_cast<int>(ceil_div(s.units, s.per_split));
  return s;
}

// A block's share of the work: blocks split * n_tiles + tile, the tile decoded as (group g,
// tap tile kt, input-channel tile ct, output-channel tile ot), output tiles of one x
// window side by side; S reduction units from u0.  The tile's taps are k0 .. k0 + taps - 1,
// and the raw x window that serves them starts at t0 + lead, a multiple of v elements (16
// bytes), with tap k's columns at off0 + k * dilation inside it.
struct WgradBlock {
  int ot, ct, kt, g;
  int64_t split, u0;
  int S, k0, taps, lead, off0;
};

__device__ __forceinline__ WgradBlock decode_wgrad_block(const WgradParams& p, const WgradSplit& sp, int n_ot, int n_ct,
                                                         int n_kt, int tile_taps, int v) {
  WgradBlock w;
  int64_t tile = blockIdx.x % sp.n_tiles;
  w.split = blockIdx.x / sp.n_tiles;
  w.ot = static_cast<int>(tile % n_ot);
  tile /= n_ot;
  w.ct = static_cast<int>(tile % n_ct);
  tile /= n_ct;
  w.kt = static_cast<int>(tile % n_kt);
  w.g = static_cast<int>(tile / n_kt);
  w.u0 = w.split * sp.per_split;
  w.S = static_cast<int>((sp.units < w.u0 + sp.per_split ? sp.units : w.u0 + sp.per_split) - w.u0);
  w.k0 = w.kt * tile_taps;
  w.taps = tile_taps < p.K - w.k0 ? tile_taps : p.K - w.k0;
  w.lead = static_cast<int>(floor_div(p.shift + w.k0 * p.dilation, v) * v);
  w.off0 = p.shift + w.k0 * p.dilation - w.lead;
  return w;
}

// Where partial sum (dw row, input channel i, tap k) of split `split` goes in the workspace:
// dw's layout per split, [C_out][cin_g][K], or tap-major, [K][C_out][cin_g]
// (WgradParams::tap_major), as base + row * s_row + i * s_i + k * s_k, so that the
// epilogue's index arithmetic is one expression for both.
struct SliceIndex {
  int64_t base, s_row, s_i, s_k;
  __device__ __forceinline__ SliceIndex(const WgradParams& p, int64_t split) {
    const int64_t C_out = static_cast<int64_t>(p.groups) * p.cout_g;
    base = split * C_out * p.cin_g * p.K;
    s_row = p.tap_major ? p.cin_g : static_cast<int64_t>(p.cin_g) * p.K;
    s_i = p.tap_major ? 1 : p.K;
    s_k = p.tap_major ? C_out * p.cin_g : 1;
  }
  __device__ __forceinline__ int64_t operator()(int64_t row, int i, int k) const {
    return base + row * s_row + i * s_i + k * s_k;
  }
};

// Shared-memory buffers are kept 1024-byte aligned (the 128-byte swizzle's atoms).
inline int round_up_kb(int64_t bytes) { return static_cast<int>(ceil_div(bytes, 1024) * 1024); }

}  // namespace causalconv
