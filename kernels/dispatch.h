// Entry points bound to Python (bindings.cpp).  Precision codes match
// causalconv/_precision.py.
#pragma once
#include <ATen/ATen.h>

#include <string>
#include <vector>

namespace causalconv {

constexpr int64_t kPrecisionTF32 = 1;  // fp32 operands rounded to TF32
constexpr int64_t kPrecisionIEEE = 2;  // full fp32 accuracy (3xTF32 on tensor cores)

// Kernel families, in the order launch_counts() reports them.
enum class KernelKind : int {
  kFwdGeneric = 0,
  kFwdDepthwise,
  kFwdWgmma,
  kFwdMma,
  kInputGrad,  // counted in addition to the forward kernel that computed it
  kWgradGeneric,
  kWgradWgmma,
  kWgradDepthwise,
};
constexpr int kNumKernelKinds = 8;

// A test/benchmark override of the automatic choice.
// kWgmma runs the TMA kernel where it applies; kWgmmaRegisterA the wgmma kernel that
// reads x from registers out of staged tiles; kWgmmaWindow, for TF32 fp32, the TMA kernels
// that read x into registers straight from raw windows at each tap's offset (fwd_rs.cu,
// wgrad_rs.cu), elsewhere what kWgmma runs.
enum class KernelChoice : int { kAuto = 0, kGeneric, kDepthwise, kWgmma, kWgmmaRegisterA, kWgmmaWindow, kMma };

at::Tensor forward(const at::Tensor& x, const at::Tensor& weight, const c10::optional<at::Tensor>& bias,
                   int64_t dilation, int64_t groups, int64_t precision);
at::Tensor input_grad(const at::Tensor& dy, const at::Tensor& weight, int64_t dilation, int64_t groups,
                      int64_t precision);
at::Tensor weight_grad(const at::Tensor& dy, const at::Tensor& x, int64_t K, int64_t dilation, int64_t groups,
                       int64_t precision);

// Both gradients in one call; small problems run them on two streams (dispatch.cu).
std::vector<at::Tensor> backward(const at::Tensor& dy, const at::Tensor& x, const at::Tensor& weight, int64_t dilation,
                                 int64_t groups, int64_t precision);

void set_forced_kernel(const std::string& name);
std::vector<int64_t> launch_counts();
void set_poison_outputs(bool on);
bool has_wgmma();

}  // namespace causalconv
