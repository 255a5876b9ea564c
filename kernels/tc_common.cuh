// Pieces shared by the tensor-core kernels (forward and weight gradient): operand type
// traits, the 128-byte swizzle, A-fragment loads from staged x tiles, and the 16-bit
// transpose of a raw x window into time-major tile rows.
#pragma once
#include <algorithm>
#include <cstdlib>
#include <cstring>
#include <type_traits>
#include <utility>

#include "common.cuh"
#include "dependent_launch.cuh"
#include "ptx.cuh"
#include "wgmma_ops.cuh"

namespace causalconv {
namespace tc {

enum class Engine : int { kWgmma = 0, kMmaSync = 1 };

template <typename T>
struct Elem;
template <>
struct Elem<float> {
  using Wg = wgmma::Tf32;
  static constexpr int kKStep = 8;  // reduction depth of one MMA instruction
};
template <>
struct Elem<__nv_bfloat16> {
  using Wg = wgmma::Bf16;
  static constexpr int kKStep = 16;
};
template <>
struct Elem<__half> {
  using Wg = wgmma::F16;
  static constexpr int kKStep = 16;
};

// Elements in one 128-byte swizzle row, and in one 16-byte chunk.
template <typename T>
constexpr int kRowElems = 128 / sizeof(T);
template <typename T>
constexpr int kChunkElems = 16 / sizeof(T);

// 128-byte swizzle: in a tile of 128-byte rows whose 8-row atoms are 1024-byte aligned,
// 16-byte chunk c of row r is stored at chunk position c ^ (r % 8).
__host__ __device__ __forceinline__ int swizzle_chunk(int row, int chunk) { return chunk ^ (row & 7); }

__device__ __forceinline__ uint32_t f32_bits(float v) { return __float_as_uint(v); }

template <typename T>
__device__ __forceinline__ uint32_t pack2(T lo, T hi) {
  const uint16_t l = *reinterpret_cast<const uint16_t*>(&lo);
  const uint16_t h = *reinterpret_cast<const uint16_t*>(&hi);
  return static_cast<uint32_t>(l) | (static_cast<uint32_t>(h) << 16);
}

// fp32 operand as the tensor cores should see it: TF32 with round-to-nearest-even, and
// for the 3xTF32 split also the rounded remainder.
template <bool kSplit>
__device__ __forceinline__ void tf32_parts(float v, uint32_t& hi, uint32_t& lo) {
  const float h = round_tf32(v);
  hi = f32_bits(h);
  if constexpr (kSplit) lo = f32_bits(round_tf32(v - h));
}

// A fragment (16 x kKStep, rows = M, columns = reduction) read from a staged tile whose
// element (m, r) sits at base[m * m_stride + r * r_stride].  The register layout is the
// one mma.m16n8k8 (tf32) / m16n8k16 (16-bit) and each warp's quarter of wgmma m64 use:
// lane = 4 * g + c holds rows g and g + 8, reduction columns c, c + 4 (tf32) or the
// pairs 2c, 2c + 1 and 2c + 8, 2c + 9 (16-bit, low half first).
template <typename T, bool kSplit>
struct AFrag {
  uint32_t hi[4];
  uint32_t lo[kSplit ? 4 : 1];

  __device__ __forceinline__ void load(const T* base, int m_stride, int r_stride, int lane) {
    const int g = lane >> 2, c = lane & 3;
    if constexpr (std::is_same_v<T, float>) {
      const T* p = base + g * m_stride + c * r_stride;
      const float v[4] = {p[0], p[8 * m_stride], p[4 * r_stride], p[8 * m_stride + 4 * r_stride]};
#pragma unroll
      for (int i = 0; i < 4; ++i) tf32_parts<kSplit>(v[i], hi[i], lo[kSplit ? i : 0]);
    } else {
      const T* p = base + g * m_stride + 2 * c * r_stride;
      hi[0] = pack2(p[0], p[r_stride]);
      hi[1] = pack2(p[8 * m_stride], p[8 * m_stride + r_stride]);
      hi[2] = pack2(p[8 * r_stride], p[9 * r_stride]);
      hi[3] = pack2(p[8 * m_stride + 8 * r_stride], p[8 * m_stride + 9 * r_stride]);
    }
  }
};

// Row length (elements) of a 16-bit raw x window read by transpose_window_b16: its
// ldmatrix reads 16 bytes from each of 8 consecutive rows, one shared-memory wavefront
// only if the row pitch is an odd multiple of 16 bytes (an even one puts two rows on the
// same banks).  `window` is a multiple of 8; the result stays within the 256-element TMA
// box when it can.
__host__ __device__ __forceinline__ int conflict_free_window_b16(int window) {
  return (window / 8) % 2 == 0 && window + 8 <= 256 ? window + 8 : window;
}

// The 16-bit shifters' share of one stage, on the matrix-transpose loads and stores: op o
// moves time steps 8(o/2) .. 8(o/2)+7 of channels 32(o%2) .. 32(o%2)+31 as four 8x8
// matrices (matrix i: the eight channels of 16-byte chunk 4(o%2)+i), read from the raw
// window [channel][time] with ldmatrix.trans and written as tile rows [time][channel]
// with stmatrix: 2 instructions per 512 bytes where the element-wise loop took ~50 per
// 16 bytes.  A warp issues kDepth loads before their stores, so that each stmatrix finds
// its data arrived (with two in flight, the v10 profile found the shifters waiting on
// the stmatrix for its ldmatrix).  Channels at or past `valid` (outside the group) are
// written as zeros.  The forward's x tiles and the 16-bit weight gradient's share it.
// A window wider than one 256-element TMA box arrives as two boxes, [box][channel][pitch]
// (`pitch` elements per row, the second box `box_bytes` after the first, each covering
// pitch / 8 time blocks); a one-box window passes pitch = window.
template <int kWarps>
__device__ __forceinline__ void transpose_window_b16(uint32_t raw, uint32_t tile, int window, int shifter_warp, int lane,
                                                     int valid, int pitch, uint32_t box_bytes) {
  constexpr int kDepth = 4, kChannels = 64;
  const int i = lane >> 3, r = lane & 7;
  const int ops = window / 4;  // two channel halves x window / 8 time blocks
  const int box_blocks = pitch / 8;
#pragma unroll 1
  for (int o0 = shifter_warp; o0 < ops; o0 += kDepth * kWarps) {
    uint32_t v[kDepth][4];
#pragma unroll
    for (int d = 0; d < kDepth; ++d) {
      const int o = o0 + d * kWarps;  // warp-uniform, as ldmatrix needs
      if (o >= ops) continue;
      const int tb = o >> 1, second = tb >= box_blocks;  // a compare, not a division: at most two boxes
      ptx::ldmatrix_x4_trans(v[d], raw + second * box_bytes +
                                       (((4 * (o & 1) + i) * 8 + r) * pitch + (tb - second * box_blocks) * 8) * 2);
    }
#pragma unroll
    for (int d = 0; d < kDepth; ++d) {
      const int o = o0 + d * kWarps;
      if (o >= ops) break;
      const int half = o & 1, row = (o >> 1) * 8 + r;
      if (valid < kChannels) {
#pragma unroll
        for (int m = 0; m < 4; ++m) {
          const int c = (4 * half + m) * 8 + 2 * (lane & 3);  // the channels v[d][m] holds: c, c + 1
          v[d][m] &= (c < valid ? 0x0000FFFFu : 0u) | (c + 1 < valid ? 0xFFFF0000u : 0u);
        }
      }
      ptx::stmatrix_x4(tile + row * 128 + (swizzle_chunk(row, 4 * half + i) << 4), v[d]);
    }
  }
}

// Rounds n16 16-byte chunks of fp32 operand in shared memory to TF32 in place, chunk i by
// thread i % kThreads (tid): for operands that reach the tensor cores by TMA, which would
// truncate them.
template <int kThreads>
__device__ __forceinline__ void round_tf32_in_place(float4* v, int n16, int tid) {
#pragma unroll 4
  for (int i = tid; i < n16; i += kThreads) {
    float4 f = v[i];
    f.x = round_tf32(f.x);
    f.y = round_tf32(f.y);
    f.z = round_tf32(f.z);
    f.w = round_tf32(f.w);
    v[i] = f;
  }
}

// The block organization of the warp-specialized sm_90a kernels (fwd_tma.cu, wgrad_tc.cu):
// warp 0 issues the copies, warps 1-3 (the shifters) transpose x, and two consumer
// warpgroups issue the MMAs, 64 output channels each.
template <typename T>
struct WarpRoles {
  static constexpr int kConsumers = 2;                     // warpgroups issuing MMAs
  static constexpr int kThreads = 128 * (kConsumers + 1);  // plus the producer warpgroup
  static constexpr int kShifters = 96;                     // producer warps 1-3
  static constexpr int kConsumerWarps = 4 * kConsumers;
  static constexpr int kBM = 64 * kConsumers;              // output channels per block
  static constexpr int kV = kChunkElems<T>;                // TMA start granularity (16 bytes)
};

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

// Byte offset of 16-byte chunk `chunk` (0-3) of row `row` in an epilogue staging buffer of
// 64-byte rows, laid out as a TMA map with CU_TENSOR_MAP_SWIZZLE_64B reads it: chunks rotate
// by (row / 2) % 4, so that eight rows' stores of one chunk column fall in distinct banks.
__device__ __forceinline__ uint32_t swizzle64_offset(int row, int chunk) {
  return row * 64 + ((chunk ^ ((row >> 1) & 3)) << 4);
}

// One 16-byte async copy per loop step, spread over the block's threads.
template <int kThreads>
__device__ __forceinline__ void copy_chunks(uint32_t dst, const uint8_t* src, int nchunks) {
  for (int i = threadIdx.x; i < nchunks; i += kThreads) ptx::cp_async_16(dst + 16 * i, src + 16 * i, 16);
}

// Set the dynamic shared-memory limit of a kernel to the device maximum, once per
// device for each kernel instantiation that calls it.
template <typename Tag, typename Kernel>
void allow_max_smem(Kernel kernel) {
  static int configured[64] = {0};
  int dev = 0;
  CAUSALCONV_CUDA_CHECK(cudaGetDevice(&dev));
  CAUSALCONV_CHECK(dev < 64, "causalconv: device index ", dev, " out of range");
  if (!configured[dev]) {
    int optin = 0;
    CAUSALCONV_CUDA_CHECK(cudaDeviceGetAttribute(&optin, cudaDevAttrMaxSharedMemoryPerBlockOptin, dev));
    CAUSALCONV_CUDA_CHECK(cudaFuncSetAttribute(kernel, cudaFuncAttributeMaxDynamicSharedMemorySize, optin));
    configured[dev] = 1;
  }
}

// k-steps of A fragments a raw-window consumer (fwd_rs.cu, wgrad_rs.cu) keeps loaded: 2
// (the default: group j - 1 runs while j's fragments load) or 4 (three groups in flight,
// 16 more registers per instruction row), from CAUSALCONV_FRAGMENT_DEPTH; a knob for
// measuring whether the consumers wait on their fragment loads.
inline int fragment_depth() {
  const char* v = std::getenv("CAUSALCONV_FRAGMENT_DEPTH");
  if (v == nullptr || *v == '\0') return 2;
  const int d = std::atoi(v);
  CAUSALCONV_CHECK(d == 2 || d == 4, "causalconv: CAUSALCONV_FRAGMENT_DEPTH must be 2 or 4, got '", v, "'");
  return d;
}

// Whether the raw-window TF32 forward (fwd_rs.cu) feeds its rings from two producer
// threads (windows, weights) and gives stages of one or two taps up to four raw windows:
// yes unless CAUSALCONV_RS_SPLIT_FEED=0 (one producer thread, two windows).  On an H100 it
// measured 9% faster on 16x64->64 K2 d512 (stages of one tap), 3% on K=2 at dilation 1,
// and within noise on four-tap stages (NOTES v27 measured).
inline bool rs_split_feed() { return env_switch("CAUSALCONV_RS_SPLIT_FEED"); }

// Whether the raw-window TF32 forward (fwd_rs.cu) tiles groups of 64 output channels or
// fewer by 64 instead of 128 (whose second half would multiply zero weights): yes unless
// CAUSALCONV_RS_NARROW_TILES=0.  On an H100 it measured 13% faster on 16x64->64 K2 d512 and
// 18% on 32x64->64 K4, the default problem unchanged (NOTES v28 measured).
inline bool rs_narrow_tiles() { return env_switch("CAUSALCONV_RS_NARROW_TILES"); }

// Whether the raw-window TF32 forward (fwd_rs.cu) writes y through shared memory and TMA
// stores, so that its consumer warps hand each slice over and go on instead of issuing
// 4-byte global stores: yes unless CAUSALCONV_RS_TMA_STORE=0.  On an H100 the default
// problem measured 3% faster (0.488 -> 0.474 ms), 16x64->64 K2 d512 1.6%, 8x1024 0.5-2%
// slower (its 32 KB of staging costs two weight slots) (NOTES v29 measured).
inline bool rs_tma_store() { return env_switch("CAUSALCONV_RS_TMA_STORE"); }

// Whether the raw-window TF32 forward (fwd_rs.cu) runs in clusters of two blocks that
// share each weight tap's copy (each block reads half of it from L2 and multicasts it to
// both): only with CAUSALCONV_RS_MULTICAST=1.  Halving the weights' bytes per tap (an
// ablation that copied half of each tap) measured the default problem's fp32 forward 5%
// faster on an H100, but the pairs themselves measured within noise there (the blocks of a
// pair wait for each other's slot releases); untried on an H200, whose forwards are bound
// by energy per operation (NOTES v32).
inline bool rs_multicast() { return env_switch("CAUSALCONV_RS_MULTICAST", false); }

// Taps the TMA forwards' consumer warpgroup 1 runs ahead of warpgroup 2 (fwd_tma.cu, fwd_rs.cu), from
// CAUSALCONV_CONSUMER_SKEW, 0 (lockstep) by default: a knob for measuring whether
// overlapping one warpgroup's epilogue with the other's MMAs pays.
inline int consumer_skew() {
  const char* v = std::getenv("CAUSALCONV_CONSUMER_SKEW");
  if (v == nullptr || *v == '\0') return 0;
  const int s = std::atoi(v);
  CAUSALCONV_CHECK(s >= 0 && s <= 64, "causalconv: CAUSALCONV_CONSUMER_SKEW must be 0 to 64 taps, got '", v, "'");
  return s;
}

// Whether the fp32 TMA forward may split a small grid's input channels over several blocks
// per tile (fwd_tma.cu): yes unless CAUSALCONV_CHANNEL_SPLIT=0, the knob that times a small
// row without the split (NOTES v19).
inline bool channel_split_enabled() { return env_switch("CAUSALCONV_CHANNEL_SPLIT"); }

// Whether the 16-bit TMA forward (fwd_tma.cu) may take time tiles of 256 steps, whose raw
// x windows span two TMA boxes: yes unless CAUSALCONV_WIDE_TILES=0.  The wider tile moves
// fewer shared-memory bytes per multiply-add (weights re-read per tile, the halo transposed
// once per tile) and gives up a weight slot (5, not 6); on an H100 it measured 2-4% faster
// on the default problem and 4-10% on 8x1024 and 32x256->512 (NOTES v25 measured).
inline bool wide_tiles_enabled() { return env_switch("CAUSALCONV_WIDE_TILES", true); }

// How the persistent TMA forwards deal their tiles (fwd_rs.cu, fwd_tma.cu's 16-bit types;
// stream_k.cuh), from CAUSALCONV_STREAM_K: 0 (unset) every tile whole; 1 (fwd_rs.cu only)
// the last waves' tiles cut into Stream-K segments, which on an H100 measured no gain (1-3%
// slower on the default problem and 8x1024; NOTES v21); 2 every tile's units shared out
// over the grid, so that the blocks' tile ends, and their bursts of output stores, fall at
// different moments instead of all at once, and the last wave is as full as the others.
// Mode 2 measured 5-12% slower than whole tiles on an H100 (NOTES v23 measured), so it stays opt-in.
inline int stream_k_mode() {
  const char* v = std::getenv("CAUSALCONV_STREAM_K");
  if (v == nullptr || *v == '\0') return 0;
  CAUSALCONV_CHECK((v[0] == '0' || v[0] == '1' || v[0] == '2') && v[1] == '\0',
                   "causalconv: CAUSALCONV_STREAM_K must be 0, 1 or 2, got '", v, "'");
  return v[0] - '0';
}

// Start stagger of the persistent TMA forwards (fwd_tma.cu, fwd_rs.cu), a knob for
// measuring whether the grid's blocks finishing their tiles at the same moment (every
// multiprocessor storing its outputs in the same few microseconds) costs time:
// CAUSALCONV_STAGGER_NS delays the producers of half the blocks by that many nanoseconds,
// the odd-numbered ones, or with CAUSALCONV_STAGGER_SHORT=1 those with one tile fewer
// (whose delay then costs nothing when it is under a tile).  CAUSALCONV_STAGGER_NS=half
// delays the blocks with one tile fewer by half of `tile_ns`, the launcher's estimate of
// one tile's time (tile_time_ns), so that one setting fits every problem and dtype; those
// blocks pair up as the blocks that share an x window do (tile = block + i * grid, the
// output-channel tile fastest), so the pairs stay in step.  0 by default.
struct Stagger {
  uint32_t ns = 0;
  bool short_blocks = false;
};
inline Stagger start_stagger(double tile_ns) {
  Stagger s;
  const char* v = std::getenv("CAUSALCONV_STAGGER_NS");
  if (v != nullptr && std::strcmp(v, "half") == 0) {
    s.ns = static_cast<uint32_t>(std::min(tile_ns / 2, 1e6));
    s.short_blocks = true;
    return s;
  }
  if (v != nullptr && *v != '\0') {
    char* end = nullptr;
    const long ns = std::strtol(v, &end, 10);
    CAUSALCONV_CHECK(*end == '\0' && ns >= 0 && ns <= 1000000,
                     "causalconv: CAUSALCONV_STAGGER_NS must be 0 to 1000000 (nanoseconds) or 'half', got '", v, "'");
    s.ns = static_cast<uint32_t>(ns);
  }
  s.short_blocks = env_switch("CAUSALCONV_STAGGER_SHORT", false);
  return s;
}
// One tile's time on one multiprocessor, estimated from its multiply-adds at the rates the
// forwards reach on an H100 or H200 under their power cap (v22, v23: TF32 ~2.15, 16-bit
// ~3.9 TFLOP/s per multiprocessor on the default problem), rounded up so that the estimate
// errs short: a stagger of half of it then stays under half a tile.  `mma_passes` counts
// the MMAs per multiply-add (3 for the 3xTF32 split).
inline double tile_time_ns(double flops, int elem_bytes, int mma_passes) {
  const double flops_per_ns = elem_bytes == 2 ? 4000.0 : 2200.0;
  return flops * mma_passes / flops_per_ns;
}
// In the producer thread, before its first copy; `items` is the grid's work items.
__device__ __forceinline__ void stagger_wait(const Stagger& s, int64_t items) {
  if (s.ns == 0) return;
  const int64_t rem = items % gridDim.x;
  const bool late = s.short_blocks ? rem != 0 && blockIdx.x >= rem : (blockIdx.x & 1) != 0;
  if (late) ptx::sleep_ns(s.ns);
}

inline int max_smem_optin() {
  int dev = 0, optin = 0;
  CAUSALCONV_CUDA_CHECK(cudaGetDevice(&dev));
  CAUSALCONV_CUDA_CHECK(cudaDeviceGetAttribute(&optin, cudaDevAttrMaxSharedMemoryPerBlockOptin, dev));
  return optin;
}

}  // namespace tc
}  // namespace causalconv
