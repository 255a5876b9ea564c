// Scratch memory for per-call intermediates (the tensor-core forward's pre-arranged
// weight image, the weight gradient's partial sums), so that a call allocates nothing
// but its outputs.
//
// Eager calls reuse one buffer per (device, stream), grown when a call needs more and
// held until the process exits.  The lease holds a lock from acquisition until it is
// destroyed, which the caller does only after the last kernel reading the buffer has
// been enqueued: two host threads sharing a stream cannot interleave their prep and
// conv launches.  Within one stream, kernels run in launch order, so a later call that
// rewrites the buffer runs after the earlier call's kernels have read it.
//
// While the stream is being captured into a CUDA graph the lease allocates a fresh
// buffer instead (from the graph's private pool, as any temporary in captured code):
// a graph may be replayed at any time on any stream, so it must not share a buffer
// with eager calls or other graphs.
#pragma once
#include <ATen/ATen.h>
#include <cuda_runtime.h>

#include <cstddef>
#include <mutex>

namespace causalconv {

class ScratchLease {
 public:
  ScratchLease(size_t bytes, cudaStream_t stream);
  ScratchLease(const ScratchLease&) = delete;
  ScratchLease& operator=(const ScratchLease&) = delete;
  void* data() const { return ptr_; }

 private:
  std::unique_lock<std::mutex> lock_;  // unset for a captured call's own buffer
  at::Tensor owned_;                   // a captured call's buffer
  void* ptr_ = nullptr;
};

}  // namespace causalconv
