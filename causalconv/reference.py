"""Pure-PyTorch semantics of the causal convolution: the CPU path, and the oracle every
test and the CLI compare the CUDA kernels with."""

from __future__ import annotations

import torch
import torch.nn as nn
import torch.nn.functional as F

from . import _precision


def causal_padding(kernel_size: int, dilation: int) -> int:
    """Zeros prepended to the sequence so that output t sees only inputs <= t."""
    return (kernel_size - 1) * dilation


def causal_conv1d_reference(
    x: torch.Tensor,
    weight: torch.Tensor,
    bias: torch.Tensor | None = None,
    dilation: int = 1,
    groups: int = 1,
    precision: str = "auto",
) -> torch.Tensor:
    """y = conv1d(left_pad(x, (K-1)*dilation), weight, bias, dilation, groups).

    x is (B, C_in, L) or (C_in, L); the output has the same length L.  For float32,
    precision 'tf32' rounds x and weight to TF32 first (the kernels' arithmetic), 'ieee'
    computes at full fp32 accuracy (in float64 on CUDA, where cuDNN may use TF32), and
    'auto' leaves it to PyTorch.
    """
    pad = causal_padding(weight.shape[-1], dilation)
    if x.dtype == torch.float32 and precision != "auto":
        mode = _precision.resolve(precision)
        if mode == "tf32":
            x, weight = _precision.round_to_tf32(x), _precision.round_to_tf32(weight)
        elif x.is_cuda:
            b = None if bias is None else bias.double()
            y = F.conv1d(F.pad(x.double(), (pad, 0)), weight.double(), b, dilation=dilation, groups=groups)
            return y.float()
    return F.conv1d(F.pad(x, (pad, 0)), weight, bias, dilation=dilation, groups=groups)


class Model(nn.Module):
    """The reference problem: left pad by (kernel_size - 1) * dilation, then nn.Conv1d.

    Equivalent to shared/reference/5_Conv1d_Causal.py; tests and the CLI measure ModelNew
    against it.
    """

    def __init__(self, in_channels: int, out_channels: int, kernel_size: int, dilation: int = 1, bias: bool = False):
        super().__init__()
        self.causal_padding = causal_padding(kernel_size, dilation)
        self.conv1d = nn.Conv1d(in_channels, out_channels, kernel_size, dilation=dilation, bias=bias)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.conv1d(F.pad(x, (self.causal_padding, 0)))
