"""Which fp32 arithmetic does cuDNN use for a causal conv with TF32 allowed?  For each shape,
the reference (F.pad + conv1d, TF32 allowed) is compared with float64 convolutions of the
operands as they are (exact fp32), rounded to TF32 with round-to-nearest-even, and
truncated to TF32; and with causalconv in both precisions.  Prints max |difference|.
Usage: python scripts/cudnn_rounding.py [B,Cin,Cout,K,d,L ...]"""

import sys

import torch

from causalconv import causal_conv1d, causal_conv1d_reference
from causalconv._precision import conv_tf32, round_to_tf32


def truncate_to_tf32(t):
    return (t.view(torch.int32) & ~0x1FFF).view(torch.float32)


def conv64(x, w, d):
    return causal_conv1d_reference(x.double(), w.double(), dilation=d).float()


def main():
    specs = sys.argv[1:] or ["32,256,256,4,1,8192", "16,64,64,2,512,16384", "3,96,160,5,3,1000"]
    torch.manual_seed(0)
    for spec in specs:
        b, cin, cout, k, d, length = map(int, spec.split(","))
        x = torch.randn(b, cin, length, device="cuda")
        w = torch.randn(cout, cin, k, device="cuda") / (cin * k) ** 0.5
        with conv_tf32(True):
            ref = causal_conv1d_reference(x, w, dilation=d)  # F.pad + conv1d, as cuDNN computes it
        candidates = {
            "exact": conv64(x, w, d),
            "tf32-rne": conv64(round_to_tf32(x), round_to_tf32(w), d),
            "tf32-trunc": conv64(truncate_to_tf32(x), truncate_to_tf32(w), d),
            "x-rne/w-trunc": conv64(round_to_tf32(x), truncate_to_tf32(w), d),
            "x-trunc/w-rne": conv64(truncate_to_tf32(x), round_to_tf32(w), d),
            "ours-tf32": causal_conv1d(x, w, dilation=d, precision="tf32"),
            "ours-ieee": causal_conv1d(x, w, dilation=d, precision="ieee"),
        }
        errs = "  ".join(f"{name} {(ref - y).abs().max().item():.2e}" for name, y in candidates.items())
        print(f"({spec}) ref vs: {errs}", flush=True)


if __name__ == "__main__":
    main()
