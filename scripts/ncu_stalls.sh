#!/usr/bin/env bash
# Where one kernel's warps stall, per SASS line (ncu source page) plus the summary sections:
#   OUT=dir scripts/ncu_stalls.sh KERNEL_REGEX fwd|bwd float32|bfloat16 [B,Cin,Cout,K,d,L]
# scripts/ncu_summary.py reads the per-line CSV.
set -uo pipefail
cd "$(dirname "$0")/.."
OUT=${OUT:-/tmp/causalconv-out}
tag="$2_$3"
common=(--clock-control none -k "regex:$1" --launch-skip 2 --launch-count 1)
ncu "${common[@]}" --section SpeedOfLight --section WarpStateStats --section MemoryWorkloadAnalysis \
  --section ComputeWorkloadAnalysis --section SchedulerStats --section LaunchStats \
  python3 scripts/profile_case.py "$2" "$3" ${4:-} > "$OUT/ncu_$tag.txt" 2>&1
ncu "${common[@]}" --section SourceCounters --section WarpStateStats --page source --print-source sass --csv \
  python3 scripts/profile_case.py "$2" "$3" ${4:-} > "$OUT/ncu_src_$tag.csv" 2>&1
