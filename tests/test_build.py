"""The JIT loader: failures are explained and cached, sources ship with the package, and the
kernels compile where nvcc and a CUDA build of torch exist (no GPU needed)."""

import os
import shutil
import subprocess
import sys
import zipfile
from pathlib import Path

import pytest
import torch

from causalconv import _build

ROOT = Path(__file__).resolve().parent.parent


def test_failed_build_is_explained_and_not_retried(monkeypatch):
    from torch.utils import cpp_extension

    calls = []

    def failing_load(**kwargs):
        calls.append(kwargs["name"])
        raise RuntimeError("Error building extension 'causalconv_kernels': nvcc exploded")

    monkeypatch.setattr(cpp_extension, "load", failing_load)
    monkeypatch.setenv("CAUSALCONV_CUDA_ARCH", "9.0a")
    _build.reset_for_tests()
    try:
        for _ in range(3):
            with pytest.raises(RuntimeError, match="CAUSALCONV_VERBOSE_BUILD=1") as info:
                _build.load()
            assert "nvcc exploded" in str(info.value)
        assert len(calls) == 1, "a failed build must not be retried on every call"
    finally:
        _build.reset_for_tests()


def test_disable_switch(monkeypatch):
    monkeypatch.setenv("CAUSALCONV_DISABLE_CUDA", "1")
    assert _build.disabled()
    monkeypatch.setenv("CAUSALCONV_DISABLE_CUDA", "0")
    assert not _build.disabled()


def test_arch_flags():
    flags = _build.nvcc_flags(["8.0", "9.0a"])
    assert "-gencode=arch=compute_90a,code=sm_90a" in flags
    assert "-gencode=arch=compute_80,code=sm_80" in flags
    assert "-DCAUSALCONV_SM90A_BUILT" in flags
    assert "-DCAUSALCONV_SM90A_BUILT" not in _build.nvcc_flags(["8.6"])


def test_every_source_is_listed_and_present():
    kdir = _build.kernel_dir()
    for name in _build._SOURCES:
        assert (kdir / name).is_file(), name
    compiled = {p.name for p in kdir.glob("*.cu")} | {p.name for p in kdir.glob("*.cpp")}
    assert compiled == set(_build._SOURCES), "kernels/ and _build._SOURCES disagree"


def test_kernel_checks_format_their_own_numbers():
    """Every check in kernels/ goes through CAUSALCONV_CHECK (check.h), whose messages never
    send a number through std::ostream: on the GPU hosts a TORCH_CHECK message holding a
    number segfaulted inside the extension instead of raising (check.h says why)."""
    kdir = _build.kernel_dir()
    offenders = [f"{p.name}:{i}" for p in sorted(kdir.iterdir()) if p.suffix in (".cu", ".cuh", ".h", ".cpp")
                 and p.name != "check.h" for i, line in enumerate(p.read_text().splitlines(), 1)
                 if "TORCH_CHECK" in line or "TORCH_INTERNAL_ASSERT" in line or "c10::str(" in line]
    assert not offenders, f"use CAUSALCONV_CHECK instead: {offenders}"


def test_wheel_ships_kernel_sources(tmp_path):
    """A non-editable install must carry the .cu sources the loader compiles."""
    subprocess.run([sys.executable, "-m", "pip", "wheel", "--no-deps", "--no-build-isolation", "-q", "-w",
                    str(tmp_path), str(ROOT)], check=True)
    wheel = next(tmp_path.glob("causalconv-*.whl"))
    names = set(zipfile.ZipFile(wheel).namelist())
    for src in list(_build._SOURCES) + ["common.cuh", "launchers.h", "wgmma_ops.cuh"]:
        assert f"causalconv/kernels/{src}" in names, src


def _can_compile() -> bool:
    cuda_home = os.environ.get("CUDA_HOME", "/usr/local/cuda")
    nvcc = shutil.which("nvcc") or (Path(cuda_home) / "bin" / "nvcc")
    return torch.version.cuda is not None and Path(nvcc).exists()


@pytest.mark.build
@pytest.mark.skipif(torch.cuda.is_available(), reason="with a GPU the GPU tests build the kernels")
@pytest.mark.skipif(not _can_compile(), reason="needs nvcc and a CUDA build of torch")
def test_kernels_compile_without_gpu(tmp_path):
    env = dict(os.environ, CAUSALCONV_CUDA_ARCH="9.0a,8.0", TORCH_EXTENSIONS_DIR=str(tmp_path))
    env.setdefault("CUDA_HOME", "/usr/local/cuda")
    code = ("from causalconv import _build; m = _build.load(); "
            "print(' '.join(sorted(n for n in dir(m) if not n.startswith('_'))))")
    out = subprocess.run([sys.executable, "-c", code], env=env, capture_output=True, text=True, timeout=3000)
    assert out.returncode == 0, out.stderr[-4000:]
    names = set(out.stdout.split())
    assert {"forward", "input_grad", "weight_grad", "has_wgmma", "launch_counts"} <= names, out.stdout
