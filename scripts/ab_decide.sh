#!/usr/bin/env bash
# One device call that decides between two settings of a run-time knob and benchmarks the
# one it keeps, so that a single call both measures an experiment and publishes its outcome.
# Build; the GPU tests that exercise the knob (PYTEST_K in PYTEST_FILES, by default
# tests/test_gpu_forward.py, under a short limit: a hang shows there); the forward
# (ab_forward.py; with AB=backward the backward, ab_backward.py) on the default problem,
# 8x1024 and 32x256->512 in fp32,
# bf16 and fp16 (AB_CASES) with BASE and CAND alternating, nvidia-smi sampling the clock and
# power meanwhile; scripts/pick_setting.py keeps CAND only if it beat BASE by 1% on the
# default problem (or DECIDE_SHAPE) in every case of DECIDE (default fp32 and bf16; its verdict in
# $OUT/decision.txt); then, with the kept setting
# exported, the benchmark, the whole suite and memcheck over the sm_90a and depthwise kernels (and, with
# RACECHECK_KERNELS, memcheck and racecheck over those), in that order, so that a call cut
# off by its time limit still returns the first.  Logs, smi.csv
# and h200.json under $OUT.  Settings as ab_forward.py spells them: NAME=value+NAME2=value.
#   BASE=CAUSALCONV_STAGGER_NS=0 CAND=CAUSALCONV_STAGGER_NS=half PYTEST_K=stagger \
#     [AB_SHAPES="B,Cin,Cout,K,d,L ..."] [AB_CASES=bfloat16:tf32,float16:tf32]
#     [DECIDE=bfloat16,float16] [DECIDE_SHAPE=16,64,64,2,512,16384] [BENCH_ARGS=--quick] scripts/ab_decide.sh
set -uo pipefail
cd "$(dirname "$0")/.."
: "${BASE:?the baseline setting, e.g. CAUSALCONV_STAGGER_NS=0}" "${CAND:?the candidate setting}"
export OUT=${OUT:-/tmp/causalconv-out}
mkdir -p "$OUT"
STEPS="env build" STEP_TIMEOUT=150 TAIL=6 scripts/device_check.sh || exit 1
if [ -n "${PYTEST_K:-}" ]; then
  STEPS=tests PYTEST_ARGS="${PYTEST_FILES:-tests/test_gpu_forward.py}" STEP_TIMEOUT=100 TAIL=10 scripts/device_check.sh
  cp "$OUT/tests.log" "$OUT/tests_knob.log"
fi
nvidia-smi --query-gpu=timestamp,clocks.sm,power.draw,clocks_event_reasons.active --format=csv -lms 250 \
  > "$OUT/smi.csv" 2>&1 &
smi=$!
shapes=${AB_SHAPES:-"32,256,256,4,1,8192 8,1024,1024,4,1,4096 32,256,512,4,1,8192"}
base=auto@$BASE cand=auto@$CAND
if [ "${AB:-forward}" = backward ]; then  # ab_backward.py names the settings alone
  AB_CASES=${AB_CASES:-float32:tf32,bfloat16:tf32} AB_SHAPES="$shapes" STEP_TIMEOUT=200 TAIL=10 STEPS=ab_backward \
    AB_SETTINGS="$BASE,$CAND,$BASE,$CAND" scripts/device_check.sh
else
  AB_CASES=${AB_CASES:-float32:tf32,bfloat16:tf32,float16:tf32} AB_SHAPES="$shapes" STEP_TIMEOUT=150 TAIL=10 STEPS=ab \
    AB_KERNELS="$base,$cand,$base,$cand" scripts/device_check.sh
fi
kill $smi
python3 scripts/pick_setting.py "$OUT/steps.log" "$BASE" "$CAND" "${DECIDE:-tf32,bfloat16}" > "$OUT/decision.txt"
cat "$OUT/decision.txt"
kept=$(tail -n 1 "$OUT/decision.txt")
[ "$kept" = "$CAND" ] || kept=$BASE  # no verdict (the ab step cut off?) keeps the baseline
# A candidate whose own tests failed (or did not finish) is not kept, however fast.
summary=$(grep -E "^=* ?[0-9]+ [a-z]+.* in [0-9.]+s" "$OUT/tests_knob.log" 2>/dev/null | tail -n 1 | sed -E 's/^=+ //')
if [ -n "${PYTEST_K:-}" ] && { ! [[ $summary =~ ^[0-9]+\ passed ]] || [[ $summary =~ failed|error ]]; }; then
  echo "the knob's tests did not pass: keeping $BASE"
  kept=$BASE
fi
echo "kept: $kept"
IFS=+ read -ra assignments <<< "$kept"
for a in "${assignments[@]}"; do export "${a?}"; done
STEPS=bench STEP_TIMEOUT=170 TAIL=70 scripts/device_check.sh
# The whole suite took 225-235 s on an H100 before v34 and v35 added two tests (a few seconds).
PYTEST_K= STEPS=tests STEP_TIMEOUT=${SUITE_TIMEOUT:-270} TAIL=15 scripts/device_check.sh
STEPS=memcheck SANITIZE_KERNELS=wgmma,wgmma-window,depthwise STEP_TIMEOUT=70 TAIL=6 scripts/device_check.sh
# With RACECHECK_KERNELS set (e.g. wgmma-window), racecheck over those kernels with the kept setting.
if [ -n "${RACECHECK_KERNELS:-}" ]; then
  STEPS=sanitize SANITIZE_KERNELS=$RACECHECK_KERNELS STEP_TIMEOUT=120 TAIL=6 scripts/device_check.sh
fi
