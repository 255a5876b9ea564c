"""The index arithmetic of the raw-window kernels (kernels/fwd_rs.cu, kernels/wgrad_rs.cu),
replayed with numpy on the CPU and compared with direct sums: their plans (taps per tile,
channels, window pitch), TMA boxes with zero fill, each lane's fragment addresses as the
kernels compute them, and the epilogues' output indices.  Not the PTX: fragment layouts,
descriptors and synchronization only a GPU run checks.  Mirrors the plan code by hand, so
update it with the kernels.  Needs numpy (not a dependency of the package).
    python scripts/emulate_window_kernels.py"""

import numpy as np

SMEM = 232448  # sm_90 opt-in shared memory per block


def cdiv(a, b):
    return -(-a // b)


def box(a, r0, nr, c0, nc):
    """A TMA box of a 2-D array: out-of-range rows and columns read as zeros."""
    out = np.zeros((nr, nc))
    rows = np.arange(r0, r0 + nr)
    cols = np.arange(c0, c0 + nc)
    rk, ck = (rows >= 0) & (rows < a.shape[0]), (cols >= 0) & (cols < a.shape[1])
    out[np.ix_(rk, ck)] = a[np.ix_(rows[rk], cols[ck])]
    return out


def reference(x, w, d, groups):
    b, cin, length = x.shape
    cout, cin_g, k = w.shape
    cout_g = cout // groups
    xp = np.concatenate([np.zeros((b, cin, (k - 1) * d)), x], axis=2)
    return xp, cin_g, cout_g


def wgrad(b, cin, cout, k, d, length, groups, sms=132):
    rng = np.random.default_rng(0)
    x, dy = rng.standard_normal((b, cin, length)), rng.standard_normal((b, cout, length))
    cin_g, cout_g, shift = cin // groups, cout // groups, -(k - 1) * d
    n = 128 if cdiv(cout_g, 128) * 128 <= cdiv(cout_g, 64) * 64 else 64  # choose_shape
    mi = 2 if k * cin_g > 128 else 1
    rows = 128 * mi
    best = None  # pick_rows
    for taps in range(1, min(k, rows // 16) + 1):
        window = cdiv(3 + (taps - 1) * d + 32 - 4, 8) * 8 + 4
        if window > 256:
            break
        for ch in range(16, rows // taps + 1, 16):
            slot = n * 128 + cdiv(ch * window * 4, 1024) * 1024
            if 2 * slot > SMEM - 1024 - 192:
                continue
            cost = cdiv(k, taps) * cdiv(cin_g, ch)
            if best is None or cost < best[0] or (cost == best[0] and taps > best[1]):
                best = (cost, taps, ch, window)
    _, tile_taps, ch, window = best
    n_kt, n_ct, n_ot = cdiv(k, tile_taps), cdiv(cin_g, ch), cdiv(cout_g, n)
    n_tiles, units = groups * n_kt * n_ct * n_ot, b * cdiv(length, 32)
    splits = min(max(1, sms // n_tiles), units, max(1, (1 << 26) // (cout * cin_g * k)))
    per = cdiv(units, splits)
    splits = cdiv(units, per)
    ws = np.full((splits, cout, cin_g, k), np.nan)
    x2, dy2 = x.reshape(b * cin, length), dy.reshape(b * cout, length)
    r = np.arange(rows)
    kl_r, chn_r = r // ch, r % ch
    for blk in range(n_tiles * splits):  # decode_wgrad_block
        tile, split = blk % n_tiles, blk // n_tiles
        ot, tile = tile % n_ot, tile // n_ot
        ct, tile = tile % n_ct, tile // n_ct
        kt, g = tile % n_kt, tile // n_kt
        u0 = split * per
        k0 = kt * tile_taps
        taps = min(tile_taps, k - k0)
        lead = (shift + k0 * d) // 4 * 4
        off0 = shift + k0 * d - lead
        acc = np.zeros((rows, n))
        for u in range(u0, min(units, u0 + per)):
            bb, t0 = u // cdiv(length, 32), (u % cdiv(length, 32)) * 32
            dyt = box(dy2, bb * cout + g * cout_g + ot * n, n, t0, 32)
            raw = box(x2, bb * cin + g * cin_g + ct * ch, ch, t0 + lead, window).ravel()
            a = np.zeros((rows, 32))
            ok = kl_r < taps
            # row_off (elements) + time step: the lane's loads at + 4 and the k-steps' + 8
            idx = (chn_r * window + off0 + kl_r * d)[:, None] + np.arange(32)[None, :]
            assert idx[ok].max() < ch * window
            a[ok] = raw[idx[ok]]
            acc += a @ dyt.T
        for rr in np.nonzero(kl_r < taps)[0]:
            o = ot * n + np.arange(n)
            i = ct * ch + chn_r[rr]
            keep = o < cout_g
            if i < cin_g:
                ws[split, g * cout_g + o[keep], i, k0 + kl_r[rr]] = acc[rr, keep]
    dw = ws.sum(0)
    assert not np.isnan(dw).any(), "an element of dw was never written"
    xp, _, _ = reference(x, np.zeros((cout, cin_g, k)), d, groups)
    exact = np.zeros((cout, cin_g, k))
    for o in range(cout):
        gg = o // cout_g
        for kk in range(k):
            exact[o, :, kk] = np.einsum("bit,bt->i", xp[:, gg * cin_g:(gg + 1) * cin_g, kk * d:kk * d + length], dy[:, o])
    err = np.abs(dw - exact).max()
    print(f"wgrad {(b, cin, cout, k, d, length, groups)}: M {rows} N {n} taps {tile_taps} ch {ch} window {window}"
          f" splits {splits}: max err {err:.1e}")
    assert err < 1e-9


def forward(b, cin, cout, k, d, length, groups, mi):
    rng = np.random.default_rng(1)
    x, w = rng.standard_normal((b, cin, length)), rng.standard_normal((cout, cin // groups, k))
    xp, cin_g, cout_g = reference(x, w, d, groups)
    shift, half = -(k - 1) * d, 64 * mi
    for tpg in range(min(k, 4), 0, -1):  # make_plan
        window = cdiv(3 + (tpg - 1) * d + half - 8, 16) * 16 + 8
        if window <= 256:
            break
    n_ot, n_ic, n_tt, ngroups = cdiv(cout_g, 128), cdiv(cin_g, 32), cdiv(length, 2 * half), cdiv(k, tpg)
    half_words = 32 * window
    y = np.full((b, cout, length), np.nan)
    lane = np.arange(32)
    gl, cl = lane >> 2, lane & 3
    for tile in range(n_ot * n_tt * groups * b):
        ot, t0 = tile % n_ot, (tile // n_ot % n_tt) * 2 * half
        rest = tile // n_ot // n_tt
        g, bb = rest % groups, rest // groups
        acc = np.zeros((2, mi, 64, 128))
        for j in range(n_ic * ngroups):
            ic, k0 = j // ngroups, (j % ngroups) * tpg
            a0 = (t0 + k0 * d + shift) // 4 * 4
            raw = np.concatenate([box(x[bb], g * cin_g + ic * 32, 32, a0 + h * half, window).ravel() for h in range(2)])
            off = (t0 + k0 * d + shift) - a0
            for kk in range(min(tpg, k - k0)):
                wt = np.zeros((128, 32))
                o_ok, c_ok = ot * 128 + np.arange(128) < cout_g, ic * 32 + np.arange(32) < cin_g
                wt[np.ix_(o_ok, c_ok)] = w[g * cout_g + ot * 128 + np.arange(128)[o_ok]][:, ic * 32 + np.arange(32)[c_ok],
                                                                                        k0 + kk]
                for c in range(2):
                    for m in range(mi):
                        a = np.zeros((64, 32))
                        for q in range(4):
                            lane_off = (cl * window + 16 * q + gl) * 4 + c * half_words * 4
                            for ks in range(4):
                                at = lane_off + off * 4 + kk * d * 4 + ks * 2 * (16 * window) + m * 256
                                for dt, dc in ((0, 0), (8, 0), (0, 4), (8, 4)):
                                    addr = at + dt * 4 + dc * window * 4  # dc channels on
                                    assert ((addr // 4) // half_words == c).all()
                                    a[16 * q + gl + dt, 8 * ks + cl + dc] = raw[addr // 4]
                        acc[c, m] += a @ wt.T
        for c in range(2):
            for m in range(mi):
                t = t0 + half * c + 64 * m + np.arange(64)
                o = ot * 128 + np.arange(128)
                tk, ok = t < length, o < cout_g
                y[bb, (g * cout_g + o[ok])[:, None], t[tk][None, :]] = acc[c, m][np.ix_(tk, ok)].T
    exact = np.zeros((b, cout, length))
    for o in range(cout):
        gg = o // cout_g
        for kk in range(k):
            exact[:, o] += np.einsum("bit,i->bt", xp[:, gg * cin_g:(gg + 1) * cin_g, kk * d:kk * d + length], w[o, :, kk])
    assert not np.isnan(y).any(), "an element of y was never written"
    err = np.abs(y - exact).max()
    print(f"fwd {(b, cin, cout, k, d, length, groups)}: time tile {2 * half} taps/stage {tpg} window {window}:"
          f" max err {err:.1e}")
    assert err < 1e-9


for case in [(2, 96, 160, 4, 1, 264, 1), (1, 64, 32, 5, 3, 40, 2), (1, 48, 40, 40, 1, 64, 1), (2, 32, 32, 2, 100, 264, 1),
             (1, 40, 72, 7, 40, 8, 1), (2, 64, 64, 2, 512, 1100, 1), (1, 257, 33, 3, 2, 64, 1), (1, 192, 64, 1, 1, 8, 2),
             (1, 64, 320, 16, 1, 96, 1), (2, 8, 16, 3, 2, 40, 8)]:
    wgrad(*case)
for case in [(1, 40, 24, 4, 1, 300, 1, 1), (2, 64, 136, 5, 3, 136, 2, 1), (1, 32, 16, 7, 9, 200, 1, 2),
             (1, 16, 130, 2, 100, 130, 1, 1)]:
    forward(*case)
