// Thin wrappers over the PTX instructions the tensor-core kernels need, each named for
// what it does.  Instructions that exist only on sm_90a are compiled only there.
#pragma once
#include <cstdint>

namespace causalconv {
namespace ptx {

__device__ __forceinline__ uint32_t smem_addr(const void* p) {
  return static_cast<uint32_t>(__cvta_generic_to_shared(p));
}

// 16-byte global -> shared copy that completes asynchronously (sm_80+).  Bytes past
// src_bytes (0 or 16 here) are written as zeros, which is how out-of-range columns of a
// window (t < 0 or t >= L) and channels past the group's end become zero padding.
__device__ __forceinline__ void cp_async_16(uint32_t dst, const void* src, uint32_t src_bytes) {
  asm volatile("cp.async.cg.shared.global [%0], [%1], 16, %2;\n" ::"r"(dst), "l"(src), "r"(src_bytes)
               : "memory");
}
__device__ __forceinline__ void cp_async_commit() { asm volatile("cp.async.commit_group;\n" ::: "memory"); }
template <int kPending>
__device__ __forceinline__ void cp_async_wait() {
  asm volatile("cp.async.wait_group %0;\n" ::"n"(kPending) : "memory");
}

// The same with a run-time count of groups allowed to stay pending (0..7).
__device__ __forceinline__ void cp_async_wait_dyn(int pending) {
  switch (pending) {
    case 0: cp_async_wait<0>(); break;
    case 1: cp_async_wait<1>(); break;
    case 2: cp_async_wait<2>(); break;
    case 3: cp_async_wait<3>(); break;
    case 4: cp_async_wait<4>(); break;
    case 5: cp_async_wait<5>(); break;
    case 6: cp_async_wait<6>(); break;
    default: cp_async_wait<7>(); break;
  }
}

__device__ __forceinline__ uint32_t ld_shared_b32(uint32_t addr) {
  uint32_t v;
  asm volatile("ld.shared.b32 %0, [%1];\n" : "=r"(v) : "r"(addr));
  return v;
}

// mma.sync (sm_80+): one warp computes a 16x8 fp32 tile; A 16xk row-major, B kx8 column-major.
__device__ __forceinline__ void mma_tf32_16x8x8(float (&d)[4], const uint32_t (&a)[4], const uint32_t (&b)[2]) {
  asm volatile(
      "mma.sync.aligned.m16n8k8.row.col.f32.tf32.tf32.f32 {%0, %1, %2, %3}, {%4, %5, %6, %7}, {%8, %9}, "
      "{%0, %1, %2, %3};\n"
      : "+f"(d[0]), "+f"(d[1]), "+f"(d[2]), "+f"(d[3])
      : "r"(a[0]), "r"(a[1]), "r"(a[2]), "r"(a[3]), "r"(b[0]), "r"(b[1]));
}
__device__ __forceinline__ void mma_bf16_16x8x16(float (&d)[4], const uint32_t (&a)[4], const uint32_t (&b)[2]) {
  asm volatile(
      "mma.sync.aligned.m16n8k16.row.col.f32.bf16.bf16.f32 {%0, %1, %2, %3}, {%4, %5, %6, %7}, {%8, %9}, "
      "{%0, %1, %2, %3};\n"
      : "+f"(d[0]), "+f"(d[1]), "+f"(d[2]), "+f"(d[3])
      : "r"(a[0]), "r"(a[1]), "r"(a[2]), "r"(a[3]), "r"(b[0]), "r"(b[1]));
}
__device__ __forceinline__ void mma_f16_16x8x16(float (&d)[4], const uint32_t (&a)[4], const uint32_t (&b)[2]) {
  asm volatile(
      "mma.sync.aligned.m16n8k16.row.col.f32.f16.f16.f32 {%0, %1, %2, %3}, {%4, %5, %6, %7}, {%8, %9}, "
      "{%0, %1, %2, %3};\n"
      : "+f"(d[0]), "+f"(d[1]), "+f"(d[2]), "+f"(d[3])
      : "r"(a[0]), "r"(a[1]), "r"(a[2]), "r"(a[3]), "r"(b[0]), "r"(b[1]));
}

// Four 8x8 matrices of 16-bit elements, transposed on the way: lanes 8i..8i+7 give the
// 16-byte rows of matrix i; lane t receives in r[i] row t/4 of matrix i's transpose,
// elements 2(t%4) and 2(t%4)+1 (the low half first).
__device__ __forceinline__ void ldmatrix_x4_trans(uint32_t (&r)[4], uint32_t addr) {
  asm volatile("ldmatrix.sync.aligned.m8n8.x4.trans.shared.b16 {%0, %1, %2, %3}, [%4];\n"
               : "=r"(r[0]), "=r"(r[1]), "=r"(r[2]), "=r"(r[3])
               : "r"(addr)
               : "memory");
}

// The converse store (sm_90): lanes 8i..8i+7 give the row addresses of matrix i; lane t's
// r[i] goes to row t/4, elements 2(t%4) and 2(t%4)+1, of matrix i.
__device__ __forceinline__ void stmatrix_x4(uint32_t addr, const uint32_t (&r)[4]) {
  asm volatile("stmatrix.sync.aligned.m8n8.x4.shared.b16 [%0], {%1, %2, %3, %4};\n" ::"r"(addr), "r"(r[0]), "r"(r[1]),
               "r"(r[2]), "r"(r[3])
               : "memory");
}

// Flags between blocks (sm_70+): a release store publishes the writes ordered before it
// (for the whole block, after a barrier), an acquire load makes them visible to what
// follows it.  A barrier over `threads` threads (a multiple of 32) of the block, on
// hardware barrier `id` (0 is __syncthreads's).
__device__ __forceinline__ void st_release_gpu(int* p, int v) {
  asm volatile("st.release.gpu.global.b32 [%0], %1;\n" ::"l"(p), "r"(v) : "memory");
}
__device__ __forceinline__ int ld_acquire_gpu(const int* p) {
  int v;
  asm volatile("ld.acquire.gpu.global.b32 %0, [%1];\n" : "=r"(v) : "l"(p) : "memory");
  return v;
}
__device__ __forceinline__ void named_barrier_sync(int id, int threads) {
  asm volatile("bar.sync %0, %1;\n" ::"r"(id), "r"(threads) : "memory");
}

// The global nanosecond clock, and a wait until it has advanced by `ns` (sleeping between
// looks, so that the waiting thread takes no issue slots from its block's other warps).
__device__ __forceinline__ uint64_t globaltimer_ns() {
  uint64_t t;
  asm volatile("mov.u64 %0, %%globaltimer;\n" : "=l"(t));
  return t;
}
__device__ __forceinline__ void sleep_ns(uint32_t ns) {
#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 700
  const uint64_t until = globaltimer_ns() + ns;
  while (globaltimer_ns() < until) __nanosleep(500);
#endif
}

// Programmatic dependent launch (sm_90): a kernel launched with programmatic stream
// serialization may start before the kernel ahead of it in the stream has finished, and
// waits in griddep_wait until that kernel has completed and its writes are visible (a no-op
// when launched normally).  launch_dependents lets such a follower start now rather than at
// this kernel's end.
__device__ __forceinline__ void griddep_wait() {
#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 900
  asm volatile("griddepcontrol.wait;\n" ::: "memory");
#endif
}
__device__ __forceinline__ void griddep_launch_dependents() {
#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 900
  asm volatile("griddepcontrol.launch_dependents;\n" ::: "memory");
#endif
}

#if defined(__CUDA_ARCH_FEAT_SM90_ALL)
#define CAUSALCONV_HAS_WGMMA 1

// Shared memory written by ordinary stores or cp.async is read by wgmma through the
// async proxy: each writing thread fences before the barrier that publishes the tile.
__device__ __forceinline__ void fence_proxy_async() {
  asm volatile("fence.proxy.async.shared::cta;\n" ::: "memory");
}
// Orders this thread's register accesses before the wgmma ops issued after it.
__device__ __forceinline__ void wgmma_fence() { asm volatile("wgmma.fence.sync.aligned;\n" ::: "memory"); }
__device__ __forceinline__ void wgmma_commit() { asm volatile("wgmma.commit_group.sync.aligned;\n" ::: "memory"); }
template <int kPending>
__device__ __forceinline__ void wgmma_wait() {
  asm volatile("wgmma.wait_group.sync.aligned %0;\n" ::"n"(kPending) : "memory");
}

// Descriptor of a K-major operand tile stored with the 128-byte swizzle: rows of 128
// bytes, 8-row atoms of 1024 bytes (stride-dimension offset), atoms 1024-byte aligned.
// Advancing along K inside the 128-byte row is done by adding bytes to the start address.
__device__ __forceinline__ uint64_t desc_kmajor_sw128(uint32_t smem_byte_addr) {
  uint64_t d = 0;
  d |= static_cast<uint64_t>((smem_byte_addr & 0x3ffffu) >> 4);  // start address, bits 0-13
  d |= static_cast<uint64_t>(1) << 16;                           // leading offset: unused when swizzled
  d |= static_cast<uint64_t>(1024 >> 4) << 32;                   // stride offset: 1024 B between atoms
  d |= static_cast<uint64_t>(1) << 62;                           // layout: 128-byte swizzle
  return d;
}

// Descriptor of an MN-major operand tile (16-bit types) with the 128-byte swizzle: rows of
// 128 bytes along K, each holding 64 consecutive M/N elements; 8-row atoms 1024 bytes apart
// (stride offset), and the next 64 M/N elements `mn_stride` bytes on (leading offset, a
// multiple of 16).  Like the K-major form, the start may be any 128-byte row: the swizzle
// is a function of the absolute address.
__device__ __forceinline__ uint64_t desc_mnmajor_sw128(uint32_t smem_byte_addr, uint32_t mn_stride) {
  uint64_t d = 0;
  d |= static_cast<uint64_t>((smem_byte_addr & 0x3ffffu) >> 4);      // start address, bits 0-13
  d |= static_cast<uint64_t>((mn_stride >> 4) & 0x3fffu) << 16;       // leading offset: next 64 M/N
  d |= static_cast<uint64_t>(1024 >> 4) << 32;                       // stride offset: next 8 K rows
  d |= static_cast<uint64_t>(1) << 62;                               // layout: 128-byte swizzle
  return d;
}

// mbarrier: a shared-memory barrier object that counts arrivals and, for TMA, bytes.
// Phases alternate; a waiter names the parity of the phase it waits to see completed.
__device__ __forceinline__ void mbar_init(uint32_t bar, uint32_t arrivals) {
  asm volatile("mbarrier.init.shared::cta.b64 [%0], %1;\n" ::"r"(bar), "r"(arrivals) : "memory");
}
// Makes initialized barriers visible to the async proxy (TMA) and the other threads;
// a block barrier must follow.
__device__ __forceinline__ void fence_mbar_init() {
  asm volatile("fence.mbarrier_init.release.cluster;\n" ::: "memory");
}
__device__ __forceinline__ void mbar_arrive(uint32_t bar) {
  asm volatile("mbarrier.arrive.shared::cta.b64 _, [%0];\n" ::"r"(bar) : "memory");
}
// Arrives and announces `bytes` that TMA copies will deliver before the phase completes.
__device__ __forceinline__ void mbar_arrive_expect_tx(uint32_t bar, uint32_t bytes) {
  asm volatile("mbarrier.arrive.expect_tx.shared::cta.b64 _, [%0], %1;\n" ::"r"(bar), "r"(bytes) : "memory");
}
__device__ __forceinline__ void mbar_wait(uint32_t bar, uint32_t parity) {
  uint32_t done = 0;
  do {
    asm volatile(
        "{\n.reg .pred p;\nmbarrier.try_wait.parity.shared::cta.b64 p, [%1], %2;\nselp.u32 %0, 1, 0, p;\n}\n"
        : "=r"(done)
        : "r"(bar), "r"(parity)
        : "memory");
  } while (!done);
}

// TMA: copies the box of a 2-D tensor map at element coordinates (c0 innermost, c1) into
// shared memory and reports its bytes to `bar`.  Coordinates outside the tensor, negative
// ones included, read as zeros.
__device__ __forceinline__ void tma_load_2d(uint32_t dst, const void* tensor_map, int c0, int c1, uint32_t bar) {
  asm volatile(
      "cp.async.bulk.tensor.2d.shared::cluster.global.mbarrier::complete_tx::bytes [%0], [%1, {%2, %3}], [%4];\n" ::"r"(dst),
      "l"(tensor_map), "r"(c0), "r"(c1), "r"(bar)
      : "memory");
}
// The same for a 3-D map (c0 innermost).
__device__ __forceinline__ void tma_load_3d(uint32_t dst, const void* tensor_map, int c0, int c1, int c2,
                                            uint32_t bar) {
  asm volatile(
      "cp.async.bulk.tensor.3d.shared::cluster.global.mbarrier::complete_tx::bytes [%0], [%1, {%2, %3, %4}], [%5];\n" ::"r"(dst),
      "l"(tensor_map), "r"(c0), "r"(c1), "r"(c2), "r"(bar)
      : "memory");
}
// Bulk copy of `bytes` contiguous bytes (16-byte aligned, a multiple of 16) from global
// to shared memory, reported to `bar` like a TMA copy.
__device__ __forceinline__ void bulk_load(uint32_t dst, const void* src, uint32_t bytes, uint32_t bar) {
  asm volatile("cp.async.bulk.shared::cluster.global.mbarrier::complete_tx::bytes [%0], [%1], %2, [%3];\n" ::"r"(dst),
               "l"(src), "r"(bytes), "r"(bar)
               : "memory");
}
// The same copy delivered to every CTA of `cta_mask` in the cluster: the bytes land at
// dst's offset and complete transactions on the barrier at bar's offset in each of them
// (sm_90a), so one read of global memory fills the same buffer in several blocks.
__device__ __forceinline__ void bulk_load_multicast(uint32_t dst, const void* src, uint32_t bytes, uint32_t bar,
                                                    uint16_t cta_mask) {
  asm volatile(
      "cp.async.bulk.shared::cluster.global.mbarrier::complete_tx::bytes.multicast::cluster [%0], [%1], %2, [%3], %4;\n" ::"r"(
          dst),
      "l"(src), "r"(bytes), "r"(bar), "h"(cta_mask)
      : "memory");
}
// Thread block clusters: this block's rank in its cluster; an arrival on the barrier at
// `bar`'s offset in block `cta` of the cluster, with the default release at CTA scope (what
// it orders are this thread's finished reads of a buffer the other block's copy may now
// overwrite; .release.cluster made ptxas put a MEMBAR.ALL.GPU before every arrival, which
// slowed fwd_rs's pairs by 64% on an H100, NOTES v32); and a barrier of every thread of the
// cluster (release / acquire), which also keeps a block's shared memory alive while the
// others may still address it.
__device__ __forceinline__ uint32_t cluster_ctarank() {
  uint32_t r;
  asm volatile("mov.u32 %0, %%cluster_ctarank;\n" : "=r"(r));
  return r;
}
__device__ __forceinline__ void mbar_arrive_cluster(uint32_t bar, uint32_t cta) {
  asm volatile(
      "{\n.reg .b32 remote;\nmapa.shared::cluster.u32 remote, %0, %1;\n"
      "mbarrier.arrive.shared::cluster.b64 _, [remote];\n}\n" ::"r"(bar),
      "r"(cta)
      : "memory");
}
__device__ __forceinline__ void cluster_sync() {
  asm volatile("barrier.cluster.arrive.release;\nbarrier.cluster.wait.acquire;\n" ::: "memory");
}
// TMA store: writes the box at element coordinates (c0 innermost, c1, c2) of a 3-D map from
// shared memory (src, laid out as the map's swizzle says) to global memory; elements
// outside the tensor are not written.  The copy joins this thread's current bulk group.
__device__ __forceinline__ void tma_store_3d(const void* tensor_map, uint32_t src, int c0, int c1, int c2) {
  asm volatile("cp.async.bulk.tensor.3d.global.shared::cta.bulk_group [%0, {%1, %2, %3}], [%4];\n" ::"l"(tensor_map),
               "r"(c0), "r"(c1), "r"(c2), "r"(src)
               : "memory");
}
__device__ __forceinline__ void bulk_commit_group() { asm volatile("cp.async.bulk.commit_group;\n" ::: "memory"); }
// Waits until at most kPending of this thread's bulk groups still read their shared-memory
// source (the buffer of any older group may then be overwritten).
template <int kPending>
__device__ __forceinline__ void bulk_wait_group_read() {
  asm volatile("cp.async.bulk.wait_group.read %0;\n" ::"n"(kPending) : "memory");
}
// Waits until all of this thread's bulk groups have completed, their writes included.
__device__ __forceinline__ void bulk_wait_group_all() { asm volatile("cp.async.bulk.wait_group 0;\n" ::: "memory"); }
// Warp-specialized register budgets: a warpgroup gives registers back (dec) or takes them
// (inc, waiting until others have given them back); every warp of the warpgroup executes
// the same one.  kRegs is a multiple of 8 in [24, 256].
template <int kRegs>
__device__ __forceinline__ void setmaxnreg_dec() {
  asm volatile("setmaxnreg.dec.sync.aligned.u32 %0;\n" ::"n"(kRegs));
}
template <int kRegs>
__device__ __forceinline__ void setmaxnreg_inc() {
  asm volatile("setmaxnreg.inc.sync.aligned.u32 %0;\n" ::"n"(kRegs));
}
__device__ __forceinline__ void tma_prefetch_descriptor(const void* tensor_map) {
  asm volatile("prefetch.tensormap [%0];\n" ::"l"(tensor_map) : "memory");
}
#else
#define CAUSALCONV_HAS_WGMMA 0
#endif

}  // namespace ptx
}  // namespace causalconv
