"""causalconv: fast, exact causal 1D convolution for PyTorch.

    y = causal_conv1d(x, weight, bias, dilation=1, groups=1)   # x: (B, C_in, L)

CausalConv1d is an nn.Conv1d-compatible module; ModelNew is a drop-in for the reference
Model.  CUDA tensors run hand-written kernels (compiled on first use); everything else runs
the PyTorch reference in causalconv.reference.
"""

from . import ops as _ops  # registers the causalconv::* operators
from .functional import causal_conv1d
from .modules import CausalConv1d, ModelNew
from .reference import Model, causal_conv1d_reference

__all__ = ["causal_conv1d", "CausalConv1d", "ModelNew", "Model", "causal_conv1d_reference"]
__version__ = "0.1.0"
