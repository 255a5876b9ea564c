"""Where the backward's time goes: forward, dx alone (frozen weight), dW alone (x without
grad) for a few shapes, median CUDA-event times with L2 flushed.  BD_KERNELS names forced kernel
families to time side by side ("auto" by default; "wgmma-window" runs fp32 TF32 on the kernels
that read x into registers from raw windows).  BD_TILES names 16-bit weight-gradient tiles
(taps x 64-channel blocks, CAUSALCONV_WGRAD_TILE; "columns" for the cost model that counts
MMA columns alone) to time dW on beside the default choice, each with its error against float64.
    BD_DTYPES=float32,bfloat16,float16 BD_KERNELS=auto,wgmma-window BD_TILES=3x1,1x4 \
        python scripts/bwd_breakdown.py [B,Cin,Cout,K,d,L ...]"""
import os
import sys
from pathlib import Path

import torch

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))
from causalconv import _build, causal_conv1d, causal_conv1d_reference  # noqa: E402
from causalconv._timing import time_cuda  # noqa: E402

shapes = [tuple(int(v) for v in s.split(",")) for s in sys.argv[1:]] or [
    (32, 256, 256, 4, 1, 8192), (8, 1024, 1024, 4, 1, 4096), (16, 64, 64, 2, 512, 16384), (32, 128, 128, 7, 4, 4096)]
for shape in shapes:
    b, c_in, c_out, k, d, length = shape
    for dtype in [getattr(torch, n) for n in os.environ.get("BD_DTYPES", "float32,bfloat16").split(",")]:
        x = torch.randn(b, c_in, length, device="cuda", dtype=dtype)
        w = torch.randn(c_out, c_in, k, device="cuda", dtype=dtype) / (c_in * k) ** 0.5
        gy = torch.randn(b, c_out, length, device="cuda", dtype=dtype)
        xg, wg = x.clone().requires_grad_(), w.clone().requires_grad_()
        y_dx = causal_conv1d(xg, w, None, d)
        y_dw = causal_conv1d(x, wg, None, d)
        gflop = 2 * b * c_in * c_out * k * length / 1e9
        for kernel in os.environ.get("BD_KERNELS", "auto").split(","):
            _build.load().set_forced_kernel(kernel)
            t = {
                "fwd": time_cuda(lambda: causal_conv1d(x, w, None, d), min_reps=30, budget_s=0.4)["median_ms"],
                "dx": time_cuda(lambda: torch.autograd.grad(y_dx, [xg], gy, retain_graph=True), min_reps=30,
                                budget_s=0.4)["median_ms"],
                "dw": time_cuda(lambda: torch.autograd.grad(y_dw, [wg], gy, retain_graph=True), min_reps=30,
                                budget_s=0.4)["median_ms"],
            }
            print(f"{shape} {str(dtype)[6:]:9s} {kernel:8s} " + "  ".join(
                f"{n} {v:.3f} ms ({gflop / v:.0f} TFLOP/s)" for n, v in t.items()), flush=True)
        _build.load().set_forced_kernel("auto")
        tiles = [t for t in os.environ.get("BD_TILES", "").split(",") if t]
        if tiles and dtype != torch.float32:
            w64 = w.double().requires_grad_()
            exact = torch.autograd.grad(causal_conv1d_reference(x.double(), w64, None, d), [w64], gy.double())[0]
            for tile in ["auto"] + tiles:
                if tile == "auto":
                    os.environ.pop("CAUSALCONV_WGRAD_TILE", None)
                else:
                    os.environ["CAUSALCONV_WGRAD_TILE"] = tile.replace("x", ",")
                try:
                    got = torch.autograd.grad(y_dw, [wg], gy, retain_graph=True)[0]
                    ms = time_cuda(lambda: torch.autograd.grad(y_dw, [wg], gy, retain_graph=True), min_reps=30,
                                   budget_s=0.4)["median_ms"]
                except RuntimeError as e:
                    print(f"{shape} {str(dtype)[6:]:9s} tile {tile:5s} not run: {str(e).splitlines()[0]}", flush=True)
                    continue
                err = ((got.double() - exact).abs().max() / exact.abs().max()).item()
                print(f"{shape} {str(dtype)[6:]:9s} tile {tile:5s} dw {ms:.3f} ms ({gflop / ms:.0f} TFLOP/s)  "
                      f"max err / max |dw| {err:.1e}", flush=True)
            os.environ.pop("CAUSALCONV_WGRAD_TILE", None)
