#!/usr/bin/env bash
# One device call for dependent launch (CAUSALCONV_PDL, default on): build; the GPU tests
# that switch it, under a short limit (a follower that never sees its predecessor finish
# shows as a hang); the forward (ab_forward.py) and the backward (ab_backward.py) with it
# off and on, alternating, twice, in one process each; then with the defaults the
# benchmark, the whole suite and compute-sanitizer's memcheck over the sm_90a kernels, in
# that order, so that a call cut off by its time limit still returns the first.  Logs and
# h200.json under $OUT.  ~8-9 minutes on an H100.
#   scripts/ab_pdl.sh
set -uo pipefail
cd "$(dirname "$0")/.."
export OUT=${OUT:-/tmp/causalconv-out}
mkdir -p "$OUT"
STEPS="env build" STEP_TIMEOUT=150 TAIL=6 scripts/device_check.sh || exit 1
STEPS=tests PYTEST_K="dependent or knobs" PYTEST_ARGS="tests/test_gpu_forward.py tests/test_gpu_backward.py" \
  STEP_TIMEOUT=150 TAIL=25 scripts/device_check.sh
cp "$OUT/tests.log" "$OUT/tests_knobs.log"
shapes="32,256,256,4,1,8192 8,1024,1024,4,1,4096 32,128,128,7,4,4096 4,512,512,3,1,2048 3,96,160,5,3,1000 1,256,256,4,1,64"
AB_CASES=float32:tf32,float32:ieee,bfloat16:tf32 AB_SHAPES="$shapes" STEP_TIMEOUT=150 TAIL=20 \
  AB_KERNELS=auto@CAUSALCONV_PDL=0,auto@CAUSALCONV_PDL=1,auto@CAUSALCONV_PDL=0,auto@CAUSALCONV_PDL=1 STEPS=ab \
  scripts/device_check.sh
AB_CASES=float32:tf32,float32:ieee,bfloat16:tf32 AB_SHAPES="$shapes" STEP_TIMEOUT=150 TAIL=20 \
  AB_SETTINGS=CAUSALCONV_PDL=0,CAUSALCONV_PDL=1,CAUSALCONV_PDL=0,CAUSALCONV_PDL=1 STEPS=ab_backward \
  scripts/device_check.sh
STEPS=bench STEP_TIMEOUT=150 TAIL=70 scripts/device_check.sh
STEPS=tests STEP_TIMEOUT=250 TAIL=15 scripts/device_check.sh
STEPS=memcheck SANITIZE_KERNELS=wgmma,wgmma-window STEP_TIMEOUT=120 TAIL=6 scripts/device_check.sh
