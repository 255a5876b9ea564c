"""nn.Module front ends.  They hold parameters and call the functional; no kernel logic."""

from __future__ import annotations

import torch
import torch.nn as nn

from . import _precision
from .functional import causal_conv1d
from .reference import causal_padding


def _positive_int(name: str, value) -> int:
    if isinstance(value, (tuple, list)) and len(value) == 1:
        value = value[0]
    if isinstance(value, bool) or not isinstance(value, int) or value < 1:
        raise ValueError(f"{name} must be an integer >= 1, got {value!r}")
    return value


class CausalConv1d(nn.Conv1d):
    """An ``nn.Conv1d`` (stride 1) whose input is left-padded by ``(kernel_size - 1) * dilation``,
    so output step t sees inputs <= t and the output keeps the input's length.

    Parameters, initialization and ``state_dict`` are exactly ``nn.Conv1d``'s (weight
    ``(C_out, C_in / groups, K)``, optional bias), so a trained ``nn.Conv1d`` loads into it.
    Input ``(B, C_in, L)`` or ``(C_in, L)``.  ``precision`` applies to float32, see
    :func:`causalconv.causal_conv1d`.
    """

    def __init__(self, in_channels: int, out_channels: int, kernel_size: int, dilation: int = 1, groups: int = 1,
                 bias: bool = True, device=None, dtype=None, precision: str = "auto"):
        in_channels = _positive_int("in_channels", in_channels)
        out_channels = _positive_int("out_channels", out_channels)
        kernel_size = _positive_int("kernel_size", kernel_size)
        dilation = _positive_int("dilation", dilation)
        groups = _positive_int("groups", groups)
        if in_channels % groups or out_channels % groups:
            raise ValueError(f"groups={groups} must divide in_channels={in_channels} and out_channels={out_channels}")
        _precision.check_precision(precision)
        super().__init__(in_channels, out_channels, kernel_size, stride=1, padding=0, dilation=dilation,
                         groups=groups, bias=bias, device=device, dtype=dtype)
        self.precision = precision

    @property
    def causal_padding(self) -> int:
        return causal_padding(self.kernel_size[0], self.dilation[0])

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return causal_conv1d(x, self.weight, self.bias, self.dilation[0], self.groups, self.precision)

    def extra_repr(self) -> str:
        s = (f"{self.in_channels}, {self.out_channels}, kernel_size={self.kernel_size[0]}, "
             f"dilation={self.dilation[0]}, causal_padding={self.causal_padding}")
        if self.groups != 1:
            s += f", groups={self.groups}"
        if self.bias is None:
            s += ", bias=False"
        if self.precision != "auto":
            s += f", precision={self.precision!r}"
        return s


class ModelNew(nn.Module):
    """Drop-in replacement for the reference ``Model(in_channels, out_channels, kernel_size,
    dilation=1, bias=False)``: the same constructor, the same random draws (it builds the same
    ``nn.Conv1d`` as ``self.conv1d``), the same ``state_dict`` keys, the same outputs; the
    forward runs causalconv's kernels.
    """

    def __init__(self, in_channels: int, out_channels: int, kernel_size: int, dilation: int = 1, bias: bool = False):
        super().__init__()
        self.causal_padding = causal_padding(kernel_size, dilation)
        self.conv1d = nn.Conv1d(in_channels, out_channels, kernel_size, dilation=dilation, bias=bias)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        conv = self.conv1d
        return causal_conv1d(x, conv.weight, conv.bias, conv.dilation[0], conv.groups)
