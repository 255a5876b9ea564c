"""Summarizes the per-SASS stall samples that scripts/ncu_stalls.sh writes (ncu_src_*.csv):
the instructions holding the most samples, and the running share of samples at each barrier
wait, MMA, shared-memory and global access, so the listing reads as the kernel's roles in code
order (producer, shifters, consumers, epilogue) with where each spends its time.
    python scripts/ncu_summary.py OUT/ncu_src_fwd_bfloat16.csv [--top 20]"""
import argparse
import csv
import io

KEY_OPS = ("SYNCS", "HGMMA", "WARPGROUP", "LDS", "STS", "STG", "LDG", "UTMALDG", "UBLKCP", "BAR", "EXIT")


def load(path):
    lines = [ln for ln in open(path).read().splitlines() if not ln.startswith("==")]
    start = next(i for i, ln in enumerate(lines) if ln.startswith('"Address'))
    rows = list(csv.reader(io.StringIO("\n".join(lines[start:]))))
    header, body = rows[0], rows[1:]
    src, col = header.index("Source"), header.index("Warp Stall Sampling (All Samples)")
    return [(r[0], float(r[col] or 0), r[src]) for r in body]


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("csv")
    ap.add_argument("--top", type=int, default=20)
    args = ap.parse_args()
    rows = load(args.csv)
    total = sum(v for _, v, _ in rows) or 1.0
    print(f"{args.csv}: {total:.0f} samples")
    print("-- top instructions (a branch that spins on a barrier names the wait before it)")
    index = {addr: i for i, (addr, _, _) in enumerate(rows)}
    for addr, v, s in sorted(rows, key=lambda r: -r[1])[: args.top]:
        wait = ""
        if "BRA" in s:
            i = index[addr]
            prev = next((rows[k] for k in range(i - 1, max(i - 40, -1), -1) if "TRYWAIT" in rows[k][2]), None)
            wait = f"   <- wait at {prev[0][-6:]}" if prev else ""
        print(f"{100 * v / total:5.1f}%  {addr[-6:]}  {s[:70]}{wait}")
    print("-- running share at key instructions (code order)")
    acc = 0.0
    for addr, v, s in rows:
        acc += v
        if any(op in s for op in KEY_OPS):
            print(f"{100 * acc / total:5.1f}%  {addr[-6:]}  {s[:100]}")


if __name__ == "__main__":
    main()
