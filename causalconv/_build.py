"""Lazy JIT build of the CUDA kernels in kernels/ with torch.utils.cpp_extension and ninja.

Built on first CUDA use (never at import), once per process, for the GPUs present (sm_90a on
Hopper, sm_XY elsewhere), cached in torch's extensions directory and rebuilt when a source
or flag changes.  A failed build is remembered: later calls raise the same error at once
instead of recompiling.

Environment:
  CAUSALCONV_DISABLE_CUDA=1     use the PyTorch path even for CUDA tensors
  CAUSALCONV_VERBOSE_BUILD=1    show the compiler output
  CAUSALCONV_CUDA_ARCH=9.0a,8.0 build for these targets instead of the visible GPUs
  MAX_JOBS=N                    parallel compile jobs (read by torch's ninja builder)
  CAUSALCONV_FRAGMENT_DEPTH=4   k-steps of fragments the raw-window kernels (forced 'wgmma-window')
                                keep in flight, 2 by default: a tuning experiment, read per call
  CAUSALCONV_CONSUMER_SKEW=N    taps the TMA forwards' first consumer warpgroup runs ahead of the
                                second, 0 by default: a tuning experiment, read per call
  CAUSALCONV_WGRAD_TILE=3,1     taps per tile and 64-channel blocks of the 16-bit weight gradient
                                (MN-major x) instead of its cost model's, or 'columns' for the
                                model that counts MMA columns alone (before v19): a tuning
                                experiment, read per call
  CAUSALCONV_CHANNEL_SPLIT=0    keep the fp32 TMA forward from splitting a small grid's input
                                channels over several blocks per tile: a tuning experiment, read
                                per call
"""

from __future__ import annotations

import hashlib
import os
import sys
import threading
import time
from pathlib import Path

import torch

_lock = threading.Lock()
_module = None
_error: str | None = None

_SOURCES = ("bindings.cpp", "autograd.cpp", "dispatch.cu", "fwd_generic.cu", "fwd_depthwise.cu", "fwd_tc.cu", "fwd_tma.cu", "fwd_rs.cu",
            "fwd_tc_f32.cu", "fwd_tc_bf16.cu", "fwd_tc_f16.cu", "wgrad_generic.cu", "wgrad_depthwise.cu", "wgrad_tc.cu",
            "wgrad_rs.cu", "split_reduce.cu", "weight_flip.cu", "scratch.cu", "tensor_map.cu")


def _flag(name: str) -> bool:
    return os.environ.get(name, "").strip().lower() not in ("", "0", "false", "no")


def disabled() -> bool:
    return _flag("CAUSALCONV_DISABLE_CUDA")


def kernel_dir() -> Path:
    """Where the .cu sources are: the repository's kernels/ or the installed copy."""
    here = Path(__file__).resolve().parent
    for candidate in (here.parent / "kernels", here / "kernels"):
        if (candidate / "dispatch.cu").is_file():
            return candidate
    raise RuntimeError(f"causalconv: CUDA sources not found next to {here} (looked for kernels/dispatch.cu)")


def target_archs() -> list[str]:
    """Targets such as '9.0a' or '8.6': CAUSALCONV_CUDA_ARCH, else every visible GPU."""
    env = os.environ.get("CAUSALCONV_CUDA_ARCH", "").strip()
    if env:
        return sorted({a.strip() for a in env.split(",") if a.strip()})
    archs = set()
    for i in range(torch.cuda.device_count()):
        major, minor = torch.cuda.get_device_capability(i)
        archs.add(f"{major}.{minor}a" if (major, minor) == (9, 0) else f"{major}.{minor}")
    if not archs:
        raise RuntimeError("causalconv: no CUDA device visible; set CAUSALCONV_CUDA_ARCH to build without one")
    return sorted(archs)


def nvcc_flags(archs: list[str]) -> list[str]:
    flags = ["-O3", "--expt-relaxed-constexpr", "-lineinfo"]
    for a in archs:
        num = a.replace(".", "")
        flags.append(f"-gencode=arch=compute_{num},code=sm_{num}")
    if "9.0a" in archs:
        flags.append("-DCAUSALCONV_SM90A_BUILT")
    return flags


def load():
    """The compiled extension module, building it if needed."""
    global _module, _error
    if _module is not None:
        return _module
    with _lock:
        if _module is not None:
            return _module
        if _error is not None:
            raise RuntimeError(_error)
        from torch.utils import cpp_extension

        src = kernel_dir()
        archs = target_archs()
        sources = [str(src / s) for s in _SOURCES]
        tag = hashlib.sha1(",".join(archs).encode()).hexdigest()[:8]
        name = f"causalconv_kernels_{tag}"
        verbose = _flag("CAUSALCONV_VERBOSE_BUILD")
        start = time.perf_counter()
        # One status line, completed with the elapsed time (compiler output, when
        # CAUSALCONV_VERBOSE_BUILD=1, starts on its own line).
        print(f"causalconv: loading CUDA kernels for {', '.join('sm_' + a.replace('.', '') for a in archs)} "
              "(compiled on first use, then cached)...", end="\n" if verbose else "", file=sys.stderr, flush=True)
        try:
            # The -gencode flags name every target, so torch adds none of its own.
            _module = cpp_extension.load(
                name=name,
                sources=sources,
                extra_cflags=["-O3"],
                extra_cuda_cflags=nvcc_flags(archs),
                extra_include_paths=[str(src)],
                verbose=verbose,
            )
        except Exception as exc:  # noqa: BLE001 - any build failure is reported the same way
            print(" failed", file=sys.stderr, flush=True)
            _error = (f"causalconv: building the CUDA kernels failed ({type(exc).__name__}: "
                      f"{str(exc).strip().splitlines()[-1] if str(exc).strip() else 'no message'}). "
                      "Rerun with CAUSALCONV_VERBOSE_BUILD=1 to see the compiler output, or set "
                      "CAUSALCONV_DISABLE_CUDA=1 to use the PyTorch path.")
            raise RuntimeError(_error) from exc
        print(f" ready in {time.perf_counter() - start:.1f} s", file=sys.stderr, flush=True)
        return _module


def reset_for_tests() -> None:
    """Forget a loaded module or a cached failure (tests only)."""
    global _module, _error
    with _lock:
        _module = None
        _error = None
