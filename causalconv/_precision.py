"""How fp32 convolutions are computed: 'tf32' (operands rounded to TF32, fp32 accumulation)
or 'ieee' (full fp32 accuracy).

'auto' reproduces what the reference (F.pad + nn.Conv1d through cuDNN) computes: TF32 when
PyTorch allows it for cuDNN convolutions (read at call time, so flipping the switch later
takes effect) *and* the shape is one cuDNN runs on tensor cores; cuDNN keeps exact fp32
for the others (dilated or narrow convolutions), and so does causalconv.  The shape rule is
checked against cuDNN itself by tests/test_gpu_forward.py."""

from __future__ import annotations

import torch

PRECISIONS = ("auto", "tf32", "ieee")

# Codes understood by the CUDA extension (kernels/dispatch.h).
_CODES = {"tf32": 1, "ieee": 2}


def conv_allows_tf32() -> bool:
    """True when PyTorch lets cuDNN convolutions use TF32 for fp32 tensors."""
    cudnn = torch.backends.cudnn
    conv = getattr(cudnn, "conv", None)
    if conv is not None and hasattr(conv, "fp32_precision"):
        # Newer API: the most specific setting that is not 'none' wins.
        chain = (conv.fp32_precision, getattr(cudnn, "fp32_precision", "none"),
                 getattr(torch.backends, "fp32_precision", "none"))
        for value in chain:
            if value == "tf32":
                return True
            if value == "ieee":
                return False
        return False
    return bool(cudnn.allow_tf32)


def cudnn_uses_tensor_cores(dilation: int, cin_g: int, cout_g: int) -> bool:
    """Whether cuDNN runs this convolution on tensor cores (so TF32, when allowed), as
    observed with cuDNN 9 on Hopper: undilated convolutions with at least 16 channels per
    group on both sides."""
    return dilation == 1 and cin_g >= 16 and cout_g >= 16


def check_precision(precision: str) -> None:
    if precision not in PRECISIONS:
        raise ValueError(f"precision must be one of {PRECISIONS}, got {precision!r}")


def resolve(precision: str, dilation: int = 1, cin_g: int = 16, cout_g: int = 16) -> str:
    """'tf32' or 'ieee' for an fp32 convolution of this shape run now."""
    check_precision(precision)
    if precision == "auto":
        tf32 = conv_allows_tf32() and cudnn_uses_tensor_cores(dilation, cin_g, cout_g)
        return "tf32" if tf32 else "ieee"
    return precision


def code(precision: str, dilation: int, cin_g: int, cout_g: int) -> int:
    """The extension's precision code for a convolution with these per-group channels."""
    return _CODES[resolve(precision, dilation, cin_g, cout_g)]


def round_to_tf32(t: torch.Tensor) -> torch.Tensor:
    """fp32 values rounded to TF32 (10 mantissa bits) with round-to-nearest-even, as the
    kernels round their operands; Inf and NaN pass through."""
    if t.dtype != torch.float32:
        raise TypeError(f"round_to_tf32 expects float32, got {t.dtype}")
    u = t.contiguous().view(torch.int32).to(torch.int64) & 0xFFFFFFFF
    special = (u & 0x7F800000) == 0x7F800000
    rounded = (u + 0xFFF + ((u >> 13) & 1)) & 0xFFFFE000
    out = torch.where(special, u, rounded)
    out = torch.where(out >= 2**31, out - 2**32, out).to(torch.int32)
    return out.view(torch.float32).view(t.shape)


class conv_tf32:
    """Context manager setting PyTorch's TF32 switch for cuDNN convolutions, restoring it on
    exit.  Uses the per-operator API where this torch has it."""

    def __init__(self, enabled: bool):
        self.enabled = enabled

    def __enter__(self):
        conv = getattr(torch.backends.cudnn, "conv", None)
        if conv is not None and hasattr(conv, "fp32_precision"):
            self._restore = ("new", conv.fp32_precision)
            conv.fp32_precision = "tf32" if self.enabled else "ieee"
        else:
            self._restore = ("legacy", torch.backends.cudnn.allow_tf32)
            torch.backends.cudnn.allow_tf32 = self.enabled
        return self

    def __exit__(self, *exc):
        kind, value = self._restore
        if kind == "new":
            torch.backends.cudnn.conv.fp32_precision = value
        else:
            torch.backends.cudnn.allow_tf32 = value
        return False
