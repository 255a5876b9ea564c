// The forward with its autograd node (autograd.cpp), bound to Python as
// forward_with_grad.
#pragma once
#include <ATen/ATen.h>

#include <string>

namespace causalconv {

// causalconv::forward recorded for autograd: precision `code` for the kernels, and the
// precision name for the operators a differentiable backward calls.
at::Tensor forward_with_grad(const at::Tensor& x, const at::Tensor& weight, const c10::optional<at::Tensor>& bias,
                             int64_t dilation, int64_t groups, int64_t code, const std::string& precision);

}  // namespace causalconv
