"""ModelNew is a drop-in for the reference Model; CausalConv1d is nn.Conv1d-compatible (CPU)."""

import pytest
import torch
import torch.nn as nn
import torch.nn.functional as F

from causalconv import CausalConv1d, Model, ModelNew


@pytest.mark.parametrize("bias", [False, True])
@pytest.mark.parametrize("args", [(256, 256, 4, 1), (3, 5, 1, 1), (16, 32, 5, 3)])
def test_modelnew_same_random_draws_and_keys(args, bias):
    torch.manual_seed(42)
    ref = Model(*args, bias=bias)
    torch.manual_seed(42)
    new = ModelNew(*args, bias=bias)
    assert list(new.state_dict()) == list(ref.state_dict())
    assert list(ref.state_dict()) == (["conv1d.weight", "conv1d.bias"] if bias else ["conv1d.weight"])
    for (k, a), (_, b) in zip(ref.state_dict().items(), new.state_dict().items()):
        assert torch.equal(a, b), k
    # the next draw is the same too: construction consumed the same numbers
    assert torch.equal(torch.rand(3), (torch.manual_seed(42), Model(*args, bias=bias), torch.rand(3))[2])


def test_modelnew_default_signature_matches_reference():
    torch.manual_seed(42)
    ref = Model(8, 8, 3)
    torch.manual_seed(42)
    new = ModelNew(8, 8, 3)
    assert new.conv1d.bias is None and ref.conv1d.bias is None
    assert new.conv1d.dilation == ref.conv1d.dilation == (1,)


def test_state_dict_loads_both_ways():
    a, b = Model(4, 6, 3, 2, True), ModelNew(4, 6, 3, 2, True)
    b.load_state_dict(a.state_dict())
    x = torch.randn(2, 4, 11)
    torch.testing.assert_close(b(x), a(x))
    c = Model(4, 6, 3, 2, True)
    c.load_state_dict(b.state_dict())
    torch.testing.assert_close(c(x), b(x))


@pytest.mark.parametrize("batch,length", [(1, 1), (1, 2), (3, 7), (2, 100), (5, 3)])
def test_modelnew_outputs_match_reference(batch, length):
    torch.manual_seed(42)
    ref = Model(6, 10, 4, 3)
    torch.manual_seed(42)
    new = ModelNew(6, 10, 4, 3)
    x = torch.randn(batch, 6, length)  # several lengths shorter than the padding (9)
    y_ref, y_new = ref(x), new(x)
    assert y_new.shape == y_ref.shape == (batch, 10, length)
    assert y_new.dtype == y_ref.dtype
    torch.testing.assert_close(y_new, y_ref, atol=1e-5, rtol=1e-5)


@pytest.mark.parametrize("convert", ["half", "bfloat16", "double", "to_bf16"])
def test_dtype_conversions_behave_like_reference(convert):
    torch.manual_seed(42)
    ref = Model(4, 4, 3, bias=True)
    torch.manual_seed(42)
    new = ModelNew(4, 4, 3, bias=True)
    ops = {"half": lambda m: m.half(), "bfloat16": lambda m: m.bfloat16(), "double": lambda m: m.double(),
           "to_bf16": lambda m: m.to("cpu", torch.bfloat16)}
    ref, new = ops[convert](ref), ops[convert](new)
    assert new.conv1d.weight.dtype == ref.conv1d.weight.dtype
    assert new.conv1d.bias.dtype == ref.conv1d.bias.dtype
    x = torch.randn(2, 4, 9).to(ref.conv1d.weight.dtype)
    y_ref, y_new = ref(x), new(x)
    assert y_new.dtype == y_ref.dtype
    tol = 1e-2 if y_ref.dtype in (torch.float16, torch.bfloat16) else 1e-6
    torch.testing.assert_close(y_new.float(), y_ref.float(), atol=tol, rtol=tol)


def test_unbatched_input():
    m = ModelNew(4, 6, 3)
    x = torch.randn(4, 10)
    y = m(x)
    assert y.shape == (6, 10)
    torch.testing.assert_close(y, m(x[None])[0])


@pytest.mark.parametrize("groups,bias", [(1, True), (2, False), (4, True)])
def test_causalconv1d_is_conv1d_compatible(groups, bias):
    torch.manual_seed(7)
    conv = nn.Conv1d(8, 12, 5, dilation=2, groups=groups, bias=bias)
    torch.manual_seed(7)
    causal = CausalConv1d(8, 12, 5, dilation=2, groups=groups, bias=bias)
    assert isinstance(causal, nn.Conv1d)
    assert list(causal.state_dict()) == list(conv.state_dict())
    for a, b in zip(conv.state_dict().values(), causal.state_dict().values()):
        assert torch.equal(a, b)  # same init, same shapes
    fresh = CausalConv1d(8, 12, 5, dilation=2, groups=groups, bias=bias)
    fresh.load_state_dict(conv.state_dict())  # a trained nn.Conv1d loads
    x = torch.randn(3, 8, 20)
    torch.testing.assert_close(fresh(x), conv(F.pad(x, (8, 0))))
    assert fresh(x).shape == (3, 12, 20)
    assert fresh(x[0]).shape == (12, 20)


def test_causalconv1d_repr_and_device_dtype():
    m = CausalConv1d(4, 8, 3, dilation=2, groups=2, bias=False, dtype=torch.float64)
    assert m.weight.dtype == torch.float64 and m.weight.shape == (8, 2, 3)
    r = repr(m)
    assert "CausalConv1d(4, 8, kernel_size=3, dilation=2, causal_padding=4, groups=2, bias=False)" == r
    assert "precision='ieee'" in repr(CausalConv1d(2, 2, 2, precision="ieee"))


def test_batch_zero_returns_empty():
    m = CausalConv1d(4, 6, 3)
    y = m(torch.randn(0, 4, 9))
    assert y.shape == (0, 6, 9)
    ref = nn.Conv1d(4, 6, 3)(torch.randn(0, 4, 11))
    assert ref.shape[0] == 0
