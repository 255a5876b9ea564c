"""Small grid through every kernel family, for compute-sanitizer (memcheck, racecheck):

    PYTORCH_NO_CUDA_MEMORY_CACHING=1 compute-sanitizer --tool memcheck --error-exitcode 1 \
        python scripts/sanitize.py

Shapes are small (the sanitizer slows kernels 10-100x) but cover partial tiles, halos
larger than a tile, groups, depthwise (under 'generic' and 'depthwise'), both fp32 modes and
a 16-bit type.  SANITIZE_KERNELS
(e.g. "wgmma") limits the run to some kernel families, SANITIZE_MAX_ELEMS (e.g. 2000000) to
the cases whose x and y have at most that many elements: racecheck is slow."""

import os
import sys
from pathlib import Path

import torch

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))
from causalconv import _build, causal_conv1d  # noqa: E402

ext = _build.load()
kernels = ["generic", "depthwise", "mma"] + (["wgmma", "wgmma-ra", "wgmma-window"] if ext.has_wgmma() else [])
if os.environ.get("SANITIZE_KERNELS"):
    kernels = [k for k in kernels if k in os.environ["SANITIZE_KERNELS"].split(",")]
max_elems = int(os.environ.get("SANITIZE_MAX_ELEMS", "0")) or float("inf")
cases = [  # B, C_in, C_out, groups, K, dilation, L
    (2, 96, 160, 1, 4, 1, 264),
    (1, 64, 32, 2, 5, 3, 40),
    (1, 40, 72, 1, 7, 40, 8),
    (2, 8, 16, 8, 3, 2, 1030),
    # depthwise (one input channel per group): its forward and weight-gradient kernels, the
    # (batch, step) range split over blocks, two tap groups
    (3, 16, 16, 16, 9, 2, 2600),
    (8, 64, 64, 1, 3, 1, 8192),  # more blocks than SMs, so several waves share the scratch image
    (2, 32, 32, 1, 2, 100, 264),  # taps further apart than a weight-gradient stage is long
    (6, 512, 512, 512, 4, 1, 8192),  # depthwise: 3 units per staged weight-gradient block (132 SMs), its ring wraps
    (2, 24, 24, 24, 8, 1, 2056),  # depthwise, the register forward: 8 taps reach two fp32 chunks back, a short last block
    (1, 48, 40, 1, 40, 1, 64),  # more taps than one weight-gradient tile holds
    (1, 160, 64, 1, 6, 7, 136),  # 16-bit weight gradient, MN-major x: two tiles of taps, three channel blocks
    # the 16-bit forward's 256-step tiles: raw windows of two TMA boxes, filled by three taps 100 apart
    (8, 64, 64, 1, 3, 100, 8192),
    # 128 channels in 96 tiles of 256 steps (on 132 SMs): the raw-window forward's 256-step
    # tile at N = 128
    (3, 128, 128, 1, 4, 1, 8192),
    # one wave of 128 x 256 tiles and a few more: with CAUSALCONV_STREAM_K=1 the raw-window
    # forward cuts nearly every tile in two (partial sums and flags in the scratch buffer);
    # with =2 every block's share of it and of the 16-bit forward starts and ends mid-tile
    (torch.cuda.get_device_properties(0).multi_processor_count // 8 + 1, 128, 128, 1, 4, 1, 2048),
]
n = 0
for kernel in kernels:
    ext.set_forced_kernel(kernel)
    for b, c_in, c_out, groups, k, d, length in cases:
        if kernel != "generic" and length % 8:
            continue
        if b * max(c_in, c_out) * length > max_elems:  # SANITIZE_MAX_ELEMS: racecheck's time goes with size
            continue
        # 'depthwise' runs the depthwise cases (the automatic choice for them, and the input
        # gradient's too at one output channel per group), the tensor-core families the others
        if (kernel == "depthwise") != (groups == c_in == c_out) and kernel != "generic":
            continue
        for dtype, precision in ((torch.float32, "tf32"), (torch.float32, "ieee"), (torch.bfloat16, "auto")):
            x = torch.randn(b, c_in, length, device="cuda", dtype=dtype, requires_grad=True)
            w = torch.randn(c_out, c_in // groups, k, device="cuda", dtype=dtype, requires_grad=True)
            bias = torch.randn(c_out, device="cuda", dtype=dtype, requires_grad=True)
            y = causal_conv1d(x, w, bias, d, groups, precision)
            y.backward(torch.randn_like(y))
            torch.cuda.synchronize()
            n += 1
ext.set_forced_kernel("auto")
print(f"sanitize: {n} forward+backward runs over kernels {kernels}; launch counts {list(ext.launch_counts())}")
