"""The index arithmetic of the v19c generic weight gradient (kernels/wgrad_generic.cu as of
commit 654c78d: taps per group as a template parameter, dy staged time-major with a padded row
so that a warp's four channels are one 16-byte load, global loads batched per thread), replayed
with numpy on the CPU (blocks, units, staging, tap groups with a short last group) and compared
with a direct float64 weight gradient.  Shapes cover partial channel tiles, groups, two tap
groups and a dilation past the sequence.  That kernel is not in the tree until a GPU has run
it (NOTES v19c); this checks its indexing before then.
    python scripts/emulate_wgrad_generic.py"""
import numpy as np
kThreads, kOB, kCB, kTC, kDyRow, kMaxTaps, kMaxSpan, kBatch = 256, 32, 32, 64, 36, 8, 192, 8


def cdiv(a, b):
    return -(-a // b)


def plan(B, L, groups, cin_g, cout_g, K, d, sms=132):
    kg = max(1, min(K, kMaxTaps, 1 + kMaxSpan // d))
    n_tg, n_ot, n_ct = cdiv(K, kg), cdiv(cout_g, kOB), cdiv(cin_g, kCB)
    xrow = (kTC + (kg - 1) * d) | 1
    n_tiles = groups * n_ot * n_ct * n_tg
    units = B * cdiv(L, kTC)
    n_out = groups * cout_g * cin_g * K
    splits = max(1, cdiv(4 * sms, n_tiles))
    splits = min(splits, units, max(1, (1 << 26) // n_out))
    per = cdiv(units, splits)
    return dict(kg=kg, n_tg=n_tg, n_ot=n_ot, n_ct=n_ct, xrow=xrow, n_tiles=n_tiles, units=units, per=per,
                splits=cdiv(units, per))

def kernel(dy, x, groups, K, d):
    B, C_out, L = dy.shape; C_in = x.shape[1]
    cin_g, cout_g = C_in // groups, C_out // groups
    shift = -(K - 1) * d
    pl = plan(B, L, groups, cin_g, cout_g, K, d); KG = pl['kg']
    ws = np.full((pl['splits'], C_out, cin_g, K), np.nan)
    dyf, xf = dy.reshape(-1), x.reshape(-1)
    n_tc = cdiv(L, kTC)
    for bid in range(pl['n_tiles'] * pl['splits']):
        tile = bid % pl['n_tiles']; split = bid // pl['n_tiles']
        ot = tile % pl['n_ot']; tile //= pl['n_ot']
        ct = tile % pl['n_ct']; tile //= pl['n_ct']
        tg = tile % pl['n_tg']; g = tile // pl['n_tg']
        k0 = tg * KG; nt = min(KG, K - k0); width = kTC + (nt - 1) * d
        acc = np.zeros((kThreads // 32, 32, 4, KG))  # warp, lane, i, k
        for u in range(split * pl['per'], min(pl['units'], (split + 1) * pl['per'])):
            b, t0 = u // n_tc, (u % n_tc) * kTC
            dy_base = (b * C_out + g * cout_g + ot * kOB) * L
            x_base = (b * C_in + g * cin_g + ct * kCB) * L
            dys = np.full((kTC, kDyRow), np.nan)
            for tid in range(kThreads):
                for r in range(kBatch):
                    idx = tid + r * kThreads; o, tt = idx // kTC, idx % kTC; t = t0 + tt
                    v = dyf[dy_base + o * L + t] if (ot * kOB + o < cout_g and t < L) else 0.0
                    dys[idx % kTC][idx // kTC] = v
            xs = np.full(kCB * pl['xrow'], np.nan)
            xs0 = t0 + k0 * d + shift
            for base in range(0, kCB * width, kBatch * kThreads):
                for tid in range(kThreads):
                    for r in range(kBatch):
                        idx = base + tid + r * kThreads; ci = idx // width; j = idx - ci * width; t = xs0 + j
                        ok = idx < kCB * width and ct * kCB + ci < cin_g and 0 <= t < L
                        v = xf[x_base + ci * L + t] if ok else 0.0
                        if idx < kCB * width: xs[ci * pl['xrow'] + j] = v
            for warp in range(8):
                for lane in range(32):
                    for tt in range(kTC):
                        dv = dys[tt][warp * 4: warp * 4 + 4]
                        for k in range(KG):
                            if k < nt:
                                acc[warp, lane, :, k] += dv * xs[lane * pl['xrow'] + tt + k * d]
        for warp in range(8):
            for lane in range(32):
                c = ct * kCB + lane
                if c >= cin_g: continue
                for i in range(4):
                    o = ot * kOB + warp * 4 + i
                    if o >= cout_g: continue
                    for k in range(KG):
                        if k < nt: ws[split, g * cout_g + o, c, k0 + k] = acc[warp, lane, i, k]
    return ws.sum(0)

def exact(dy, x, groups, K, d):
    B, C_out, L = dy.shape; C_in = x.shape[1]; cin_g, cout_g = C_in // groups, C_out // groups
    pad = (K - 1) * d
    xp = np.concatenate([np.zeros((B, C_in, pad)), x], axis=2)
    dw = np.zeros((C_out, cin_g, K))
    for o in range(C_out):
        g = o // cout_g
        for k in range(K):
            dw[o, :, k] = np.einsum('bt,bit->i', dy[:, o], xp[:, g * cin_g:(g + 1) * cin_g, k * d:k * d + L])
    return dw

rng = np.random.default_rng(0)
for B, C_in, C_out, groups, K, d, L in [(1, 40, 36, 1, 5, 3, 70), (1, 8, 16, 2, 16, 5, 30), (2, 6, 4, 1, 3, 100, 20)]:
    x = rng.standard_normal((B, C_in, L)); dy = rng.standard_normal((B, C_out, L))
    got, ref = kernel(dy, x, groups, K, d), exact(dy, x, groups, K, d)
    print((B, C_in, C_out, groups, K, d, L), plan(B, L, groups, C_in // groups, C_out // groups, K, d)['kg'],
          'nan' if np.isnan(got).any() else np.abs(got - ref).max())
