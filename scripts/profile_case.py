"""Runs one case a few times, for ncu:  python scripts/profile_case.py fwd|bwd float32|bfloat16 [B,Cin,Cout,K,d,L[,groups]]"""
import sys
from pathlib import Path

import torch

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))
from causalconv import causal_conv1d  # noqa: E402

direction, dtype = sys.argv[1], getattr(torch, sys.argv[2])
shape = [int(v) for v in (sys.argv[3] if len(sys.argv) > 3 else "32,256,256,4,1,8192").split(",")]
b, c_in, c_out, k, d, length = shape[:6]
groups = shape[6] if len(shape) > 6 else 1
x = torch.randn(b, c_in, length, device="cuda", dtype=dtype, requires_grad=direction == "bwd")
w = torch.randn(c_out, c_in // groups, k, device="cuda", dtype=dtype, requires_grad=direction == "bwd")
for _ in range(4):
    y = causal_conv1d(x, w, None, d, groups)
    if direction == "bwd":
        y.backward(torch.ones_like(y))
torch.cuda.synchronize()
