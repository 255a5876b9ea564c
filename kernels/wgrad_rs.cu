// fp32 (TF32) weight gradient with x as the register operand (sm_90a: TMA, mbarriers,
// wgmma with A in registers):
//   dw[o, i, k] = sum_{b, t} dy[b, o, t] * x[b, i, t + k*dilation + shift]
// as a GEMM per block: M = kRows (tap, input channel) rows, row r = tap * ch + channel,
// N = kN output channels, reduced over (batch, time) in stages of 32 steps (one 128-byte
// dy row).
//
// Why: wgrad_tc.cu reads both operands from shared memory, so each tap needs its own copy
// of the x tile shifted by k*dilation, which TMA cannot make (a copy starts on a 16-byte
// boundary) and TF32 cannot read transposed; three shifter warps write those copies, and
// they set the pace: the fp32 weight gradient took 0.86 ms on the default problem where
// the same pipeline with the shifting switched off took 0.37 ms (NOTES v17).  Here the
// shift costs nothing: each consumer lane loads its A fragment elements straight from the
// stage's raw x window at its row's tap offset (4-byte loads have no alignment to keep)
// and rounds them to TF32 in registers.  dy is the B operand, K-major as it lies in
// memory, brought by TMA in the 128-byte-swizzled layout; producer warps 1-3 round it to
// TF32 in place (the tensor cores would truncate).
//
// Per stage and block (kRows = 256, kN = 128): 2.1 MFLOP against ~150 KB of shared-memory
// traffic (wgmma's B reads 64 KB, the fragment loads 32 KB, the copies 25 KB, dy's
// rounding 32 KB), where wgrad_tc.cu moved ~200 KB through shared memory for the same
// work, 64 KB of it in the shifters' latency-bound loop.
//
// Raw window rows are `window` elements apart with window = 4 (mod 8): the eight rows g of
// a fragment load are eight channels of one tap, whose words g * window + c (c < 4) then
// fall in 32 distinct banks.
//
// Warp roles as in wgrad_tc.cu: one producer thread, warps 1-3 of warpgroup 0 round dy,
// warpgroups 1-2 issue the MMAs (rows 64 * kMI * c .. of the block's kRows).  A consumer
// commits one group per k-step and keeps kBufs in flight: the fragments of k-step j are
// loaded while groups j - kBufs + 1 .. j - 1 run, into the registers group j - kBufs read
// (retired by then).
// Partial sums go to the split's workspace slice, tap-major (or laid out as dw with
// CAUSALCONV_WGRAD_TAP_MAJOR=0; launchers.h); split_reduce.cu adds the slices in a fixed
// order.
#include <ATen/ATen.h>

#include <algorithm>

#include "launchers.h"
#include "tc_common.cuh"
#include "tensor_map.h"
#include "wgrad_plan.cuh"

namespace causalconv {
namespace tc {
namespace {

// kMI m64 instructions per consumer warpgroup and k-step (each its own 64 rows of A, all
// sharing the dy tile), kN output channels (kMI * kN / 2 accumulators per thread), kBufs
// k-steps of fragments (fragment_depth()).
template <int MI, int N, int Bufs>
struct RsShape {
  static constexpr int kMI = MI, kN = N, kBufs = Bufs;
};

template <class Shape>
struct RsTraits : WarpRoles<float> {
  static constexpr int kMI = Shape::kMI, kN = Shape::kN, kBufs = Shape::kBufs;
  static constexpr int kRows = 64 * kMI * WarpRoles<float>::kConsumers;  // (tap, channel) rows per block
  static constexpr int kCT = 32;                                          // reduction steps per stage
  static constexpr int kKSteps = kCT / 8;
  static constexpr int kDyBytes = kN * 128;
  static constexpr int kMaxSlots = 8;
  static constexpr int kBarrierBytes = 8 * 3 * kMaxSlots;
  // Registers per thread: the copy warpgroup gives back what the consumers' 128
  // accumulators and kBufs k-steps of fragments need beyond the 168 of a 384-thread block
  // (at 168 ptxas serialized the MMAs for want of registers).
  static constexpr int kCopyRegs = 40, kMmaRegs = 232;
  static_assert(kCopyRegs * 128 + kMmaRegs * 256 <= 65536, "the register file");
  static_assert(kMI * kN <= 256, "at most 128 accumulators per thread");
  static_assert(kKSteps % kBufs == 0, "a k-step's fragment buffer is its index mod kBufs in every stage");
};

struct RsPlan {
  int taps;        // taps per tile
  int ch;          // input channels per tap in a tile, a multiple of 16 (a warp's rows are one tap)
  int window;      // raw x row pitch (elements), 4 mod 8, covering the taps' span
  int slot_bytes;  // dy tile + raw window, a multiple of 1024
  int slots;       // ring depth
  int n_kt, n_ct, n_ot;
  WgradSplit split;
};

template <class Shape>
__global__ void __launch_bounds__(RsTraits<Shape>::kThreads, 1)
    wgrad_rs_kernel(const __grid_constant__ CUtensorMap map_dy, const __grid_constant__ CUtensorMap map_x,
                    WgradParams p, RsPlan pl) {
  using Tr = RsTraits<Shape>;
  extern __shared__ __align__(16) uint8_t smem_raw[];
#if CAUSALCONV_HAS_WGMMA
  ptx::griddep_launch_dependents();  // the split reduction after it may start (dependent_launch.cuh)
  using Mma = wgmma::Mma<wgmma::Tf32, Tr::kN>;
  const uint32_t raw0 = ptx::smem_addr(smem_raw);
  const uint32_t base = (raw0 + 1023u) & ~1023u;  // swizzle atoms are 1024-byte aligned
  uint8_t* base_ptr = smem_raw + (base - raw0);
  // [copy slots: dy tile, raw x window][barriers]
  const int nsl = pl.slots;
  const uint32_t bars = base + nsl * pl.slot_bytes;
  auto full = [&](int sl) { return bars + 8u * sl; };               // the copies landed
  auto ready = [&](int sl) { return bars + 8u * (nsl + sl); };      // dy rounded
  auto slot_free = [&](int sl) { return bars + 8u * (2 * nsl + sl); };  // the MMAs retired

  const WgradBlock blk = decode_wgrad_block(p, pl.split, pl.n_ot, pl.n_ct, pl.n_kt, pl.taps, 4);
  const int ot = blk.ot, ct = blk.ct, g = blk.g, S = blk.S, k0 = blk.k0, taps = blk.taps, off0 = blk.off0;
  const int64_t split = blk.split, u0 = blk.u0;

  const int wg = threadIdx.x >> 7, warp = threadIdx.x >> 5, lane = threadIdx.x & 31;
  if (threadIdx.x == 0) {
    for (int sl = 0; sl < nsl; ++sl) {
      ptx::mbar_init(full(sl), 1);
      ptx::mbar_init(ready(sl), Tr::kShifters);
      ptx::mbar_init(slot_free(sl), Tr::kConsumerWarps);
    }
    ptx::fence_mbar_init();
  }
  __syncthreads();

  const uint32_t n_tc = static_cast<uint32_t>(ceil_div(p.L, Tr::kCT));  // units fit 32 bits (host check)
  if (wg == 0) {
    ptx::setmaxnreg_dec<Tr::kCopyRegs>();
    if (warp == 0) {
      if (lane != 0) return;
      // Producer: stage s reuses the slot of s - nsl once both consumers retired its MMAs.
      ptx::tma_prefetch_descriptor(&map_dy);
      ptx::tma_prefetch_descriptor(&map_x);
      const int dy_row0 = g * p.cout_g + ot * Tr::kN;
      const int x_row0 = g * p.cin_g + ct * pl.ch;
      const uint32_t bytes = Tr::kDyBytes + pl.ch * pl.window * 4;
      Ring sr;
      uint32_t b = static_cast<uint32_t>(u0 / n_tc), tci = static_cast<uint32_t>(u0 % n_tc);  // unit u0 + s
      for (int s = 0; s < S; ++s, sr.next(nsl)) {
        ptx::mbar_wait(slot_free(sr.idx), sr.phase ^ 1);
        const int t0 = static_cast<int>(tci) * Tr::kCT;
        const uint32_t slot = base + sr.idx * pl.slot_bytes;
        ptx::mbar_arrive_expect_tx(full(sr.idx), bytes);
        ptx::tma_load_2d(slot, &map_dy, t0, static_cast<int>(b) * (p.groups * p.cout_g) + dy_row0, full(sr.idx));
        ptx::tma_load_2d(slot + Tr::kDyBytes, &map_x, t0 + blk.lead,
                         static_cast<int>(b) * (p.groups * p.cin_g) + x_row0, full(sr.idx));
        if (++tci == n_tc) {
          tci = 0;
          ++b;
        }
      }
      return;
    }
    // Rounders (warps 1-3): dy to TF32 in place.
    Ring sr;
    for (int s = 0; s < S; ++s, sr.next(nsl)) {
      ptx::mbar_wait(full(sr.idx), sr.phase);
      round_tf32_in_place<Tr::kShifters>(reinterpret_cast<float4*>(base_ptr + sr.idx * pl.slot_bytes),
                                         Tr::kDyBytes / 16, threadIdx.x - 32);
      ptx::fence_proxy_async();  // the MMAs read dy through the async proxy
      ptx::mbar_arrive(ready(sr.idx));
    }
    return;
  }

  ptx::setmaxnreg_inc<Tr::kMmaRegs>();
  // Consumers.  Lane 4g + c of warp q holds A rows 16q + g and 16q + g + 8 of each of its
  // instructions' 64, columns (time steps) c and c + 4 of the k-step: rows g, g + 8 are
  // channels chn, chn + 8 of one tap (ch is a multiple of 16).
  const int c = wg - 1, q = warp & 3, gl = lane >> 2, cl = lane & 3;
  uint32_t row_off[Tr::kMI];  // byte offset of the lane's first element in a raw window
  bool row_ok[Tr::kMI];       // the row's tap belongs to this tile (warp-uniform)
#pragma unroll
  for (int mi = 0; mi < Tr::kMI; ++mi) {
    const int r = 64 * (Tr::kMI * c + mi) + 16 * q + gl;
    const int kl = r / pl.ch, chn = r - kl * pl.ch;
    row_ok[mi] = kl < taps;
    row_off[mi] = static_cast<uint32_t>(chn * pl.window + off0 + kl * p.dilation + cl) * 4u;
  }
  const uint32_t row8 = static_cast<uint32_t>(8 * pl.window) * 4u;  // rows g + 8: channel + 8

  float acc[Tr::kMI][Tr::kN / 2];
#pragma unroll
  for (int mi = 0; mi < Tr::kMI; ++mi) {
#pragma unroll
    for (int j = 0; j < Tr::kN / 2; ++j) acc[mi][j] = 0.f;
  }
  uint32_t frag[Tr::kBufs][Tr::kMI][4];  // k-step j's in frag[j % kBufs]
  Ring sr;
  int prev_sl = -1;  // the previous stage's slot, released when its last group retired
  for (int s = 0; s < S; ++s, sr.next(nsl)) {
    // The raw window is read by ordinary loads: wait for its copy directly, then for dy's
    // rounding.
    ptx::mbar_wait(full(sr.idx), sr.phase);
    ptx::mbar_wait(ready(sr.idx), sr.phase);
    const uint32_t slot = base + sr.idx * pl.slot_bytes;
    const uint32_t window = slot + Tr::kDyBytes;
    const uint64_t db = ptx::desc_kmajor_sw128(slot);
#pragma unroll
    for (int ks = 0; ks < Tr::kKSteps; ++ks) {
      uint32_t(&a)[Tr::kMI][4] = frag[ks % Tr::kBufs];
#pragma unroll
      for (int mi = 0; mi < Tr::kMI; ++mi) {
        const uint32_t at = window + row_off[mi] + ks * 32;
        if (row_ok[mi]) {
          a[mi][0] = f32_bits(round_tf32(__uint_as_float(ptx::ld_shared_b32(at))));
          a[mi][1] = f32_bits(round_tf32(__uint_as_float(ptx::ld_shared_b32(at + row8))));
          a[mi][2] = f32_bits(round_tf32(__uint_as_float(ptx::ld_shared_b32(at + 16))));
          a[mi][3] = f32_bits(round_tf32(__uint_as_float(ptx::ld_shared_b32(at + row8 + 16))));
        } else {
          a[mi][0] = a[mi][1] = a[mi][2] = a[mi][3] = 0u;
        }
      }
      ptx::wgmma_fence();  // the fragments were written by ordinary instructions
#pragma unroll
      for (int mi = 0; mi < Tr::kMI; ++mi) Mma::run(acc[mi], a[mi], db + 2 * ks);  // 32 bytes of each dy row
      ptx::wgmma_commit();
      ptx::wgmma_wait<Tr::kBufs - 1>();  // group j - kBufs + 1 has retired: its fragments may be overwritten
      // at ks = kBufs - 2 that group ended stage s - 1
      if (ks == Tr::kBufs - 2 && prev_sl >= 0 && lane == 0) ptx::mbar_arrive(slot_free(prev_sl));
    }
    prev_sl = sr.idx;
  }
  ptx::wgmma_wait<0>();

  // acc[mi][4j + e]: A row 64 (kMI c + mi) + 16q + g (+8 for e >= 2) = (tap, channel),
  // column (output channel) 8j + 2c + (e & 1).
  const SliceIndex slice(p, split);
#pragma unroll
  for (int mi = 0; mi < Tr::kMI; ++mi) {
    const int r = 64 * (Tr::kMI * c + mi) + 16 * q + gl;
    const int kl = r / pl.ch, chn = r - kl * pl.ch;
    if (kl >= taps) continue;
#pragma unroll
    for (int j = 0; j < Tr::kN / 8; ++j) {
#pragma unroll
      for (int e = 0; e < 4; ++e) {
        const int o = ot * Tr::kN + 8 * j + 2 * cl + (e & 1);
        const int i = ct * pl.ch + chn + ((e & 2) ? 8 : 0);
        // Tap-major, the warp's 8 rows g are consecutive channels i of one tap, contiguous.
        if (o < p.cout_g && i < p.cin_g)
          p.ws[slice(static_cast<int64_t>(g) * p.cout_g + o, i, k0 + kl)] = acc[mi][4 * j + e];
      }
    }
  }
#else
  __trap();  // dispatch only picks wgmma for sm_90a binaries
#endif
}

// Raw window pitch for `taps` taps: the span from the 16-byte-aligned start (offset up to
// 3) over the taps and one stage, rounded up to 4 (mod 8) elements.
int rs_window(const WgradParams& p, int taps) {
  const int64_t span = 3 + static_cast<int64_t>(taps - 1) * p.dilation + 32;
  return static_cast<int>(ceil_div(span - 4, 8) * 8 + 4);
}

// The row tile: taps x ch rows of kRows.  Fewest tiles over the problem, then the most taps
// per tile (their raw window is shared), then the narrowest channel block (the smallest
// copy); at least two slots must fit.
template <class Tr>
bool pick_rows(const WgradParams& p, RsPlan& pl) {
  const int budget = max_smem_optin() - 1024 - Tr::kBarrierBytes;
  int64_t best_cost = -1;
  for (int taps = 1; taps <= std::min(p.K, Tr::kRows / 16); ++taps) {
    const int window = rs_window(p, taps);
    if (window > 256) break;  // the TMA box limit
    for (int ch = 16; taps * ch <= Tr::kRows; ch += 16) {
      const int slot = Tr::kDyBytes + round_up_kb(static_cast<int64_t>(ch) * window * 4);
      if (2 * slot > budget) continue;
      const int64_t cost = ceil_div(p.K, taps) * ceil_div(p.cin_g, ch);
      if (best_cost < 0 || cost < best_cost || (cost == best_cost && taps > pl.taps)) {
        best_cost = cost;
        pl.taps = taps;
        pl.ch = ch;
        pl.window = window;
        pl.slot_bytes = slot;
        pl.slots = std::min(Tr::kMaxSlots, budget / slot);
      }
    }
  }
  return best_cost > 0;
}

template <class Shape>
RsPlan make_plan(const WgradParams& p, int sm_count) {
  using Tr = RsTraits<Shape>;
  RsPlan pl{};
  CAUSALCONV_CHECK(pick_rows<Tr>(p, pl), "causalconv: no register-A weight-gradient tile fits dilation ", p.dilation);
  pl.n_kt = static_cast<int>(ceil_div(p.K, pl.taps));
  pl.n_ct = static_cast<int>(ceil_div(p.cin_g, pl.ch));
  pl.n_ot = static_cast<int>(ceil_div(p.cout_g, Tr::kN));
  pl.split = plan_wgrad_split(p, static_cast<int64_t>(p.groups) * pl.n_kt * pl.n_ct * pl.n_ot, Tr::kCT, sm_count);
  return pl;
}

// Shapes: kN covers the output channels of a group in the fewest columns, 128 on ties,
// and kMI the (tap, channel) rows: two 64-row instructions per warpgroup unless one covers
// them all.
struct RsChoice {
  int mi, n, bufs;
};
RsChoice choose_shape(const WgradParams& p) {
  const int n = ceil_div(p.cout_g, 128) * 128 <= ceil_div(p.cout_g, 64) * 64 ? 128 : 64;
  const int mi = static_cast<int64_t>(p.K) * p.cin_g > 128 ? 2 : 1;
  return {mi, n, fragment_depth()};
}

// The one place a run-time shape becomes a kernel template.
// (Four fragment buffers only with two instructions per k-step: with one, ptxas serializes
// the MMAs, C7513, having given two buffers the same registers.)
template <typename F>
auto with_shape(const RsChoice& s, F&& f) {
  if (s.mi == 1) return s.n == 64 ? f(RsShape<1, 64, 2>{}) : f(RsShape<1, 128, 2>{});
  if (s.bufs == 4) return s.n == 64 ? f(RsShape<2, 64, 4>{}) : f(RsShape<2, 128, 4>{});
  return s.n == 64 ? f(RsShape<2, 64, 2>{}) : f(RsShape<2, 128, 2>{});
}

template <class Shape>
void launch(const WgradParams& p, const RsPlan& pl, cudaStream_t stream) {
  using Tr = RsTraits<Shape>;
  const size_t smem = static_cast<size_t>(pl.slots) * pl.slot_bytes + Tr::kBarrierBytes + 1024;
  CAUSALCONV_CHECK(pl.slots >= 2 && smem <= static_cast<size_t>(max_smem_optin()),
                   "causalconv: register-A weight-gradient pipeline needs 2 slots of ", pl.slot_bytes, " bytes");
  const int64_t blocks = pl.split.n_tiles * pl.split.splits;
  const int64_t C_out = static_cast<int64_t>(p.groups) * p.cout_g, C_in = static_cast<int64_t>(p.groups) * p.cin_g;
  CAUSALCONV_CHECK(blocks <= INT32_MAX && pl.split.units <= INT32_MAX && p.B * std::max(C_out, C_in) <= INT32_MAX &&
                       p.L + static_cast<int64_t>(p.K) * p.dilation <= INT32_MAX,
                   "causalconv: weight-gradient problem too large for 32-bit TMA coordinates");
  const CUtensorMap map_dy = make_row_tensor_map(p.dy, at::kFloat, p.B * C_out, p.L, Tr::kCT, Tr::kN, true);
  const CUtensorMap map_x = make_row_tensor_map(p.x, at::kFloat, p.B * C_in, p.L, pl.window, pl.ch, false);
  auto kernel = wgrad_rs_kernel<Shape>;
  allow_max_smem<Tr>(kernel);  // one instantiation per traits type
  kernel<<<static_cast<unsigned>(blocks), Tr::kThreads, smem, stream>>>(map_dy, map_x, p, pl);
  CAUSALCONV_CHECK_LAUNCH("conv_wgrad_rs");
}

}  // namespace
}  // namespace tc

bool wgrad_rs_supports(const WgradParams& p, at::ScalarType dtype) {
  return dtype == at::kFloat && p.precision == Precision::kTF32 && wgrad_tc_supports(p, dtype);
}

bool wgrad_rs_tap_major() { return env_switch("CAUSALCONV_WGRAD_TAP_MAJOR"); }

int wgrad_rs_splits(const WgradParams& p, int sm_count) {
  return tc::with_shape(tc::choose_shape(p),
                        [&](auto shape) { return tc::make_plan<decltype(shape)>(p, sm_count).split.splits; });
}

void launch_wgrad_rs(const WgradParams& p, at::ScalarType dtype, int sm_count, cudaStream_t stream) {
  CAUSALCONV_CHECK(wgrad_rs_supports(p, dtype), "causalconv: the register-A weight gradient is for TF32 float32 only");
  tc::with_shape(tc::choose_shape(p), [&](auto shape) {
    using Shape = decltype(shape);
    const tc::RsPlan pl = tc::make_plan<Shape>(p, sm_count);
    CAUSALCONV_CHECK(p.splits == pl.split.splits, "causalconv: workspace sized for ", p.splits, " splits, plan needs ",
                     pl.split.splits);
    tc::launch<Shape>(p, pl, stream);
    return 0;
  });
}

}  // namespace causalconv
