"""causal_conv1d: the functional form of the causal convolution."""

from __future__ import annotations

import torch

from . import ops


def causal_conv1d(
    x: torch.Tensor,
    weight: torch.Tensor,
    bias: torch.Tensor | None = None,
    dilation: int = 1,
    groups: int = 1,
    precision: str = "auto",
) -> torch.Tensor:
    """Causal 1D convolution: ``conv1d(left_pad(x, (K-1)*dilation), weight, bias, dilation, groups)``.

    Output step t depends only on inputs at steps <= t, and has the input's length.

    Args:
        x: ``(B, C_in, L)`` or unbatched ``(C_in, L)``; float16, bfloat16, float32 or float64.
        weight: ``(C_out, C_in / groups, K)``, same dtype and device as x.
        bias: ``(C_out,)`` or None.
        dilation: spacing between taps, >= 1.
        groups: channel groups, dividing both C_in and C_out.
        precision: for float32 only. ``'auto'`` follows PyTorch's TF32 switch for cuDNN
            convolutions (``torch.backends.cudnn.allow_tf32`` / ``...conv.fp32_precision``);
            ``'tf32'`` rounds operands to TF32 and accumulates in fp32; ``'ieee'`` gives full
            fp32 accuracy.

    Returns:
        ``(B, C_out, L)`` (or ``(C_out, L)`` for unbatched x) in x's dtype.
    """
    ops.check_inputs(x, weight, bias, dilation, groups, precision)
    unbatched = x.dim() == 2
    if unbatched:
        x = x.unsqueeze(0)
    y = ops.conv_fwd(x, weight, bias, dilation, groups, precision)
    return y.squeeze(0) if unbatched else y
