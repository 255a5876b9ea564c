"""Depthwise causal convolutions (groups = channels, the Mamba / Hyena short conv): the
forward, the weight gradient alone and the whole backward against F.pad + F.conv1d in the
same process (median CUDA-event times, L2 flushed), ours twice: on the register kernels
("ours", CAUSALCONV_DEPTHWISE_REGISTERS=1: fwd_depthwise.cu's for the forward and input
gradient, wgrad_depthwise.cu's for the weight gradient) and on the staged ones ("staged",
=0, the default until the register kernels have run on a GPU);
and the weight gradient on the dense CUDA-core kernel (forced 'generic', what depthwise
layers ran before wgrad_depthwise.cu) beside the depthwise one; each result's normwise
error against float64.  A shape ending in ",cl" takes x channel-last, a (B, L, C) tensor
viewed as (B, C, L), as a model that keeps its activations (B, L, C) hands it over.
    python scripts/depthwise_bench.py [dtype] [B,C,K,d,L[,cl] ...]"""
import os
import sys
from pathlib import Path

import torch
import torch.nn.functional as F

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))
from causalconv import _build, causal_conv1d  # noqa: E402
from causalconv._timing import time_cuda  # noqa: E402

ext = _build.load()
args = sys.argv[1:]
dtype = getattr(torch, args[0]) if args and not args[0][0].isdigit() else torch.bfloat16
args = args[1:] if args and not args[0][0].isdigit() else args
shapes = [tuple(int(v) for v in s.split(",")[:5]) + (s.endswith(",cl"),) for s in args] or [
    (8, 1536, 4, 1, 2048, False), (4, 2048, 4, 1, 8192, False), (32, 256, 3, 1, 4096, False),
    (16, 512, 2, 8, 4096, False), (8, 1536, 4, 1, 2048, True)]


def reference(x, w, d):
    return F.conv1d(F.pad(x, ((w.shape[-1] - 1) * d, 0)), w, None, 1, 0, d, w.shape[0])


def rel_err(a, exact):
    return ((a.double() - exact).norm() / exact.norm()).item()


for b, c, k, d, length, channel_last in shapes:
    x = torch.randn(b, c, length, device="cuda", dtype=dtype)
    if channel_last:
        x = x.transpose(1, 2).contiguous().transpose(1, 2)
    w = (torch.randn(c, 1, k, device="cuda", dtype=dtype) / k ** 0.5)
    gy = torch.randn(b, c, length, device="cuda", dtype=dtype)
    x64, w64 = x.double().requires_grad_(True), w.double().requires_grad_(True)
    exact = torch.autograd.grad(reference(x64, w64, d), [x64, w64], gy.double())
    gbytes = 2 * x.numel() * x.element_size() / 1e9  # x and dy (or y), read or written once
    print(f"B={b} C={c} K={k} d={d} L={length} {dtype}{' channel-last' if channel_last else ''}: floor {gbytes / 4.2e3 * 1e6:.1f} us at 4.2 TB/s")
    xg, wg = x.clone().requires_grad_(True), w.clone().requires_grad_(True)
    ours = lambda x_, w_: causal_conv1d(x_, w_, None, d, c)  # noqa: E731
    for name, fn in (("ours", ours), ("staged", ours), ("ref", lambda x_, w_: reference(x_, w_, d))):
        os.environ["CAUSALCONV_DEPTHWISE_REGISTERS"] = "0" if name == "staged" else "1"
        with torch.no_grad():
            fwd = time_cuda(lambda: fn(x, w))["median_ms"]
        y_w = fn(x, wg)  # weight gradient alone (x without grad)
        dw_ms = time_cuda(lambda: torch.autograd.grad(y_w, [wg], gy, retain_graph=True))["median_ms"]
        dw = torch.autograd.grad(y_w, [wg], gy, retain_graph=True)[0]
        y_b = fn(xg, wg)
        bwd_ms = time_cuda(lambda: torch.autograd.grad(y_b, [xg, wg], gy, retain_graph=True))["median_ms"]
        gx = torch.autograd.grad(y_b, [xg, wg], gy, retain_graph=True)[0]
        print(f"  {name:6s} fwd {fwd * 1e3:8.1f} us  dw {dw_ms * 1e3:8.1f} us  bwd {bwd_ms * 1e3:8.1f} us  "
              f"err dw {rel_err(dw, exact[1]):.1e} dx {rel_err(gx, exact[0]):.1e}")
    os.environ.pop("CAUSALCONV_DEPTHWISE_REGISTERS")
    y_w = causal_conv1d(x, wg, None, d, c)
    ext.set_forced_kernel("generic")
    try:
        dense_ms = time_cuda(lambda: torch.autograd.grad(y_w, [wg], gy, retain_graph=True))["median_ms"]
        dense = torch.autograd.grad(y_w, [wg], gy, retain_graph=True)[0]
    finally:
        ext.set_forced_kernel("auto")
    print(f"  dense CUDA-core weight gradient {dense_ms * 1e3:8.1f} us, err {rel_err(dense, exact[1]):.1e}")
