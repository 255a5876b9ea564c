"""The backward (dx and dw of one call, bias included) under run-time knob settings side by
side in one process: median CUDA-event times with L2 flushed, and each setting's largest
normwise error against float64 (dx or dw, whichever is worse; AB_ERRORS=0 skips the float64
gradients, which take longer than the timing on large shapes).  AB_SETTINGS lists the settings (NAME=value+NAME2=value, or
'-' for the environment as it is); AB_CASES the dtypes and fp32 precisions as in
scripts/ab_forward.py.
    AB_SETTINGS=CAUSALCONV_PDL=0,CAUSALCONV_PDL=1 python scripts/ab_backward.py [B,Cin,Cout,K,d,L ...]"""
import os
import sys
from pathlib import Path

import torch

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))
from causalconv import _build, causal_conv1d  # noqa: E402
from causalconv._timing import time_cuda  # noqa: E402
from causalconv.bench import GRID  # noqa: E402
from causalconv.reference import causal_conv1d_reference  # noqa: E402

ext = _build.load()
shapes = [tuple(int(v) for v in s.split(",")) for s in sys.argv[1:]] or GRID
for b, c_in, c_out, k, d, length in shapes:
    gflop = 4 * b * c_in * c_out * k * length / 1e9
    for case in os.environ.get("AB_CASES", "float32:tf32,bfloat16:tf32").split(","):
        dtype_name, precision = case.split(":")
        dtype = getattr(torch, dtype_name)
        x = torch.randn(b, c_in, length, device="cuda", dtype=dtype, requires_grad=True)
        w = (torch.randn(c_out, c_in, k, device="cuda", dtype=dtype) / (c_in * k) ** 0.5).requires_grad_(True)
        bias = torch.randn(c_out, device="cuda", dtype=dtype, requires_grad=True)
        gy = torch.randn(b, c_out, length, device="cuda", dtype=dtype)
        exact = None
        if os.environ.get("AB_ERRORS", "1") != "0":
            x64, w64 = x.detach().double().requires_grad_(True), w.detach().double().requires_grad_(True)
            exact = torch.autograd.grad(causal_conv1d_reference(x64, w64, bias.double(), d, 1), [x64, w64],
                                        gy.double())
        line = f"{(b, c_in, c_out, k, d, length)} {dtype_name if dtype != torch.float32 else precision:9s}"
        for spec in os.environ.get("AB_SETTINGS", "-").split(","):
            knobs = [knob.split("=") for knob in spec.split("+") if knob and knob != "-"]
            for name, value in knobs:
                os.environ[name] = value
            y = causal_conv1d(x, w, bias, d, 1, precision)
            ext.set_poison_outputs(True)
            grads = torch.autograd.grad(y, [x, w], gy, retain_graph=True)
            ext.set_poison_outputs(False)
            err = max(((a.double() - e).norm() / e.norm()).item() for a, e in zip(grads, exact)) if exact else float("nan")
            ms = time_cuda(lambda: torch.autograd.grad(y, [x, w], gy, retain_graph=True), min_reps=30,
                           budget_s=0.4)["median_ms"]
            line += f"  {spec} {ms:.4f} ms {gflop / ms:.0f} TFLOP/s err {err:.1e}"
            for name, _ in knobs:
                del os.environ[name]
        print(line, flush=True)
