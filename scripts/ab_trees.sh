#!/usr/bin/env bash
# Forward kernels of several source trees side by side on one GPU: this working tree and
# one or more variants unpacked beside it, each built into its own extensions directory,
# timed in alternating rounds (scripts/ab_forward.py, AB_KERNELS default wgmma) so that
# all see the same host.  Prepare a variant here, then carry it to the device:
#   git archive <commit> causalconv kernels scripts | tar -x -C .ab_base   (.ab_*/ in .git/info/exclude)
#   OUT=dir scripts/ab_trees.sh .ab_base [.ab_other ...] [-- B,Cin,Cout,K,d,L ...]
# Output: for each shape and dtype, one line per tree and round, the working tree ("new")
# last in each round.
set -uo pipefail
cd "$(dirname "$0")/.."
trees=()
while [ $# -gt 0 ] && [ "$1" != "--" ]; do trees+=("$1"); shift; done
[ $# -gt 0 ] && shift  # the "--"
OUT=${OUT:-/tmp/causalconv-out}
mkdir -p "$OUT"
export AB_KERNELS=${AB_KERNELS:-wgmma} MAX_JOBS=${MAX_JOBS:-8}
build='from causalconv import _build; _build.load()'
declare -A ext
for t in "${trees[@]}" .; do
  name=$(basename "$(cd "$t" && pwd)")
  [ "$t" = . ] && name=new
  ext[$t]=$(mktemp -d)
  (cd "$t" && TORCH_EXTENSIONS_DIR=${ext[$t]} python3 -c "$build" > "$OUT/build_$name.log" 2>&1) &
done
wait
logs=()
for round in 1 2; do
  for t in "${trees[@]}" .; do
    name=$(basename "$(cd "$t" && pwd)")
    [ "$t" = . ] && name=new
    TORCH_EXTENSIONS_DIR=${ext[$t]} python3 "$t/scripts/ab_forward.py" "$@" 2>&1 | grep -v "^causalconv:" |
      sed "s/^/$name$round /" > "$OUT/ab_$name$round.log"
    logs+=("$OUT/ab_$name$round.log")
  done
done
paste -d'\n' "${logs[@]}"
