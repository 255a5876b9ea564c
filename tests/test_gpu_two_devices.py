"""Tensors on a second GPU: every kernel runs on the tensors' device and the current stream
there, whatever the current device is, and the per-device state (multiprocessor counts,
shared-memory limits set per kernel, scratch buffers) is kept apart."""

import pytest
import torch

from causalconv import causal_conv1d
from helpers import assert_close, exact_forward, exact_grads

pytestmark = [pytest.mark.gpu,
              pytest.mark.skipif(torch.cuda.device_count() < 2, reason="needs two GPUs")]

DTYPE_PRECISIONS = [(torch.float32, "tf32"), (torch.float32, "ieee"), (torch.float16, "auto"),
                    (torch.bfloat16, "auto")]
# (B, C_in, C_out, K, dilation, L): one shape for the tensor-core kernels, one small enough
# for the small-problem paths (the weight gradient on a second stream).
SHAPES = [(2, 128, 128, 4, 1, 2048), (3, 24, 40, 5, 3, 300)]


def _inputs(shape, dtype, device, seed):
    b, c_in, c_out, k, _, length = shape
    g = torch.Generator().manual_seed(seed)
    x = torch.randn(b, c_in, length, generator=g)
    w = torch.randn(c_out, c_in, k, generator=g) / (c_in * k) ** 0.5
    bias = torch.randn(c_out, generator=g)
    gy = torch.randn(b, c_out, length, generator=g)
    return [t.to(device, dtype) for t in (x, w, bias, gy)]


def _run(x, w, bias, gy, dilation, precision):
    x, w, bias = (t.detach().requires_grad_(True) for t in (x, w, bias))
    y = causal_conv1d(x, w, bias, dilation, 1, precision)
    return (y,) + torch.autograd.grad(y, [x, w, bias], gy)


def _exact(x, w, bias, gy, dilation, precision):
    return (exact_forward(x, w, bias, dilation, 1, precision),) + exact_grads(x, w, bias, gy, dilation, 1, precision)


def _assert_matches_oracle(got, exact, shape, dtype, precision, label):
    _, c_in, c_out, k, _, length = shape
    for name, a, e in zip(("out", "dx", "dw"), got, exact):
        assert_close(a, e, dtype, precision, name, label=label, terms={"out": c_in * k, "dx": c_out * k}.get(name, 0))
    tol = {torch.float32: 1e-5, torch.float16: 1e-2, torch.bfloat16: 2e-2}[dtype]
    torch.testing.assert_close(got[3].double(), exact[3], atol=tol * length, rtol=tol)


@pytest.mark.parametrize("dtype,precision", DTYPE_PRECISIONS, ids=lambda v: str(v).replace("torch.", ""))
@pytest.mark.parametrize("shape", SHAPES, ids=lambda s: "x".join(map(str, s)))
def test_second_device_while_the_first_is_current(shape, dtype, precision):
    """Forward and both gradients on cuda:1 with cuda:0 current: right values, results on
    cuda:1, cuda:0 still current; and bitwise the results of the same call on cuda:0 (same
    card model, deterministic kernels), run after it so that cuda:1 set up its state first."""
    dilation = shape[4]
    inputs = _inputs(shape, dtype, "cuda:1", seed=7)
    with torch.cuda.device(0):
        got = _run(*inputs, dilation, precision)
        assert torch.cuda.current_device() == 0
    assert all(t.device == torch.device("cuda:1") for t in got)
    label = f"cuda:1 {shape} {dtype} {precision}"
    _assert_matches_oracle(got, _exact(*inputs, dilation, precision), shape, dtype, precision, label)
    with torch.cuda.device(0):
        on_first = _run(*(t.to("cuda:0") for t in inputs), dilation, precision)
    for a, b in zip(got, on_first):
        assert torch.equal(a.cpu(), b.cpu()), f"{label}: cuda:0 and cuda:1 disagree"


@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16], ids=str)
@pytest.mark.parametrize("shape", SHAPES, ids=lambda s: "x".join(map(str, s)))
def test_second_device_runs_on_its_current_stream(shape, dtype):
    """The operands are written on a side stream of cuda:1 after a long sleep there; the
    convolution and its gradients, called on that stream, must see the written values.  A
    kernel launched on cuda:1's default stream would read them unwritten."""
    dilation = shape[4]
    precision = "tf32" if dtype == torch.float32 else "auto"  # 'auto' would probe cuDNN, which syncs
    source = _inputs(shape, dtype, "cuda:1", seed=11)
    side = torch.cuda.Stream(device="cuda:1")
    side.wait_stream(torch.cuda.current_stream("cuda:1"))
    with torch.cuda.device(1), torch.cuda.stream(side):
        torch.cuda._sleep(50_000_000)  # ~25 ms: the operands below are written long after the launches
        inputs = [torch.empty_like(t).copy_(t) for t in source]
        got = _run(*inputs, dilation, precision)
    torch.cuda.current_stream("cuda:1").wait_stream(side)
    for t in got:
        t.record_stream(torch.cuda.current_stream("cuda:1"))
    _assert_matches_oracle(got, _exact(*source, dilation, precision), shape, dtype, precision,
                           f"cuda:1 side stream {shape} {dtype}")
