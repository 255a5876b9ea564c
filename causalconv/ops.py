"""The causalconv::* operators: schemas, fake (meta) implementations, autograd, the argument
checks made once at the Python boundary, and the choice between the CUDA kernels and the
PyTorch reference.

  conv_fwd(x, weight, bias, dilation, groups, precision)          -> y
  conv_input_grad(grad_y, weight, dilation, groups, precision)    -> grad_x
  conv_weight_grad(grad_y, x, kernel_size, dilation, groups, precision) -> grad_weight
  conv_backward(grad_y, x, weight, dilation, groups, precision)   -> (grad_x, grad_weight)

conv_backward is the two gradient ops in one call, for the common case of both being
needed: one operator dispatch instead of two, which is most of a small problem's time.

Each is differentiable (the two gradient ops are linear in both arguments, so their own
gradients are these ops again), which makes double backward work.  Being opaque operators,
they compile under torch.compile(fullgraph=True) without graph breaks.

The package calls them through the functions of the same names at the end of this file,
which in plain eager CUDA use run the same implementations without the operator dispatch
(see "Eager fast path").
"""

from __future__ import annotations

import torch

from . import _build, _precision
from .reference import causal_conv1d_reference, causal_padding

_FLOAT_DTYPES = (torch.float16, torch.bfloat16, torch.float32, torch.float64)

_lib = torch.library.Library("causalconv", "DEF")
_lib.define("conv_fwd(Tensor x, Tensor weight, Tensor? bias, int dilation, int groups, str precision) -> Tensor")
_lib.define("conv_input_grad(Tensor grad_y, Tensor weight, int dilation, int groups, str precision) -> Tensor")
_lib.define("conv_weight_grad(Tensor grad_y, Tensor x, int kernel_size, int dilation, int groups, str precision)"
            " -> Tensor")
_lib.define("conv_backward(Tensor grad_y, Tensor x, Tensor weight, int dilation, int groups, str precision)"
            " -> (Tensor, Tensor)")


# ---------------------------------------------------------------------------------------
# Argument checks (run once, by causalconv.causal_conv1d, before the operator).

def _shape(t: torch.Tensor) -> str:
    return "(" + ", ".join(str(s) for s in t.shape) + ")"


def check_inputs(x, weight, bias, dilation, groups, precision) -> None:
    """Raise TypeError/ValueError naming the argument, what was expected and what came."""
    if not isinstance(x, torch.Tensor):
        raise TypeError(f"x must be a torch.Tensor, got {type(x).__name__}")
    if not isinstance(weight, torch.Tensor):
        raise TypeError(f"weight must be a torch.Tensor, got {type(weight).__name__}")
    if bias is not None and not isinstance(bias, torch.Tensor):
        raise TypeError(f"bias must be a torch.Tensor or None, got {type(bias).__name__}")
    for name, t in (("x", x), ("weight", weight), ("bias", bias)):
        if t is not None and t.dtype not in _FLOAT_DTYPES:
            raise TypeError(f"{name} must be float16, bfloat16, float32 or float64, got {t.dtype}")
    if isinstance(groups, bool) or not isinstance(groups, int) or groups < 1:
        raise ValueError(f"groups must be an integer >= 1, got {groups!r}")
    if isinstance(dilation, bool) or not isinstance(dilation, int) or dilation < 1:
        raise ValueError(f"dilation must be an integer >= 1, got {dilation!r}")
    _precision.check_precision(precision)
    if x.dim() not in (2, 3):
        raise ValueError(f"x must have shape (B, C_in, L) or (C_in, L), got {_shape(x)}")
    if weight.dim() != 3:
        raise ValueError(f"weight must have shape (C_out, C_in/groups, K), got {_shape(weight)}")
    c_in = x.shape[-2]
    c_out, cin_g, k = weight.shape
    if k < 1:
        raise ValueError(f"weight must have kernel size K >= 1, got shape {_shape(weight)}")
    if c_in % groups != 0:
        raise ValueError(f"groups={groups} must divide the input channels of x, got C_in={c_in}")
    if c_out % groups != 0:
        raise ValueError(f"groups={groups} must divide the output channels of weight, got C_out={c_out}")
    if cin_g * groups != c_in:
        raise ValueError(f"weight must have shape (C_out, C_in/groups, K) = ({c_out}, {c_in // groups}, {k}) "
                         f"for x with C_in={c_in} and groups={groups}, got {_shape(weight)}")
    if bias is not None and (bias.dim() != 1 or bias.shape[0] != c_out):
        raise ValueError(f"bias must have shape ({c_out},), got {_shape(bias)}")
    for name, t in (("weight", weight), ("bias", bias)):
        if t is None:
            continue
        if t.dtype != x.dtype:
            raise TypeError(f"{name} must have the dtype of x ({x.dtype}), got {t.dtype}")
        if t.device != x.device:
            raise ValueError(f"{name} must be on the device of x ({x.device}), got {t.device}")


# ---------------------------------------------------------------------------------------
# Reference (PyTorch) implementations: every device, and CUDA when the kernels are off.

def _cast_for(precision: str, dtype: torch.dtype, cuda: bool):
    """How the reference evaluates fp32 under an explicit precision: TF32-rounded operands,
    or float64 on CUDA for 'ieee' (cuDNN might use TF32)."""
    if dtype != torch.float32 or precision == "auto":
        return None
    mode = _precision.resolve(precision)
    if mode == "tf32":
        return _precision.round_to_tf32
    return (lambda t: t.double()) if cuda else None


def _ref_input_grad(grad_y, weight, dilation, groups, precision):
    cast = _cast_for(precision, grad_y.dtype, grad_y.is_cuda)
    out_dtype = grad_y.dtype
    if cast is not None:
        grad_y, weight = cast(grad_y), cast(weight)
    pad = causal_padding(weight.shape[-1], dilation)
    b, _, length = grad_y.shape
    size = (b, weight.shape[1] * groups, length + pad)
    gx = torch.nn.grad.conv1d_input(size, weight, grad_y, dilation=dilation, groups=groups)
    return gx[..., pad:].to(out_dtype).contiguous()


def _ref_weight_grad(grad_y, x, kernel_size, dilation, groups, precision):
    cast = _cast_for(precision, x.dtype, x.is_cuda)
    out_dtype = x.dtype
    if cast is not None:
        grad_y, x = cast(grad_y), cast(x)
    pad = causal_padding(kernel_size, dilation)
    shape = (grad_y.shape[1], x.shape[1] // groups, kernel_size)
    xp = torch.nn.functional.pad(x, (pad, 0))
    return torch.nn.grad.conv1d_weight(xp, shape, grad_y, dilation=dilation, groups=groups).to(out_dtype)


def _use_kernels(t: torch.Tensor) -> bool:
    return t.dtype != torch.float64 and not _build.disabled()


@torch.library.impl(_lib, "conv_fwd", "CompositeExplicitAutograd")
def _conv_fwd_ref(x, weight, bias, dilation, groups, precision):
    if x.shape[-1] == 0:
        return x.new_empty((x.shape[0], weight.shape[0], 0))
    return causal_conv1d_reference(x, weight, bias, dilation, groups, precision)


@torch.library.impl(_lib, "conv_fwd", "CUDA")
def _conv_fwd_cuda(x, weight, bias, dilation, groups, precision):
    if not _use_kernels(x):
        return _conv_fwd_ref(x, weight, bias, dilation, groups, precision)
    prec = _precision.code(precision, x.dtype, (x.shape, weight.shape, dilation, groups, x.device))
    return _build.load().forward(x, weight, bias, dilation, groups, prec)


@torch.library.impl(_lib, "conv_input_grad", "CompositeExplicitAutograd")
def _conv_input_grad_ref(grad_y, weight, dilation, groups, precision):
    return _ref_input_grad(grad_y, weight, dilation, groups, precision)


@torch.library.impl(_lib, "conv_input_grad", "CUDA")
def _conv_input_grad_cuda(grad_y, weight, dilation, groups, precision):
    if not _use_kernels(grad_y):
        return _ref_input_grad(grad_y, weight, dilation, groups, precision)
    # the forward's shape decides, so a training step uses one precision throughout
    x_shape = (grad_y.shape[0], weight.shape[1] * groups, grad_y.shape[2])
    prec = _precision.code(precision, grad_y.dtype, (x_shape, weight.shape, dilation, groups, grad_y.device))
    return _build.load().input_grad(grad_y, weight, dilation, groups, prec)


@torch.library.impl(_lib, "conv_weight_grad", "CompositeExplicitAutograd")
def _conv_weight_grad_ref(grad_y, x, kernel_size, dilation, groups, precision):
    return _ref_weight_grad(grad_y, x, kernel_size, dilation, groups, precision)


@torch.library.impl(_lib, "conv_weight_grad", "CUDA")
def _conv_weight_grad_cuda(grad_y, x, kernel_size, dilation, groups, precision):
    if not _use_kernels(x):
        return _ref_weight_grad(grad_y, x, kernel_size, dilation, groups, precision)
    w_shape = (grad_y.shape[1], x.shape[1] // groups, kernel_size)
    prec = _precision.code(precision, x.dtype, (x.shape, w_shape, dilation, groups, x.device))
    return _build.load().weight_grad(grad_y, x, kernel_size, dilation, groups, prec)


@torch.library.impl(_lib, "conv_backward", "CompositeExplicitAutograd")
def _conv_backward_ref(grad_y, x, weight, dilation, groups, precision):
    return (_ref_input_grad(grad_y, weight, dilation, groups, precision),
            _ref_weight_grad(grad_y, x, weight.shape[-1], dilation, groups, precision))


@torch.library.impl(_lib, "conv_backward", "CUDA")
def _conv_backward_cuda(grad_y, x, weight, dilation, groups, precision):
    if not _use_kernels(x):
        return _conv_backward_ref(grad_y, x, weight, dilation, groups, precision)
    prec = _precision.code(precision, x.dtype, (x.shape, weight.shape, dilation, groups, x.device))
    gx, gw = _build.load().backward(grad_y, x, weight, dilation, groups, prec)
    return gx, gw


# ---------------------------------------------------------------------------------------
# Fake implementations (shapes only) for torch.compile and meta tensors.

@torch.library.register_fake("causalconv::conv_fwd")
def _conv_fwd_fake(x, weight, bias, dilation, groups, precision):
    return x.new_empty((x.shape[0], weight.shape[0], x.shape[2]))


@torch.library.register_fake("causalconv::conv_input_grad")
def _conv_input_grad_fake(grad_y, weight, dilation, groups, precision):
    return grad_y.new_empty((grad_y.shape[0], weight.shape[1] * groups, grad_y.shape[2]))


@torch.library.register_fake("causalconv::conv_weight_grad")
def _conv_weight_grad_fake(grad_y, x, kernel_size, dilation, groups, precision):
    return x.new_empty((grad_y.shape[1], x.shape[1] // groups, kernel_size))


@torch.library.register_fake("causalconv::conv_backward")
def _conv_backward_fake(grad_y, x, weight, dilation, groups, precision):
    return x.new_empty(x.shape), weight.new_empty(weight.shape)


# ---------------------------------------------------------------------------------------
# Autograd.  Only the gradients asked for are computed: a frozen weight launches no
# weight-gradient kernel, an x without requires_grad no input-gradient kernel.

_ops = torch.ops.causalconv


def _setup_fwd(ctx, inputs, output):
    x, weight, bias, dilation, groups, precision = inputs
    ctx.save_for_backward(x, weight)
    ctx.conf = (dilation, groups, precision)
    ctx.has_bias = bias is not None


def _backward_fwd(ctx, grad_y):
    x, weight = ctx.saved_tensors
    dilation, groups, precision = ctx.conf
    gx = gw = gb = None
    if ctx.needs_input_grad[0] and ctx.needs_input_grad[1]:
        gx, gw = conv_backward(grad_y, x, weight, dilation, groups, precision)
    elif ctx.needs_input_grad[0]:
        gx = conv_input_grad(grad_y, weight, dilation, groups, precision)
    elif ctx.needs_input_grad[1]:
        gw = conv_weight_grad(grad_y, x, weight.shape[-1], dilation, groups, precision)
    if ctx.has_bias and ctx.needs_input_grad[2]:
        gb = grad_y.sum(dim=(0, 2))
    return gx, gw, gb, None, None, None


def _setup_input_grad(ctx, inputs, output):
    grad_y, weight, dilation, groups, precision = inputs
    ctx.save_for_backward(grad_y, weight)
    ctx.conf = (dilation, groups, precision)


def _backward_input_grad(ctx, g):
    grad_y, weight = ctx.saved_tensors
    dilation, groups, precision = ctx.conf
    g_gy = g_w = None
    if ctx.needs_input_grad[0]:
        g_gy = _ops.conv_fwd(g, weight, None, dilation, groups, precision)
    if ctx.needs_input_grad[1]:
        g_w = _ops.conv_weight_grad(grad_y, g, weight.shape[-1], dilation, groups, precision)
    return g_gy, g_w, None, None, None


def _setup_weight_grad(ctx, inputs, output):
    grad_y, x, kernel_size, dilation, groups, precision = inputs
    ctx.save_for_backward(grad_y, x)
    ctx.conf = (dilation, groups, precision)


def _backward_weight_grad(ctx, g):
    grad_y, x = ctx.saved_tensors
    dilation, groups, precision = ctx.conf
    g_gy = g_x = None
    if ctx.needs_input_grad[0]:
        g_gy = _ops.conv_fwd(x, g, None, dilation, groups, precision)
    if ctx.needs_input_grad[1]:
        g_x = _ops.conv_input_grad(grad_y, g, dilation, groups, precision)
    return g_gy, g_x, None, None, None, None


def _setup_backward(ctx, inputs, output):
    grad_y, x, weight, dilation, groups, precision = inputs
    ctx.save_for_backward(grad_y, x, weight)
    ctx.conf = (dilation, groups, precision)


def _backward_backward(ctx, g_gx, g_gw):
    """conv_backward's outputs are linear in grad_y and in x / weight: the gradients of
    grad_x = input_grad(grad_y, weight) and grad_weight = weight_grad(grad_y, x) combined."""
    grad_y, x, weight = ctx.saved_tensors
    dilation, groups, precision = ctx.conf
    g_gy = g_x = g_w = None
    if ctx.needs_input_grad[0]:
        parts = [] if g_gx is None else [_ops.conv_fwd(g_gx, weight, None, dilation, groups, precision)]
        if g_gw is not None:
            parts.append(_ops.conv_fwd(x, g_gw, None, dilation, groups, precision))
        g_gy = sum(parts[1:], parts[0]) if parts else None
    if ctx.needs_input_grad[1] and g_gw is not None:
        g_x = _ops.conv_input_grad(grad_y, g_gw, dilation, groups, precision)
    if ctx.needs_input_grad[2] and g_gx is not None:
        g_w = _ops.conv_weight_grad(grad_y, g_gx, weight.shape[-1], dilation, groups, precision)
    return g_gy, g_x, g_w, None, None, None


torch.library.register_autograd("causalconv::conv_fwd", _backward_fwd, setup_context=_setup_fwd)
torch.library.register_autograd("causalconv::conv_input_grad", _backward_input_grad, setup_context=_setup_input_grad)
torch.library.register_autograd("causalconv::conv_weight_grad", _backward_weight_grad,
                                setup_context=_setup_weight_grad)
torch.library.register_autograd("causalconv::conv_backward", _backward_backward, setup_context=_setup_backward)


# ---------------------------------------------------------------------------------------
# Eager fast path.  A call through the dispatcher costs ~60 us of Python before the kernels
# are enqueued (the op's Python CUDA kernel, and with gradients torch.library's generated
# autograd wrapper, whose argument re-binding alone is ~35 us), measured on the CPU path;
# a small problem's kernels take less.  Plain CUDA tensors in eager mode call the very
# implementations the dispatcher would pick.  A forward that needs a graph records it with
# the extension's C++ autograd node, which saves and computes what the operator's
# registered autograd does (a Python autograd.Function costs ~20-40 us more per call);
# where the kernels are off (float64, CAUSALCONV_DISABLE_CUDA) an autograd.Function made of
# the operator's setup_context and backward does.  Anything else goes through the
# operators: torch.compile and its fake tensors, tensor subclasses, torch function and
# dispatch modes, functorch transforms, the CPU.

_PLAIN_TYPES = (torch.Tensor, torch.nn.Parameter)


def _plain_eager_cuda(*tensors) -> bool:
    if torch.compiler.is_compiling() or torch._C._is_torch_function_mode_enabled():
        return False
    if torch._C._len_torch_dispatch_stack() > 0 or torch._C._functorch.peek_interpreter_stack() is not None:
        return False
    # nn.Parameter (a module's weight and bias) adds no torch function or dispatch behaviour
    return all(t is None or (type(t) in _PLAIN_TYPES and t.is_cuda) for t in tensors)


def _needs_graph(*tensors) -> bool:
    return torch.is_grad_enabled() and any(t is not None and t.requires_grad for t in tensors)


class _ConvFwdEager(torch.autograd.Function):
    """conv_fwd recorded for autograd like the operator: same setup_context, same backward.
    (The form with a separate setup_context staticmethod binds its arguments with
    inspect.signature on every call, ~40 us more.)"""

    @staticmethod
    def forward(ctx, x, weight, bias, dilation, groups, precision):
        y = _conv_fwd_cuda(x, weight, bias, dilation, groups, precision)
        _setup_fwd(ctx, (x, weight, bias, dilation, groups, precision), y)
        return y

    @staticmethod
    def backward(ctx, grad_y):
        return _backward_fwd(ctx, grad_y)


def conv_fwd(x, weight, bias, dilation, groups, precision):
    if _plain_eager_cuda(x, weight, bias):
        if not _needs_graph(x, weight, bias):
            return _conv_fwd_cuda(x, weight, bias, dilation, groups, precision)
        if _use_kernels(x):  # the extension's C++ autograd node (kernels/autograd.cpp)
            prec = _precision.code(precision, x.dtype, (x.shape, weight.shape, dilation, groups, x.device))
            return _build.load().forward_with_grad(x, weight, bias, dilation, groups, prec, precision)
        return _ConvFwdEager.apply(x, weight, bias, dilation, groups, precision)
    return _ops.conv_fwd(x, weight, bias, dilation, groups, precision)


# The gradient ops take the fast path only when no graph is recorded (a backward without
# create_graph); double backward goes through the operators and their registered autograd.

def conv_input_grad(grad_y, weight, dilation, groups, precision):
    if _plain_eager_cuda(grad_y, weight) and not _needs_graph(grad_y, weight):
        return _conv_input_grad_cuda(grad_y, weight, dilation, groups, precision)
    return _ops.conv_input_grad(grad_y, weight, dilation, groups, precision)


def conv_weight_grad(grad_y, x, kernel_size, dilation, groups, precision):
    if _plain_eager_cuda(grad_y, x) and not _needs_graph(grad_y, x):
        return _conv_weight_grad_cuda(grad_y, x, kernel_size, dilation, groups, precision)
    return _ops.conv_weight_grad(grad_y, x, kernel_size, dilation, groups, precision)


def conv_backward(grad_y, x, weight, dilation, groups, precision):
    if _plain_eager_cuda(grad_y, x, weight) and not _needs_graph(grad_y, x, weight):
        return _conv_backward_cuda(grad_y, x, weight, dilation, groups, precision)
    return _ops.conv_backward(grad_y, x, weight, dilation, groups, precision)
