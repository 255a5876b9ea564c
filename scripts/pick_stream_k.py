"""Reads ab_forward.py's lines (scripts/ab_tile_ends.sh) and prints which Stream-K mode the
rest of that call runs: 2 when every tile shared out beat whole tiles on the default problem
by at least 1% in fp32 (TF32) and in bf16 (best of each mode's runs), else 0.  The last line
is the mode alone.
    python scripts/pick_stream_k.py steps.log"""
import re
import sys

DEFAULT = "(32, 256, 256, 4, 1, 8192)"
best = {}  # (case, mode) -> fastest ms
for line in open(sys.argv[1]):
    if not line.startswith(DEFAULT):
        continue
    case = line[len(DEFAULT):].split()[0]
    for mode, ms in re.findall(r"CAUSALCONV_STREAM_K=(\d) ([0-9.]+) ms", line):
        key = (case, mode)
        best[key] = min(best.get(key, float("inf")), float(ms))
wins = {}  # case -> whether mode 2 beat whole tiles by 1%; float16 is reported, not decisive
for case in ("tf32", "bfloat16", "float16"):
    whole, shared = best.get((case, "0")), best.get((case, "2"))
    if whole is None or shared is None:
        print(f"{case}: not measured")
        continue
    print(f"{case}: whole tiles {whole:.3f} ms, shared out {shared:.3f} ms ({whole / shared - 1:+.1%})")
    wins[case] = shared * 1.01 <= whole
print(2 if wins.get("tf32") and wins.get("bfloat16") else 0)
