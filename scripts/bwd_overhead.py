"""Where a small row's time goes: for ModelNew and the reference Model, the backward
(autograd.grad of a retained graph, x and weight requiring grad; or with `fwd` first, the
forward under no_grad) timed three ways: as the
benchmark times it (CUDA events, L2 flushed), the host time to issue one call (back-to-back
calls, before the final synchronize), and the GPU time of its kernels (torch.profiler, which
adds some of its own); then the kernels by GPU time, ours and the reference's.  When the
first is close to the second and well above the third, the row is bound by the host.
    python scripts/bwd_overhead.py [fwd] [dtype] [B,Cin,Cout,K,d,L ...]"""
import sys
from pathlib import Path

import torch
from torch.autograd import DeviceType
from torch.profiler import ProfilerActivity, profile

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))
from causalconv import Model, ModelNew  # noqa: E402
from causalconv._timing import cpu_ms_per_call, time_cuda  # noqa: E402

args = sys.argv[1:]
forward = bool(args) and args[0] == "fwd"
args = args[1:] if forward else args
dtype = getattr(torch, args[0]) if args else torch.bfloat16
shapes = [tuple(int(v) for v in s.split(",")) for s in args[1:]] or [(4, 512, 512, 3, 1, 2048),
                                                                       (1, 256, 256, 4, 1, 64)]


def gpu_us_per_call(fn, calls=20):
    with profile(activities=[ProfilerActivity.CPU, ProfilerActivity.CUDA]) as prof:
        for _ in range(calls):
            fn()
        torch.cuda.synchronize()
    # Kernel rows only: an op's row also counts the kernels it launched.
    gpu = sum(e.self_device_time_total for e in prof.key_averages() if e.device_type == DeviceType.CUDA)
    return gpu / calls, prof


for shape in shapes:
    b, c_in, c_out, k, d, length = shape
    for name, cls in (("ours", ModelNew), ("ref", Model)):
        torch.manual_seed(0)
        m = cls(c_in, c_out, k, d).to("cuda", dtype)
        x = torch.randn(b, c_in, length, device="cuda", dtype=dtype, requires_grad=True)
        y = m(x)
        gy = torch.randn_like(y)
        params = [x] + [p for p in m.parameters() if p.requires_grad]

        def fn():
            if forward:
                with torch.no_grad():
                    return m(x)
            return torch.autograd.grad(y, params, gy, retain_graph=True)

        bench = time_cuda(fn)["median_ms"] * 1e3
        cpu = cpu_ms_per_call(fn, calls=100, warmup=20) * 1e3
        gpu, prof = gpu_us_per_call(fn)
        print(f"{'fwd' if forward else 'bwd'} {shape} {str(dtype)[6:]} {name:4s} benchmark {bench:7.1f} us  cpu/call {cpu:7.1f} us  "
              f"gpu kernels/call {gpu:7.1f} us", flush=True)
        # Each kernel's GPU time, ours and the reference's: which launch a small row spends on.
        print(prof.key_averages().table(sort_by="self_device_time_total", row_limit=8), flush=True)
