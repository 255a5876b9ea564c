"""What the sources say in two places stays the same in both: every environment variable the
package or its kernels read is documented in the README's Environment table (and nothing
documented there is gone from the code), and the Python lists of kernel families match the
families the extension counts."""

import re
from pathlib import Path

import helpers
from causalconv import bench

ROOT = Path(__file__).resolve().parent.parent
VAR = re.compile(r"CAUSALCONV_[A-Z0-9_]+")


def _read_in_code() -> set:
    names = set()
    for path in list((ROOT / "kernels").iterdir()) + list((ROOT / "causalconv").glob("*.py")):
        if path.suffix in (".cu", ".cuh", ".h", ".cpp", ".py"):
            names |= set(re.findall(r'"(CAUSALCONV_[A-Z0-9_]+)"', path.read_text()))
    return names


def _documented() -> set:
    readme = (ROOT / "README.md").read_text()
    section = readme.split("## Environment", 1)[1].split("\n## ", 1)[0]
    return {m for line in section.splitlines() if line.startswith("| `") for m in VAR.findall(line)}


def test_environment_variables_are_documented():
    code, docs = _read_in_code(), _documented()
    assert code, "no CAUSALCONV_* variable found in the sources: the scan is broken"
    assert code - docs == set(), f"read by the code but missing from the README's Environment table: {code - docs}"
    assert docs - code == set(), f"documented in the README but read nowhere: {docs - code}"


def test_kernel_family_names_match_the_extension():
    header = (ROOT / "kernels" / "dispatch.h").read_text()
    enum = header.split("enum class KernelKind", 1)[1].split("};", 1)[0]
    kinds = re.findall(r"^\s*k(\w+)", enum, re.M)
    declared = int(re.search(r"kNumKernelKinds = (\d+);", header).group(1))
    assert len(kinds) == declared, f"KernelKind lists {kinds}, kNumKernelKinds says {declared}"
    assert bench.KERNEL_NAMES == helpers.KERNEL_NAMES
    assert len(bench.KERNEL_NAMES) == declared, f"{bench.KERNEL_NAMES} against {kinds}"
    snake = [re.sub(r"(?<!^)(?=[A-Z])", "_", k).lower() for k in kinds]
    expected = [s.replace("fwd_", "") for s in snake]
    assert bench.KERNEL_NAMES == expected, f"{bench.KERNEL_NAMES} against the enum's {expected}"
