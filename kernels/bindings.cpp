// Python bindings of the extension.  Argument checks that name Python arguments live
// in causalconv/ops.py; these functions assume them and check only what the kernels
// themselves rely on.
#include <torch/extension.h>

#include "autograd.h"
#include "dispatch.h"

PYBIND11_MODULE(TORCH_EXTENSION_NAME, m) {
  m.doc() = "causalconv CUDA kernels";
  m.def("forward", &causalconv::forward, "causal conv forward", py::arg("x"), py::arg("weight"), py::arg("bias"),
        py::arg("dilation"), py::arg("groups"), py::arg("precision"));
  m.def("forward_with_grad", &causalconv::forward_with_grad, "causal conv forward with an autograd node",
        py::arg("x"), py::arg("weight"), py::arg("bias"), py::arg("dilation"), py::arg("groups"),
        py::arg("precision_code"), py::arg("precision"));
  m.def("input_grad", &causalconv::input_grad, "gradient w.r.t. x", py::arg("grad_y"), py::arg("weight"),
        py::arg("dilation"), py::arg("groups"), py::arg("precision"));
  m.def("weight_grad", &causalconv::weight_grad, "gradient w.r.t. weight", py::arg("grad_y"), py::arg("x"),
        py::arg("kernel_size"), py::arg("dilation"), py::arg("groups"), py::arg("precision"));
  m.def("backward", &causalconv::backward, "gradients w.r.t. x and weight", py::arg("grad_y"), py::arg("x"),
        py::arg("weight"), py::arg("dilation"), py::arg("groups"), py::arg("precision"));
  m.def("set_forced_kernel", &causalconv::set_forced_kernel, "override the automatic kernel choice");
  m.def("set_poison_outputs", &causalconv::set_poison_outputs, "fill outputs with NaN before each launch (tests)");
  m.def("launch_counts", &causalconv::launch_counts, "launches per kernel family since load");
  m.def("has_wgmma", &causalconv::has_wgmma, "whether the current device runs the wgmma kernels");
}
