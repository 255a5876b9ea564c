"""The index arithmetic of the depthwise weight gradient (kernels/wgrad_depthwise.cu),
replayed with numpy on the CPU and compared with a direct sum: its plan (taps per block, tap
groups, 1024-step chunks, splits), each block's (output channel, tap group, split) from its
index, each thread's steps and the taps' x offsets with zero fill outside [0, L), the
block's reduction into its split's slice, and the slices added in order.  Not the CUDA: the
shuffles, barriers and loads only a GPU run checks.  Mirrors the plan code by hand, so update
it with the kernel.  Needs numpy (not a dependency of the package).
    python scripts/emulate_wgrad_depthwise.py"""

import numpy as np

THREADS, PER, MAX_TAPS, MAX_UNITS = 256, 4, 8, 64
CHUNK = THREADS * PER


def cdiv(a, b):
    return -(-a // b)


def plan(b, groups, cout_g, k, length, sms=132):
    kg = min(k, MAX_TAPS)
    n_tg = cdiv(k, kg)
    n_chunks = cdiv(length, CHUNK)
    units = b * n_chunks
    c_out = groups * cout_g
    splits = max(cdiv(32 * sms, c_out * n_tg), cdiv(units, MAX_UNITS))
    splits = max(min(splits, units, max(1, (1 << 26) // (c_out * k))), 1)
    per_split = cdiv(units, splits)
    return kg, n_tg, n_chunks, units, per_split, cdiv(units, per_split)


def emulate(x, dy, groups, k, d, sms=132):
    b, _, length = x.shape
    c_out = dy.shape[1]
    cout_g = c_out // groups
    shift = -(k - 1) * d
    kg, n_tg, n_chunks, units, per_split, splits = plan(b, groups, cout_g, k, length, sms)
    ws = np.full((splits, c_out, k), np.nan)
    tid = np.arange(THREADS)
    for block in range(c_out * n_tg * splits):
        o, rest = block % c_out, block // c_out
        tg, split = rest % n_tg, rest // n_tg
        k0, nt = tg * kg, min(kg, k - tg * kg)
        c = o // cout_g
        acc = np.zeros((THREADS, kg))
        for u in range(split * per_split, min(units, (split + 1) * per_split)):
            bb, t0 = u // n_chunks, (u % n_chunks) * CHUNK + tid
            for j in range(PER):
                t = t0 + j * THREADS  # each thread's step, and every tap's offset from it
                inside = t < length
                dv = np.where(inside, dy[bb, o, np.minimum(t, length - 1)], 0.0)
                for kk in range(kg):
                    s = t + (k0 + kk) * d + shift
                    ok = inside & (kk < nt) & (s >= 0) & (s < length)
                    xv = np.where(ok, x[bb, c, np.clip(s, 0, length - 1)], 0.0)
                    acc[:, kk] += dv * xv
        ws[split, o, k0:k0 + nt] = acc.sum(axis=0)[:nt]
    assert not np.isnan(ws).any(), "a workspace element was never written"
    return ws.sum(axis=0)


def direct(x, dy, groups, k, d):
    b, _, length = x.shape
    c_out = dy.shape[1]
    cout_g = c_out // groups
    pad = (k - 1) * d
    xp = np.concatenate([np.zeros((b, x.shape[1], pad)), x], axis=2)
    dw = np.zeros((c_out, k))
    for o in range(c_out):
        for kk in range(k):
            dw[o, kk] = (dy[:, o, :] * xp[:, o // cout_g, kk * d:kk * d + length]).sum()
    return dw


rng = np.random.default_rng(0)
# (B, channels, multiplier, K, dilation, L, multiprocessors): one multiprocessor stands in for a
# layer with thousands of channels, whose splits hold several units each
for b, channels, mult, k, d, length, sms in ((2, 4, 1, 4, 1, 1000, 132), (3, 3, 2, 9, 3, 2600, 132),
                                             (1, 2, 1, 16, 1, 7, 132), (2, 2, 3, 2, 64, 2100, 132),
                                             (64, 1, 1, 3, 1, 300, 132), (1, 1, 4, 5, 2, 5000, 132),
                                             (8, 4, 1, 4, 1, 4096, 1), (5, 8, 1, 3, 2, 3000, 1)):
    x = rng.standard_normal((b, channels, length))
    dy = rng.standard_normal((b, channels * mult, length))
    got, want = emulate(x, dy, channels, k, d, sms), direct(x, dy, channels, k, d)
    err = np.abs(got - want).max() / np.abs(want).max()
    print(f"B={b} C={channels} x{mult} K={k} d={d} L={length} sms={sms} "
          f"plan={plan(b, channels, mult, k, length, sms)}: max rel err {err:.1e}")
    assert err < 1e-12, "index arithmetic differs from the direct sum"
print("depthwise weight gradient: index arithmetic matches the direct sums")
