// TMA descriptors (CUtensorMap) for row-major 2-D views of (B, C, L) tensors, built through
// the driver entry point so the extension links only against the CUDA runtime.
#pragma once
#include <ATen/ATen.h>
#include <cuda.h>

#include <cstdint>

namespace causalconv {

// A [rows][L] view of `data` (unit stride along L, rows L elements apart), copied in boxes
// of box_l x box_rows elements with the 128-byte swizzle (box_l * element size must be
// 128).  Needs `data` 16-byte aligned and L * element size a multiple of 16.
CUtensorMap make_row_tensor_map(const void* data, at::ScalarType dtype, int64_t rows, int64_t L, int box_l,
                                int box_rows);

}  // namespace causalconv
