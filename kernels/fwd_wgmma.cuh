// Tensor-core forward on Hopper (sm_90a): both wgmma operands from shared memory.
//
// The conv is computed per tile as the implicit GEMM y^T[t, o] = sum_k sum_i
// x^T[t + k*dilation + shift, i] * w_k[o, i].  A block owns 256 time steps x BN output
// channels of one (batch, group) and walks its reduction in stages of one 128-byte chunk
// of input channels (32 fp32 / 64 16-bit) times up to 4 taps.  Per stage:
//   - x^T: the window of time steps the stage's taps read, transposed so that each time
//     step is one 128-byte row of channels (K-major, 128-byte swizzle).  The rows of tap
//     k start k*dilation rows further down, so every tap's A operand is the same tile
//     read from a different row: no im2col, no padded copy, the causal zeros are rows
//     the loader fills with zeros.  The transpose happens in registers on the way from
//     global memory (16-byte loads along time, 16-byte shared stores along channels),
//     with fp32 rounded to TF32 (and split into hi + lo for 3xTF32) once per element.
//   - the weights of the stage's taps, pre-arranged on the device into the exact
//     shared-memory image (K-major, swizzled, TF32-rounded) and copied in by cp.async.
// Two stage buffers: while the tensor cores work on stage j, the threads fetch stage
// j+1; one barrier per stage.  Blocks are persistent (one per SM, tiles strided by the
// grid), so the next tile's first stage loads while the current tile finishes and its
// epilogue (bias, cast, store) runs.
#pragma once
#include "fwd_tc.cuh"

namespace causalconv {
namespace tc {
namespace fwd {

struct SsPlan {
  const void* w_hi;
  const void* w_lo;
  int n_ot, n_ic;        // output-channel tiles, input-channel chunks (per group)
  int tpg, ngroups;      // taps per stage, tap groups
  int rows;              // x^T rows per stage: the tile, the taps' halo, alignment slack
  int w_part_bytes;      // one weight part (hi or lo) of one stage
  int x_part_bytes;      // one x^T part
  int x_offset;          // bytes from a stage's start to its x^T hi part
  int stage_bytes;
  int64_t n_tt, tiles;   // time tiles per (batch, group); all tiles
};

// What one pipeline step (a stage of one tile) works on.
struct Step {
  int64_t b, t0;
  int g, ot, ic, k0, nt;
  int64_t tile;
};

__device__ __forceinline__ Step decode_step(const ConvParams& p, const SsPlan& plan, int64_t j, int S, int bm) {
  Step st;
  const int64_t local = j / S;
  const int s = static_cast<int>(j - local * S);
  st.tile = blockIdx.x + local * gridDim.x;
  int64_t r = st.tile;
  st.ot = static_cast<int>(r % plan.n_ot);
  r /= plan.n_ot;
  st.g = static_cast<int>(r % p.groups);
  r /= p.groups;
  st.t0 = (r % plan.n_tt) * bm;
  st.b = r / plan.n_tt;
  st.ic = s / plan.ngroups;
  st.k0 = (s - st.ic * plan.ngroups) * plan.tpg;
  st.nt = min(plan.tpg, p.K - st.k0);
  return st;
}

// Descriptor of a K-major, 128-byte-swizzled operand starting at any 128-byte row of a
// tile whose swizzle atoms are 1024-byte aligned.  The hardware applies the swizzle to
// the absolute shared-memory address, so a start row inside an atom needs nothing but
// the start address (base-offset field 0): scripts/probe_desc_row_shift.cu measured this
// on an H200, where setting the field to the row within the atom gave wrong products.
#if CAUSALCONV_HAS_WGMMA
__device__ __forceinline__ uint64_t a_desc(uint32_t addr) { return ptx::desc_kmajor_sw128(addr); }
#endif

template <typename T, Precision P, int BN>
struct SsEngine {
  using Tr = FwdTraits<T, P, BN>;
  using Mma = wgmma::MmaSS<typename Elem<T>::Wg, BN>;
  // The MMAs accumulate into acc.  Without the split it holds the whole tile.  With the
  // 3xTF32 split every stage starts it from zero and adds it to the fp32 totals when the
  // stage is done: the tensor cores' accumulation truncates, and over the hundreds of
  // chained MMAs of a whole tile that bias would exceed fp32 accuracy.  (One set of
  // accumulators: ptxas serializes all MMAs when other instructions read accumulators
  // while any MMA is in flight, even a second set's.)
  float acc[2][BN / 2];
  float tot[Tr::kSplit ? 2 : 1][Tr::kSplit ? BN / 2 : 1];

  // Clears the split's fp32 totals (the MMA accumulators are cleared by start()).
  __device__ __forceinline__ void zero() {
    if constexpr (Tr::kSplit) {
#pragma unroll
      for (int m = 0; m < 2; ++m)
#pragma unroll
        for (int j = 0; j < BN / 2; ++j) tot[m][j] = 0.f;
    }
  }

  // Pins the accumulators at this point of the program: without it the compiler may copy
  // an accumulator between an MMA's issue and its wait, and ptxas then has to wait for
  // the MMAs right after issuing them, which serializes the loads behind them.
  __device__ __forceinline__ void pin() {
#pragma unroll
    for (int m = 0; m < 2; ++m)
#pragma unroll
      for (int j = 0; j < BN / 2; ++j) asm volatile("" : "+f"(acc[m][j])::"memory");
  }

  // The MMAs of tap kl of the stage whose x^T starts at xs (row `first` is this
  // warpgroup's first time step for tap 0) and whose weights start at ws.
  __device__ __forceinline__ void issue_tap(uint32_t xs, int first, uint32_t ws, int kl, int dilation,
                                            const SsPlan& plan, bool chain_start) {
#if CAUSALCONV_HAS_WGMMA
    ptx::wgmma_fence();  // each tap is its own branch; each orders the register accesses before it
    const uint32_t wt = ws + kl * Tr::kTapBytes;
#pragma unroll
    for (int kk = 0; kk < Tr::kKSteps; ++kk) {
      const uint64_t w_hi = ptx::desc_kmajor_sw128(wt + kk * 32);
#pragma unroll
      for (int m = 0; m < 2; ++m) {
        const uint32_t a = xs + static_cast<uint32_t>(first + m * 64 + kl * dilation) * 128u + kk * 32;
        const uint64_t x_hi = a_desc(a);
        const int accumulate = (chain_start && kk == 0) ? 0 : 1;
        if constexpr (Tr::kSplit) {
          // small products first
          const uint64_t x_lo = a_desc(a + plan.x_part_bytes);
          const uint64_t w_lo = ptx::desc_kmajor_sw128(wt + plan.w_part_bytes + kk * 32);
          Mma::run(acc[m], x_lo, w_hi, accumulate);
          Mma::run(acc[m], x_hi, w_lo, 1);
          Mma::run(acc[m], x_hi, w_hi, 1);
        } else {
          Mma::run(acc[m], x_hi, w_hi, accumulate);
        }
      }
    }
#else
    __trap();  // dispatch only picks this kernel for sm_90a binaries
#endif
  }

  // Issues the stage's MMAs as one commit group.  The first stage of a tile (every stage
  // with the split) starts the accumulators from zero through the MMAs' own accumulate
  // flag, so no other instruction writes them while MMAs may be in flight.
  __device__ __forceinline__ void start(uint32_t xs, int first, uint32_t ws, int nt, int dilation,
                                        const SsPlan& plan, bool tile_start) {
#if CAUSALCONV_HAS_WGMMA
    const bool fresh = Tr::kSplit || tile_start;
    pin();
    // Unrolled over the largest tap count: a run-time loop would make the accumulators
    // loop-carried values, which ptxas then copies between MMAs (forcing waits).
#pragma unroll
    for (int kl = 0; kl < Tr::kMaxTaps; ++kl)
      if (kl < nt) issue_tap(xs, first, ws, kl, dilation, plan, fresh && kl == 0);
    ptx::wgmma_commit();
    pin();
#endif
  }

  // Waits for the stage's MMAs.
  __device__ __forceinline__ void finish() {
#if CAUSALCONV_HAS_WGMMA
    ptx::wgmma_wait<0>();
    pin();
    if constexpr (Tr::kSplit) {
#pragma unroll
      for (int m = 0; m < 2; ++m)
#pragma unroll
        for (int j = 0; j < BN / 2; ++j) tot[m][j] += acc[m][j];
    }
#endif
  }

  __device__ __forceinline__ float result(int m, int j) const {
    if constexpr (Tr::kSplit) return tot[m][j];
    else return acc[m][j];
  }

  // Warpgroup wg holds time steps wg*128 .. +127 as two m64 tiles; warp q of the
  // warpgroup rows 16q .. 16q+15 of each.
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

// 16-byte vector of T along time, and its transpose into rows of channels.
template <typename T>
struct Transpose;

// fp32: a thread holds 4 channels x 4 time steps; row u gets (c0..c3 at time u), TF32
// rounded, and for the split also the rounded remainder.
template <>
struct Transpose<float> {
  using Vec = float4;
  template <bool kSplit>
  __device__ __forceinline__ static void store(const Vec (&v)[4], uint8_t* hi, uint8_t* lo, int row0, int cb,
                                               int part_bytes) {
#pragma unroll
    for (int u = 0; u < 4; ++u) {
      const int r = row0 + u;
      const uint32_t off = r * 128 + (swizzle_chunk(r, cb) << 4);
      const float c[4] = {(&v[0].x)[u], (&v[1].x)[u], (&v[2].x)[u], (&v[3].x)[u]};
      float4 h, l;
      float* hp = &h.x;
      float* lp = &l.x;
#pragma unroll
      for (int i = 0; i < 4; ++i) {
        hp[i] = round_tf32(c[i]);
        lp[i] = round_tf32(c[i] - hp[i]);
      }
      *reinterpret_cast<float4*>(hi + off) = h;
      if constexpr (kSplit) *reinterpret_cast<float4*>(lo + off) = l;
    }
  }
};

// 16-bit: a thread holds 8 channels x 8 time steps (each 32-bit word two time steps);
// row u gets the 8 channels at time u, packed two per word.
template <typename T16>
struct Transpose16 {
  using Vec = uint4;
  template <bool kSplit>
  __device__ __forceinline__ static void store(const Vec (&v)[8], uint8_t* hi, uint8_t*, int row0, int cb, int) {
#pragma unroll
    for (int u = 0; u < 8; ++u) {
      const int r = row0 + u;
      const uint32_t off = r * 128 + (swizzle_chunk(r, cb) << 4);
      const uint32_t sel = (u & 1) ? 0x7632u : 0x5410u;  // high or low halves of the two words
      uint4 o;
      uint32_t* op = &o.x;
#pragma unroll
      for (int w = 0; w < 4; ++w) {
        const uint32_t a = (&v[2 * w].x)[u >> 1], c = (&v[2 * w + 1].x)[u >> 1];
        op[w] = __byte_perm(a, c, sel);
      }
      *reinterpret_cast<uint4*>(hi + off) = o;
    }
  }
};
template <>
struct Transpose<__nv_bfloat16> : Transpose16<__nv_bfloat16> {};
template <>
struct Transpose<__half> : Transpose16<__half> {};

// Stage st's x window into x^T, in two halves so that the global loads can be issued
// before the stage's MMAs and the shared stores done after them: a warp blocks while it
// issues wgmma, so loads issued after the MMAs would not overlap them.  Thread (tb, cb)
// covers time steps a0 + kV*tb .. +kV-1 and channels kV*cb .. +kV-1; lanes 0-7 of a warp
// share tb, so each 16-byte shared store of a warp phase lands in distinct banks.  The
// first batch covers 256 time steps, the rest of the window (halo, alignment slack)
// follows in further batches after the MMAs are issued.
template <class Tr, typename T>
struct XBatch {
  using Tp = Transpose<T>;
  using Vec = typename Tp::Vec;
  static constexpr int kV = Tr::kV;
  static constexpr int kPerRound = Tr::kThreads / 8;  // time blocks per round
  // 8 vectors (32 registers) per thread, what fits next to 128 accumulators
  static constexpr int kRounds = 8 / kV;
  static constexpr int kBlocks = kRounds * kPerRound;
  Vec v[kRounds][kV];

  __device__ __forceinline__ void fetch(const ConvParams& p, const SsPlan& plan, const Step& st, int tb0) {
    const int64_t a0 = floor_div(st.t0 + static_cast<int64_t>(st.k0) * p.dilation + p.shift, kV) * kV;
    const int cb = threadIdx.x & 7;
    const int c0 = st.ic * Tr::kCI + cb * kV;
    const T* x = static_cast<const T*>(p.x) + st.b * p.sx_b + (static_cast<int64_t>(st.g) * p.cin_g + c0) * p.sx_c;
    const int n_tb = plan.rows / kV;
#pragma unroll
    for (int r = 0; r < kRounds; ++r) {
      const int tb = tb0 + (threadIdx.x >> 3) + r * kPerRound;
      const int64_t t = a0 + static_cast<int64_t>(tb) * kV;
      // L is a multiple of kV: a vector is all in or all out
      const bool t_ok = tb < n_tb && t >= 0 && t < p.L;
#pragma unroll
      for (int c = 0; c < kV; ++c) {
        const bool ok = t_ok && c0 + c < p.cin_g;
        v[r][c] = ok ? __ldg(reinterpret_cast<const Vec*>(x + c * p.sx_c + t)) : Vec{};
      }
    }
  }

  __device__ __forceinline__ void store(const SsPlan& plan, uint8_t* xs, int tb0) const {
    const int n_tb = plan.rows / kV;
#pragma unroll
    for (int r = 0; r < kRounds; ++r) {
      const int tb = tb0 + (threadIdx.x >> 3) + r * kPerRound;
      if (tb < n_tb)
        Tp::template store<Tr::kSplit>(v[r], xs, xs + plan.x_part_bytes, tb * kV, threadIdx.x & 7,
                                       plan.x_part_bytes);
    }
  }
};

// The batches after the first, loaded and stored in one go.
template <class Tr, typename T>
__device__ __forceinline__ void load_x_rest(const ConvParams& p, const SsPlan& plan, const Step& st, uint8_t* xs) {
  using XB = XBatch<Tr, T>;
  for (int tb0 = XB::kBlocks; tb0 < plan.rows / Tr::kV; tb0 += XB::kBlocks) {
    XB xb;
    xb.fetch(p, plan, st, tb0);
    xb.store(plan, xs, tb0);
  }
}

template <class Tr, typename T>
__device__ __forceinline__ void load_w(const ConvParams& p, const SsPlan& plan, const Step& st, uint32_t ws) {
  const int64_t w_tile = (static_cast<int64_t>(st.g) * plan.n_ot + st.ot) * plan.n_ic + st.ic;
  // weights of taps k0 .. k0+nt-1 are contiguous in the image
  const int64_t w_elem = (w_tile * p.K + st.k0) * static_cast<int64_t>(Tr::kTapBytes / sizeof(T));
  const int chunks = st.nt * Tr::kTapBytes / 16;
  copy_chunks<Tr::kThreads>(ws, reinterpret_cast<const uint8_t*>(static_cast<const T*>(plan.w_hi) + w_elem), chunks);
  if constexpr (Tr::kSplit) {
    copy_chunks<Tr::kThreads>(ws + plan.w_part_bytes,
                              reinterpret_cast<const uint8_t*>(static_cast<const T*>(plan.w_lo) + w_elem), chunks);
  }
}

template <typename T, Precision P, int BN>
__global__ void __launch_bounds__(256, 1) fwd_ss_kernel(ConvParams p, SsPlan plan) {
  using Tr = FwdTraits<T, P, BN>;
#if CAUSALCONV_HAS_WGMMA
  extern __shared__ __align__(16) uint8_t smem_raw[];
  const uint32_t raw = ptx::smem_addr(smem_raw);
  const uint32_t base = (raw + 1023u) & ~1023u;  // swizzle atoms need 1024-byte alignment
  uint8_t* base_ptr = smem_raw + (base - raw);

  const int S = plan.n_ic * plan.ngroups;  // stages per tile
  if (blockIdx.x >= plan.tiles) return;
  const int64_t steps = (plan.tiles - blockIdx.x + gridDim.x - 1) / gridDim.x * S;
  const int first = (threadIdx.x >> 7) * 128;  // this warpgroup's first time step

  SsEngine<T, P, BN> eng;
  eng.zero();
  using XB = XBatch<Tr, T>;
  Step cur = decode_step(p, plan, 0, S, Tr::kBM);
  {
    load_w<Tr, T>(p, plan, cur, base);
    ptx::cp_async_commit();
    XB xb;
    xb.fetch(p, plan, cur, 0);
    xb.store(plan, base_ptr + plan.x_offset, 0);
    load_x_rest<Tr, T>(p, plan, cur, base_ptr + plan.x_offset);
  }
  ptx::cp_async_wait<0>();
  ptx::fence_proxy_async();
  __syncthreads();

  for (int64_t j = 0; j < steps; ++j) {
    const uint32_t sb = base + static_cast<uint32_t>(j & 1) * plan.stage_bytes;
    const int64_t ws0 = cur.t0 + static_cast<int64_t>(cur.k0) * p.dilation + p.shift;
    const int off = static_cast<int>(ws0 - floor_div(ws0, Tr::kV) * Tr::kV);
    const uint32_t xs = sb + plan.x_offset;

    // The next step goes into the other buffer, which the previous step's MMAs (complete
    // before the last barrier) no longer read: its loads are issued first, the MMAs of
    // this step next, and the x stores when the loads have landed.
    const bool more = j + 1 < steps;
    Step next = cur;
    const uint32_t nb = static_cast<uint32_t>((j + 1) & 1) * plan.stage_bytes;
    XB xb;
    if (more) {
      next = decode_step(p, plan, j + 1, S, Tr::kBM);
      load_w<Tr, T>(p, plan, next, base + nb);
      ptx::cp_async_commit();
      xb.fetch(p, plan, next, 0);
    }
    eng.start(xs, first + off, sb, cur.nt, p.dilation, plan, j % S == 0);
    if (more) {
      xb.store(plan, base_ptr + nb + plan.x_offset, 0);
      load_x_rest<Tr, T>(p, plan, next, base_ptr + nb + plan.x_offset);
    }
    eng.finish();

    if (j + 1 == steps || next.tile != cur.tile) {
      eng.store(p, cur.b, cur.g, cur.t0, cur.ot * BN);
      eng.zero();
    }
    ptx::cp_async_wait<0>();
    ptx::fence_proxy_async();  // x^T was written by ordinary stores, read by wgmma
    __syncthreads();
    cur = next;
  }
#else
  __trap();  // dispatch only picks this kernel for sm_90a binaries
#endif
}

template <typename T, Precision P, int BN>
SsPlan make_ss_plan(const ConvParams& p, int smem_limit) {
  using Tr = FwdTraits<T, P, BN>;
  SsPlan plan{};
  plan.n_ot = static_cast<int>(ceil_div(p.cout_g, BN));
  plan.n_ic = static_cast<int>(ceil_div(p.cin_g, Tr::kCI));
  for (int tpg = std::min(p.K, Tr::kMaxTaps); tpg >= 1; --tpg) {
    // The tile, the halo of this many taps, up to kV-1 rows of alignment slack; whole
    // 8-row swizzle atoms.
    const int64_t rows = (static_cast<int64_t>(Tr::kBM) + static_cast<int64_t>(tpg - 1) * p.dilation + Tr::kV - 1 + 7) / 8 * 8;
    const int64_t x_part = rows * 128;
    const int w_part = tpg * Tr::kTapBytes;
    const int64_t stage = Tr::kParts * (w_part + x_part);
    if (2 * stage + 1024 <= smem_limit || tpg == 1) {
      plan.tpg = tpg;
      plan.rows = static_cast<int>(rows);
      plan.w_part_bytes = w_part;
      plan.x_part_bytes = static_cast<int>(x_part);
      plan.x_offset = Tr::kParts * w_part;
      plan.stage_bytes = static_cast<int>(std::min<int64_t>(stage, INT32_MAX));
      break;
    }
  }
  plan.ngroups = static_cast<int>(ceil_div(p.K, plan.tpg));
  plan.n_tt = ceil_div(p.L, Tr::kBM);
  plan.tiles = plan.n_tt * p.B * p.groups * plan.n_ot;

  return plan;
}

template <typename T, Precision P, int BN>
void launch_ss(const ConvParams& p, cudaStream_t stream, int sms) {
  using Tr = FwdTraits<T, P, BN>;
  const int smem_limit = max_smem_optin();
  SsPlan plan = make_ss_plan<T, P, BN>(p, smem_limit);
  const size_t smem = 2 * static_cast<size_t>(plan.stage_bytes) + 1024;
  TORCH_CHECK(smem <= static_cast<size_t>(smem_limit), "causalconv: tensor-core tile needs ", smem,
              " bytes of shared memory, device allows ", smem_limit);

  // The image lives in this stream's scratch buffer (no allocation per call); the lease
  // is held until the conv kernel that reads it has been enqueued.
  const int64_t image = static_cast<int64_t>(p.groups) * plan.n_ot * plan.n_ic * p.K * BN * Tr::kCI;
  ScratchLease scratch(static_cast<size_t>(image) * Tr::kParts * sizeof(T), stream);
  T* hi = static_cast<T*>(scratch.data());
  T* lo = Tr::kSplit ? hi + image : nullptr;
  launch_weight_image<T, P, BN>(p, plan.n_ot, plan.n_ic, hi, lo, image, stream);
  plan.w_hi = hi;
  plan.w_lo = lo;

  const int64_t grid = std::min<int64_t>(plan.tiles, sms);
  auto kernel = fwd_ss_kernel<T, P, BN>;
  allow_max_smem<KernelTag<T, P, BN, Engine::kWgmma>>(kernel);
  kernel<<<static_cast<unsigned>(grid), Tr::kThreads, smem, stream>>>(p, plan);
  CAUSALCONV_CHECK_LAUNCH("conv_fwd_wgmma");
}

}  // namespace fwd
}  // namespace tc
}  // namespace causalconv
