"""Reads ab_forward.py's or ab_backward.py's lines (scripts/ab_decide.sh) and prints which of two knob settings
the rest of that call runs: the candidate when it beat the baseline on the default problem
by at least 1% in every decisive case (best of each setting's runs; by default fp32 (TF32)
and bf16, fp16 reported only; a knob of the 16-bit kernels alone names its own, e.g.
bfloat16,float16), else the baseline.  Settings as ab_forward.py spells them after 'auto@' and ab_backward.py alone
(NAME=value+NAME2=value).  The last line is the chosen setting alone.
DECIDE_SHAPE=B,Cin,Cout,K,d,L decides on that shape instead of the default problem (a knob that
only changes some shapes, e.g. narrow channel counts).
    python scripts/pick_setting.py steps.log CAUSALCONV_STREAM_K=0 CAUSALCONV_STREAM_K=2 [tf32,bfloat16]"""
import os
import re
import sys

DEFAULT = "(" + ", ".join(os.environ.get("DECIDE_SHAPE", "32,256,256,4,1,8192").split(",")) + ")"
log, base, cand = sys.argv[1:4]
decisive = (sys.argv[4] if len(sys.argv) > 4 else "tf32,bfloat16").split(",")
best = {}  # (case, setting) -> fastest ms
for line in open(log):
    if not line.startswith(DEFAULT):
        continue
    case = line[len(DEFAULT):].split()[0]
    for setting in (base, cand):
        for ms in re.findall(rf"(?:auto@)?{re.escape(setting)} ([0-9.]+) ms", line):
            key = (case, setting)
            best[key] = min(best.get(key, float("inf")), float(ms))
wins = {}  # case -> whether the candidate beat the baseline by 1%
for case in ("tf32", "bfloat16", "float16"):
    b, c = best.get((case, base)), best.get((case, cand))
    if b is None or c is None:
        print(f"{case}: not measured")
        continue
    print(f"{case}: {base} {b:.3f} ms, {cand} {c:.3f} ms ({b / c - 1:+.1%})")
    wins[case] = c * 1.01 <= b
print(cand if all(wins.get(case) for case in decisive) else base)
