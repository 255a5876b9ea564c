"""Autograd, torch.library checks and torch.compile on the CPU path."""

import pytest
import torch

import causalconv
from causalconv import CausalConv1d, causal_conv1d

OPS = torch.ops.causalconv


@pytest.mark.parametrize("dilation,groups,bias", [(1, 1, True), (2, 2, False), (3, 4, True)])
def test_gradcheck_float64(dilation, groups, bias):
    torch.manual_seed(0)
    x = torch.randn(2, 4, 9, dtype=torch.float64, requires_grad=True)
    w = torch.randn(8, 4 // groups, 3, dtype=torch.float64, requires_grad=True)
    b = torch.randn(8, dtype=torch.float64, requires_grad=True) if bias else None
    args = (x, w, b) if bias else (x, w)
    f = (lambda x, w, b: causal_conv1d(x, w, b, dilation, groups)) if bias else \
        (lambda x, w: causal_conv1d(x, w, None, dilation, groups))
    assert torch.autograd.gradcheck(f, args)
    assert torch.autograd.gradgradcheck(f, args)  # double backward works


def _samples():
    torch.manual_seed(0)
    x = torch.randn(2, 4, 7, requires_grad=True)
    w = torch.randn(6, 2, 3, requires_grad=True)
    b = torch.randn(6, requires_grad=True)
    gy = torch.randn(2, 6, 7, requires_grad=True)
    return [
        (OPS.conv_fwd.default, (x, w, b, 2, 2, "auto")),
        (OPS.conv_fwd.default, (x, w, None, 1, 2, "ieee")),
        (OPS.conv_input_grad.default, (gy, w, 2, 2, "auto")),
        (OPS.conv_weight_grad.default, (gy, x, 3, 2, 2, "auto")),
        (OPS.conv_backward.default, (gy, x, w, 2, 2, "auto")),
    ]


@pytest.mark.parametrize("op,args", _samples())
def test_opcheck(op, args):
    torch.library.opcheck(op, args)


def test_fake_shapes_on_meta():
    x = torch.empty(3, 8, 100, device="meta")
    w = torch.empty(16, 4, 5, device="meta")
    assert OPS.conv_fwd(x, w, None, 2, 2, "auto").shape == (3, 16, 100)
    gy = torch.empty(3, 16, 100, device="meta")
    assert OPS.conv_input_grad(gy, w, 2, 2, "auto").shape == (3, 8, 100)
    assert OPS.conv_weight_grad(gy, x, 5, 2, 2, "auto").shape == (16, 4, 5)
    gx, gw = OPS.conv_backward(gy, x, w, 2, 2, "auto")
    assert gx.shape == x.shape and gw.shape == w.shape


def test_fused_backward_matches_the_separate_gradient_ops():
    torch.manual_seed(2)
    gy, x, w = torch.randn(2, 6, 11), torch.randn(2, 4, 11), torch.randn(6, 2, 3)
    gx, gw = OPS.conv_backward(gy, x, w, 2, 2, "auto")
    torch.testing.assert_close(gx, OPS.conv_input_grad(gy, w, 2, 2, "auto"), rtol=0, atol=0)
    torch.testing.assert_close(gw, OPS.conv_weight_grad(gy, x, 3, 2, 2, "auto"), rtol=0, atol=0)


def _model():
    torch.manual_seed(0)
    return torch.nn.Sequential(CausalConv1d(6, 8, 4), torch.nn.GELU(), CausalConv1d(8, 6, 3, dilation=2, groups=2))


def test_compile_fullgraph_forward_and_backward():
    m = _model()
    x = torch.randn(3, 6, 40)

    def loss_fn(x):
        return m(x).square().mean()

    compiled = torch.compile(loss_fn, fullgraph=True)
    compiled(x).backward()
    grads = [p.grad.clone() for p in m.parameters()]
    m.zero_grad()
    loss_fn(x).backward()
    for g, p in zip(grads, m.parameters()):
        torch.testing.assert_close(g, p.grad)


@pytest.mark.skipif(not hasattr(torch._dynamo.config, "trace_autograd_ops"),
                    reason="this torch cannot trace Tensor.backward() inside a compiled function")
def test_compile_fullgraph_training_step():
    m = _model()
    x = torch.randn(3, 6, 40)

    def step(x):
        loss = m(x).square().mean()
        loss.backward()
        return loss.detach()

    step(x)
    expected = [p.grad.clone() for p in m.parameters()]
    m.zero_grad()
    with torch._dynamo.config.patch(trace_autograd_ops=True):
        torch.compile(step, fullgraph=True)(x)
    for g, p in zip(expected, m.parameters()):
        torch.testing.assert_close(p.grad, g)


def test_compile_dynamic_lengths():
    m = CausalConv1d(4, 4, 3)
    compiled = torch.compile(m, fullgraph=True, dynamic=True)
    for length in (5, 17, 33):
        x = torch.randn(2, 4, length)
        torch.testing.assert_close(compiled(x), m(x))


def test_only_requested_gradients():
    m = CausalConv1d(4, 4, 3)
    m.weight.requires_grad_(False)
    x = torch.randn(2, 4, 9, requires_grad=True)
    m(x).sum().backward()
    assert x.grad is not None and m.weight.grad is None and m.bias.grad is not None


def test_length_zero_and_batch_zero():
    w = torch.randn(3, 2, 4)
    assert causal_conv1d(torch.randn(2, 2, 0), w).shape == (2, 3, 0)
    assert causal_conv1d(torch.randn(0, 2, 5), w).shape == (0, 3, 5)


def test_public_names():
    assert set(causalconv.__all__) >= {"causal_conv1d", "CausalConv1d", "ModelNew"}
