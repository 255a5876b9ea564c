#!/usr/bin/env bash
# One device call for the tile-end experiment (NOTES v23): do the persistent forwards lose
# time because every block ends its tiles at the same moment?  Build; the GPU tests of the
# Stream-K modes and knobs under a short limit (a head waiting for a tail that never comes
# shows as a hang); the forward (ab_forward.py) on the default problem, 8x1024 and
# 32x256->512 with CAUSALCONV_STREAM_K 0 (whole tiles, the default) and 2 (every tile
# shared out: staggered tile ends, no short last wave), fp32 also with 1 (last waves only)
# and with half the blocks started late (CAUSALCONV_STAGGER_NS), nvidia-smi sampling the
# clock and power meanwhile; the backward of 3x96->160 with dependent launch off and on
# (cec9ecd's two-stream reductions); then with the defaults the benchmark, the whole suite,
# and memcheck over the sm_90a kernels with and without mode 2, in that order, so that a
# call cut off by its time limit still returns the first.  Logs, smi.csv and h200.json
# under $OUT.  If mode 2 wins, make it the default in tc_common.cuh's stream_k_mode() and
# benchmark again.
#   scripts/ab_tile_ends.sh
set -uo pipefail
cd "$(dirname "$0")/.."
export OUT=${OUT:-/tmp/causalconv-out}
mkdir -p "$OUT"
STEPS="env build" STEP_TIMEOUT=150 TAIL=6 scripts/device_check.sh || exit 1
STEPS=tests PYTEST_K="stream_k or knobs" PYTEST_ARGS="tests/test_gpu_forward.py" STEP_TIMEOUT=100 TAIL=10 \
  scripts/device_check.sh
cp "$OUT/tests.log" "$OUT/tests_knobs.log"
nvidia-smi --query-gpu=timestamp,clocks.sm,power.draw,clocks_event_reasons.active --format=csv -lms 250 \
  > "$OUT/smi.csv" 2>&1 &
smi=$!
shapes="32,256,256,4,1,8192 8,1024,1024,4,1,4096 32,256,512,4,1,8192"
off=auto@CAUSALCONV_STREAM_K=0 all=auto@CAUSALCONV_STREAM_K=2
AB_CASES=float32:tf32 AB_SHAPES="$shapes" STEP_TIMEOUT=100 TAIL=10 STEPS=ab \
  AB_KERNELS="$off,$all,auto@CAUSALCONV_STREAM_K=1,$off+CAUSALCONV_STAGGER_NS=15000+CAUSALCONV_STAGGER_SHORT=1,$off,$all" \
  scripts/device_check.sh
AB_CASES=bfloat16:tf32,float16:tf32 AB_SHAPES="$shapes" STEP_TIMEOUT=100 TAIL=10 STEPS=ab \
  AB_KERNELS="$off,$all,$off+CAUSALCONV_STAGGER_NS=6500,$off,$all" scripts/device_check.sh
kill $smi
AB_CASES=float32:ieee,bfloat16:tf32 AB_SHAPES="3,96,160,5,3,1000" STEP_TIMEOUT=60 TAIL=6 \
  AB_SETTINGS=CAUSALCONV_PDL=0,CAUSALCONV_PDL=1,CAUSALCONV_PDL=0,CAUSALCONV_PDL=1 STEPS=ab_backward \
  scripts/device_check.sh
STEPS=bench STEP_TIMEOUT=150 TAIL=70 scripts/device_check.sh
STEPS=tests STEP_TIMEOUT=200 TAIL=15 scripts/device_check.sh
STEPS=memcheck SANITIZE_KERNELS=wgmma,wgmma-window STEP_TIMEOUT=60 TAIL=6 scripts/device_check.sh
CAUSALCONV_STREAM_K=2 STEPS=memcheck SANITIZE_KERNELS=wgmma,wgmma-window STEP_TIMEOUT=60 TAIL=6 \
  scripts/device_check.sh
