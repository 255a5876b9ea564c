"""Benchmark: causalconv against the reference Model (F.pad + nn.Conv1d through cuDNN), both
timed in the same process on the same GPU, reported as ratios.

Rules: CUDA events, L2 flushed before every call, warm-up, median of >= 100 calls (see
_timing.py).  The GEMM ceilings used for "share of ceiling" are measured in the same run.
"""

from __future__ import annotations

import datetime
import json
import platform
from dataclasses import asdict, dataclass, field
from pathlib import Path

import torch

from . import _build, _precision
from ._timing import time_cuda
from .modules import ModelNew
from .reference import Model

# (B, C_in, C_out, K, dilation, L)
DEFAULT_SHAPE = (32, 256, 256, 4, 1, 8192)
GRID = [
    DEFAULT_SHAPE,
    (64, 320, 320, 4, 1, 16384),
    (32, 256, 512, 4, 1, 8192),
    (8, 1024, 1024, 4, 1, 4096),
    (4, 512, 512, 3, 1, 2048),
    (16, 64, 64, 2, 512, 16384),
    (32, 128, 128, 7, 4, 4096),
    (3, 96, 160, 5, 3, 1000),
    (1, 256, 256, 4, 1, 64),
]
DTYPES = {"float32": torch.float32, "bfloat16": torch.bfloat16, "float16": torch.float16}
KERNEL_NAMES = ["generic", "depthwise", "wgmma", "mma", "input_grad", "wgrad_generic", "wgrad_wgmma",
                "wgrad_depthwise"]


@dataclass
class Row:
    case: str
    B: int
    C_in: int
    C_out: int
    K: int
    dilation: int
    groups: int
    L: int
    dtype: str
    precision: str
    direction: str
    ref_ms: float = 0.0
    ours_ms: float = 0.0
    speedup: float = 0.0
    tflops: float = 0.0
    ceiling_share: float = 0.0
    max_abs_err_vs_ref: float = 0.0
    rel_err_vs_fp64: float = 0.0
    kernels: list = field(default_factory=list)
    reps: int = 0


def flops(shape, direction: str) -> float:
    b, c_in, c_out, k, _, length = shape
    one = 2.0 * b * c_out * c_in * k * length
    return {"fwd": 1, "bwd": 2, "fwd+bwd": 3}[direction] * one


def measure_ceilings(device) -> dict:
    """Dense GEMM rates (TFLOP/s) for TF32 and bf16 on random data, and copy bandwidth."""
    n = 8192
    out = {}
    a = torch.randn(n, n, device=device)
    b = torch.randn(n, n, device=device)
    saved = torch.backends.cuda.matmul.allow_tf32
    try:
        torch.backends.cuda.matmul.allow_tf32 = True
        ms = time_cuda(lambda: a @ b, min_reps=10, max_reps=20, budget_s=0.5)["median_ms"]
        out["tf32_tflops"] = 2 * n**3 / ms / 1e9
    finally:
        torch.backends.cuda.matmul.allow_tf32 = saved
    a16, b16 = a.bfloat16(), b.bfloat16()
    ms = time_cuda(lambda: a16 @ b16, min_reps=10, max_reps=20, budget_s=0.5)["median_ms"]
    out["bf16_tflops"] = 2 * n**3 / ms / 1e9
    src = torch.empty(1 << 30, dtype=torch.uint8, device=device)
    dst = torch.empty_like(src)
    ms = time_cuda(lambda: dst.copy_(src), min_reps=10, max_reps=20, budget_s=0.5)["median_ms"]
    out["copy_tbps"] = 2 * src.numel() / ms / 1e9
    return out


def _counts():
    return list(_build.load().launch_counts())


def _rel(a: torch.Tensor, ref: torch.Tensor) -> float:
    return ((a.double() - ref).norm() / ref.norm().clamp_min(1e-300)).item()


def run_case(shape, dtype_name: str, direction: str, tf32: bool, ceilings: dict, device, case: str = "") -> Row:
    dtype = DTYPES[dtype_name]
    b, c_in, c_out, k, d, length = shape
    torch.manual_seed(0)
    ref = Model(c_in, c_out, k, d).to(device, dtype)
    ours = ModelNew(c_in, c_out, k, d).to(device, dtype)
    ours.load_state_dict(ref.state_dict())
    x = torch.randn(b, c_in, length, device=device, dtype=dtype)
    row = Row(case or "", b, c_in, c_out, k, d, 1, length, dtype_name, "native", direction)
    with _precision.conv_tf32(tf32):
        if dtype == torch.float32:  # what 'auto' resolves to here (cuDNN's own choice)
            row.precision = _precision.resolve("auto", (x.shape, ref.conv1d.weight.shape, d, 1, device))
        if direction == "fwd":
            with torch.no_grad():
                fns = [lambda m=m: m(x) for m in (ref, ours)]
                outs = [f() for f in fns]
                ref64 = Model(c_in, c_out, k, d).to(device, torch.float64)
                ref64.load_state_dict(ref.state_dict())
                exact = [ref64(x.double())]
            outs = [[o] for o in outs]
        else:
            xg = x.detach().requires_grad_(True)
            gy = torch.randn(b, c_out, length, device=device, dtype=dtype)

            def grads_of(m, xin):
                w = m.conv1d.weight
                if direction == "bwd":
                    y = m(xin)
                    return lambda: torch.autograd.grad(y, [xin, w], gy, retain_graph=True)
                return lambda: torch.autograd.grad(m(xin), [xin, w], gy)

            fns = [grads_of(ref, xg), grads_of(ours, xg)]
            outs = [list(f()) for f in fns]
            ref64 = Model(c_in, c_out, k, d).to(device, torch.float64)
            ref64.load_state_dict(ref.state_dict())
            x64 = x.double().requires_grad_(True)
            exact = list(torch.autograd.grad(ref64(x64), [x64, ref64.conv1d.weight], gy.double()))
        row.max_abs_err_vs_ref = max((o.double() - r.double()).abs().max().item() for o, r in zip(outs[1], outs[0]))
        row.rel_err_vs_fp64 = max(_rel(o, e) for o, e in zip(outs[1], exact))
        before = _counts()
        fns[1]()
        torch.cuda.synchronize(device)
        row.kernels = [n for n, a, z in zip(KERNEL_NAMES, before, _counts()) if z > a]
        t_ref = time_cuda(fns[0])
        t_ours = time_cuda(fns[1])
    row.ref_ms, row.ours_ms, row.reps = t_ref["median_ms"], t_ours["median_ms"], t_ours["reps"]
    row.speedup = row.ref_ms / row.ours_ms
    row.tflops = flops(shape, direction) / row.ours_ms / 1e9
    if dtype == torch.float32:
        ceiling = ceilings["tf32_tflops"] / (1 if row.precision == "tf32" else 3)
    else:
        ceiling = ceilings["bf16_tflops"]
    row.ceiling_share = row.tflops / ceiling
    return row


def plan(quick: bool, directions: list[str]) -> list[tuple]:
    """(case, shape, dtype, direction, tf32) rows of the benchmark."""
    rows = []
    d = DEFAULT_SHAPE
    if "fwd" in directions:
        rows += [("default", d, "float32", "fwd", True), ("default", d, "bfloat16", "fwd", True),
                 ("default", d, "float16", "fwd", True), ("default-tf32-off", d, "float32", "fwd", False)]
    if "fwd+bwd" in directions:
        rows += [("default", d, "float32", "fwd+bwd", True), ("default", d, "bfloat16", "fwd+bwd", True)]
    if quick:
        return rows
    for shape in GRID:
        for dt in ("float32", "bfloat16"):
            if "fwd" in directions:
                rows.append(("grid", shape, dt, "fwd", True))
            if "bwd" in directions:
                rows.append(("grid", shape, dt, "bwd", True))
    return rows


def environment(device) -> dict:
    props = torch.cuda.get_device_properties(device)
    return {
        "device": props.name,
        "sm_count": props.multi_processor_count,
        "torch": torch.__version__,
        "cuda": torch.version.cuda,
        "cudnn": torch.backends.cudnn.version(),
        "python": platform.python_version(),
        "date": datetime.datetime.now(datetime.timezone.utc).isoformat(timespec="seconds"),
    }


def summarize(rows: list[Row]) -> dict:
    import math

    out = {}
    for dt in ("float32", "bfloat16"):
        grid = [r for r in rows if r.case == "grid" and r.dtype == dt and r.direction == "fwd"]
        if grid:
            out[f"fwd_{dt}_geomean"] = math.exp(sum(math.log(r.speedup) for r in grid) / len(grid))
            out[f"fwd_{dt}_min"] = min(r.speedup for r in grid)
        grid = [r for r in rows if r.case == "grid" and r.dtype == dt and r.direction == "bwd"]
        if grid:
            out[f"bwd_{dt}_geomean"] = math.exp(sum(math.log(r.speedup) for r in grid) / len(grid))
            out[f"bwd_{dt}_min"] = min(r.speedup for r in grid)
    return out


def format_table(rows: list[Row]) -> str:
    head = (f"{'case':<17}{'shape (B,Cin,Cout,K,d,L)':<30}{'dtype':<10}{'prec':<7}{'dir':<8}"
            f"{'ref ms':>9}{'ours ms':>9}{'speedup':>8}{'TFLOP/s':>9}{'ceil%':>7}{'err/ref':>10}{'rel64':>10}  kernels")
    lines = [head, "-" * len(head)]
    for r in rows:
        shape = f"({r.B},{r.C_in},{r.C_out},{r.K},{r.dilation},{r.L})"
        lines.append(f"{r.case:<17}{shape:<30}{r.dtype:<10}{r.precision:<7}{r.direction:<8}{r.ref_ms:>9.4f}"
                     f"{r.ours_ms:>9.4f}{r.speedup:>7.2f}x{r.tflops:>9.1f}{100 * r.ceiling_share:>6.0f}%"
                     f"{r.max_abs_err_vs_ref:>10.2e}{r.rel_err_vs_fp64:>10.2e}  {'+'.join(r.kernels)}")
    return "\n".join(lines)


def run(quick: bool = False, directions: list[str] | None = None, out: str | None = None) -> dict:
    if not torch.cuda.is_available():
        raise SystemExit("causalconv bench: needs a CUDA GPU")
    device = torch.device("cuda", torch.cuda.current_device())
    directions = directions or ["fwd", "bwd", "fwd+bwd"]
    _build.load()
    env = environment(device)
    ceilings = measure_ceilings(device)
    print(f"{env['device']}  torch {env['torch']}  CUDA {env['cuda']}  cuDNN {env['cudnn']}")
    print(f"measured ceilings: TF32 GEMM {ceilings['tf32_tflops']:.0f} TFLOP/s, bf16 GEMM "
          f"{ceilings['bf16_tflops']:.0f} TFLOP/s, copy {ceilings['copy_tbps']:.2f} TB/s", flush=True)
    rows = []
    for case, shape, dt, direction, tf32 in plan(quick, directions):
        rows.append(run_case(shape, dt, direction, tf32, ceilings, device, case))
        print(format_table(rows[-1:]).splitlines()[-1], flush=True)
        torch.cuda.empty_cache()
    result = {"environment": env, "ceilings": ceilings, "summary": summarize(rows), "rows": [asdict(r) for r in rows]}
    print()
    print(format_table(rows))
    print(json.dumps(result["summary"], indent=1))
    if out:
        Path(out).parent.mkdir(parents=True, exist_ok=True)
        Path(out).write_text(json.dumps(result, indent=1) + "\n")
        print(f"wrote {out}")
    return result
