// TMA descriptors (CUtensorMap) for (B, C, L) tensors, built through
// the driver entry point so the extension links only against the CUDA runtime.
#pragma once
#include <ATen/ATen.h>
#include <cuda.h>

#include <cstdint>

namespace causalconv {

// A [rows][L] view of `data` (unit stride along L, rows L elements apart), copied in boxes
// of box_l x box_rows elements.  swizzle128: the box lands in the 128-byte-swizzled layout
// wgmma reads (box_l * element size must then be 128); otherwise rows are stored densely.
// Needs `data` 16-byte aligned and L * element size a multiple of 16; a copy's start along
// L must be a multiple of 16 bytes too (the hardware faults otherwise).
CUtensorMap make_row_tensor_map(const void* data, at::ScalarType dtype, int64_t rows, int64_t L, int box_l,
                                int box_rows, bool swizzle128);

// A (B, C, L) tensor with unit stride along L and strides s_b, s_c (elements, multiples
// of 16 bytes), copied in boxes of box_l x box_c elements of one batch, stored densely, or
// with swizzle64 in the 64-byte swizzle (box_l * element size must then be 64: 16-byte
// chunk c of box row r at chunk position c ^ (r / 2 % 4)).  Coordinates outside the
// tensor (t < 0 or >= L, channels >= C) read as zeros and are not written by stores.
CUtensorMap make_bcl_tensor_map(const void* data, at::ScalarType dtype, int64_t B, int64_t C, int64_t L, int64_t s_b,
                                int64_t s_c, int box_l, int box_c, bool swizzle64 = false);

}  // namespace causalconv
