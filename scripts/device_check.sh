#!/usr/bin/env bash
# Everything that needs the GPU, in one device call: environment, JIT build, the test
# suite, compute-sanitizer, the benchmark.  Logs and JSON go to $OUT.
#   STEPS="env build tests sanitize bench" PYTEST_ARGS="..." BENCH_ARGS="..." scripts/device_check.sh
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

run() {  # name, command...
  local name=$1; shift
  echo "=== $name: $*"
  local t0=$SECONDS
  "$@" > "$OUT/$name.log" 2>&1
  status[$name]=$?
  echo "=== $name: exit ${status[$name]} in $((SECONDS - t0)) s"
  tail -n "${TAIL:-25}" "$OUT/$name.log"
}

for step in $STEPS; do
  case $step in
    env) run env bash -c "nvidia-smi; $PY -c 'import torch,sys; print(sys.version); print(torch.__version__, torch.version.cuda, torch.backends.cudnn.version(), torch.cuda.get_device_name())'; nvcc --version | tail -2; $PY -m pytest --version" ;;
    build) run build $PY -c "from causalconv import _build; m = _build.load(); print('wgmma:', m.has_wgmma())" ;;
    verify) run verify $PY -m causalconv --json "$OUT/verify.json" ;;
    tests) run tests $PY -m pytest -q -rs ${PYTEST_ARGS:-tests} ;;
    sanitize)
      run memcheck env PYTORCH_NO_CUDA_MEMORY_CACHING=1 compute-sanitizer --tool memcheck --error-exitcode 1 $PY scripts/sanitize.py
      run racecheck env PYTORCH_NO_CUDA_MEMORY_CACHING=1 compute-sanitizer --tool racecheck --error-exitcode 1 $PY scripts/sanitize.py ;;
    bench) run bench $PY -m causalconv bench --out "$OUT/h200.json" ${BENCH_ARGS:-} ;;
    *) echo "unknown step $step" ;;
  esac
done
echo "=== summary"
for k in "${!status[@]}"; do echo "$k: ${status[$k]}"; done
