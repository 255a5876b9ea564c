"""The index arithmetic of the depthwise weight gradient (kernels/wgrad_depthwise.cu),
replayed with numpy on the CPU and compared with a direct sum: its plan (taps per block, tap
groups, which kernel, chunks, splits), each block's (output channel, tap group, split) from
its index, and per kernel: the direct one's steps per thread and the taps' x offsets with
zero fill outside [0, L); the staged one's shared-memory ring (dy chunks and x windows in two
slots, copied 16 bytes at a time from aligned starts with zero fill, the window's lead, the
steps past L skipped); the register one's units (a 16-byte chunk of dy per thread, the x
window from the thread's own chunk and the lanes' below, the warp's edge lanes loading
theirs, two units in flight); then the block's reduction into its split's slice, and the
slices added in order.  Not the CUDA: the shuffles, barriers and copies' completion only a GPU run
checks.  Mirrors the plan code by hand, so update it with the kernel.  Needs numpy (not a
dependency of the package).
    python scripts/emulate_wgrad_depthwise.py"""

import numpy as np

THREADS, MAX_TAPS, MAX_PRODUCTS = 256, 8, 256
CHUNK = THREADS * 4           # direct kernel
STAGED_CHUNK = THREADS * 8    # staged kernel
STAGES, STAGED_MAX_BYTES = 2, 48 * 1024


def cdiv(a, b):
    return -(-a // b)


def staged_x_elems(k, d, length, elem_bytes, kg):
    """Elements of the staged kernel's x window per slot, 0 where it cannot run (rows assumed
    16-byte aligned, as fresh tensors are)."""
    vec = 16 // elem_bytes
    x_elems = cdiv(vec - 1 + STAGED_CHUNK + (kg - 1) * d, vec) * vec
    fits = STAGES * (STAGED_CHUNK + x_elems) * elem_bytes <= STAGED_MAX_BYTES
    return x_elems if length % vec == 0 and fits else 0


def registers_fit(k, d, length, elem_bytes):
    """The register kernel (when CAUSALCONV_DEPTHWISE_REGISTERS=1): aligned rows, dilation 1,
    taps in one group."""
    return length % (16 // elem_bytes) == 0 and k <= MAX_TAPS and (k == 1 or d == 1)


def plan(b, groups, cout_g, k, d, length, elem_bytes, sms=132, registers=False):
    kg = min(k, MAX_TAPS)
    n_tg = cdiv(k, kg)
    registers = registers and registers_fit(k, d, length, elem_bytes)
    x_elems = 0 if registers else staged_x_elems(k, d, length, elem_bytes, kg)
    chunk = THREADS * (16 // elem_bytes) if registers else STAGED_CHUNK if x_elems else CHUNK
    n_chunks = cdiv(length, chunk)
    units = b * n_chunks
    c_out = groups * cout_g
    splits = max(cdiv(32 * sms, c_out * n_tg), cdiv(units, MAX_PRODUCTS // (chunk // THREADS)))
    splits = max(min(splits, units, max(1, (1 << 26) // (c_out * k))), 1)
    per_split = cdiv(units, splits)
    return kg, n_tg, x_elems, n_chunks, units, per_split, cdiv(units, per_split), registers


def direct_units(x, dy, o, c, k0, nt, kg, units_range, n_chunks, d, shift, acc):
    length = x.shape[2]
    tid = np.arange(THREADS)
    for u in units_range:
        bb, t0 = u // n_chunks, (u % n_chunks) * CHUNK + tid
        for j in range(CHUNK // THREADS):
            t = t0 + j * THREADS  # each thread's step, and every tap's offset from it
            inside = t < length
            dv = np.where(inside, dy[bb, o, np.minimum(t, length - 1)], 0.0)
            for kk in range(kg):
                s = t + (k0 + kk) * d + shift
                ok = inside & (kk < nt) & (s >= 0) & (s < length)
                xv = np.where(ok, x[bb, c, np.clip(s, 0, length - 1)], 0.0)
                acc[:, kk] += dv * xv


def staged_units(x, dy, o, c, k0, nt, kg, units, n_chunks, d, shift, x_elems, elem_bytes, acc):
    """The staged kernel's ring: slot i % STAGES holds unit i's dy chunk and x window; unit
    i + STAGES is copied into it only after unit i's sums."""
    length = x.shape[2]
    vec = 16 // elem_bytes
    tap0 = k0 * d + shift
    lead = tap0 % vec  # Python's % is the floor modulo the kernel computes
    x_vecs = cdiv(lead + STAGED_CHUNK + (nt - 1) * d, vec)
    assert x_vecs * vec <= x_elems
    slots = np.full((STAGES, STAGED_CHUNK + x_elems), np.nan)

    def issue(u, slot):
        bb, c0 = u // n_chunks, (u % n_chunks) * STAGED_CHUNK
        for i in range(STAGED_CHUNK // vec):  # copies wholly inside or outside the sequence
            t = c0 + i * vec
            slots[slot, i * vec:(i + 1) * vec] = dy[bb, o, t:t + vec] if t < length else 0.0
        a0 = c0 + tap0 - lead
        assert a0 % vec == 0
        for i in range(x_vecs):
            s = a0 + i * vec
            base = STAGED_CHUNK + i * vec
            slots[slot, base:base + vec] = x[bb, c, s:s + vec] if 0 <= s < length else 0.0

    n = len(units)
    for i in range(min(STAGES, n)):
        issue(units[i], i)
    tid = np.arange(THREADS)
    for i in range(n):
        buf = slots[i % STAGES]
        c0 = (units[i] % n_chunks) * STAGED_CHUNK
        valid = min(STAGED_CHUNK, length - c0)
        for j in range(STAGED_CHUNK // THREADS):
            t = tid + j * THREADS
            ok = t < valid
            dv = np.where(ok, buf[np.minimum(t, STAGED_CHUNK - 1)], 0.0)
            for kk in range(nt):
                xi = STAGED_CHUNK + lead + t + kk * d
                xv = np.where(ok, buf[np.minimum(xi, len(buf) - 1)], 0.0)
                assert not np.isnan(xv[ok]).any(), "read a window element never copied"
                acc[:, kk] += dv * xv
        if i + STAGES < n:
            issue(units[i + STAGES], i % STAGES)


def register_units(x, dy, o, c, k, units, n_chunks, vec, acc, in_flight=2):
    """The register kernel, lane by lane: per unit, thread tid takes 16-byte chunk
    (unit's chunk) * THREADS + tid of dy and x, and the nb chunks of x before it from lane
    tid - h, or at the warp's edge (lane < h) loads them itself; its sums add dy[j] * x[j + k -
    (K-1)] over the chunk's steps j, and chunks past the row add nothing.  Units go in pairs
    (in_flight), the pair's second past the split's end reading and adding nothing."""
    length = x.shape[2]
    n_vec = length // vec
    nb = cdiv(k - 1, vec)

    def load(row, ci):
        return row[ci * vec:(ci + 1) * vec] if 0 <= ci < n_vec else np.zeros(vec)

    for u0 in range(units[0], units[-1] + 1, in_flight) if units else ():
        for u in range(u0, min(u0 + in_flight, units[-1] + 1)):
            bb = u // n_chunks
            for warp in range(THREADS // 32):
                chunk_of = [(u % n_chunks) * THREADS + warp * 32 + lane for lane in range(32)]
                own = [load(x[bb, c], ci) for ci in chunk_of]
                for lane in range(32):
                    ci = chunk_of[lane]
                    win = np.zeros((nb + 1) * vec)
                    win[nb * vec:] = own[lane]
                    for h in range(1, nb + 1):
                        win[(nb - h) * vec:(nb - h + 1) * vec] = load(x[bb, c], ci - h) if lane < h else own[lane - h]
                    if ci >= n_vec:
                        continue
                    dv = load(dy[bb, o], ci)
                    for j in range(vec):
                        for kk in range(k):
                            acc[warp * 32 + lane, kk] += dv[j] * win[nb * vec + j + kk - (k - 1)]


def emulate(x, dy, groups, k, d, elem_bytes, sms=132, registers=False):
    b, _, length = x.shape
    c_out = dy.shape[1]
    cout_g = c_out // groups
    shift = -(k - 1) * d
    kg, n_tg, x_elems, n_chunks, units, per_split, splits, registers = plan(b, groups, cout_g, k, d, length,
                                                                           elem_bytes, sms, registers)
    ws = np.full((splits, c_out, k), np.nan)
    for block in range(c_out * n_tg * splits):
        o, rest = block % c_out, block // c_out
        tg, split = rest % n_tg, rest // n_tg
        k0, nt = tg * kg, min(kg, k - tg * kg)
        c = o // cout_g
        acc = np.zeros((THREADS, kg))
        mine = list(range(split * per_split, min(units, (split + 1) * per_split)))
        if registers:
            register_units(x, dy, o, c, k, mine, n_chunks, 16 // elem_bytes, acc)
        elif x_elems:
            staged_units(x, dy, o, c, k0, nt, kg, mine, n_chunks, d, shift, x_elems, elem_bytes, acc)
        else:
            direct_units(x, dy, o, c, k0, nt, kg, mine, n_chunks, d, shift, acc)
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
# (B, channels, multiplier, K, dilation, L, multiprocessors, element bytes): one multiprocessor
# stands in for a layer with thousands of channels, whose splits hold several units each
for b, channels, mult, k, d, length, sms, eb in (
        (2, 4, 1, 4, 1, 1000, 132, 2), (3, 3, 2, 9, 3, 2600, 132, 4), (1, 2, 1, 16, 1, 7, 132, 2),
        (2, 2, 3, 2, 64, 2100, 132, 2), (2, 2, 3, 2, 64, 2100, 132, 4), (64, 1, 1, 3, 1, 300, 132, 4),
        (1, 1, 4, 5, 2, 5000, 132, 2), (8, 4, 1, 4, 1, 4096, 1, 2), (5, 8, 1, 3, 2, 3000, 1, 4),
        (5, 8, 1, 3, 2, 3000, 1, 2), (2, 2, 1, 3, 3000, 8192, 132, 2), (2, 2, 1, 3, 3000, 8192, 132, 4),
        (3, 2, 2, 8, 1, 1032, 1, 4), (3, 2, 1, 7, 1, 2056, 1, 2), (2, 2, 1, 1, 1, 64, 132, 4)):
    x = rng.standard_normal((b, channels, length))
    dy = rng.standard_normal((b, channels * mult, length))
    want = direct(x, dy, channels, k, d)
    for registers in (False, True):
        pl = plan(b, channels, mult, k, d, length, eb, sms, registers)
        if registers and not pl[-1]:
            continue
        got = emulate(x, dy, channels, k, d, eb, sms, registers)
        err = np.abs(got - want).max() / np.abs(want).max()
        kind = "registers" if pl[-1] else "staged" if pl[2] else "direct"
        print(f"B={b} C={channels} x{mult} K={k} d={d} L={length} sms={sms} {eb}-byte {kind} plan={pl}: "
              f"max rel err {err:.1e}")
        assert err < 1e-12, "index arithmetic differs from the direct sum"
print("depthwise weight gradient: index arithmetic matches the direct sums")
