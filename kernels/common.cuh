// Small device helpers shared by all kernel families: element conversion, TF32
// rounding, and the launch-error check every launcher uses.
#pragma once
#include <cuda_bf16.h>
#include <cuda_fp16.h>
#include <cuda_runtime.h>
#include <c10/core/ScalarType.h>
#include <c10/util/Exception.h>

#include <type_traits>

#include <cstdint>
#include <cstdlib>
#include <cstring>

#include "check.h"
#include "conv_params.h"

// Every launch goes through this: a bad configuration surfaces as a Python
// RuntimeError naming the kernel instead of a silent garbage result.
#define CAUSALCONV_CHECK_LAUNCH(name)                                                 \
  do {                                                                                \
    cudaError_t err_ = cudaGetLastError();                                            \
    CAUSALCONV_CHECK(err_ == cudaSuccess, "causalconv: launch of ", name,             \
                     " failed: ", cudaGetErrorString(err_));                          \
  } while (0)

#define CAUSALCONV_CUDA_CHECK(expr)                                                   \
  do {                                                                                \
    cudaError_t err_ = (expr);                                                        \
    CAUSALCONV_CHECK(err_ == cudaSuccess, "causalconv: ", #expr, " failed: ",         \
                     cudaGetErrorString(err_));                                       \
  } while (0)

// An on/off knob from the environment: `unset` when unset or empty, on at "1", off at "0",
// an error naming the variable otherwise.  Read at each call, so that a test may switch it.
inline bool env_switch(const char* name, bool unset = true) {
  const char* v = std::getenv(name);
  if (v == nullptr || *v == '\0') return unset;
  if (std::strcmp(v, "1") == 0) return true;
  CAUSALCONV_CHECK(std::strcmp(v, "0") == 0, "causalconv: ", name, " must be 0 or 1, got '", v, "'");
  return false;
}

namespace causalconv {

template <typename T>
__device__ __forceinline__ float to_float(T v);
template <>
__device__ __forceinline__ float to_float<float>(float v) { return v; }
template <>
__device__ __forceinline__ float to_float<__half>(__half v) { return __half2float(v); }
template <>
__device__ __forceinline__ float to_float<__nv_bfloat16>(__nv_bfloat16 v) {
  return __bfloat162float(v);
}

template <typename T>
__device__ __forceinline__ T from_float(float v);
template <>
__device__ __forceinline__ float from_float<float>(float v) { return v; }
template <>
__device__ __forceinline__ __half from_float<__half>(float v) { return __float2half_rn(v); }
template <>
__device__ __forceinline__ __nv_bfloat16 from_float<__nv_bfloat16>(float v) {
  return __float2bfloat16_rn(v);
}

template <typename T>
constexpr c10::ScalarType scalar_type_of() {
  if constexpr (std::is_same_v<T, float>) return c10::ScalarType::Float;
  else if constexpr (std::is_same_v<T, __half>) return c10::ScalarType::Half;
  else return c10::ScalarType::BFloat16;
}

// Round an fp32 value to TF32 (10 explicit mantissa bits) with round-to-nearest-even,
// the rounding cuDNN applies to convolution operands when TF32 is allowed.  Before sm_90
// there is no RNE conversion instruction, so integer arithmetic does it: Inf stays Inf,
// NaN becomes a quiet NaN whose payload survives the truncation the tensor cores apply to
// the low 13 bits.
__device__ __forceinline__ float round_tf32(float v) {
#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 900
  // One instruction (F2FP.TF32) on Hopper; the bit arithmetic below is the same rounding.
  uint32_t r;
  asm("cvt.rn.tf32.f32 %0, %1;" : "=r"(r) : "f"(v));
  return __uint_as_float(r);
#endif
  uint32_t u = __float_as_uint(v);
  const bool special = (u & 0x7f800000u) == 0x7f800000u;
  const bool nan = special && (u & 0x007fffffu);
  const uint32_t rounded = (u + 0x0fffu + ((u >> 13) & 1u)) & 0xffffe000u;
  u = special ? (nan ? 0x7fffe000u : u) : rounded;
  return __uint_as_float(u);
}

// Operand value as the arithmetic will see it, for the CUDA-core kernels.
__device__ __forceinline__ float operand(float v, bool tf32) { return tf32 ? round_tf32(v) : v; }

// Floor division for possibly negative numerators (window starts left of t = 0).
__host__ __device__ __forceinline__ int64_t floor_div(int64_t a, int64_t b) {
  const int64_t q = a / b;
  return (a % b != 0 && ((a < 0) != (b < 0))) ? q - 1 : q;
}

__host__ __device__ __forceinline__ int64_t ceil_div(int64_t a, int64_t b) { return (a + b - 1) / b; }

// The one place a CUDA-core weight-gradient kernel's run-time taps per block (1 to 8) becomes
// its template parameter, so that its loops hold only the taps there are:
// f(std::integral_constant<int, taps>{}).
template <typename F>
void with_tap_group(int taps, const char* kernel, F&& f) {
  switch (taps) {
    case 1: return f(std::integral_constant<int, 1>{});
    case 2: return f(std::integral_constant<int, 2>{});
    case 3: return f(std::integral_constant<int, 3>{});
    case 4: return f(std::integral_constant<int, 4>{});
    case 5: return f(std::integral_constant<int, 5>{});
    case 6: return f(std::integral_constant<int, 6>{});
    case 7: return f(std::integral_constant<int, 7>{});
    default:
      CAUSALCONV_CHECK(taps == 8, "causalconv: ", kernel, ": tap group of ", taps, " taps");
      return f(std::integral_constant<int, 8>{});
  }
}

// The one place a tensor's dtype becomes a launcher's element type: f(T{}) for float,
// __half or __nv_bfloat16, an error naming `kernel` for any other.
template <typename F>
void with_element_type(c10::ScalarType dtype, const char* kernel, F&& f) {
  switch (dtype) {
    case c10::ScalarType::Float: return f(float{});
    case c10::ScalarType::Half: return f(__half{});
    case c10::ScalarType::BFloat16: return f(__nv_bfloat16{});
    default: CAUSALCONV_CHECK(false, "causalconv: ", kernel, " supports float32, float16, bfloat16; got ", dtype);
  }
}

// Both, as the CUDA-core weight gradients launch: f(T{}, std::integral_constant<int, taps>{}).
template <typename F>
void with_type_and_taps(c10::ScalarType dtype, int taps, const char* kernel, F&& f) {
  with_element_type(dtype, kernel, [&](auto elem) { with_tap_group(taps, kernel, [&](auto t) { f(elem, t); }); });
}

}  // namespace causalconv
