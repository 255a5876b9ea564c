#!/usr/bin/env bash
# One device call for the tile-end experiment (NOTES v23): do the persistent forwards lose
# time because every block ends its tiles at the same moment?  Build; the GPU tests of the
# Stream-K modes under a short limit (a head waiting for a tail that never comes shows as a
# hang); the forward (ab_forward.py) on the default problem, 8x1024 and 32x256->512 with
# CAUSALCONV_STREAM_K 0 (whole tiles) and 2 (every tile shared out: staggered tile ends, no
# short last wave) alternating, nvidia-smi sampling the clock and power meanwhile.  Then the
# call keeps mode 2 only if it beat whole tiles on the default problem in fp32 and bf16
# (scripts/pick_stream_k.py; its verdict in $OUT/decision.txt), else sets
# CAUSALCONV_STREAM_K=0 for the rest: the benchmark, the whole suite and memcheck over the
# sm_90a kernels, in that order, so that a call cut off by its time limit still returns the
# first.  Logs, smi.csv and h200.json under $OUT.
#   [TILE_END_SHAPES="B,Cin,Cout,K,d,L ..."] [BENCH_ARGS=--quick] scripts/ab_tile_ends.sh
set -uo pipefail
cd "$(dirname "$0")/.."
export OUT=${OUT:-/tmp/causalconv-out}
mkdir -p "$OUT"
STEPS="env build" STEP_TIMEOUT=150 TAIL=6 scripts/device_check.sh || exit 1
STEPS=tests PYTEST_K="stream_k" PYTEST_ARGS="tests/test_gpu_forward.py" STEP_TIMEOUT=100 TAIL=10 \
  scripts/device_check.sh
cp "$OUT/tests.log" "$OUT/tests_stream_k.log"
nvidia-smi --query-gpu=timestamp,clocks.sm,power.draw,clocks_event_reasons.active --format=csv -lms 250 \
  > "$OUT/smi.csv" 2>&1 &
smi=$!
shapes=${TILE_END_SHAPES:-"32,256,256,4,1,8192 8,1024,1024,4,1,4096 32,256,512,4,1,8192"}
off=auto@CAUSALCONV_STREAM_K=0 all=auto@CAUSALCONV_STREAM_K=2
AB_CASES=float32:tf32,bfloat16:tf32,float16:tf32 AB_SHAPES="$shapes" STEP_TIMEOUT=150 TAIL=10 STEPS=ab \
  AB_KERNELS="$off,$all,$off,$all" scripts/device_check.sh
kill $smi
python3 scripts/pick_stream_k.py "$OUT/steps.log" > "$OUT/decision.txt"
cat "$OUT/decision.txt"
mode=$(tail -n 1 "$OUT/decision.txt")
case $mode in 0|2) ;; *) echo "no verdict (ab step cut off?): whole tiles"; mode=0 ;; esac
export CAUSALCONV_STREAM_K=$mode
STEPS=bench STEP_TIMEOUT=170 TAIL=70 scripts/device_check.sh
STEPS=tests STEP_TIMEOUT=220 TAIL=15 scripts/device_check.sh
STEPS=memcheck SANITIZE_KERNELS=wgmma,wgmma-window STEP_TIMEOUT=70 TAIL=6 scripts/device_check.sh
