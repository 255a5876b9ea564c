#!/usr/bin/env bash
# One device call for v21's two opt-in paths, Stream-K in the raw-window fp32 forward
# (CAUSALCONV_STREAM_K) and dependent launch of the TMA forwards (CAUSALCONV_PDL): build;
# their GPU tests under a short limit (a broken flag hand-off shows as a hang); each setting
# timed beside both off in one process, twice; then with both on the benchmark, the whole
# suite, and compute-sanitizer (memcheck, racecheck) over the raw-window kernels, in that
# order, so that a call cut off by its time limit still returns the first.  Logs and
# h200.json under $OUT.  ~7 minutes on an H100, the sanitizers ~2-3 more.
#   scripts/ab_stream_k.sh
set -uo pipefail
cd "$(dirname "$0")/.."
export OUT=${OUT:-/tmp/causalconv-out}
mkdir -p "$OUT"
STEPS="env build" STEP_TIMEOUT=150 TAIL=6 scripts/device_check.sh || exit 1
STEPS=tests PYTEST_K="stream_k or dependent or knobs" PYTEST_ARGS="tests/test_gpu_forward.py" STEP_TIMEOUT=120 \
  TAIL=25 scripts/device_check.sh
cp "$OUT/tests.log" "$OUT/tests_knobs.log"
off="auto@CAUSALCONV_STREAM_K=0+CAUSALCONV_PDL=0"
sk="auto@CAUSALCONV_STREAM_K=1+CAUSALCONV_PDL=0"
both="auto@CAUSALCONV_STREAM_K=1+CAUSALCONV_PDL=1"
AB_CASES=float32:tf32,bfloat16:tf32,float16:tf32 AB_KERNELS="$off,$sk,$both,$off,$sk,$both" \
  AB_SHAPES="32,256,256,4,1,8192 32,256,512,4,1,8192 8,1024,1024,4,1,4096 32,128,128,7,4,4096" \
  STEPS=ab STEP_TIMEOUT=150 TAIL=14 scripts/device_check.sh
export CAUSALCONV_STREAM_K=1 CAUSALCONV_PDL=1
STEPS=bench STEP_TIMEOUT=150 TAIL=70 scripts/device_check.sh
STEPS=tests STEP_TIMEOUT=250 TAIL=15 scripts/device_check.sh
SANITIZE_KERNELS=wgmma-window RACECHECK_KERNELS=wgmma-window STEPS=sanitize STEP_TIMEOUT=150 TAIL=6 \
  scripts/device_check.sh
