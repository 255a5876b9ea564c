#include "tensor_map.h"

#include <cuda_runtime.h>
#include <cudaTypedefs.h>

#include <mutex>

#include "common.cuh"

namespace causalconv {
namespace {

PFN_cuTensorMapEncodeTiled_v12000 encode_fn() {
  static PFN_cuTensorMapEncodeTiled_v12000 fn = nullptr;
  static std::once_flag once;
  std::call_once(once, [] {
    void* ptr = nullptr;
    cudaDriverEntryPointQueryResult found{};
    CAUSALCONV_CUDA_CHECK(cudaGetDriverEntryPointByVersion("cuTensorMapEncodeTiled", &ptr, 12000, cudaEnableDefault, &found));
    CAUSALCONV_CHECK(found == cudaDriverEntryPointSuccess && ptr != nullptr,
                     "causalconv: the CUDA driver has no cuTensorMapEncodeTiled (TMA needs a CUDA 12 driver)");
    fn = reinterpret_cast<PFN_cuTensorMapEncodeTiled_v12000>(ptr);
  });
  return fn;
}

CUtensorMapDataType tma_dtype(at::ScalarType dtype) {
  switch (dtype) {
    case at::kFloat: return CU_TENSOR_MAP_DATA_TYPE_FLOAT32;
    case at::kHalf: return CU_TENSOR_MAP_DATA_TYPE_FLOAT16;
    case at::kBFloat16: return CU_TENSOR_MAP_DATA_TYPE_BFLOAT16;
    default: CAUSALCONV_CHECK(false, "causalconv: no TMA element type for ", dtype);
  }
}

// Encodes a tiled map; strides are in bytes, for dimensions 1 .. rank-1.
CUtensorMap encode(const void* data, at::ScalarType dtype, int rank, const cuuint64_t* dims, const cuuint64_t* strides,
                   const cuuint32_t* box, CUtensorMapSwizzle swizzle) {
  CUtensorMap map;
  const cuuint32_t element_strides[3] = {1, 1, 1};
  const CUresult r = encode_fn()(&map, tma_dtype(dtype), rank, const_cast<void*>(data), dims, strides, box,
                                 element_strides, CU_TENSOR_MAP_INTERLEAVE_NONE, swizzle,
                                 CU_TENSOR_MAP_L2_PROMOTION_L2_256B, CU_TENSOR_MAP_FLOAT_OOB_FILL_NONE);
  CAUSALCONV_CHECK(r == CUDA_SUCCESS, "causalconv: cuTensorMapEncodeTiled failed with error ", static_cast<int>(r),
                   " (dims ", dims[0], " x ", dims[1], ", box ", box[0], " x ", box[1], ")");
  return map;
}

}  // namespace

CUtensorMap make_row_tensor_map(const void* data, at::ScalarType dtype, int64_t rows, int64_t L, int box_l,
                                int box_rows, bool swizzle128) {
  const int64_t elem = c10::elementSize(dtype);
  CAUSALCONV_CHECK(reinterpret_cast<uintptr_t>(data) % 16 == 0 && (L * elem) % 16 == 0,
                   "causalconv: TMA needs 16-byte aligned rows (L = ", L, ")");
  CAUSALCONV_CHECK((swizzle128 ? box_l * elem == 128 : (box_l * elem) % 16 == 0 && box_l <= 256) && box_rows >= 1 &&
                       box_rows <= 256,
                   "causalconv: TMA box ", box_l, " x ", box_rows, " is not a valid ",
                   swizzle128 ? "128-byte-swizzled" : "dense", " box");
  const cuuint64_t dims[2] = {static_cast<cuuint64_t>(L), static_cast<cuuint64_t>(rows)};
  const cuuint64_t strides[1] = {static_cast<cuuint64_t>(L * elem)};  // bytes between rows
  const cuuint32_t box[2] = {static_cast<cuuint32_t>(box_l), static_cast<cuuint32_t>(box_rows)};
  return encode(data, dtype, 2, dims, strides, box, swizzle128 ? CU_TENSOR_MAP_SWIZZLE_128B : CU_TENSOR_MAP_SWIZZLE_NONE);
}

CUtensorMap make_bcl_tensor_map(const void* data, at::ScalarType dtype, int64_t B, int64_t C, int64_t L, int64_t s_b,
                                int64_t s_c, int box_l, int box_c, bool swizzle64) {
  const int64_t elem = c10::elementSize(dtype);
  CAUSALCONV_CHECK(reinterpret_cast<uintptr_t>(data) % 16 == 0 && (s_c * elem) % 16 == 0 && (s_b * elem) % 16 == 0,
                   "causalconv: TMA needs 16-byte aligned rows (strides ", s_b, ", ", s_c, ")");
  CAUSALCONV_CHECK((swizzle64 ? box_l * elem == 64 : (box_l * elem) % 16 == 0 && box_l <= 256) && box_c >= 1 && box_c <= 256,
                   "causalconv: TMA box ", box_l, " x ", box_c, " is not a valid ", swizzle64 ? "64-byte-swizzled" : "dense",
                   " box");
  const cuuint64_t dims[3] = {static_cast<cuuint64_t>(L), static_cast<cuuint64_t>(C), static_cast<cuuint64_t>(B)};
  const cuuint64_t strides[2] = {static_cast<cuuint64_t>(s_c * elem), static_cast<cuuint64_t>(s_b * elem)};
  const cuuint32_t box[3] = {static_cast<cuuint32_t>(box_l), static_cast<cuuint32_t>(box_c), 1};
  return encode(data, dtype, 3, dims, strides, box, swizzle64 ? CU_TENSOR_MAP_SWIZZLE_64B : CU_TENSOR_MAP_SWIZZLE_NONE);
}

}  // namespace causalconv
