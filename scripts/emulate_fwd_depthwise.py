"""The index arithmetic of the depthwise forward (kernels/fwd_depthwise.cu), replayed with
numpy on the CPU and compared with a direct sum, for the forward (causal window) and the
input gradient (anti-causal window, weights read tap-reversed from the forward's):
- the register kernel: each block's (batch, output channel, segment) from its index, each
  thread's two chunks kThreads apart, the chunks it loads (zeros outside the sequence), the
  neighbouring chunks it gets from the lane h below (above) by a shuffle or, at a warp's
  edge, loads itself, the window it unpacks them into and each output's taps in it;
- the staged kernel: its tap groups, the aligned window start and lead, and the taps'
  weights (tap-reversed for an input gradient).
Not the CUDA: loads, shuffles and barriers only a GPU run checks.  Mirrors the kernels by
hand, so update it with them.  Needs numpy (not a dependency of the package).
    python scripts/emulate_fwd_depthwise.py"""

import numpy as np

THREADS, PER = 128, 2          # register kernel
SEG_CHUNKS = THREADS * PER
STAGED_TB, STAGED_MAX_SPAN = 1024, 4096


def cdiv(a, b):
    return -(-a // b)


def direct(x, w, bias, cout_g, dilation, shift):
    """y[b, o, t] = bias[o] + sum_k w[o, k] * x[b, o // cout_g, t + k*dilation + shift], zero outside."""
    b, _, length = x.shape
    c_out, k_taps = w.shape
    y = np.zeros((b, c_out, length)) + bias[None, :, None]
    for o in range(c_out):
        for k in range(k_taps):
            src = np.arange(length) + k * dilation + shift
            ok = (src >= 0) & (src < length)
            y[:, o, ok] += w[o, k] * x[:, o // cout_g, src[ok]]
    return y


def weights_as_read(w_mem, k_taps, transposed):
    """The kernels' w[oc*K + (K-1-k if transposed else k)]: an input gradient's weights are the
    forward's, tap-reversed (one input channel per group: the per-group transpose is the identity)."""
    flat = w_mem.reshape(-1)
    c_out = flat.size // k_taps
    return np.array([[flat[oc * k_taps + (k_taps - 1 - k if transposed else k)] for k in range(k_taps)]
                     for oc in range(c_out)])


def register_kernel(x, w_mem, bias, cout_g, k_taps, anti, vec):
    """The register kernel, block by block and lane by lane."""
    b_n, _, length = x.shape
    c_out = w_mem.size // k_taps
    assert length % vec == 0
    n_chunks = length // vec
    nb = cdiv(k_taps - 1, vec)  # neighbouring chunks the taps reach into
    n_seg = cdiv(n_chunks, SEG_CHUNKS)
    w = weights_as_read(w_mem, k_taps, anti)
    y = np.full((b_n, c_out, length), np.nan)

    for block in range(b_n * c_out * n_seg):
        seg, row = block % n_seg, block // n_seg
        oc, b = row % c_out, row // c_out
        xrow = x[b, oc // cout_g]

        def load_chunk(c):
            return xrow[c * vec:(c + 1) * vec].copy() if 0 <= c < n_chunks else np.zeros(vec)

        for warp in range(THREADS // 32):
            for i in range(PER):
                # every lane's own chunk first: the shuffles read them
                chunks = [seg * SEG_CHUNKS + warp * 32 + lane + i * THREADS for lane in range(32)]
                own = [load_chunk(c) for c in chunks]
                for lane in range(32):
                    c = chunks[lane]
                    win = np.zeros((nb + 1) * vec)
                    win[(0 if anti else nb * vec):][:vec] = own[lane]
                    for h in range(1, nb + 1):
                        at_edge = lane >= 32 - h if anti else lane < h
                        if at_edge:
                            nbr = load_chunk(c + h if anti else c - h)
                        else:
                            nbr = own[lane + h if anti else lane - h]
                        pos = h if anti else nb - h
                        win[pos * vec:(pos + 1) * vec] = nbr
                    if c >= n_chunks:
                        continue
                    for j in range(vec):
                        acc = 0.0
                        for k in range(k_taps):
                            acc += w[oc, k] * win[j + k if anti else nb * vec + j + k - (k_taps - 1)]
                        y[b, oc, c * vec + j] = acc + bias[oc]
    return y


def staged_kernel(x, w_mem, bias, cout_g, k_taps, dilation, shift, transposed, vec):
    """The staged kernel's windows and weights, block by block (threads summed at once)."""
    b_n, _, length = x.shape
    c_out = w_mem.size // k_taps
    tpg = max(1, min(k_taps, 1 + STAGED_MAX_SPAN // dilation))
    n_tt = cdiv(length, STAGED_TB)
    flat = w_mem.reshape(-1)
    y = np.full((b_n, c_out, length), np.nan)
    for block in range(c_out * n_tt * b_n):
        oc, rest = block % c_out, block // c_out
        t0, b = rest % n_tt * STAGED_TB, rest // n_tt
        xrow = x[b, oc // cout_g]
        acc = np.zeros(STAGED_TB)
        for k0 in range(0, k_taps, tpg):
            nt = min(tpg, k_taps - k0)
            ws0 = t0 + k0 * dilation + shift
            a0 = ws0 // vec * vec
            off = ws0 - a0
            nchunks = cdiv(off + STAGED_TB + (nt - 1) * dilation, vec)
            src = a0 + np.arange(nchunks * vec)
            ok = (src >= 0) & (src < length)
            xs = np.zeros(nchunks * vec)
            xs[ok] = xrow[src[ok]]
            for k in range(nt):
                wv = flat[oc * k_taps + (k_taps - 1 - k0 - k if transposed else k0 + k)]
                acc += wv * xs[off + k * dilation:][:STAGED_TB]
        steps = min(STAGED_TB, length - t0)
        y[b, oc, t0:t0 + steps] = acc[:steps] + bias[oc]
    return y


def check(b, channels, multiplier, k_taps, dilation, length, vec, rng):
    c_out = channels * multiplier
    x = rng.standard_normal((b, channels, length))
    w_mem = rng.standard_normal((c_out, 1, k_taps))
    bias = rng.standard_normal(c_out)
    worst = 0.0
    # forward: causal shift; input gradient (one output channel per group only): no shift,
    # the weights as stored by the forward, read tap-reversed
    for anti in ((False, True) if multiplier == 1 else (False,)):
        shift = 0 if anti else -(k_taps - 1) * dilation
        exact = direct(x, weights_as_read(w_mem, k_taps, anti), bias, multiplier, dilation, shift)
        got = [staged_kernel(x, w_mem, bias, multiplier, k_taps, dilation, shift, anti, vec)]
        if (dilation == 1 or k_taps == 1) and k_taps <= 8 and length % vec == 0:
            got.append(register_kernel(x, w_mem, bias, multiplier, k_taps, anti, vec))
        for y in got:
            assert not np.isnan(y).any(), "an output was not written"
            worst = max(worst, float(np.abs(y - exact).max()))
    label = f"{b}x{channels} x{multiplier} K={k_taps} d={dilation} L={length} vec={vec}"
    assert worst < 1e-9, f"{label}: max error {worst:.2e}"
    print(f"{label}: max error {worst:.1e}")


if __name__ == "__main__":
    rng = np.random.default_rng(0)
    for b, channels, multiplier, k_taps, dilation, length, vec in (
            (2, 3, 1, 4, 1, 8, 8), (1, 2, 1, 4, 1, 2056, 8), (1, 2, 2, 8, 1, 1032, 4), (1, 2, 1, 8, 1, 1032, 4),
            (2, 2, 1, 1, 1, 64, 4), (1, 3, 1, 5, 1, 4096 + 16, 8), (1, 2, 1, 3, 2, 1000, 8),
            (1, 2, 1, 9, 1, 1000, 4), (1, 1, 1, 3, 3000, 5000, 8), (1, 2, 1, 2, 1, 3, 4)):
        check(b, channels, multiplier, k_taps, dilation, length, vec, rng)
