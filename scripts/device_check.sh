#!/usr/bin/env bash
# Everything that needs the GPU, in one device call: environment, JIT build, the test
# suite, compute-sanitizer, the benchmark.  Logs and JSON go to $OUT.
#   STEPS="env build tests sanitize bench" PYTEST_ARGS="..." PYTEST_K="..." BENCH_ARGS="..." scripts/device_check.sh
# (PYTEST_ARGS is split on spaces; PYTEST_K is pytest's -k expression, passed whole.)
# Each step is cut off after STEP_TIMEOUT seconds (default 900), so a hang cannot take the
# rest of the run with it.
set -uo pipefail
cd "$(dirname "$0")/.."
OUT=${OUT:-/tmp/causalconv-out}
mkdir -p "$OUT"
export PYTHONUNBUFFERED=1 MAX_JOBS=${MAX_JOBS:-16}
export PYTHONPATH="$PWD${PYTHONPATH:+:$PYTHONPATH}"
[ -d .device/pydeps ] && export PYTHONPATH="$PWD/.device/pydeps:$PYTHONPATH"
PY=${PY:-python3}
STEPS=${STEPS:-"env build tests sanitize bench"}
declare -A status

# Each step's output goes to its own log under $LOGS and, as soon as the step ends, into
# $OUT/steps.log (tests and ncu in their own files).
LOGS=$(mktemp -d)
run() {  # name, command...
  local name=$1; shift
  echo "=== $name: $*"
  local t0=$SECONDS
  timeout "${STEP_TIMEOUT:-900}" "$@" > "$LOGS/$name.log" 2>&1
  status[$name]=$?
  echo "=== $name: exit ${status[$name]} in $((SECONDS - t0)) s"
  tail -n "${TAIL:-25}" "$LOGS/$name.log"
  gather "$name"  # at once, so a run cut off by the time limit still returns what finished
}
gather() {  # name: copy one step's log under $OUT (the device tool returns only a few files)
  local f="$LOGS/$1.log"
  case $1 in
    tests) cp "$f" "$OUT/tests.log" ;;
    ncu_*) { echo "##### $1"; cat "$f"; } >> "$OUT/ncu.log" ;;
    *) { echo "##### $1"; cat "$f"; } >> "$OUT/steps.log" ;;
  esac
}

for step in $STEPS; do
  case $step in
    env) run env bash -c "nvidia-smi; $PY -c 'import torch,sys; print(sys.version); print(torch.__version__, torch.version.cuda, torch.backends.cudnn.version(), torch.cuda.get_device_name())'; nvcc --version | tail -2; $PY -m pytest --version" ;;
    build)  # nothing after a failed build could run: stop here
      run build env CAUSALCONV_VERBOSE_BUILD=1 $PY -c "from causalconv import _build; m = _build.load(); print('wgmma:', m.has_wgmma())"
      [ "${status[build]}" = 0 ] || { grep -m 20 "error" "$LOGS/build.log"; exit 1; } ;;
    verify) run verify $PY -m causalconv --json "$OUT/verify.json" ;;
    tests) run tests $PY -m pytest -q -rs ${PYTEST_K:+-k "$PYTEST_K"} ${PYTEST_ARGS:-tests} ;;
    sanitize|memcheck)  # memcheck alone skips racecheck, the slow one
      run memcheck env PYTORCH_NO_CUDA_MEMORY_CACHING=1 compute-sanitizer --tool memcheck --error-exitcode 1 $PY scripts/sanitize.py
      [ "$step" = memcheck ] && continue
      run racecheck env PYTORCH_NO_CUDA_MEMORY_CACHING=1 SANITIZE_KERNELS=${RACECHECK_KERNELS:-} compute-sanitizer --tool racecheck --error-exitcode 1 $PY scripts/sanitize.py ;;
    profile)
      for spec in "fwd float32 fwd_tma_kernel" "fwd bfloat16 fwd_tma_kernel" "bwd float32 wgrad_kernel"; do
        set -- $spec
        run "ncu_$1_$2" ncu --clock-control none -k "regex:$3" --launch-skip 2 --launch-count 1 \
          --section SpeedOfLight --section WarpStateStats --section MemoryWorkloadAnalysis \
          --section ComputeWorkloadAnalysis --section Occupancy --section LaunchStats \
          $PY scripts/profile_case.py "$1" "$2"
      done ;;
    breakdown) run breakdown $PY scripts/bwd_breakdown.py ${BD_SHAPES:-} ;;
    depthwise)  # depthwise layers against F.pad + F.conv1d (DEPTHWISE_ARGS: the script's)
      run depthwise $PY scripts/depthwise_bench.py ${DEPTHWISE_ARGS:-} ;;
    overhead)  # small rows: host time per call against their kernels' GPU time (OVERHEAD_ARGS: the script's)
      run overhead $PY scripts/bwd_overhead.py ${OVERHEAD_ARGS:-fwd float32 1,256,256,4,1,64 3,96,160,5,3,1000} ;;
    ab) run ab $PY scripts/ab_forward.py ${AB_SHAPES:-} ;;
    ab_backward) run ab_backward $PY scripts/ab_backward.py ${AB_SHAPES:-} ;;
    bench) run bench $PY -m causalconv bench --out "$OUT/h200.json" ${BENCH_ARGS:-} ;;
    *) echo "unknown step $step" ;;
  esac
done
echo "=== summary"
for k in "${!status[@]}"; do echo "$k: ${status[$k]}"; done
