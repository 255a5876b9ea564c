"""sm_90a forward kernels side by side on the benchmark grid, median CUDA-event times with
L2 flushed, and each one's normwise error against float64.  AB_KERNELS picks them
(default: the TMA kernel and the register-A one), each optionally with environment knobs
set while it runs (kernel@NAME=value+NAME2=value: the same kernel with run-time knobs on and
off, in one process); AB_CASES the dtypes and fp32 precisions (default float32:tf32,bfloat16:tf32;
float32:ieee times the 3xTF32 split).
    AB_KERNELS=wgmma,wgmma-ra,mma python scripts/ab_forward.py [B,Cin,Cout,K,d,L ...]
    AB_KERNELS=auto@CAUSALCONV_STREAM_K=0,auto@CAUSALCONV_STREAM_K=1 python scripts/ab_forward.py"""
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
for shape in shapes:
    b, c_in, c_out, k, d, length = shape
    gflop = 2 * b * c_in * c_out * k * length / 1e9
    for case in os.environ.get("AB_CASES", "float32:tf32,bfloat16:tf32").split(","):
        dtype_name, precision = case.split(":")
        dtype = getattr(torch, dtype_name)
        x = torch.randn(b, c_in, length, device="cuda", dtype=dtype)
        w = torch.randn(c_out, c_in, k, device="cuda", dtype=dtype) / (c_in * k) ** 0.5
        bias = torch.randn(c_out, device="cuda", dtype=dtype)
        n = min(b, 2)  # the float64 check on a batch slice keeps memory small
        exact = causal_conv1d_reference(x[:n].double(), w.double(), bias.double(), d, 1)
        line = f"{shape} {dtype_name if dtype != torch.float32 else precision:9s}"
        for spec in os.environ.get("AB_KERNELS", "wgmma,wgmma-ra").split(","):
            kernel, _, knobs = spec.partition("@")
            knobs = [knob.split("=") for knob in knobs.split("+") if knob]
            for name, value in knobs:
                os.environ[name] = value
            ext.set_forced_kernel(kernel)
            ext.set_poison_outputs(True)
            y = causal_conv1d(x, w, bias, d, 1, precision)
            ext.set_poison_outputs(False)
            err = ((y[:n].double() - exact).norm() / exact.norm()).item()
            ms = time_cuda(lambda: causal_conv1d(x, w, bias, d, 1, precision), min_reps=30, budget_s=0.4)["median_ms"]
            line += f"  {spec} {ms:.3f} ms {gflop / ms:.0f} TFLOP/s err {err:.1e}"
            for name, _ in knobs:
                del os.environ[name]
        ext.set_forced_kernel("auto")
        print(line, flush=True)
