"""GPU timing for the benchmark and the CLI: CUDA events around each call, L2 flushed before
each one, warm-up first, median of many runs."""

from __future__ import annotations

import statistics
import time
from typing import Callable

import torch

_flush_buffers: dict[torch.device, torch.Tensor] = {}


def _flush_l2(device: torch.device) -> None:
    buf = _flush_buffers.get(device)
    if buf is None:
        # Larger than any L2 (50-60 MB on Hopper): writing it evicts the previous call's data.
        buf = _flush_buffers[device] = torch.empty(256 * 1024 * 1024 // 4, dtype=torch.int32, device=device)
    buf.zero_()


def time_cuda(fn: Callable[[], object], *, min_reps: int = 100, max_reps: int = 2000, budget_s: float = 1.5,
              warmup: int = 5, device: torch.device | None = None) -> dict:
    """Median milliseconds of fn() over at least min_reps timed calls."""
    device = device or torch.device("cuda", torch.cuda.current_device())
    for _ in range(warmup):
        fn()
    torch.cuda.synchronize(device)
    start, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
    start.record()
    for _ in range(3):
        fn()
    end.record()
    torch.cuda.synchronize(device)
    estimate_ms = max(start.elapsed_time(end) / 3, 1e-3)
    reps = int(min(max_reps, max(min_reps, budget_s * 1e3 / (estimate_ms + 0.1))))
    starts = [torch.cuda.Event(enable_timing=True) for _ in range(reps)]
    ends = [torch.cuda.Event(enable_timing=True) for _ in range(reps)]
    for i in range(reps):
        _flush_l2(device)
        starts[i].record()
        fn()
        ends[i].record()
    torch.cuda.synchronize(device)
    times = [s.elapsed_time(e) for s, e in zip(starts, ends)]
    return {"median_ms": statistics.median(times), "reps": reps, "min_ms": min(times)}


def cpu_ms_per_call(fn: Callable[[], object], calls: int = 500, warmup: int = 50) -> float:
    """Milliseconds of host time per call to issue fn() back to back, taken before the final
    synchronize: what a call costs the CPU, whatever its kernels take, as long as the calls'
    launches fit the launch queue (about a thousand; beyond it the CPU waits for the GPU)."""
    for _ in range(warmup):
        fn()
    torch.cuda.synchronize()
    start = time.perf_counter()
    for _ in range(calls):
        fn()
    elapsed = (time.perf_counter() - start) / calls * 1e3
    torch.cuda.synchronize()
    return elapsed
