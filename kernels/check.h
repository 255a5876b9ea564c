// CAUSALCONV_CHECK(cond, parts...): TORCH_CHECK whose message never sends a number through
// std::ostream.  Every check in kernels/ goes through it.
//
// Why: on the GPU hosts this project is tested on (the extension built by /opt/gcc's g++,
// run beside the system libstdc++), an error whose message held a number killed the
// process instead of raising: c10::str's `stream << int` segfaulted inside the extension's
// std::ostream::_M_insert<long> (cuda-gdb backtrace, 2026-12-06, from a forced weight-
// gradient tile that does not fit K), while messages made of text alone raised as they
// should.  So numbers become text here through std::to_string (no locale facets), sizes,
// dtypes and devices through their own to-text functions, and TORCH_CHECK gets one string.
#pragma once
#include <c10/core/Device.h>
#include <c10/core/ScalarType.h>
#include <c10/util/ArrayRef.h>
#include <c10/util/Exception.h>

#include <string>
#include <type_traits>

namespace causalconv::check_detail {

inline std::string text(const char* s) { return s; }
inline std::string text(const std::string& s) { return s; }
inline std::string text(char c) { return std::string(1, c); }
inline std::string text(bool b) { return b ? "true" : "false"; }
inline std::string text(c10::ScalarType t) { return c10::toString(t); }
inline std::string text(const c10::Device& d) { return d.str(); }
inline std::string text(c10::IntArrayRef a) {
  std::string s = "[";
  for (size_t i = 0; i < a.size(); ++i) s += (i ? ", " : "") + std::to_string(a[i]);
  return s + "]";
}
template <typename T, std::enable_if_t<std::is_integral_v<T> || std::is_floating_point_v<T>, int> = 0>
std::string text(T v) {
  return std::to_string(v);
}

template <typename... Parts>
std::string message(const Parts&... parts) {
  std::string s;
  ((s += text(parts)), ...);
  return s;
}

}  // namespace causalconv::check_detail

#define CAUSALCONV_CHECK(cond, ...) TORCH_CHECK(cond, ::causalconv::check_detail::message(__VA_ARGS__))
