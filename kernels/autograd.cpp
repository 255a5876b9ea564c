// The forward as a C++ autograd node, for eager calls that record a graph.
//
// Why: a Python torch.autograd.Function costs ~20-40 us of CPU per call (apply, the
// context object, save_for_backward, and freeing it all with the graph), more than a
// small problem's kernels take; this node costs a few.  It records what
// causalconv/ops.py's registered autograd for causalconv::conv_fwd records (x and
// weight saved, the same gradient kernels, only the gradients asked for) and its results
// are bitwise those of the operator (tests/test_gpu_backward.py).
//
// The precision is resolved once, in Python, for the forward's shape, and the backward's
// kernels use the same code: a training step runs in one precision throughout.  A
// backward that must itself be differentiable (create_graph with a tensor that requires
// grad) goes through the causalconv:: operators instead, whose registered autograd
// provides the second derivatives.
#include <ATen/core/dispatch/Dispatcher.h>
#include <torch/autograd.h>

#include <string>

#include "autograd.h"
#include "dispatch.h"

namespace causalconv {
namespace {

using torch::autograd::AutogradContext;
using torch::autograd::variable_list;

// Calls causalconv::<name> (registered from Python) through the dispatcher, boxed, so that
// its autograd records the graph; returns the op's outputs.
std::vector<at::Tensor> call_operator(const char* name, torch::jit::Stack stack) {
  const auto op = c10::Dispatcher::singleton().findSchemaOrThrow(name, "");
  op.callBoxed(&stack);
  std::vector<at::Tensor> out;
  for (const auto& v : stack) out.push_back(v.toTensor());
  return out;
}

struct ConvFwdFunction : public torch::autograd::Function<ConvFwdFunction> {
  // bias as an optional: autograd records a device for every tensor input, and an
  // undefined tensor has none.  Without a bias, the node's inputs are x and weight.
  static at::Tensor forward(AutogradContext* ctx, const at::Tensor& x, const at::Tensor& weight,
                            const c10::optional<at::Tensor>& bias, int64_t dilation, int64_t groups, int64_t code,
                            const std::string& precision) {
    ctx->save_for_backward({x, weight});
    ctx->saved_data["dilation"] = dilation;
    ctx->saved_data["groups"] = groups;
    ctx->saved_data["code"] = code;
    ctx->saved_data["precision"] = precision;
    ctx->saved_data["has_bias"] = bias.has_value() && bias->defined();
    return causalconv::forward(x, weight, bias, dilation, groups, code);
  }

  static variable_list backward(AutogradContext* ctx, variable_list grads) {
    const auto saved = ctx->get_saved_variables();
    const at::Tensor &x = saved[0], &weight = saved[1], &gy = grads[0];
    const int64_t dilation = ctx->saved_data["dilation"].toInt(), groups = ctx->saved_data["groups"].toInt();
    const int64_t code = ctx->saved_data["code"].toInt();
    const bool need_x = ctx->needs_input_grad(0), need_w = ctx->needs_input_grad(1);
    const bool need_b = ctx->saved_data["has_bias"].toBool() && ctx->needs_input_grad(2);
    // As ops.py decides for each gradient op: a graph is recorded when grad mode is on
    // (create_graph) and one of the op's inputs requires grad.
    const bool graph = at::GradMode::is_enabled();
    const auto recorded = [&](std::initializer_list<const at::Tensor*> ts) {
      if (!graph) return false;
      for (const at::Tensor* t : ts)
        if (t->requires_grad()) return true;
      return false;
    };
    at::Tensor gx, gw, gb;
    if (need_x && need_w) {
      if (recorded({&gy, &x, &weight})) {
        auto out = call_operator("causalconv::conv_backward",
                                 {gy, x, weight, dilation, groups, ctx->saved_data["precision"]});
        gx = out[0];
        gw = out[1];
      } else {
        auto out = causalconv::backward(gy, x, weight, dilation, groups, code);
        gx = out[0];
        gw = out[1];
      }
    } else if (need_x) {
      gx = recorded({&gy, &weight})
               ? call_operator("causalconv::conv_input_grad", {gy, weight, dilation, groups,
                                                               ctx->saved_data["precision"]})[0]
               : input_grad(gy, weight, dilation, groups, code);
    } else if (need_w) {
      gw = recorded({&gy, &x}) ? call_operator("causalconv::conv_weight_grad",
                                               {gy, x, weight.size(2), dilation, groups, ctx->saved_data["precision"]})[0]
                               : weight_grad(gy, x, weight.size(2), dilation, groups, code);
    }
    if (need_b) gb = gy.sum(at::IntArrayRef{0, 2});  // a braced list is ambiguous to C++17
    return {gx, gw, gb, at::Tensor(), at::Tensor(), at::Tensor(), at::Tensor()};
  }
};

}  // namespace

at::Tensor forward_with_grad(const at::Tensor& x, const at::Tensor& weight, const c10::optional<at::Tensor>& bias,
                             int64_t dilation, int64_t groups, int64_t code, const std::string& precision) {
  return ConvFwdFunction::apply(x, weight, bias, dilation, groups, code, precision);
}

}  // namespace causalconv
