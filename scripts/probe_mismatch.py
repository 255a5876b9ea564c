"""Where a kernel family's results go wrong, for debugging a new kernel on the GPU: runs the
forward, the input gradient and the weight gradient of one shape with a forced family,
compares each with float64 and prints, for the elements off by more than the TF32/16-bit
tolerance, how they spread over each index taken modulo a tile size (a wrong fragment or
descriptor layout shows as a pattern in one index; a race as a scatter that moves between
runs).
    PROBE_KERNEL=wgmma-window python scripts/probe_mismatch.py [B,Cin,Cout,K,d,L] [dtype]"""
import os
import sys
from collections import Counter
from pathlib import Path

import torch

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))
from causalconv import _build, causal_conv1d  # noqa: E402
from causalconv.reference import causal_conv1d_reference  # noqa: E402

b, c_in, c_out, k, d, length = (int(v) for v in (sys.argv[1] if len(sys.argv) > 1 else "2,256,256,4,1,1024").split(","))
dtype = getattr(torch, sys.argv[2] if len(sys.argv) > 2 else "float32")
kernel = os.environ.get("PROBE_KERNEL", "wgmma-window")
ext = _build.load()
torch.manual_seed(0)
x = torch.randn(b, c_in, length, device="cuda", dtype=dtype, requires_grad=True)
w = (torch.randn(c_out, c_in, k, device="cuda", dtype=dtype) / (c_in * k) ** 0.5).requires_grad_(True)
gy = torch.randn(b, c_out, length, device="cuda", dtype=dtype)
precision = "tf32" if dtype == torch.float32 else "auto"
ext.set_forced_kernel(kernel)
ext.set_poison_outputs(True)
y = causal_conv1d(x, w, None, d, 1, precision)
gx, gw = torch.autograd.grad(y, [x, w], gy)
ext.set_poison_outputs(False)
ext.set_forced_kernel("auto")

x64, w64 = x.detach().double().requires_grad_(True), w.detach().double().requires_grad_(True)
y64 = causal_conv1d_reference(x64, w64, None, d, 1)
gx64, gw64 = torch.autograd.grad(y64, [x64, w64], gy.double())
tol = 1e-2 if dtype == torch.float32 else 5e-2  # relative to each tensor's rms: well above rounding


def report(name, got, exact, axes):
    """axes: (label, modulus) per dimension of the tensor."""
    err = (got.double() - exact).abs()
    bad = ~(err <= tol * exact.pow(2).mean().sqrt())  # NaN (unwritten, poisoned) counts as bad
    n_bad = int(bad.sum())
    print(f"{name}: {n_bad} of {bad.numel()} elements off ({n_bad / bad.numel():.2%}), max err {err.max().item():.3g}")
    if n_bad == 0:
        return
    idx = bad.nonzero()
    for dim, (label, mod) in enumerate(axes):
        counts = Counter((idx[:, dim] % mod).tolist())
        top = ", ".join(f"{v}: {c}" for v, c in counts.most_common(8))
        print(f"  {label} mod {mod}: {len(counts)} distinct values; most common {top}")


print(f"kernel {kernel}, shape {(b, c_in, c_out, k, d, length)}, {dtype}")
report("y", y, y64, [("b", b), ("o", 128), ("t", 256)])
report("dx", gx, gx64, [("b", b), ("i", 128), ("t", 256)])
report("dw", gw, gw64, [("o", 128), ("i", 64), ("k", k)])
