#!/usr/bin/env bash
# Forward kernels of two source trees side by side on one GPU: this working tree and a
# baseline unpacked beside it, each built into its own extensions directory, timed in
# alternating rounds (scripts/ab_forward.py, AB_KERNELS default wgmma) so that both see
# the same host.  Prepare the baseline here, then carry it to the device:
#   git archive <commit> causalconv kernels scripts | tar -x -C .ab_base   (.ab_base/ in .git/info/exclude)
#   OUT=dir scripts/ab_trees.sh .ab_base [B,Cin,Cout,K,d,L ...]
set -uo pipefail
cd "$(dirname "$0")/.."
base=$1; shift
OUT=${OUT:-/tmp/causalconv-out}
mkdir -p "$OUT"
export AB_KERNELS=${AB_KERNELS:-wgmma} MAX_JOBS=${MAX_JOBS:-8}
new_ext=$(mktemp -d) base_ext=$(mktemp -d)
build='from causalconv import _build; _build.load()'
(TORCH_EXTENSIONS_DIR=$new_ext python3 -c "$build" > "$OUT/build_new.log" 2>&1) &
(cd "$base" && TORCH_EXTENSIONS_DIR=$base_ext python3 -c "$build" > "$OUT/build_base.log" 2>&1) &
wait
for round in 1 2; do
  TORCH_EXTENSIONS_DIR=$base_ext python3 "$base/scripts/ab_forward.py" "$@" > "$OUT/ab_base$round.log" 2>&1
  TORCH_EXTENSIONS_DIR=$new_ext python3 scripts/ab_forward.py "$@" > "$OUT/ab_new$round.log" 2>&1
done
# base, new, base, new for each line
paste -d'\n' "$OUT/ab_base1.log" "$OUT/ab_new1.log" "$OUT/ab_base2.log" "$OUT/ab_new2.log" | grep -v "^causalconv:"
