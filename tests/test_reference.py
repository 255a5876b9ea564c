"""The reference semantics: causal (left-padded) conv, output length = input length."""

import pytest
import torch
import torch.nn.functional as F

from causalconv import Model, causal_conv1d_reference


def direct_causal(x, w, b, dilation, groups):
    """Definition, one output at a time: y[o, t] = b[o] + sum_{i,k} w[o,i,k] x[g(o), i, t + k*d - pad]."""
    bsz, c_in, length = x.shape
    c_out, cin_g, k = w.shape
    pad = (k - 1) * dilation
    cout_g = c_out // groups
    y = torch.zeros(bsz, c_out, length, dtype=torch.float64)
    for o in range(c_out):
        g = o // cout_g
        for t in range(length):
            acc = torch.zeros(bsz, dtype=torch.float64)
            for kk in range(k):
                src = t + kk * dilation - pad
                if 0 <= src < length:
                    acc += (x[:, g * cin_g:(g + 1) * cin_g, src].double() * w[o, :, kk].double()).sum(-1)
            y[:, o, t] = acc + (0 if b is None else b[o].double())
    return y


@pytest.mark.parametrize("k,dilation,groups,length,bias", [
    (1, 1, 1, 5, False), (3, 1, 1, 2, True), (4, 2, 2, 9, True), (2, 5, 4, 3, False), (5, 3, 1, 17, True)])
def test_reference_matches_definition(k, dilation, groups, length, bias):
    torch.manual_seed(0)
    x = torch.randn(2, 4, length, dtype=torch.float64)
    w = torch.randn(8, 4 // groups, k, dtype=torch.float64)
    b = torch.randn(8, dtype=torch.float64) if bias else None
    y = causal_conv1d_reference(x, w, b, dilation, groups)
    assert y.shape == (2, 8, length)
    torch.testing.assert_close(y, direct_causal(x, w, b, dilation, groups))


def test_output_depends_only_on_past():
    torch.manual_seed(0)
    x = torch.randn(1, 3, 20)
    w = torch.randn(2, 3, 4)
    y = causal_conv1d_reference(x, w, None, 2)
    x2 = x.clone()
    x2[..., 12:] = torch.randn(1, 3, 8)  # change the future only
    y2 = causal_conv1d_reference(x2, w, None, 2)
    assert torch.equal(y[..., :12], y2[..., :12])
    assert not torch.equal(y[..., 12:], y2[..., 12:])


def test_model_equals_shared_reference_definition():
    torch.manual_seed(42)
    m = Model(8, 6, 4, dilation=3, bias=True)
    x = torch.randn(2, 8, 5)  # shorter than the padding (9)
    expected = m.conv1d(F.pad(x, ((4 - 1) * 3, 0)))
    torch.testing.assert_close(m(x), expected)
    assert m(x).shape == (2, 6, 5)
