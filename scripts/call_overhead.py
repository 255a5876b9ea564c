"""Per-call cost of small problems, where the CPU time of a call can exceed its kernels: for
the reference Model and ModelNew, the median CUDA-event time with L2 flushed (as the
benchmark times) with autograd enabled and disabled, and the CPU time per call of 500
back-to-back calls.
    python scripts/call_overhead.py [B,Cin,Cout,K,d,L ...]"""
import sys
from pathlib import Path

import torch

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))
from causalconv import Model, ModelNew  # noqa: E402
from causalconv._timing import cpu_ms_per_call, time_cuda  # noqa: E402

shapes = [tuple(int(v) for v in s.split(",")) for s in sys.argv[1:]] or [
    (3, 96, 160, 5, 3, 1000), (1, 256, 256, 4, 1, 64), (4, 512, 512, 3, 1, 2048)]


for dtype in (torch.bfloat16, torch.float32):
    for b, c_in, c_out, k, d, length in shapes:
        ref = Model(c_in, c_out, k, d).to("cuda", dtype)
        ours = ModelNew(c_in, c_out, k, d).to("cuda", dtype)
        ours.load_state_dict(ref.state_dict())
        x = torch.randn(b, c_in, length, device="cuda", dtype=dtype)
        line = f"{(b, c_in, c_out, k, d, length)} {str(dtype)[6:]}"
        for name, m in (("ref", ref), ("ours", ours)):
            for grad in (True, False):
                with torch.set_grad_enabled(grad):
                    gpu = time_cuda(lambda: m(x))["median_ms"]
                    cpu = cpu_ms_per_call(lambda: m(x))
                line += f" | {name} grad={int(grad)} {gpu:.4f} ms, cpu {cpu:.4f} ms"
        print(line, flush=True)
