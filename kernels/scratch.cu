// Per-(device, stream) scratch buffers; see scratch.h for the rules that make reuse safe.
#include "scratch.h"

#include <c10/cuda/CUDAFunctions.h>

#include <map>
#include <memory>
#include <utility>

#include "common.cuh"

namespace causalconv {
namespace {

struct Slot {
  std::mutex mu;  // held by a lease for the whole call
  at::Tensor buf;
};

std::mutex g_map_mu;  // guards the map only, never held across a call
std::map<std::pair<int, cudaStream_t>, std::unique_ptr<Slot>> g_slots;

Slot& slot_for(int device, cudaStream_t stream) {
  std::lock_guard<std::mutex> guard(g_map_mu);
  auto& s = g_slots[{device, stream}];
  if (!s) s = std::make_unique<Slot>();
  return *s;
}

bool capturing(cudaStream_t stream) {
  cudaStreamCaptureStatus status = cudaStreamCaptureStatusNone;
  CAUSALCONV_CUDA_CHECK(cudaStreamIsCapturing(stream, &status));
  return status != cudaStreamCaptureStatusNone;
}

at::Tensor allocate(size_t bytes, int device) {
  return at::empty({static_cast<int64_t>(bytes)}, at::TensorOptions().dtype(at::kByte).device(at::kCUDA, device));
}

}  // namespace

ScratchLease::ScratchLease(size_t bytes, cudaStream_t stream) {
  const int device = c10::cuda::current_device();
  bytes = (bytes + 255) / 256 * 256;
  if (capturing(stream)) {
    owned_ = allocate(bytes, device);
    ptr_ = owned_.data_ptr();
    return;
  }
  Slot& s = slot_for(device, stream);
  lock_ = std::unique_lock<std::mutex>(s.mu);
  if (!s.buf.defined() || static_cast<size_t>(s.buf.numel()) < bytes) {
    // The old buffer goes back to the caching allocator, which reuses it only in this
    // stream's order, i.e. after the kernels already enqueued here have read it.
    s.buf = at::Tensor();
    s.buf = allocate(bytes, device);
  }
  ptr_ = s.buf.data_ptr();
}

}  // namespace causalconv
