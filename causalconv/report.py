"""Chart (PNG, needs matplotlib: the [plot] extra) and markdown tables from a benchmark JSON,
so the README shows exactly what a run measured."""

from __future__ import annotations

import json
import sys
from pathlib import Path


def _shape(r: dict) -> str:
    return f"{r['B']}x{r['C_in']}→{r['C_out']} K{r['K']} d{r['dilation']} L{r['L']}"


def markdown(data: dict) -> str:
    env, ceil = data["environment"], data["ceilings"]
    lines = [f"Measured on {env['device']}, torch {env['torch']}, CUDA {env['cuda']}, cuDNN {env['cudnn']}, "
             f"{env['date'][:10]}. Ceilings measured in the same run: TF32 GEMM {ceil['tf32_tflops']:.0f} TFLOP/s, "
             f"bf16 GEMM {ceil['bf16_tflops']:.0f} TFLOP/s.",
             "",
             "| case | shape | dtype | precision | direction | reference ms | causalconv ms | speedup | TFLOP/s | "
             "share of ceiling | max abs err vs ref | rel err vs fp64 |",
             "|---|---|---|---|---|---:|---:|---:|---:|---:|---:|---:|"]
    for r in data["rows"]:
        lines.append(f"| {r['case']} | {_shape(r)} | {r['dtype']} | {r['precision']} | {r['direction']} | "
                     f"{r['ref_ms']:.3f} | {r['ours_ms']:.3f} | {r['speedup']:.2f}x | {r['tflops']:.0f} | "
                     f"{100 * r['ceiling_share']:.0f}% | {r['max_abs_err_vs_ref']:.1e} | {r['rel_err_vs_fp64']:.1e} |")
    if data.get("summary"):
        lines += ["", "| summary | value |", "|---|---:|"]
        lines += [f"| {k} | {v:.2f}x |" for k, v in data["summary"].items()]
    return "\n".join(lines)


def chart(data: dict, png: Path) -> None:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    rows = [r for r in data["rows"] if r["case"] == "grid"]
    groups = [("fwd", "float32"), ("fwd", "bfloat16"), ("bwd", "float32"), ("bwd", "bfloat16")]
    shapes = list(dict.fromkeys(_shape(r) for r in rows))
    fig, ax = plt.subplots(figsize=(12, 5))
    width = 0.8 / len(groups)
    for i, (direction, dtype) in enumerate(groups):
        vals = {_shape(r): r["speedup"] for r in rows if r["direction"] == direction and r["dtype"] == dtype}
        xs = [j + i * width for j in range(len(shapes))]
        ax.bar(xs, [vals.get(s, 0) for s in shapes], width, label=f"{direction} {dtype}")
    ax.axhline(1.0, color="black", linewidth=0.8)
    ax.set_xticks([j + 0.4 - width / 2 for j in range(len(shapes))])
    ax.set_xticklabels(shapes, rotation=30, ha="right", fontsize=8)
    ax.set_ylabel("speedup over F.pad + nn.Conv1d (cuDNN)")
    ax.set_title(f"causalconv on {data['environment']['device']} (torch {data['environment']['torch']})")
    ax.legend()
    fig.tight_layout()
    fig.savefig(png, dpi=110)
    print(f"wrote {png}", file=sys.stderr)  # stdout carries only the markdown


def main(json_path: str, png: str | None = None) -> None:
    data = json.loads(Path(json_path).read_text())
    print(markdown(data))
    try:
        chart(data, Path(png) if png else Path(json_path).with_suffix(".png"))
    except ImportError:
        print("(matplotlib not installed: pip install 'causalconv[plot]' for the chart)", file=sys.stderr)
