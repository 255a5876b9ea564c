#!/usr/bin/env bash
# One device call for the experiments switched at run time rather than built apart: the
# raw-window TF32 kernels ('wgmma-window'), their fragment depth (CAUSALCONV_FRAGMENT_DEPTH)
# and the TMA forwards' consumer skew (CAUSALCONV_CONSUMER_SKEW).  Builds once; smoke-runs
# each new path on one shape under a short time limit (probe_mismatch.py: a hang or a wrong
# result shows there, and a hung path is left out of the rest); times each setting beside
# the default (ab_forward.py also prints each kernel's error against float64); then runs
# the GPU tests that cover the knobs and compute-sanitizer on the wgmma kernels, so that a
# call cut off by its time limit still returns the timings.  (In 16-bit 'wgmma-window' runs
# the TMA kernel again: a measure of the timing noise.)  Logs under $OUT (steps.log,
# tests.log).  ~8-9 minutes on an H200.
#   scripts/ab_knobs.sh            (SKEWS="0 2 4 8" to time several skews; default "0 4")
set -uo pipefail
cd "$(dirname "$0")/.."
export OUT=${OUT:-/tmp/causalconv-out} STEP_TIMEOUT=${STEP_TIMEOUT:-240} TAIL=${TAIL:-40}
mkdir -p "$OUT"
PY=${PY:-python3}
mark() { echo "##### setting: $*" >> "$OUT/steps.log"; echo "##### setting: $*"; }
smoke() {  # label, then the environment (NAME=value ...) to run the probe in
  local label=$1; shift
  mark "smoke: $label"
  env "$@" timeout 90 $PY scripts/probe_mismatch.py 2,256,256,4,1,1024 >> "$OUT/steps.log" 2>&1
  local rc=$?
  echo "smoke $label: exit $rc" | tee -a "$OUT/steps.log"
  return $rc
}

STEPS="env build" scripts/device_check.sh || exit 1
window=wgmma-window
smoke "raw-window kernels" PROBE_KERNEL=wgmma-window || window=""
smoke "raw-window kernels, depth 4" PROBE_KERNEL=wgmma-window CAUSALCONV_FRAGMENT_DEPTH=4 || true
skews=${SKEWS:-0 4} test_skew=4
smoke "TMA forward, skew 4" PROBE_KERNEL=wgmma CAUSALCONV_CONSUMER_SKEW=4 || { skews=0; test_skew=0; }
[ -n "$window" ] || echo "raw-window kernels failed their smoke run: left out of the timings" | tee -a "$OUT/steps.log"

export BD_DTYPES=float32 BD_KERNELS=auto${window:+,$window} AB_KERNELS=wgmma${window:+,$window} AB_CASES=float32:tf32
mark "defaults (fragment depth 2, skew 0)"
STEPS="ab breakdown" scripts/device_check.sh
if [ -n "$window" ]; then
  mark "CAUSALCONV_FRAGMENT_DEPTH=4"
  CAUSALCONV_FRAGMENT_DEPTH=4 STEPS="ab breakdown" scripts/device_check.sh
fi
for skew in $skews; do
  mark "CAUSALCONV_CONSUMER_SKEW=$skew"
  CAUSALCONV_CONSUMER_SKEW=$skew AB_CASES=float32:tf32,bfloat16:tf32,float16:tf32 STEPS="ab" scripts/device_check.sh
done
# With a skew of 4 the sanitizers also cover the skewed forwards (skew 0 is v17's code).
mark "tests and sanitizers (CAUSALCONV_CONSUMER_SKEW=$test_skew where a test does not set it)"
CAUSALCONV_CONSUMER_SKEW=$test_skew STEPS="tests sanitize" PYTEST_ARGS="tests/test_gpu_forward.py tests/test_gpu_backward.py" \
  PYTEST_K="window or skew or depth or knobs" SANITIZE_KERNELS=wgmma,wgmma-window RACECHECK_KERNELS=wgmma,wgmma-window \
  scripts/device_check.sh
