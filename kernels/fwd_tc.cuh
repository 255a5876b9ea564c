// Tensor-core forward: the causal conv as an implicit GEMM computed per block as
// y^T[t, o] = sum_k sum_i x[i, t + k*dilation + shift] * w_k[o, i].
//
// A block owns kBM = 256 time steps x BN output channels of one (batch, group).  Each
// pipeline stage holds one chunk of kCI input channels (128 bytes of each row) of
//   - x over the window [t0 + k0*dilation + shift, ... + kBM + (taps-1)*dilation): the
//     tile with its halo, loaded once and reused by every tap of the stage;
//   - the weights of those taps, pre-arranged on the device into the exact shared-memory
//     image (K-major, 128-byte swizzle, TF32-rounded) so they copy in verbatim.
// Both arrive by 16-byte cp.async with zero fill (t outside [0, L), channels past the
// group), double-buffered.  x is the MMA's A operand, read from shared memory into
// registers at the tap's shifted column, so the shift costs nothing; the weights are the
// B operand.  On sm_90a the MMA is wgmma (two warpgroups, each 128 t x BN); elsewhere
// mma.sync with the same staging.  The epilogue adds the bias and casts.  On sm_90a the
// dispatch runs this wgmma kernel only when forced as "wgmma-ra"; fwd_tma.cu runs
// everywhere else, the 3xTF32 split included (faster on every shape, NOTES.md v8, v16).
#pragma once
#include <ATen/ATen.h>

#include <algorithm>

#include "launchers.h"
#include "scratch.h"
#include "tc_common.cuh"
#include "weight_image.cuh"

namespace causalconv {
namespace tc {
namespace fwd {

template <typename T, Precision P, int BN>
struct FwdTraits {
  static constexpr int kThreads = 256;
  static constexpr int kBM = 256;
  static constexpr int kCI = kRowElems<T>;
  static constexpr int kV = kChunkElems<T>;
  static constexpr int kKStep = Elem<T>::kKStep;
  static constexpr int kKSteps = kCI / kKStep;
  static constexpr bool kSplit = P == Precision::kTF32x3;
  static constexpr int kParts = kSplit ? 2 : 1;
  static constexpr int kMaxTaps = 4;
  static constexpr int kTapBytes = BN * 128;
  static_assert(BN == 64 || BN == 128, "output-channel tile must be 64 or 128");
  static_assert(std::is_same_v<T, float> == (P != Precision::kNative),
                "fp32 runs as TF32 or 3xTF32; 16-bit types run natively");
};

template <typename T, Precision P, int BN, Engine E>
struct KernelTag {};

// Host-computed layout of one launch, passed by value.
struct FwdPlan {
  const void* w_hi;
  const void* w_lo;
  int n_ot, n_ic;    // output-channel tiles, input-channel chunks (per group)
  int tpg, ngroups;  // taps per stage, tap groups
  int row;           // elements per staged x row
  int w_part_bytes;  // one weight part (hi or lo) of one stage
  int x_offset;      // bytes from a stage's start to its x tile
  int stage_bytes;
};

// ---------------------------------------------------------------------------------
template <class Tr, typename T>
__device__ __forceinline__ void load_stage(const ConvParams& p, const FwdPlan& plan, const T* x, int64_t w_tile,
                                           int64_t t0, int s, uint32_t sbase) {
  const int ic = s / plan.ngroups, grp = s - ic * plan.ngroups;
  const int k0 = grp * plan.tpg, nt = min(plan.tpg, p.K - k0);
  // weights of taps k0 .. k0+nt-1 are contiguous in the image
  const int64_t w_elem = ((w_tile + ic) * p.K + k0) * static_cast<int64_t>(Tr::kTapBytes / sizeof(T));
  const int w_chunks = nt * Tr::kTapBytes / 16;
  copy_chunks<Tr::kThreads>(sbase, reinterpret_cast<const uint8_t*>(static_cast<const T*>(plan.w_hi) + w_elem),
                            w_chunks);
  if constexpr (Tr::kSplit) {
    copy_chunks<Tr::kThreads>(sbase + plan.w_part_bytes,
                              reinterpret_cast<const uint8_t*>(static_cast<const T*>(plan.w_lo) + w_elem), w_chunks);
  }
  // x window, starting at a 16-byte boundary at or before the first column needed; rows
  // are spread over warps and 16-byte chunks over lanes (no per-chunk division)
  const int64_t a0 = floor_div(t0 + static_cast<int64_t>(k0) * p.dilation + p.shift, Tr::kV) * Tr::kV;
  const int nch = plan.row / Tr::kV;
  const int c0 = ic * Tr::kCI;
  const int warp = threadIdx.x >> 5, lane = threadIdx.x & 31;
  for (int ci = warp; ci < Tr::kCI; ci += Tr::kThreads / 32) {
    const bool c_ok = c0 + ci < p.cin_g;
    const T* xrow = x + static_cast<int64_t>(c0 + ci) * p.sx_c;
    const uint32_t drow = sbase + plan.x_offset + static_cast<uint32_t>(ci * plan.row * sizeof(T));
    for (int ch = lane; ch < nch; ch += 32) {
      const int64_t t = a0 + static_cast<int64_t>(ch) * Tr::kV;
      const bool ok = c_ok && t >= 0 && t < p.L;
      ptx::cp_async_16(drow + ch * 16, ok ? xrow + t : x, ok ? 16u : 0u);
    }
  }
}

template <typename T>
__device__ __forceinline__ void store_out(const ConvParams& p, int64_t b, int g, int64_t t, int o, float v) {
  if (t < p.L && o < p.cout_g) {
    const int64_t oc = static_cast<int64_t>(g) * p.cout_g + o;
    const float bv = p.bias ? to_float(static_cast<const T*>(p.bias)[oc]) : 0.f;
    static_cast<T*>(p.y)[b * p.sy_b + oc * p.sy_c + t] = from_float<T>(v + bv);
  }
}

// ---------------------------------------------------------------------------------
// wgmma engine: warpgroup wg owns t rows wg*128 .. +127 as two m64 tiles; warp q of
// the warpgroup holds rows 16q .. 16q+15 of each.
template <typename T, Precision P, int BN>
struct WgmmaEngine {
  using Tr = FwdTraits<T, P, BN>;
  // acc is what the tensor cores accumulate into.  With the 3xTF32 split each tap starts
  // from zero and is added to tot with ordinary fp32 adds: the tensor cores' accumulation
  // truncates, and over hundreds of chained MMAs that bias would exceed fp32 accuracy.
  float acc[2][BN / 2];
  float tot[Tr::kSplit ? 2 : 1][Tr::kSplit ? BN / 2 : 1];

  __device__ __forceinline__ void zero() {
#pragma unroll
    for (int m = 0; m < 2; ++m)
#pragma unroll
      for (int j = 0; j < BN / 2; ++j) {
        acc[m][j] = 0.f;
        if constexpr (Tr::kSplit) tot[m][j] = 0.f;
      }
  }

  __device__ __forceinline__ void flush() {
#pragma unroll
    for (int m = 0; m < 2; ++m)
#pragma unroll
      for (int j = 0; j < BN / 2; ++j) {
        if constexpr (Tr::kSplit) {
          tot[m][j] += acc[m][j];
          acc[m][j] = 0.f;
        }
      }
  }

  __device__ __forceinline__ float result(int m, int j) const {
    if constexpr (Tr::kSplit) return tot[m][j];
    else return acc[m][j];
  }

  using Frags = AFrag<T, Tr::kSplit>[Tr::kKSteps][2];

  // Loads the A fragments of tap kl and issues its MMAs as one commit group.
  __device__ __forceinline__ void issue_tap(Frags& a, const T* xw, int row, int kl, int dilation, uint32_t wbase,
                                            int w_part_bytes) {
#if CAUSALCONV_HAS_WGMMA
    using Mma = wgmma::Mma<typename Elem<T>::Wg, BN>;
    const int lane = threadIdx.x & 31;
#pragma unroll
    for (int kk = 0; kk < Tr::kKSteps; ++kk)
#pragma unroll
      for (int m = 0; m < 2; ++m) a[kk][m].load(xw + kl * dilation + m * 64 + kk * Tr::kKStep * row, 1, row, lane);
    ptx::wgmma_fence();
    const uint32_t wt = wbase + kl * Tr::kTapBytes;
#pragma unroll
    for (int kk = 0; kk < Tr::kKSteps; ++kk) {
      const uint64_t d_hi = ptx::desc_kmajor_sw128(wt + kk * 32);
#pragma unroll
      for (int m = 0; m < 2; ++m) {
        if constexpr (Tr::kSplit) {
          // small products first; all three share the accumulator
          const uint64_t d_lo = ptx::desc_kmajor_sw128(wt + w_part_bytes + kk * 32);
          Mma::run(acc[m], a[kk][m].lo, d_hi);
          Mma::run(acc[m], a[kk][m].hi, d_lo);
        }
        Mma::run(acc[m], a[kk][m].hi, d_hi);
      }
    }
    ptx::wgmma_commit();
#else
    __trap();  // dispatch only picks wgmma for sm_90a binaries
#endif
  }

  __device__ __forceinline__ void stage(const T* xs, int row, int off, uint32_t wbase, int nt, int dilation,
                                        int w_part_bytes) {
#if CAUSALCONV_HAS_WGMMA
    const int wg = threadIdx.x >> 7, q = (threadIdx.x >> 5) & 3;
    const T* xw = xs + off + wg * 128 + q * 16;
    if constexpr (Tr::kSplit) {
      // One tap per accumulation chain, flushed into the fp32 totals.
      Frags fa;
#pragma unroll 1
      for (int kl = 0; kl < nt; ++kl) {
        issue_tap(fa, xw, row, kl, dilation, wbase, w_part_bytes);
        ptx::wgmma_wait<0>();
        flush();
      }
    } else if constexpr (std::is_same_v<T, float>) {
      // Two fragment sets: tap kl+1 is loaded while tap kl's MMAs run.  (ptxas keeps
      // this pipelined for fp32 operands; for 16-bit ones it serializes, hence the
      // simpler form below.)
      Frags fa, fb;
#pragma unroll 1
      for (int kl = 0; kl < nt; kl += 2) {
        issue_tap(fa, xw, row, kl, dilation, wbase, w_part_bytes);
        ptx::wgmma_wait<1>();
        if (kl + 1 < nt) {
          issue_tap(fb, xw, row, kl + 1, dilation, wbase, w_part_bytes);
          ptx::wgmma_wait<1>();
        }
      }
      ptx::wgmma_wait<0>();
    } else {
      Frags fa;
#pragma unroll 1
      for (int kl = 0; kl < nt; ++kl) {
        issue_tap(fa, xw, row, kl, dilation, wbase, w_part_bytes);
        ptx::wgmma_wait<0>();
      }
    }
#endif
  }

  __device__ __forceinline__ void store(const ConvParams& p, int64_t b, int g, int64_t t0, int o0) const {
    const int lane = threadIdx.x & 31, wg = threadIdx.x >> 7, q = (threadIdx.x >> 5) & 3;
#pragma unroll
    for (int m = 0; m < 2; ++m)
#pragma unroll
      for (int j = 0; j < BN / 2; ++j) {
        const int t = wg * 128 + m * 64 + q * 16 + (lane >> 2) + ((j & 2) ? 8 : 0);
        const int o = (j >> 2) * 8 + 2 * (lane & 3) + (j & 1);
        store_out<T>(p, b, g, t0 + t, o0 + o, result(m, j));
      }
  }
};

// mma.sync engine (sm_80+): warp w computes t rows (w%4)*64 .. +63 and output channels
// (w/4)*BN/2 .. +BN/2-1 as 4 x (BN/16) tiles of 16 x 8.
template <typename T, Precision P, int BN>
struct MmaSyncEngine {
  using Tr = FwdTraits<T, P, BN>;
  static constexpr int kWN = BN / 2;
  static constexpr int kN8 = kWN / 8;
  float acc[4][kN8][4];
  // As in the wgmma engine: with the 3xTF32 split each tap accumulates from zero and is
  // added to fp32 totals.
  float tot[Tr::kSplit ? 4 : 1][Tr::kSplit ? kN8 : 1][Tr::kSplit ? 4 : 1];

  __device__ __forceinline__ void zero() {
#pragma unroll
    for (int m = 0; m < 4; ++m)
#pragma unroll
      for (int n = 0; n < kN8; ++n)
#pragma unroll
        for (int r = 0; r < 4; ++r) {
          acc[m][n][r] = 0.f;
          if constexpr (Tr::kSplit) tot[m][n][r] = 0.f;
        }
  }

  __device__ __forceinline__ void flush() {
    if constexpr (Tr::kSplit) {
#pragma unroll
      for (int m = 0; m < 4; ++m)
#pragma unroll
        for (int n = 0; n < kN8; ++n)
#pragma unroll
          for (int r = 0; r < 4; ++r) {
            tot[m][n][r] += acc[m][n][r];
            acc[m][n][r] = 0.f;
          }
    }
  }

  __device__ __forceinline__ float result(int m, int n, int r) const {
    if constexpr (Tr::kSplit) return tot[m][n][r];
    else return acc[m][n][r];
  }

  __device__ __forceinline__ static void mma(float (&d)[4], const uint32_t (&a)[4], const uint32_t (&b)[2]) {
    if constexpr (std::is_same_v<T, float>) {
      ptx::mma_tf32_16x8x8(d, a, b);
    } else if constexpr (std::is_same_v<T, __nv_bfloat16>) {
      ptx::mma_bf16_16x8x16(d, a, b);
    } else {
      ptx::mma_f16_16x8x16(d, a, b);
    }
  }

  __device__ __forceinline__ void stage(const T* xs, int row, int off, uint32_t wbase, int nt, int dilation,
                                        int w_part_bytes) {
    const int lane = threadIdx.x & 31, warp = threadIdx.x >> 5;
    const int wt = warp & 3, wo = warp >> 2;
    const T* xw = xs + off + wt * 64;
    for (int kl = 0; kl < nt; ++kl) {
      const uint32_t wtap = wbase + kl * Tr::kTapBytes;
#pragma unroll
      for (int kk = 0; kk < Tr::kKSteps; ++kk) {
        AFrag<T, Tr::kSplit> a[4];
#pragma unroll
        for (int m = 0; m < 4; ++m) a[m].load(xw + kl * dilation + m * 16 + kk * Tr::kKStep * row, 1, row, lane);
#pragma unroll
        for (int n = 0; n < kN8; ++n) {
          // B fragment: lane = 4g + c holds reduction word c of chunks 2kk and 2kk+1 of row o
          const int o = wo * kWN + n * 8 + (lane >> 2);
          const uint32_t r0 = wtap + o * 128 + (lane & 3) * 4;
          const uint32_t c0 = swizzle_chunk(o, 2 * kk) * 16, c1 = swizzle_chunk(o, 2 * kk + 1) * 16;
          const uint32_t bh[2] = {ptx::ld_shared_b32(r0 + c0), ptx::ld_shared_b32(r0 + c1)};
          if constexpr (Tr::kSplit) {
            const uint32_t bl[2] = {ptx::ld_shared_b32(r0 + w_part_bytes + c0),
                                    ptx::ld_shared_b32(r0 + w_part_bytes + c1)};
#pragma unroll
            for (int m = 0; m < 4; ++m) {
              mma(acc[m][n], a[m].lo, bh);
              mma(acc[m][n], a[m].hi, bl);
            }
          }
#pragma unroll
          for (int m = 0; m < 4; ++m) mma(acc[m][n], a[m].hi, bh);
        }
      }
      flush();
    }
  }

  __device__ __forceinline__ void store(const ConvParams& p, int64_t b, int g, int64_t t0, int o0) const {
    const int lane = threadIdx.x & 31, warp = threadIdx.x >> 5;
    const int wt = warp & 3, wo = warp >> 2;
#pragma unroll
    for (int m = 0; m < 4; ++m)
#pragma unroll
      for (int n = 0; n < kN8; ++n)
#pragma unroll
        for (int r = 0; r < 4; ++r) {
          const int t = wt * 64 + m * 16 + (lane >> 2) + ((r & 2) ? 8 : 0);
          const int o = wo * kWN + n * 8 + 2 * (lane & 3) + (r & 1);
          store_out<T>(p, b, g, t0 + t, o0 + o, result(m, n, r));
        }
  }
};

template <typename T, Precision P, int BN, Engine E>
__global__ void __launch_bounds__(256, 1) fwd_kernel(ConvParams p, FwdPlan plan) {
  using Tr = FwdTraits<T, P, BN>;
  using Eng = std::conditional_t<E == Engine::kWgmma, WgmmaEngine<T, P, BN>, MmaSyncEngine<T, P, BN>>;
  extern __shared__ __align__(16) uint8_t smem_raw[];
  const uint32_t raw = ptx::smem_addr(smem_raw);
  const uint32_t base = (raw + 1023u) & ~1023u;  // swizzle atoms need 1024-byte alignment
  const uint8_t* base_ptr = smem_raw + (base - raw);

  int64_t bid = blockIdx.x;
  const int ot = static_cast<int>(bid % plan.n_ot);
  bid /= plan.n_ot;
  const int g = static_cast<int>(bid % p.groups);
  bid /= p.groups;
  const int64_t n_tt = ceil_div(p.L, Tr::kBM);
  const int64_t t0 = (bid % n_tt) * Tr::kBM;
  const int64_t b = bid / n_tt;

  const T* x = static_cast<const T*>(p.x) + b * p.sx_b + static_cast<int64_t>(g) * p.cin_g * p.sx_c;
  const int64_t w_tile = (static_cast<int64_t>(g) * plan.n_ot + ot) * plan.n_ic;

  Eng eng;
  eng.zero();
  const int S = plan.n_ic * plan.ngroups;
  load_stage<Tr>(p, plan, x, w_tile, t0, 0, base);
  ptx::cp_async_commit();
  for (int s = 0; s < S; ++s) {
    const int buf = s & 1;
    if (s + 1 < S) load_stage<Tr>(p, plan, x, w_tile, t0, s + 1, base + (buf ^ 1) * plan.stage_bytes);
    ptx::cp_async_commit();
    ptx::cp_async_wait<1>();  // stage s has landed (this thread's copies)
#if CAUSALCONV_HAS_WGMMA
    if constexpr (E == Engine::kWgmma) ptx::fence_proxy_async();
#endif
    __syncthreads();  // ... and every thread's

    const int grp = s % plan.ngroups;
    const int k0 = grp * plan.tpg, nt = min(plan.tpg, p.K - k0);
    const int64_t ws0 = t0 + static_cast<int64_t>(k0) * p.dilation + p.shift;
    const int off = static_cast<int>(ws0 - floor_div(ws0, Tr::kV) * Tr::kV);
    const uint32_t sbase = base + buf * plan.stage_bytes;
    const T* xs = reinterpret_cast<const T*>(base_ptr + buf * plan.stage_bytes + plan.x_offset);
    eng.stage(xs, plan.row, off, sbase, nt, p.dilation, plan.w_part_bytes);
    __syncthreads();  // everyone is done reading this buffer before it is refilled
  }
  eng.store(p, b, g, t0, ot * BN);
}

// ---------------------------------------------------------------------------------
template <typename T, Precision P, int BN>
FwdPlan make_plan(const ConvParams& p, int smem_limit) {
  using Tr = FwdTraits<T, P, BN>;
  FwdPlan plan{};
  plan.n_ot = static_cast<int>(ceil_div(p.cout_g, BN));
  plan.n_ic = static_cast<int>(ceil_div(p.cin_g, Tr::kCI));
  for (int tpg = std::min(p.K, Tr::kMaxTaps); tpg >= 1; --tpg) {
    // Row length: the tile, the halo of this many taps, and up to kV-1 columns of
    // alignment slack; a multiple of 8 whose eighth is odd, which spreads the rows of an
    // A fragment over distinct shared-memory banks.
    int row = Tr::kBM + (tpg - 1) * p.dilation + Tr::kV - 1;
    row = (row + 7) / 8 * 8;
    if ((row / 8) % 2 == 0) row += 8;
    const int w_part = tpg * Tr::kTapBytes;
    const int x_bytes = static_cast<int>((static_cast<int64_t>(Tr::kCI) * row * sizeof(T) + 1023) / 1024 * 1024);
    const int stage = Tr::kParts * w_part + x_bytes;
    if (2 * stage + 1024 <= smem_limit || tpg == 1) {
      plan.tpg = tpg;
      plan.row = row;
      plan.w_part_bytes = w_part;
      plan.x_offset = Tr::kParts * w_part;
      plan.stage_bytes = stage;
      break;
    }
  }
  plan.ngroups = static_cast<int>(ceil_div(p.K, plan.tpg));
  return plan;
}

template <typename T, Precision P, int BN, Engine E>
void launch(const ConvParams& p, cudaStream_t stream) {
  using Tr = FwdTraits<T, P, BN>;
  const int smem_limit = max_smem_optin();
  FwdPlan plan = make_plan<T, P, BN>(p, smem_limit);
  const size_t smem = 2 * static_cast<size_t>(plan.stage_bytes) + 1024;
  CAUSALCONV_CHECK(smem <= static_cast<size_t>(smem_limit), "causalconv: tensor-core tile needs ", smem,
                   " bytes of shared memory, device allows ", smem_limit, "; dilation too large for this kernel");

  // The image lives in this stream's scratch buffer (no allocation per call); the lease
  // is held until the conv kernel that reads it has been enqueued.
  const int64_t image = weight_image_elems<T, BN>(p);
  ScratchLease scratch(static_cast<size_t>(image) * (Tr::kSplit ? 2 : 1) * sizeof(T), stream);
  T* hi = static_cast<T*>(scratch.data());
  T* lo = Tr::kSplit ? hi + image : nullptr;
  write_weight_image<T, P, BN>(p, hi, lo, stream);
  plan.w_hi = hi;
  plan.w_lo = lo;

  const int64_t blocks = static_cast<int64_t>(plan.n_ot) * p.groups * ceil_div(p.L, Tr::kBM) * p.B;
  CAUSALCONV_CHECK(blocks <= INT32_MAX, "causalconv: problem too large for one tensor-core launch");
  auto kernel = fwd_kernel<T, P, BN, E>;
  allow_max_smem<KernelTag<T, P, BN, E>>(kernel);
  kernel<<<static_cast<unsigned>(blocks), Tr::kThreads, smem, stream>>>(p, plan);
  CAUSALCONV_CHECK_LAUNCH("conv_fwd_tc");
}

// Instantiated tiles: wgmma with BN 128 (and 64 for narrow problems); 3xTF32 only with
// BN 64, the widest that ptxas keeps pipelined with the extra fragments; mma.sync with
// BN 64, the widest without spills.
template <typename T, Precision P>
void launch_tile(const ConvParams& p, TcKernel kind, int bn, cudaStream_t stream) {
  if (kind == TcKernel::kMmaSync) return launch<T, P, 64, Engine::kMmaSync>(p, stream);
  if constexpr (P != Precision::kTF32x3) {
    if (bn == 128) return launch<T, P, 128, Engine::kWgmma>(p, stream);
  }
  return launch<T, P, 64, Engine::kWgmma>(p, stream);
}

}  // namespace fwd
}  // namespace tc

// One translation unit per operand type (they compile in parallel).
void launch_fwd_tc_f32(const ConvParams& p, TcKernel kind, int bn, cudaStream_t stream);
void launch_fwd_tc_bf16(const ConvParams& p, TcKernel kind, int bn, cudaStream_t stream);
void launch_fwd_tc_f16(const ConvParams& p, TcKernel kind, int bn, cudaStream_t stream);

}  // namespace causalconv
