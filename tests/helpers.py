"""Shared test helpers: the tolerance table, the float64 oracle, error reporting, and (on GPU)
output poisoning and kernel forcing."""

from __future__ import annotations

import contextlib

import torch

from causalconv import _precision
from causalconv.reference import causal_conv1d_reference

# Normwise relative error ||out - exact|| / ||exact|| and max error relative to max|exact|,
# against the float64 oracle of the same (possibly TF32-rounded) operands.  In TF32 mode
# the oracle rounds the operands as the kernels do, so what is left is fp32 accumulation
# (truncating on tensor cores): ~1e-6, while a wrong rounding would show as ~3e-4.
#   key: (dtype, precision, quantity)
TOLERANCES = {
    (torch.float32, "ieee", "out"): (1e-6, 1e-5),
    (torch.float32, "tf32", "out"): (1e-5, 2e-5),
    (torch.float16, "native", "out"): (1e-3, 4e-3),
    (torch.bfloat16, "native", "out"): (8e-3, 2e-2),
    (torch.float64, "native", "out"): (1e-12, 1e-11),
    # weight gradients sum over B*L products
    (torch.float32, "ieee", "dw"): (2e-6, 2e-5),
    (torch.float32, "tf32", "dw"): (2e-5, 1e-4),
    (torch.float16, "native", "dw"): (1e-3, 4e-3),
    (torch.bfloat16, "native", "dw"): (8e-3, 2e-2),
    (torch.float64, "native", "dw"): (1e-12, 1e-11),
}
TOLERANCES.update({(d, p, "dx"): v for (d, p, q), v in list(TOLERANCES.items()) if q == "out"})

HARNESS_TOL = {torch.float32: 1e-4, torch.float16: 1e-2, torch.bfloat16: 1e-2}


def mode_of(dtype: torch.dtype, precision: str, conv=None) -> str:
    """'native' for half types, else the fp32 mode the convolution resolves to (conv as in
    causalconv._precision.resolve)."""
    if dtype != torch.float32:
        return "native"
    return _precision.resolve(precision, conv)


def oracle_operands(dtype: torch.dtype, precision: str, *tensors, conv=None):
    """The operands as the kernels' arithmetic sees them, in float64."""
    if mode_of(dtype, precision, conv) == "tf32":
        tensors = [_precision.round_to_tf32(t) for t in tensors]
    return [t.double() for t in tensors]


def exact_forward(x, w, b, dilation, groups, precision="auto"):
    xs, ws = oracle_operands(x.dtype, precision, x, w, conv=(x.shape, w.shape, dilation, groups, x.device))
    return causal_conv1d_reference(xs, ws, None if b is None else b.double(), dilation, groups)


def exact_grads(x, w, b, gy, dilation, groups, precision="auto"):
    """The float64 gradients (dx, dw, and db if b is given) of the kernels' operands."""
    xs, ws, gys = oracle_operands(x.dtype, precision, x, w, gy)
    xs.requires_grad_(True)
    ws.requires_grad_(True)
    b64 = None if b is None else b.double().requires_grad_(True)
    y = causal_conv1d_reference(xs, ws, b64, dilation, groups)
    return torch.autograd.grad(y, [xs, ws] + ([b64] if b64 is not None else []), gys)


def assert_close(out: torch.Tensor, exact: torch.Tensor, dtype, precision, quantity="out", label="", conv=None,
                 terms=0):
    """Print max/mean errors, then assert against TOLERANCES (NaN never passes).

    terms: products summed per element.  In TF32 mode the oracle's operands are the kernels'
    rounded ones, so what is left is fp32 accumulation, whose error on tensor cores grows
    about linearly with the sum's length (Hopper's accumulation truncates): on an H100 a dx
    summing 5120 products measured 1.2e-5 normwise, 2560 products 6.0e-6.  Past 1e-5 the
    bound grows as terms * 2^-26 (~6x that rate), still far below a missed operand rounding
    (~3e-4)."""
    rel_tol, max_tol = TOLERANCES[(dtype, mode_of(dtype, precision, conv), quantity)]
    if mode_of(dtype, precision, conv) == "tf32":
        rel_tol, max_tol = max(rel_tol, terms * 2.0**-26), max(max_tol, 2 * terms * 2.0**-26)
    assert out.shape == exact.shape, f"{label}: shape {tuple(out.shape)} != {tuple(exact.shape)}"
    assert out.dtype == dtype, f"{label}: dtype {out.dtype} != {dtype}"
    diff = (out.double() - exact).abs()
    scale = exact.abs().max().item() or 1.0
    rel = (diff.norm() / exact.norm().clamp_min(1e-300)).item() if exact.numel() else 0.0
    mx = diff.max().item() / scale if exact.numel() else 0.0
    mean = diff.mean().item() / scale if exact.numel() else 0.0
    print(f"{label} {quantity}: rel {rel:.2e} (tol {rel_tol:.0e}), max {mx:.2e} (tol {max_tol:.0e}), mean {mean:.2e}")
    assert torch.isfinite(out).all(), f"{label}: non-finite values in {quantity} (unwritten output?)"
    assert rel <= rel_tol and mx <= max_tol, f"{label}: {quantity} error rel {rel:.3e}, max {mx:.3e}"


def ext():
    from causalconv import _build

    return _build.load()


@contextlib.contextmanager
def poisoned_outputs():
    """Outputs and workspaces are filled with NaN before each kernel runs."""
    ext().set_poison_outputs(True)
    try:
        yield
    finally:
        ext().set_poison_outputs(False)


@contextlib.contextmanager
def forced_kernel(name: str):
    ext().set_forced_kernel(name)
    try:
        yield
    finally:
        ext().set_forced_kernel("auto")


KERNEL_NAMES = ["generic", "depthwise", "wgmma", "mma", "input_grad", "wgrad_generic", "wgrad_wgmma",
                "wgrad_depthwise"]


@contextlib.contextmanager
def count_launches():
    """Yields a dict filled on exit with the launches per kernel family inside the block."""
    before = list(ext().launch_counts())
    counts: dict = {}
    try:
        yield counts
    finally:
        torch.cuda.synchronize()
        after = list(ext().launch_counts())
        counts.update({n: a - b for n, a, b in zip(KERNEL_NAMES, after, before)})


def make_x(shape, dtype, device, layout: str, seed: int) -> torch.Tensor:
    """Fresh random x of (B, C, L) in the given memory layout."""
    g = torch.Generator(device="cpu").manual_seed(seed)
    b, c, length = shape
    if layout == "contiguous":
        return torch.randn(b, c, length, generator=g).to(device, dtype)
    if layout == "channel_slice":  # a channel slice of a wider tensor
        wide = torch.randn(b, c + 3, length, generator=g).to(device, dtype)
        return wide[:, 2:2 + c]
    if layout == "transposed":  # (B, L, C) storage viewed as (B, C, L)
        return torch.randn(b, length, c, generator=g).to(device, dtype).transpose(1, 2)
    raise ValueError(layout)
