"""Bad input gets a clear error naming the argument, what was expected and what came."""

import pytest
import torch

from causalconv import CausalConv1d, causal_conv1d

X = torch.randn(2, 4, 10)
W = torch.randn(6, 4, 3)


@pytest.mark.parametrize("kwargs,exc,pattern", [
    (dict(x=torch.randn(10)), ValueError, r"x must have shape \(B, C_in, L\) or \(C_in, L\), got \(10\)"),
    (dict(x=torch.randn(1, 2, 4, 10)), ValueError, r"x must have shape .* got \(1, 2, 4, 10\)"),
    (dict(weight=torch.randn(6, 4)), ValueError, r"weight must have shape \(C_out, C_in/groups, K\), got \(6, 4\)"),
    (dict(weight=torch.randn(6, 5, 3)), ValueError, r"weight must have shape .*\(6, 4, 3\).*got \(6, 5, 3\)"),
    (dict(weight=torch.randn(6, 4, 0)), ValueError, r"kernel size K >= 1"),
    (dict(groups=3), ValueError, r"groups=3 must divide the input channels of x, got C_in=4"),
    (dict(weight=torch.randn(5, 2, 3), groups=2), ValueError, r"groups=2 must divide the output channels"),
    (dict(groups=0), ValueError, r"groups must be an integer >= 1, got 0"),
    (dict(dilation=0), ValueError, r"dilation must be an integer >= 1, got 0"),
    (dict(dilation=1.5), ValueError, r"dilation must be an integer >= 1, got 1.5"),
    (dict(bias=torch.randn(5)), ValueError, r"bias must have shape \(6,\), got \(5\)"),
    (dict(x=X.long()), TypeError, r"x must be float16, bfloat16, float32 or float64, got torch.int64"),
    (dict(x=X.to(torch.complex64)), TypeError, r"x must be float16.*got torch.complex64"),
    (dict(weight=W.int()), TypeError, r"weight must be float16.*got torch.int32"),
    (dict(weight=W.double()), TypeError, r"weight must have the dtype of x \(torch.float32\), got torch.float64"),
    (dict(bias=torch.randn(6, dtype=torch.float16)), TypeError, r"bias must have the dtype of x"),
    (dict(weight=torch.randn(6, 4, 3, device="meta")), ValueError, r"weight must be on the device of x \(cpu\), got meta"),
    (dict(precision="fast"), ValueError, r"precision must be one of \('auto', 'tf32', 'ieee'\), got 'fast'"),
    (dict(x=[1.0, 2.0]), TypeError, r"x must be a torch.Tensor, got list"),
])
def test_bad_arguments(kwargs, exc, pattern):
    args = dict(x=X, weight=W, bias=None, dilation=1, groups=1)
    args.update(kwargs)
    with pytest.raises(exc, match=pattern):
        causal_conv1d(**args)


@pytest.mark.parametrize("kwargs,pattern", [
    (dict(kernel_size=0), r"kernel_size must be an integer >= 1, got 0"),
    (dict(dilation=-1), r"dilation must be an integer >= 1, got -1"),
    (dict(groups=3), r"groups=3 must divide in_channels=4 and out_channels=8"),
    (dict(in_channels=0), r"in_channels must be an integer >= 1, got 0"),
    (dict(precision="tf16"), r"precision must be one of"),
])
def test_bad_module_arguments(kwargs, pattern):
    args = dict(in_channels=4, out_channels=8, kernel_size=3)
    args.update(kwargs)
    with pytest.raises(ValueError, match=pattern):
        CausalConv1d(**args)


def test_channel_mismatch_in_module():
    m = CausalConv1d(4, 8, 3)
    with pytest.raises(ValueError, match=r"weight must have shape .*C_in=5"):
        m(torch.randn(2, 5, 10))
