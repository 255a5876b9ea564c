"""CUDA forward kernels against the float64 oracle, every configuration the API accepts.

Outputs are poisoned with NaN before each launch; inputs are fresh random draws; max and
mean errors are printed before asserting (pytest -s shows them)."""

import random

import pytest
import torch

from causalconv import ModelNew, Model, causal_conv1d, causal_conv1d_reference, _precision
from helpers import (HARNESS_TOL, assert_close, count_launches, exact_forward, ext, forced_kernel, make_x,
                     poisoned_outputs)

pytestmark = pytest.mark.gpu
DEV = "cuda"
DTYPE_PRECISIONS = [(torch.float32, "tf32"), (torch.float32, "ieee"), (torch.float16, "auto"),
                    (torch.bfloat16, "auto")]
KS = [1, 2, 3, 4, 5, 7, 16]
DILATIONS = [1, 2, 5]
LENGTHS = [1, 2, 3, 7, 129, 1000, 8192]
LAYOUTS = ["contiguous", "channel_slice", "transposed"]


def _weights(c_out, cin_g, k, dtype, bias, seed):
    g = torch.Generator().manual_seed(seed)
    w = (torch.randn(c_out, cin_g, k, generator=g) / (cin_g * k) ** 0.5).to(DEV, dtype)
    b = torch.randn(c_out, generator=g).to(DEV, dtype) if bias else None
    return w, b


def _check(x, w, b, dilation, groups, precision, label):
    with poisoned_outputs():
        y = causal_conv1d(x, w, b, dilation, groups, precision)
    assert_close(y, exact_forward(x, w, b, dilation, groups, precision), x.dtype, precision, label=label,
                 terms=w.shape[1] * w.shape[2])


@pytest.mark.parametrize("dtype,precision", DTYPE_PRECISIONS, ids=lambda v: str(v).replace("torch.", ""))
@pytest.mark.parametrize("k", KS)
@pytest.mark.parametrize("groups", [1, 4, 8])
def test_cuda_core_kernels_grid(dtype, precision, k, groups):
    """8 -> 16 channels: groups 1 and 4 run the generic kernel, groups 8 the depthwise one."""
    seed = 0
    for dilation in DILATIONS:
        for bias in (False, True):
            for length in LENGTHS:
                for layout in LAYOUTS:
                    seed += 1
                    x = make_x((2, 8, length), dtype, DEV, layout, seed)
                    w, b = _weights(16, 8 // groups, k, dtype, bias, seed)
                    _check(x, w, b, dilation, groups, precision,
                           f"K={k} d={dilation} g={groups} bias={bias} L={length} {layout}")


def _tc_kernels():
    names = ["mma"]
    if torch.cuda.is_available() and ext().has_wgmma():
        names[:0] = ["wgmma", "wgmma-ra", "wgmma-window"]
    return names


# "wgmma" is the TMA kernel wherever it applies (both fp32 modes), "wgmma-ra" the one that
# reads x from registers out of staged tiles, "wgmma-window" (TF32 only; elsewhere it runs
# what "wgmma" runs) the TMA kernel that reads x into registers from raw windows.
@pytest.mark.parametrize("kernel", ["wgmma", "wgmma-ra", "wgmma-window", "mma"])
@pytest.mark.parametrize("dtype,precision", DTYPE_PRECISIONS, ids=lambda v: str(v).replace("torch.", ""))
@pytest.mark.parametrize("k", KS)
@pytest.mark.parametrize("groups", [1, 2])
def test_tensor_core_kernels_grid(kernel, dtype, precision, k, groups):
    """96 -> 160 channels per group: partial input-channel chunks and output tiles."""
    if kernel not in _tc_kernels():
        pytest.skip("wgmma needs an sm_90 GPU")
    if kernel == "wgmma-window" and (dtype, precision) != (torch.float32, "tf32"):
        pytest.skip("the raw-window kernel is TF32 only (the others would repeat the 'wgmma' cases)")
    seed = 1000
    with forced_kernel(kernel):
        for dilation in DILATIONS:
            for bias in (False, True):
                for length in (8, 64, 1000, 8192):
                    for layout in LAYOUTS:
                        seed += 1
                        x = make_x((2, 96 * groups, length), dtype, DEV, layout, seed)
                        w, b = _weights(160 * groups, 96, k, dtype, bias, seed)
                        _check(x, w, b, dilation, groups, precision,
                               f"{kernel} K={k} d={dilation} g={groups} bias={bias} L={length} {layout}")


@pytest.mark.parametrize("skew", ["1", "4", "7", "64"])
@pytest.mark.parametrize("dtype,precision", DTYPE_PRECISIONS, ids=lambda v: str(v).replace("torch.", ""))
@pytest.mark.parametrize("kernel", ["wgmma", "wgmma-window"])
def test_tma_forward_with_skewed_consumers(kernel, skew, dtype, precision, monkeypatch):
    """CAUSALCONV_CONSUMER_SKEW starts the second consumer warpgroup that many taps late (the
    host caps it at what the first can issue alone): same results, no deadlock, including
    stages of fewer taps (K = 5, 7) and several tiles per block."""
    if not ext().has_wgmma():
        pytest.skip("the TMA forward needs an sm_90 GPU")
    if kernel == "wgmma-window" and (dtype, precision) != (torch.float32, "tf32"):
        pytest.skip("the raw-window kernel is TF32 only")
    monkeypatch.setenv("CAUSALCONV_CONSUMER_SKEW", skew)
    seed = 2000
    with forced_kernel(kernel):
        for c_in, c_out, k, dilation, length in ((256, 256, 4, 1, 8192), (96, 160, 5, 3, 1000), (64, 64, 7, 2, 4096),
                                                 (32, 48, 1, 1, 264), (64, 64, 2, 512, 2048)):
            seed += 1
            x = make_x((4, c_in, length), dtype, DEV, "contiguous", seed)
            w, b = _weights(c_out, c_in, k, dtype, True, seed)
            _check(x, w, b, dilation, 1, precision, f"skew {skew} {c_in}->{c_out} K={k} d={dilation} L={length}")


@pytest.mark.parametrize("dtype,precision", DTYPE_PRECISIONS, ids=lambda v: str(v).replace("torch.", ""))
@pytest.mark.parametrize("kernel", ["wgmma", "wgmma-window"])
def test_tma_forward_with_staggered_start(kernel, dtype, precision, monkeypatch):
    """CAUSALCONV_STAGGER_NS=half starts the blocks with one tile fewer half a tile late (the
    launcher's estimate of a tile's time): only the start moves, so the results are bitwise
    those of an unstaggered run, and right against float64.  Shapes whose tiles do not fill
    whole waves on an H100 or H200 (132 multiprocessors), so that some blocks wait."""
    if not ext().has_wgmma():
        pytest.skip("the TMA forward needs an sm_90 GPU")
    if kernel == "wgmma-window" and (dtype, precision) != (torch.float32, "tf32"):
        pytest.skip("the raw-window kernel is TF32 only")
    seed = 2100
    with forced_kernel(kernel):
        for b, c_in, c_out, k, dilation, length in ((4, 256, 256, 4, 1, 8192), (5, 96, 160, 5, 3, 1000)):
            seed += 1
            x = make_x((b, c_in, length), dtype, DEV, "contiguous", seed)
            w, bias = _weights(c_out, c_in, k, dtype, True, seed)
            label = f"stagger half {b}x{c_in}->{c_out} K={k} d={dilation} L={length}"
            monkeypatch.setenv("CAUSALCONV_STAGGER_NS", "half")
            _check(x, w, bias, dilation, 1, precision, label)
            staggered = causal_conv1d(x, w, bias, dilation, 1, precision)
            monkeypatch.setenv("CAUSALCONV_STAGGER_NS", "0")
            plain = causal_conv1d(x, w, bias, dilation, 1, precision)
            assert torch.equal(staggered, plain), f"{label}: differs from the unstaggered run"


@pytest.mark.parametrize("dtype", [torch.bfloat16, torch.float16], ids=lambda v: str(v).replace("torch.", ""))
def test_tma_forward_wide_time_tiles(dtype, monkeypatch):
    """The 16-bit TMA forward's 256-step time tiles (the default; CAUSALCONV_WIDE_TILES=0 keeps
    them at 192 or fewer), whose raw x windows arrive as two TMA boxes.  Each shape picks 256
    on 132 multiprocessors (H100, H200: fewer tile rounds per unit of length than 192 or
    128): the default problem's channels, a dilated K=5 over a partial channel chunk (96) and
    an L that is not a multiple of 256 (8184), groups, and dilations whose span fills the two
    boxes (100: 232 each) or forces fewer taps per stage (150).  The output of a column does not depend on how many columns
    share its MMA, so the results are bitwise those of 192-step tiles, and right against
    float64; the input gradient (the same kernel over dy) too."""
    if not ext().has_wgmma():
        pytest.skip("the TMA forward needs an sm_90 GPU")
    seed = 2200
    with forced_kernel("wgmma"):
        for b, c_in, c_out, k, dilation, groups, length in ((4, 256, 256, 4, 1, 1, 8192), (8, 96, 160, 5, 3, 1, 8184),
                                                            (4, 128, 128, 3, 2, 2, 8192), (2, 64, 64, 3, 100, 1, 16384),
                                                            (2, 64, 64, 3, 150, 1, 16384)):
            seed += 1
            x = make_x((b, c_in, length), dtype, DEV, "contiguous", seed).requires_grad_()
            w, bias = _weights(c_out, c_in // groups, k, dtype, True, seed)
            dy = torch.randn(b, c_out, length, generator=torch.Generator().manual_seed(seed)).to(DEV, dtype)
            label = f"wide tiles {b}x{c_in}->{c_out} K={k} d={dilation} g={groups} L={length}"
            results = {}
            for wide in ("1", "0"):
                monkeypatch.setenv("CAUSALCONV_WIDE_TILES", wide)
                if wide == "1":
                    _check(x.detach(), w, bias, dilation, groups, "auto", label)
                y = causal_conv1d(x, w, bias, dilation, groups, "auto")
                results[wide] = (y.detach(), torch.autograd.grad(y, x, dy)[0])
            assert torch.equal(results["1"][0], results["0"][0]), f"{label}: differs from 192-step tiles"
            assert torch.equal(results["1"][1], results["0"][1]), f"{label}: input gradient differs from 192-step tiles"


@pytest.mark.parametrize("kernel,knob,value,message", [
    ("wgmma", "CAUSALCONV_CONSUMER_SKEW", "-1", "CAUSALCONV_CONSUMER_SKEW must be 0 to 64"),
    ("wgmma-window", "CAUSALCONV_FRAGMENT_DEPTH", "3", "CAUSALCONV_FRAGMENT_DEPTH must be 2 or 4"),
    ("wgmma", "CAUSALCONV_CHANNEL_SPLIT", "2", "CAUSALCONV_CHANNEL_SPLIT must be 0 or 1"),
    ("wgmma-window", "CAUSALCONV_STREAM_K", "yes", "CAUSALCONV_STREAM_K must be 0, 1 or 2"),
    ("wgmma", "CAUSALCONV_PDL", "2", "CAUSALCONV_PDL must be 0 or 1"),
    ("wgmma-window", "CAUSALCONV_STAGGER_NS", "5us", "CAUSALCONV_STAGGER_NS must be 0 to 1000000"),
    ("wgmma", "CAUSALCONV_STAGGER_NS", "-1", "CAUSALCONV_STAGGER_NS must be 0 to 1000000"),
    ("wgmma", "CAUSALCONV_STAGGER_NS", "quarter", "CAUSALCONV_STAGGER_NS must be 0 to 1000000 .* or 'half'"),
    ("wgmma", "CAUSALCONV_STAGGER_SHORT", "yes", "CAUSALCONV_STAGGER_SHORT must be 0 or 1"),
    ("wgmma", "CAUSALCONV_WIDE_TILES", "256", "CAUSALCONV_WIDE_TILES must be 0 or 1"),
    ("wgmma-window", "CAUSALCONV_RS_SPLIT_FEED", "yes", "CAUSALCONV_RS_SPLIT_FEED must be 0 or 1"),
    ("wgmma-window", "CAUSALCONV_RS_NARROW_TILES", "64", "CAUSALCONV_RS_NARROW_TILES must be 0 or 1"),
    ("wgmma-window", "CAUSALCONV_RS_TMA_STORE", "on", "CAUSALCONV_RS_TMA_STORE must be 0 or 1")])
def test_tuning_knobs_reject_bad_values(kernel, knob, value, message, monkeypatch):
    if not ext().has_wgmma():
        pytest.skip("the knobs' kernels need an sm_90 GPU")
    monkeypatch.setenv(knob, value)
    x = torch.randn(1, 64, 256, device=DEV)
    w = torch.randn(64, 64, 3, device=DEV)
    with forced_kernel(kernel), pytest.raises(RuntimeError, match=message):
        causal_conv1d(x, w, precision="tf32")


@pytest.mark.parametrize("precision", ["tf32", "ieee"])
def test_fp32_channel_split(precision, monkeypatch):
    """Grids of fewer tiles than a quarter of the multiprocessors split the input channels
    over several blocks per tile (fp32 partial sums in a poisoned workspace, bias in the
    first split, added in order): even runs of chunks (256 channels, 8 chunks over 2 tiles),
    uneven ones (320 channels: 10 chunks, runs of 3 over 30 tiles on 132 multiprocessors),
    a partial last chunk (100 channels), groups, dilation, and bitwise repeatability.  The
    split is the default; the knob is set here so that an environment with
    CAUSALCONV_CHANNEL_SPLIT=0 still tests it."""
    if not ext().has_wgmma():
        pytest.skip("the TMA forward needs an sm_90 GPU")
    monkeypatch.setenv("CAUSALCONV_CHANNEL_SPLIT", "1")
    seed = 3000
    for b, c_in, c_out, k, dilation, groups, length in ((1, 256, 256, 4, 1, 1, 64), (15, 320, 256, 4, 1, 1, 64),
                                                        (2, 100, 192, 3, 2, 1, 130), (1, 512, 256, 5, 3, 2, 96)):
        seed += 1
        x = make_x((b, c_in, length), torch.float32, DEV, "contiguous", seed)
        w, bias = _weights(c_out, c_in // groups, k, torch.float32, True, seed)
        _check(x, w, bias, dilation, groups, precision, f"split {b}x{c_in}->{c_out} K={k} d={dilation} g={groups}")
        runs = [causal_conv1d(x, w, bias, dilation, groups, precision) for _ in range(2)]
        assert torch.equal(runs[0], runs[1]), "channel-split forward differs between identical runs"


@pytest.mark.parametrize("mode", ["1", "2"])
def test_fp32_stream_k(mode, monkeypatch):
    """The raw-window TF32 forward cuts its last waves' tiles (CAUSALCONV_STREAM_K=1) or all
    of them (=2) into segments along the
    reduction (stream_k.cuh), the head of a tile adding the tail's partial sums that the next
    block stored.  Shapes sized from this GPU's multiprocessor count so that the split
    engages: one wave and a few tiles more (nearly every tile cut), two waves and more (whole
    tiles, then segments), K = 5 (segments starting inside a stage of 4 taps), a partial input
    chunk, partial output and time tiles, groups, dilation, bias.  Against float64, bitwise
    equal between runs, and not bitwise equal to whole tiles (which add in another order): the
    evidence that the segments ran."""
    if not ext().has_wgmma():
        pytest.skip("the raw-window forward needs an sm_90 GPU")
    sms = torch.cuda.get_device_properties(DEV).multi_processor_count
    seed = 3500
    with forced_kernel("wgmma-window"):
        # tiles = ceil(c_out / groups / 128) * ceil(L / 256) * groups * B
        for b, c_in, c_out, k, dilation, groups, length in (
                (sms // 8 + 1, 128, 128, 4, 1, 1, 2048), (sms // 8 + 1, 100, 192, 5, 3, 1, 1000),
                (sms // 32 + 1, 256, 256, 3, 2, 2, 4096), (2 * sms // 10 + 1, 128, 128, 4, 1, 1, 2560)):
            seed += 1
            label = f"stream-K {mode} {b}x{c_in}->{c_out} K={k} d={dilation} g={groups} L={length}"
            x = make_x((b, c_in, length), torch.float32, DEV, "contiguous", seed)
            w, bias = _weights(c_out, c_in // groups, k, torch.float32, True, seed)
            monkeypatch.setenv("CAUSALCONV_STREAM_K", mode)
            _check(x, w, bias, dilation, groups, "tf32", label)
            runs = [causal_conv1d(x, w, bias, dilation, groups, "tf32") for _ in range(2)]
            assert torch.equal(runs[0], runs[1]), f"{label}: differs between identical runs"
            monkeypatch.setenv("CAUSALCONV_STREAM_K", "0")
            whole = causal_conv1d(x, w, bias, dilation, groups, "tf32")
            assert not torch.equal(runs[0], whole), f"{label}: no tile was cut (same sums as whole tiles)"
            assert_close(whole, exact_forward(x, w, bias, dilation, groups, "tf32"), torch.float32, "tf32",
                         label=label + " whole tiles", terms=w.shape[1] * w.shape[2])


def _window_cases(cases, seed):
    """Inputs for the raw-window forward's knob tests: per case (B, C_in, C_out, K, dilation,
    groups, L, Stream-K mode) a label, x, weights, bias, dilation, groups and the Stream-K
    mode to set.  Skips without an sm_90 GPU."""
    if not ext().has_wgmma():
        pytest.skip("the raw-window forward needs an sm_90 GPU")
    out = []
    for i, (b, c_in, c_out, k, dilation, groups, length, stream_k) in enumerate(cases):
        x = make_x((b, c_in, length), torch.float32, DEV, "contiguous", seed + i)
        w, bias = _weights(c_out, c_in // groups, k, torch.float32, True, seed + i)
        label = f"{b}x{c_in}->{c_out} K={k} d={dilation} g={groups} L={length} stream-K {stream_k}"
        out.append((label, x, w, bias, dilation, groups, stream_k))
    return out


def _same_with_knob_off(monkeypatch, cases, seed, knob, what):
    """Each case through the raw-window forward with `knob` at 1 and at 0: both within
    float64's tolerance (outputs poisoned first), and bitwise equal, since the knob changes
    how the kernel moves data, not which products it sums in which order."""
    with forced_kernel("wgmma-window"):
        for label, x, w, bias, dilation, groups, stream_k in _window_cases(cases, seed):
            monkeypatch.setenv("CAUSALCONV_STREAM_K", stream_k)
            results = {}
            for value in ("1", "0"):
                monkeypatch.setenv(knob, value)
                _check(x, w, bias, dilation, groups, "tf32", f"{label} {knob}={value}")
                results[value] = causal_conv1d(x, w, bias, dilation, groups, "tf32")
            assert torch.equal(results["1"], results["0"]), f"{label}: differs from {what}"


def test_fp32_split_feed(monkeypatch):
    """The raw-window TF32 forward with its windows and weights issued by two producer
    threads, and up to four raw windows for stages of one or two taps
    (CAUSALCONV_RS_SPLIT_FEED=1, the default), against one producer and two windows (=0).
    Stages of one tap (K=2 at dilation 512: the taps' span exceeds a TMA box), of two (K=2),
    of four and three (K=7), with Stream-K segments over the deeper ring, a partial input
    chunk, partial output and time tiles, groups and bias."""
    cases = ((4, 64, 64, 2, 512, 1, 4096, "0"), (3, 100, 192, 2, 1, 1, 1000, "0"),
             (2, 128, 128, 7, 4, 2, 2048, "0"), (9, 64, 64, 2, 300, 1, 4096, "2"))
    _same_with_knob_off(monkeypatch, cases, 3701, "CAUSALCONV_RS_SPLIT_FEED", "one producer and two windows")


def test_fp32_narrow_tiles(monkeypatch):
    """The raw-window TF32 forward with 64-channel output tiles for groups of 64 output
    channels or fewer (CAUSALCONV_RS_NARROW_TILES=1, the default): against float64 and bitwise equal
    between runs, beside the 128-channel tile (=0) on the same inputs.  64 channels with taps
    512 apart (one tap per stage), a partial output tile (48 channels) with a partial input
    chunk, groups of 64, and Stream-K segments (mode 2) over the narrow tile."""
    cases = ((4, 64, 64, 2, 512, 1, 4096, "0"), (3, 100, 48, 3, 2, 1, 1000, "0"),
             (2, 128, 128, 4, 1, 2, 2048, "0"), (9, 64, 64, 4, 3, 1, 4096, "2"))
    with forced_kernel("wgmma-window"):
        for label, x, w, bias, dilation, groups, stream_k in _window_cases(cases, 3801):
            monkeypatch.setenv("CAUSALCONV_STREAM_K", stream_k)
            for narrow in ("1", "0"):
                monkeypatch.setenv("CAUSALCONV_RS_NARROW_TILES", narrow)
                _check(x, w, bias, dilation, groups, "tf32", f"{label} narrow={narrow}")
            monkeypatch.setenv("CAUSALCONV_RS_NARROW_TILES", "1")
            runs = [causal_conv1d(x, w, bias, dilation, groups, "tf32") for _ in range(2)]
            assert torch.equal(runs[0], runs[1]), f"{label}: differs between identical runs"


def test_fp32_tma_store(monkeypatch):
    """The raw-window TF32 forward writing y through shared memory and TMA stores
    (CAUSALCONV_RS_TMA_STORE=1, the default) against the direct stores (=0).  64 channels (the narrow
    tile) with taps 512 apart; 48 channels in one group (the last slice clipped at C_out) with
    L = 1000 (the last time slice clipped at L); two groups of 64 (slices at each group's
    start); two groups of 48, which the stores would straddle (direct stores instead);
    Stream-K segments (mode 2) over the 128-channel tile."""
    cases = ((4, 64, 64, 2, 512, 1, 4096, "0"), (3, 100, 48, 3, 2, 1, 1000, "0"),
             (2, 128, 128, 4, 1, 2, 2048, "0"), (2, 96, 96, 3, 1, 2, 1000, "0"),
             (9, 256, 256, 4, 1, 1, 2048, "2"))
    _same_with_knob_off(monkeypatch, cases, 3901, "CAUSALCONV_RS_TMA_STORE", "the direct stores")


def test_fp32_multicast_pairs(monkeypatch):
    """The raw-window TF32 forward in clusters of two blocks that each copy half of every
    weight tap into both (CAUSALCONV_RS_MULTICAST=1) against single blocks (=0).  An odd
    count of (batch, time tile) slots, whose last pair has a tile past y's end (3 x 700, and
    1 x 64, one tile in all); 64 channels (the narrow tile's 4 KB halves) with taps 512
    apart; two groups with K=7 (stages of four and three taps); more pairs than clusters fit
    at once; and Stream-K (mode 2), which keeps single blocks."""
    cases = ((3, 100, 48, 3, 2, 1, 700, "0"), (1, 256, 256, 4, 1, 1, 64, "0"), (4, 64, 64, 2, 512, 1, 4096, "0"),
             (2, 128, 128, 7, 4, 2, 2048, "0"), (9, 256, 256, 4, 1, 1, 2048, "0"), (9, 256, 256, 4, 1, 1, 2048, "2"))
    _same_with_knob_off(monkeypatch, cases, 4001, "CAUSALCONV_RS_MULTICAST", "single blocks")


@pytest.mark.parametrize("c_in,c_out,groups", [(3, 5, 1), (96, 160, 1), (257, 257, 1), (16, 16, 1), (64, 64, 64),
                                               (256, 512, 2), (48, 48, 16)])
@pytest.mark.parametrize("dtype,precision", DTYPE_PRECISIONS, ids=lambda v: str(v).replace("torch.", ""))
def test_automatic_dispatch_odd_channels(c_in, c_out, groups, dtype, precision):
    for length, k, dilation in ((1, 4, 1), (1000, 4, 1), (8192, 3, 2), (777, 5, 3)):
        x = make_x((3, c_in, length), dtype, DEV, "contiguous", length)
        w, b = _weights(c_out, c_in // groups, k, dtype, True, length)
        _check(x, w, b, dilation, groups, precision, f"{c_in}->{c_out} g={groups} L={length} K={k} d={dilation}")


@pytest.mark.parametrize("dtype", [torch.float32, torch.float16, torch.bfloat16], ids=str)
@pytest.mark.parametrize("tf32", [True, False])
def test_harness_protocol(dtype, tf32):
    """KernelBench-style: seeded construction on the CPU, .to(device, dtype), 5 seeded trials
    with B and L jittered by up to 15%, allclose at 1e-4 (fp32) / 1e-2 (half types)."""
    if dtype != torch.float32 and not tf32:
        pytest.skip("the TF32 switch only matters for fp32")
    tol = HARNESS_TOL[dtype]
    rng = random.Random(1234)
    with _precision.conv_tf32(tf32):
        torch.manual_seed(42)
        ref = Model(256, 256, 4, 1).to(DEV, dtype)
        torch.manual_seed(42)
        new = ModelNew(256, 256, 4, 1).to(DEV, dtype)
        for trial in range(5):
            b = max(1, round(32 * rng.uniform(0.85, 1.15)))
            length = max(1, round(8192 * rng.uniform(0.85, 1.15)))
            torch.manual_seed(trial)
            x = torch.randn(b, 256, length, device=DEV, dtype=dtype)
            with torch.no_grad(), poisoned_outputs():
                y_ref, y_new = ref(x), new(x)
            err = (y_ref.double() - y_new.double()).abs().max().item()
            print(f"trial {trial} B={b} L={length}: max abs diff vs reference {err:.2e}")
            assert y_new.shape == y_ref.shape and y_new.dtype == y_ref.dtype
            assert torch.allclose(y_ref, y_new, atol=tol, rtol=tol)


@pytest.mark.parametrize("tf32", [True, False])
def test_fp32_precision_follows_torch_switch(tf32):
    torch.manual_seed(3)
    x = torch.randn(4, 256, 2048, device=DEV)
    w = torch.randn(256, 256, 4, device=DEV) / 32
    exact = causal_conv1d_reference(x.double(), w.double())
    with _precision.conv_tf32(tf32):
        assert _precision.conv_allows_tf32() == tf32
        # what cuDNN does under this setting: TF32 errors are ~1e-4, IEEE ones ~1e-7
        cudnn_err = ((causal_conv1d_reference(x, w).double() - exact).norm() / exact.norm()).item()
        assert (cudnn_err > 1e-5) == tf32, f"cuDNN error {cudnn_err:.1e} contradicts the resolver"
        with poisoned_outputs():
            y = causal_conv1d(x, w)
    assert_close(y, exact_forward(x, w, None, 1, 1, "tf32" if tf32 else "ieee"), torch.float32,
                 "tf32" if tf32 else "ieee", label=f"auto under tf32={tf32}")


# (B, C_in, C_out, groups, K, dilation, L): the benchmark grid and a few narrower/dilated ones
CUDNN_SHAPES = [(32, 256, 256, 1, 4, 1, 8192), (64, 320, 320, 1, 4, 1, 16384), (32, 256, 512, 1, 4, 1, 8192),
                (8, 1024, 1024, 1, 4, 1, 4096), (4, 512, 512, 1, 3, 1, 2048), (16, 64, 64, 1, 2, 512, 16384),
                (32, 128, 128, 1, 7, 4, 4096), (3, 96, 160, 1, 5, 3, 1000), (1, 256, 256, 1, 4, 1, 64),
                (4, 3, 5, 1, 3, 2, 77), (8, 16, 16, 1, 4, 1, 4096), (8, 8, 8, 1, 4, 1, 4096), (8, 32, 32, 1, 3, 2, 4096),
                (8, 256, 256, 1, 4, 2, 4096), (8, 256, 512, 2, 4, 1, 4096), (8, 64, 64, 64, 4, 1, 4096)]


@pytest.mark.parametrize("shape", CUDNN_SHAPES, ids=str)
def test_auto_precision_matches_cudnn(shape):
    """'auto' computes what the reference computes: TF32 exactly where cuDNN uses it."""
    b, c_in, c_out, groups, k, dilation, length = shape
    torch.manual_seed(0)
    x = torch.randn(b, c_in, length, device=DEV)
    w = torch.randn(c_out, c_in // groups, k, device=DEV) / (c_in // groups * k) ** 0.5
    exact = causal_conv1d_reference(x.double(), w.double(), None, dilation, groups)
    with _precision.conv_tf32(True), torch.no_grad():
        ref = causal_conv1d_reference(x, w, None, dilation, groups)
        err = ((ref.double() - exact).norm() / exact.norm()).item()
        probed = _precision.cudnn_uses_tf32(x.shape, w.shape, dilation, groups, x.device)
        ours = causal_conv1d(x, w, None, dilation, groups)
    diff = (ours - ref).abs().max().item()
    print(f"{shape}: cuDNN rel error {err:.2e} ({'TF32' if err > 1e-5 else 'exact'}), probe says "
          f"{'TF32' if probed else 'exact'}, max |ours - ref| {diff:.1e}")
    assert (err > 1e-5) == probed
    # ours is exact for its mode; where cuDNN is exact too the two agree to fp32 rounding.
    # (cuDNN's TF32 kernels do not all round operands to nearest-even: for some shapes its
    # TF32 result differs from ours by up to ~1e-3, both within TF32 accuracy.)
    assert_close(ours, exact_forward(x, w, None, dilation, groups, "tf32" if probed else "ieee"), torch.float32,
                 "tf32" if probed else "ieee", label=str(shape))
    if not probed:
        assert torch.allclose(ours, ref, atol=1e-4, rtol=1e-4)


@pytest.mark.parametrize("case", ["auto", "generic", "depthwise"])
def test_tensors_over_2_31_elements(case):
    length = (1 << 27) + 24  # 16 channels: 2^31 + 384 elements per tensor
    torch.manual_seed(5)
    x = torch.randn(1, 16, length, device=DEV, dtype=torch.float16)
    groups = 16 if case == "depthwise" else 1
    w, b = _weights(16, 16 // groups, 4, torch.float16, True, 9)
    kernel = "auto" if case == "depthwise" else case
    with forced_kernel(kernel), poisoned_outputs():
        y = causal_conv1d(x, w, b, 2, groups)
    pad = 6
    for start in (0, length // 2 + 3, length - 1000):
        lo = max(0, start - pad)
        ref = causal_conv1d_reference(x[..., lo:start + 1000].double(), w.double(), b.double(), 2, groups)
        assert_close(y[..., start:start + 1000], ref[..., start - lo:], torch.float16, "auto", label=f"t0={start}")
    del x, y
    torch.cuda.empty_cache()


def test_automatic_choice_on_default_problem():
    x = torch.randn(2, 256, 8192, device=DEV)
    w = torch.randn(256, 256, 4, device=DEV)
    with count_launches() as n:
        causal_conv1d(x, w)
    expected = "wgmma" if ext().has_wgmma() else "mma"
    assert n[expected] == 1 and sum(n.values()) == 1, n


@pytest.mark.parametrize("dtype", [torch.bfloat16, torch.float16], ids=str)
def test_16bit_stream_k(dtype, monkeypatch):
    """CAUSALCONV_STREAM_K=2 shares every tile's stages of the 16-bit TMA forward out over the
    grid (stream_k.cuh): block shares start with a tile's tail, whose fp32 sums go to the
    block before it, and end with a head that adds them.  Against float64, and bitwise equal
    between runs.  Shapes (at least a tile per block): K = 4 in one stage, K = 5 (two stages
    per chunk), a partial input chunk, partial output and time tiles, groups, dilation, bias."""
    if not ext().has_wgmma():
        pytest.skip("the TMA forward needs an sm_90 GPU")
    sms = torch.cuda.get_device_properties(DEV).multi_processor_count
    monkeypatch.setenv("CAUSALCONV_STREAM_K", "2")
    seed = 3600
    with forced_kernel("wgmma"):
        for b, c_in, c_out, k, dilation, groups, length in (
                (sms // 8 + 1, 256, 128, 4, 1, 1, 1536), (sms // 8 + 1, 100, 192, 5, 3, 1, 1000),
                (sms // 32 + 1, 256, 256, 3, 2, 2, 4096), (2, 256, 256, 4, 1, 1, 8192)):
            seed += 1
            label = f"stream-K {dtype} {b}x{c_in}->{c_out} K={k} d={dilation} g={groups} L={length}"
            x = make_x((b, c_in, length), dtype, DEV, "contiguous", seed)
            w, bias = _weights(c_out, c_in // groups, k, dtype, True, seed)
            _check(x, w, bias, dilation, groups, "tf32", label)
            runs = [causal_conv1d(x, w, bias, dilation, groups) for _ in range(2)]
            assert torch.equal(runs[0], runs[1]), f"{label}: differs between identical runs"


@pytest.mark.parametrize("dtype,precision", DTYPE_PRECISIONS, ids=lambda v: str(v).replace("torch.", ""))
def test_forward_as_dependent_launch(dtype, precision, monkeypatch):
    """By default (CAUSALCONV_PDL unset or 1) the TMA forwards launch as programmatic
    dependents of the weight image kernel (they start before it ends and wait for it before
    their first weight copy), and the fp32 channel split's reduction as one of the forward.
    The same kernels add in the same order, so the output must be bitwise equal to normal
    launches' (CAUSALCONV_PDL=0), on a user stream right after a matmul that produced x and
    the weights, with Stream-K on (its flags are zeroed before the image kernel), and in a
    replayed CUDA graph.  Shapes: whole tiles, Stream-K's cut tiles, a channel split (L=64)."""
    if not ext().has_wgmma():
        pytest.skip("the TMA forwards need an sm_90 GPU")
    monkeypatch.setenv("CAUSALCONV_STREAM_K", "1")
    sms = torch.cuda.get_device_properties(DEV).multi_processor_count
    s = torch.cuda.Stream()
    for seed, (b, c_in, c_out, k, dilation, length) in enumerate(((2, 256, 256, 4, 1, 8192),
                                                                  (sms // 8 + 1, 128, 128, 5, 2, 2048),
                                                                  (1, 256, 256, 4, 1, 64))):
        x0 = make_x((b, c_in, length), dtype, DEV, "contiguous", 4000 + seed)
        w0, bias = _weights(c_out, c_in, k, dtype, True, 4000 + seed)
        eye_x = torch.eye(c_in, device=DEV, dtype=dtype)
        eye_w = torch.eye(c_out, device=DEV, dtype=dtype)
        outs = {}
        for pdl in ("0", "1"):
            monkeypatch.setenv("CAUSALCONV_PDL", pdl)
            s.wait_stream(torch.cuda.current_stream())
            with torch.cuda.stream(s):
                # x and the weights come from kernels just queued on the same stream
                x = torch.matmul(eye_x, x0)
                w = torch.matmul(eye_w, w0.flatten(1)).view_as(w0)
                with poisoned_outputs():
                    outs[pdl] = causal_conv1d(x, w, bias, dilation, 1, precision)
            torch.cuda.current_stream().wait_stream(s)
        torch.cuda.synchronize()
        label = f"PDL {b}x{c_in}->{c_out} K={k} d={dilation} L={length}"
        assert torch.equal(outs["0"], outs["1"]), f"{label}: dependent launch changed the output"
        assert_close(outs["1"], exact_forward(x0, w0, bias, dilation, 1, precision), dtype, precision, label=label,
                     terms=c_in * k)
        graph = torch.cuda.CUDAGraph()
        static_x = x0.clone()
        with torch.cuda.graph(graph):
            static_y = causal_conv1d(static_x, w0, bias, dilation, 1, precision)
        static_x.copy_(torch.flip(x0, dims=[2]))
        graph.replay()
        torch.cuda.synchronize()
        monkeypatch.setenv("CAUSALCONV_PDL", "0")
        assert torch.equal(static_y, causal_conv1d(static_x, w0, bias, dilation, 1, precision)), f"{label}: graph replay"


def test_cuda_graph_capture_and_current_stream():
    torch.manual_seed(0)
    m = ModelNew(128, 128, 4, bias=True).to(DEV)
    static_x = torch.randn(4, 128, 1024, device=DEV)
    s = torch.cuda.Stream()
    s.wait_stream(torch.cuda.current_stream())
    with torch.cuda.stream(s), torch.no_grad():
        for _ in range(2):
            m(static_x)  # warm up (and build the weight image path) on a side stream
    torch.cuda.current_stream().wait_stream(s)
    g = torch.cuda.CUDAGraph()
    with torch.cuda.graph(g), torch.no_grad():
        static_y = m(static_x)
    for seed in range(3):
        torch.manual_seed(seed)
        static_x.copy_(torch.randn_like(static_x))
        g.replay()
        torch.cuda.synchronize()
        with torch.no_grad():
            expected = m(static_x)
        torch.testing.assert_close(static_y, expected, atol=0, rtol=0)


def test_graph_replay_is_independent_of_eager_calls():
    """A captured graph owns its weight image: eager calls in between, whose images go to
    the per-stream scratch buffer (and grow it), do not change what the replay computes."""
    torch.manual_seed(1)
    m = ModelNew(128, 128, 4).to(DEV)
    other = ModelNew(512, 512, 3).to(DEV)
    static_x = torch.randn(2, 128, 1024, device=DEV)
    with torch.no_grad():
        expected = m(static_x)
        s = torch.cuda.Stream()
        s.wait_stream(torch.cuda.current_stream())
        with torch.cuda.stream(s):
            m(static_x)
        torch.cuda.current_stream().wait_stream(s)
        g = torch.cuda.CUDAGraph()
        with torch.cuda.graph(g):
            static_y = m(static_x)
        big = torch.randn(2, 512, 2048, device=DEV)
        for _ in range(2):
            other(big)  # rewrites the eager scratch buffer with another weight image
            g.replay()
            other(big)
            torch.cuda.synchronize()
            torch.testing.assert_close(static_y, expected, atol=0, rtol=0)


@pytest.mark.parametrize("dtype,precision", [(torch.float32, "tf32"), (torch.float32, "ieee"),
                                             (torch.bfloat16, "auto")], ids=["tf32", "ieee", "bf16"])
def test_forward_allocates_only_its_output(dtype, precision):
    x = torch.randn(2, 256, 2048, device=DEV, dtype=dtype)
    w = torch.randn(256, 256, 4, device=DEV, dtype=dtype)
    b = torch.randn(256, device=DEV, dtype=dtype)
    causal_conv1d(x, w, b, precision=precision)  # warm-up: build, precision lookup, scratch
    torch.cuda.synchronize()
    before = torch.cuda.memory_stats()["allocation.all.allocated"]
    with count_launches() as n:
        y = causal_conv1d(x, w, b, precision=precision)
    allocated = torch.cuda.memory_stats()["allocation.all.allocated"] - before
    assert n["wgmma"] + n["mma"] == 1, n
    assert allocated == 1, f"{allocated} allocations for one forward call (expected only the output)"
    del y


def test_compile_on_gpu():
    m = ModelNew(64, 64, 4, 2, True).to(DEV)
    compiled = torch.compile(m, fullgraph=True)
    x = torch.randn(2, 64, 999, device=DEV)
    torch.testing.assert_close(compiled(x), m(x), atol=0, rtol=0)


def test_float64_on_cuda_uses_pytorch_path():
    x = torch.randn(2, 8, 50, device=DEV, dtype=torch.float64)
    w = torch.randn(8, 8, 3, device=DEV, dtype=torch.float64)
    with count_launches() as n:
        y = causal_conv1d(x, w)
    assert sum(n.values()) == 0
    assert_close(y, exact_forward(x, w, None, 1, 1), torch.float64, "auto")
