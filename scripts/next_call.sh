#!/usr/bin/env bash
# The next device call, whichever card the device tool hands out (H200s are rare: in the last
# two sessions every call that started got an H100):
# - on an H200, the publish: with LONG=1 (about 560 s) scripts/ab_decide.sh with v32's A/B
#   (CAUSALCONV_RS_MULTICAST), else the committed defaults: benchmark, whole suite, memcheck
#   over the sm_90a and depthwise kernels (about 450 s);
# - on an H100, the verification of the committed code: the depthwise tests, the depthwise
#   benchmark (the opt-in register kernels against the staged ones and cuDNN), memcheck over
#   the CUDA-core families with the register kernels on, then the whole suite.
# Logs and h200.json under $OUT.   [LONG=1] scripts/next_call.sh
set -uo pipefail
cd "$(dirname "$0")/.."
export OUT=${OUT:-/tmp/causalconv-out}
mkdir -p "$OUT"
if nvidia-smi --query-gpu=name --format=csv,noheader | grep -q H200; then
  if [ "${LONG:-0}" = 1 ]; then
    BASE=CAUSALCONV_RS_MULTICAST=0 CAND=CAUSALCONV_RS_MULTICAST=1 PYTEST_K=multicast AB_CASES=float32:tf32 \
      DECIDE=tf32 RACECHECK_KERNELS=wgmma-window scripts/ab_decide.sh
    exit
  fi
  STEPS="env build" STEP_TIMEOUT=150 TAIL=6 scripts/device_check.sh || exit 1
  STEPS=bench STEP_TIMEOUT=200 TAIL=70 scripts/device_check.sh
  STEPS=tests STEP_TIMEOUT=250 TAIL=15 scripts/device_check.sh
  STEPS=memcheck SANITIZE_KERNELS=wgmma,wgmma-window,depthwise STEP_TIMEOUT=70 TAIL=6 scripts/device_check.sh
  exit
fi
STEPS="env build" STEP_TIMEOUT=150 TAIL=6 scripts/device_check.sh || exit 1
STEPS=tests PYTEST_K=depthwise PYTEST_ARGS="tests/test_gpu_forward.py tests/test_gpu_backward.py" STEP_TIMEOUT=90 \
  TAIL=8 scripts/device_check.sh
cp "$OUT/tests.log" "$OUT/tests-depthwise.log"
STEPS=depthwise STEP_TIMEOUT=90 TAIL=30 scripts/device_check.sh
CAUSALCONV_DEPTHWISE_REGISTERS=1 STEPS=memcheck SANITIZE_KERNELS=depthwise,generic STEP_TIMEOUT=90 TAIL=6 \
  scripts/device_check.sh
STEPS=tests STEP_TIMEOUT=270 TAIL=15 scripts/device_check.sh
