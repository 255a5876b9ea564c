"""The CPU replays of the kernels' plans and index arithmetic (scripts/emulate_*.py), each
against direct sums or its own invariants: they need no GPU, so every run of the suite, CI's
included, checks them.  A replay mirrors its kernel by hand, so this keeps the scripts
runnable and their checks passing as they are edited with the kernels; it says nothing about
the CUDA itself, which the GPU tests check."""

import subprocess
import sys
from pathlib import Path

import pytest

SCRIPTS = sorted((Path(__file__).resolve().parent.parent / "scripts").glob("emulate_*.py"))


def test_the_replays_are_found():
    names = {p.stem for p in SCRIPTS}
    assert {"emulate_fwd_depthwise", "emulate_wgrad_depthwise", "emulate_window_kernels", "emulate_stream_k",
            "emulate_wgrad_generic"} <= names, names


@pytest.mark.parametrize("script", SCRIPTS, ids=lambda p: p.stem)
def test_replay_matches_direct_sums(script):
    pytest.importorskip("numpy")  # a test dependency (pyproject's "test" extra), not the package's
    run = subprocess.run([sys.executable, str(script)], capture_output=True, text=True, timeout=600)
    assert run.returncode == 0, f"{script.name} failed:\n{run.stdout[-3000:]}\n{run.stderr[-3000:]}"
