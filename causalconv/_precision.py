"""How fp32 convolutions are computed: 'tf32' (operands rounded to TF32, fp32 accumulation)
or 'ieee' (full fp32 accuracy).

'auto' reproduces what the reference (F.pad + nn.Conv1d through cuDNN) computes.  With TF32
disallowed by PyTorch (read at call time, so flipping the switch later takes effect) that is
exact fp32.  With TF32 allowed, cuDNN still computes some shapes in exact fp32 (its algorithm
choice depends on the whole shape), so the first fp32 call of each shape asks cuDNN: it
convolves an input of 1 + 2^-12, which TF32 rounds to 1, and the answer is cached.  While a
CUDA graph is being captured, or when the probe tensor would be very large, a channel-count
rule stands in for the probe."""

from __future__ import annotations

import threading

import torch

PRECISIONS = ("auto", "tf32", "ieee")

# Codes understood by the CUDA extension (kernels/dispatch.h).
_CODES = {"tf32": 1, "ieee": 2}


# PyTorch's own getter of the per-operator TF32 settings (what torch.backends.cudnn.conv.
# fp32_precision and its parents read, without their ~1-2 us of Python property lookups
# each, paid on every fp32 call); None before that API existed.
_fp32_precision_of = getattr(torch._C, "_get_fp32_precision_getter", None)


def conv_allows_tf32() -> bool:
    """True when PyTorch lets cuDNN convolutions use TF32 for fp32 tensors."""
    if _fp32_precision_of is None:
        return bool(torch.backends.cudnn.allow_tf32)
    # The most specific setting that is not 'none' wins: cuDNN convolutions, cuDNN, all.
    value = _fp32_precision_of("cuda", "conv")
    if value == "none":
        value = _fp32_precision_of("cuda", "all")
    if value == "none":
        value = _fp32_precision_of("generic", "all")
    return value == "tf32"


_PROBE_MAX_ELEMENTS = 1 << 28
_probe_lock = threading.Lock()
_probe_cache: dict = {}


def _channel_rule(cin_g: int, cout_g: int) -> bool:
    return cin_g >= 16 and cout_g >= 16


def cudnn_uses_tf32(x_shape, weight_shape, dilation: int, groups: int, device) -> bool:
    """Whether cuDNN, with TF32 allowed, computes this fp32 causal convolution in TF32."""
    # Shapes may come as torch.Size or tuple (equal, with equal hashes).  cuDNN's flags
    # through the functions that torch.backends.cudnn's properties call, ~1 us cheaper.
    key = (device, x_shape, weight_shape, dilation, groups, torch._C._get_cudnn_benchmark(),
           torch._C._get_cudnn_deterministic())
    hit = _probe_cache.get(key)  # a dict read is atomic: no lock on the per-call path
    if hit is not None:
        return hit
    b, c_in, length = x_shape
    c_out, cin_g, k = weight_shape
    if device.type != "cuda" or b * c_in * length > _PROBE_MAX_ELEMENTS or torch.cuda.is_current_stream_capturing():
        return _channel_rule(cin_g, c_out // groups)
    pad = (k - 1) * dilation
    with torch.no_grad():
        x = torch.full((b, c_in, length), 1.0 + 2.0**-12, device=device)
        w = torch.ones(weight_shape, device=device)
        y = torch.nn.functional.conv1d(torch.nn.functional.pad(x, (pad, 0)), w, dilation=dilation, groups=groups)
        full = float(cin_g * k)  # every tap inside the sequence at the last step
        tf32 = bool((y[..., -1] - full).abs().max().item() < 0.5 * full * 2.0**-12)
    with _probe_lock:
        _probe_cache[key] = tf32
    return tf32


def check_precision(precision: str) -> None:
    if precision not in PRECISIONS:
        raise ValueError(f"precision must be one of {PRECISIONS}, got {precision!r}")


def resolve(precision: str, conv=None) -> str:
    """'tf32' or 'ieee' for an fp32 convolution run now.  conv = (x_shape, weight_shape,
    dilation, groups, device) lets 'auto' follow cuDNN for that shape; without it 'auto'
    follows PyTorch's switch alone."""
    check_precision(precision)
    if precision == "auto":
        tf32 = conv_allows_tf32() and (conv is None or cudnn_uses_tf32(*conv))
        return "tf32" if tf32 else "ieee"
    return precision


def code(precision: str, dtype: torch.dtype, conv) -> int:
    """The extension's precision code for this convolution (see resolve).  Only fp32 has a
    choice: for the half types nothing is read or probed."""
    if dtype != torch.float32:
        return _CODES["tf32"]  # ignored by the kernels for 16-bit types
    return _CODES[resolve(precision, conv)]


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
