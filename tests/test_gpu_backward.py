"""CUDA backward: input and weight gradients against the float64 oracle, determinism, only the
needed kernels, autograd checks and compile on the GPU."""

import pytest
import torch

from causalconv import CausalConv1d, ModelNew, causal_conv1d, causal_conv1d_reference
from helpers import (assert_close, count_launches, exact_forward, exact_grads, ext, forced_kernel, make_x,
                     poisoned_outputs)

pytestmark = pytest.mark.gpu
DEV = "cuda"
DTYPE_PRECISIONS = [(torch.float32, "tf32"), (torch.float32, "ieee"), (torch.float16, "auto"),
                    (torch.bfloat16, "auto")]


def _grads(x, w, b, gy, dilation, groups, precision):
    x = x.detach().requires_grad_(True)
    w = w.detach().requires_grad_(True)
    b = None if b is None else b.detach().requires_grad_(True)
    with poisoned_outputs():
        y = causal_conv1d(x, w, b, dilation, groups, precision)
        grads = torch.autograd.grad(y, [x, w] + ([b] if b is not None else []), gy)
    return grads


def _problem(b, c_in, c_out, groups, k, length, dtype, seed, layout="contiguous"):
    """Fresh random x, weight (scaled to unit-variance outputs) and grad_output on the GPU."""
    x = make_x((b, c_in, length), dtype, DEV, layout, seed)
    g = torch.Generator().manual_seed(seed)
    w = (torch.randn(c_out, c_in // groups, k, generator=g) / (c_in // groups * k) ** 0.5).to(DEV, dtype)
    gy = torch.randn(b, c_out, length, generator=g).to(DEV, dtype)
    return x, w, gy, g


def _check(c_in, c_out, groups, k, dilation, length, dtype, precision, bias, layout, seed, label):
    x, w, gy, g = _problem(2, c_in, c_out, groups, k, length, dtype, seed, layout)
    b = torch.randn(c_out, generator=g).to(DEV, dtype) if bias else None
    got = _grads(x, w, b, gy, dilation, groups, precision)
    exact = exact_grads(x, w, b, gy, dilation, groups, precision)
    for name, a, e in zip(("dx", "dw", "db"), got, exact):
        quantity = "out" if name == "db" else name
        if name == "db":  # a plain sum of dy, reduced by torch in the input dtype
            e = gy.double().sum((0, 2))
            tol = {torch.float32: 1e-5, torch.float16: 1e-2, torch.bfloat16: 2e-2}[dtype]
            torch.testing.assert_close(a.double(), e, atol=tol * length, rtol=tol)
            continue
        assert_close(a, e, dtype, precision, quantity, label=label, terms=c_out // groups * k if name == "dx" else 0)


@pytest.mark.parametrize("dtype,precision", DTYPE_PRECISIONS, ids=lambda v: str(v).replace("torch.", ""))
@pytest.mark.parametrize("k", [1, 2, 3, 4, 5, 7, 16])
@pytest.mark.parametrize("kernel", ["generic", "auto"])
def test_gradients_grid(dtype, precision, k, kernel):
    seed = 0
    with forced_kernel(kernel):
        for c_in, c_out, groups in ((8, 16, 1), (8, 16, 4), (8, 16, 8), (96, 160, 1), (64, 128, 2)):
            if kernel == "generic" and groups == c_in:
                continue  # depthwise forward has its own kernel; generic is forced dense
            for dilation in (1, 2, 5):
                for length in (1, 7, 129, 1000):
                    for layout in ("contiguous", "transposed"):
                        seed += 1
                        _check(c_in, c_out, groups, k, dilation, length, dtype, precision, seed % 2 == 0, layout,
                               seed, f"{kernel} {c_in}->{c_out} g={groups} K={k} d={dilation} L={length} {layout}")


# "wgmma-window" runs the fp32 weight gradient with x read into registers from raw windows
# (wgrad_rs.cu); 16-bit types have no such kernel (they would repeat the "wgmma" cases).
@pytest.mark.parametrize("dtype,precision", DTYPE_PRECISIONS, ids=lambda v: str(v).replace("torch.", ""))
@pytest.mark.parametrize("k,dilation", [(1, 1), (2, 1), (3, 2), (4, 1), (4, 5), (5, 3), (7, 4), (8, 9), (16, 1),
                                        (3, 40), (2, 512)])  # d=512: one tap per tile, two tiles of taps
@pytest.mark.parametrize("kernel", ["wgmma", "wgmma-window"])
def test_tensor_core_weight_gradient(dtype, precision, k, dilation, kernel):
    if not ext().has_wgmma():
        pytest.skip("wgmma needs an sm_90 GPU")
    if precision == "ieee":
        pytest.skip("full-accuracy fp32 weight gradients run on the CUDA-core kernel")
    if kernel == "wgmma-window" and dtype != torch.float32:
        pytest.skip("the raw-window weight gradient is fp32 only")
    with forced_kernel(kernel):
        for c_in, c_out, groups, length in ((96, 160, 1, 1000), (256, 256, 1, 4096), (192, 64, 2, 8), (257, 33, 1, 64),
                                            (64, 320, 1, 512)):
            _check(c_in, c_out, groups, k, dilation, length, dtype, precision, True, "contiguous", k * 100 + length,
                   f"{kernel} {c_in}->{c_out} g={groups} K={k} d={dilation} L={length}")


@pytest.mark.parametrize("k,dilation", [(2, 512), (12, 1), (40, 3)])
@pytest.mark.parametrize("kernel", ["auto", "wgmma-window"])
def test_long_or_dilated_weight_gradient_runs_on_tensor_cores(k, dilation, kernel):
    """The taps' tiles are cut from a raw x window per stage (several tiles of taps when the
    span is wide), so no K or dilation sends the weight gradient to the CUDA-core kernel."""
    if not ext().has_wgmma():
        pytest.skip("wgmma needs an sm_90 GPU")
    g = torch.Generator().manual_seed(k)
    x = torch.randn(2, 64, 2048, generator=g).to(DEV)
    w = (torch.randn(64, 64, k, generator=g) / (8 * k**0.5)).to(DEV).requires_grad_(True)
    gy = torch.randn(2, 64, 2048, generator=g).to(DEV)
    with forced_kernel(kernel), count_launches() as n, poisoned_outputs():
        dw = torch.autograd.grad(causal_conv1d(x, w, dilation=dilation, precision="tf32"), [w], gy)[0]
    assert n["wgrad_wgmma"] == 1 and n["wgrad_generic"] == 0, n
    exact = exact_grads(x, w, None, gy, dilation, 1, "tf32")[1]
    assert_close(dw, exact, torch.float32, "tf32", "dw", label=f"{kernel} K={k} d={dilation}")


@pytest.mark.parametrize("dtype,precision", DTYPE_PRECISIONS, ids=lambda v: str(v).replace("torch.", ""))
@pytest.mark.parametrize("kernel", ["generic", "mma", "wgmma", "wgmma-ra", "wgmma-window"])
def test_input_gradient_on_every_forward_family(dtype, precision, kernel, monkeypatch):
    """The input gradient runs the forward's kernels on dy with the weights transposed per
    group and tap-reversed: the tensor-core families read them so from the forward's weight
    while writing their weight image, the others from a copy.  Uneven channel counts (past a
    tile, past a group), several taps and dilations, each family forced; bitwise what the
    transposed copy gives (CAUSALCONV_TRANSPOSED_IMAGE=0), within float64's tolerance."""
    if kernel.startswith("wgmma") and not ext().has_wgmma():
        pytest.skip("wgmma needs an sm_90 GPU")
    if kernel == "mma" and torch.cuda.get_device_capability()[0] < 8:
        pytest.skip("mma.sync needs compute capability 8.0")
    cases = ((2, 96, 160, 1, 5, 3, 1000), (2, 64, 48, 2, 4, 1, 264), (1, 64, 96, 2, 3, 2, 72),
             (2, 257, 33, 1, 2, 7, 128), (1, 32, 32, 1, 1, 1, 16))
    with forced_kernel(kernel):
        for seed, (b, c_in, c_out, groups, k, dilation, length) in enumerate(cases, 5300):
            x, w, gy, _ = _problem(b, c_in, c_out, groups, k, length, dtype, seed)
            xg = x.detach().requires_grad_(True)
            label = f"{kernel} {b}x{c_in}->{c_out} g={groups} K={k} d={dilation} L={length}"
            dx = {}
            for knob in ("1", "0"):
                monkeypatch.setenv("CAUSALCONV_TRANSPOSED_IMAGE", knob)
                with count_launches() as n, poisoned_outputs():
                    y = causal_conv1d(xg, w, None, dilation, groups, precision)
                    dx[knob] = torch.autograd.grad(y, [xg], gy)[0]
                assert n["input_grad"] == 1, n
            assert torch.equal(dx["1"], dx["0"]), f"{label}: differs from the transposed copy's"
            exact = exact_grads(x, w, None, gy, dilation, groups, precision)[0]
            assert_close(dx["1"], exact, dtype, precision, "dx", terms=c_out // groups * k, label=label)


@pytest.mark.parametrize("dtype,precision", DTYPE_PRECISIONS, ids=lambda v: str(v).replace("torch.", ""))
@pytest.mark.parametrize("multiplier", [1, 3])
def test_depthwise_weight_gradient(dtype, precision, multiplier, monkeypatch):
    """One input channel per group takes the depthwise weight-gradient kernels (one output
    channel per block, up to 8 taps, the (batch, step) range split over blocks): tap groups
    (K = 9, 16), wide dilations, sequences shorter than the causal pad, several chunks and
    batches per split; bitwise repeatable, within float64's tolerance of the exact gradient,
    and as the dense CUDA-core kernel (forced 'generic') computes it.  Both kernels run: the
    staged one where rows are 16-byte aligned (L a multiple of 16 bytes) and the taps' window
    fits its shared memory, the direct one for L = 7, 2100 and 300 in 16-bit, dilation 3000 in
    fp32 and the unaligned view.  On a 132-multiprocessor GPU the 12x256 L=8192 case gives
    each staged block 3 (x1) or 8 (x3) units, so its two-slot ring wraps.  With
    CAUSALCONV_DEPTHWISE_REGISTERS=1 the register kernel takes the dilation-1 cases of up to 8
    taps on aligned rows (K = 4 at L = 1000 and 8192, K = 3 at L = 300 in fp32; the unaligned
    view stays on the direct kernel): bitwise repeatable and within the same tolerance."""
    cases = ((2, 24, 4, 1, 1000, "contiguous"), (3, 16, 9, 3, 5000, "contiguous"), (1, 8, 16, 1, 7, "contiguous"),
             (4, 32, 2, 64, 2100, "contiguous"), (64, 4, 3, 1, 300, "contiguous"), (12, 256, 4, 1, 8192, "contiguous"),
             (2, 8, 3, 3000, 8192, "contiguous"), (2, 40, 4, 1, 2048, "unaligned"))
    for seed, (b, channels, k, dilation, length, layout) in enumerate(cases, 7300):
        c_out = channels * multiplier
        x, w, gy, _ = _problem(b, channels, c_out, channels, k, length, dtype, seed)
        if layout == "unaligned":  # a contiguous view one element past a 16-byte boundary
            x = torch.cat([x.new_zeros(1), x.flatten()])[1:].view(x.shape)
        label = f"depthwise x{multiplier} {b}x{channels} K={k} d={dilation} L={length} {layout}"
        wg = w.detach().requires_grad_(True)
        y = causal_conv1d(x, wg, None, dilation, channels, precision)  # x without grad: dw alone
        # The dense kernel sums each thread's share of B*L products in one fp32 register: past
        # ~10^5 its 'ieee' error exceeds the tolerance (3.3e-6 at 12x8192 on an H100), so the
        # long case is checked against float64 alone.
        runs = {}
        for kernel, registers in (("auto", "0"), ("auto", "0"), ("auto", "1"), ("auto", "1"), ("generic", "0")):
            if kernel == "generic" and b * length > 65536:
                continue
            monkeypatch.setenv("CAUSALCONV_DEPTHWISE_REGISTERS", registers)
            with forced_kernel(kernel), count_launches() as n, poisoned_outputs():
                runs.setdefault((kernel, registers), []).append(torch.autograd.grad(y, [wg], gy, retain_graph=True)[0])
            family = "wgrad_generic" if kernel == "generic" else "wgrad_depthwise"
            assert n[family] == 1 and n["wgrad_generic"] + n["wgrad_depthwise"] == 1, (kernel, n)
        exact = exact_grads(x, w, None, gy, dilation, channels, precision)[1]
        for (kernel, registers), got in runs.items():
            which = f"{label} {'dense kernel' if kernel == 'generic' else 'registers ' + registers}"
            assert all(torch.equal(g, got[0]) for g in got[1:]), f"{which}: differs between identical runs"
            assert_close(got[0], exact, dtype, precision, "dw", label=which)


@pytest.mark.parametrize("dtype,precision", DTYPE_PRECISIONS, ids=lambda v: str(v).replace("torch.", ""))
@pytest.mark.parametrize("multiplier", [1, 2])
def test_depthwise_forward_kernels_agree(dtype, precision, multiplier, monkeypatch):
    """The depthwise forward's two kernels (fwd_depthwise.cu): the register kernel, which
    CAUSALCONV_DEPTHWISE_REGISTERS=1 lets take dilation 1 with up to 8 taps on 16-byte-aligned
    rows, and the staged one (=0, the default), sum the same fp32 operands in the same order, so
    they agree bit for bit, the forward and (multiplier 1, where the input gradient is
    depthwise too and reads the weights tap-reversed) the input gradient; both within
    float64's tolerance, as is the weight gradient of either setting.  Lengths of one chunk,
    of several blocks with a short last one, and the taps reaching one or two chunks back (8
    taps are two 4-element fp32 chunks); a channel slice of a wider tensor (rows at an
    offset); channel-last x, which the register setting copies to contiguous rows first;
    K = 9 and dilation 2 take the staged kernel either way."""
    cases = ((2, 8, 4, 1, 8, "contiguous"), (3, 16, 4, 1, 5000, "contiguous"), (2, 24, 1, 1, 2056, "contiguous"),
             (2, 8, 2, 1, 1000, "channel_slice"), (1, 16, 3, 1, 4096, "contiguous"), (2, 8, 5, 1, 3072, "contiguous"),
             (2, 8, 8, 1, 1032, "contiguous"), (2, 8, 9, 1, 1000, "contiguous"), (2, 8, 4, 2, 1000, "contiguous"),
             (2, 16, 4, 1, 1000, "transposed"))
    for seed, (b, channels, k, dilation, length, layout) in enumerate(cases, 7500):
        c_out = channels * multiplier
        x, w, gy, g = _problem(b, channels, c_out, channels, k, length, dtype, seed, layout)
        bias = torch.randn(c_out, generator=g).to(DEV, dtype)
        label = f"depthwise x{multiplier} {b}x{channels} K={k} d={dilation} L={length} {layout}"
        runs = {}
        for registers in ("1", "0"):
            monkeypatch.setenv("CAUSALCONV_DEPTHWISE_REGISTERS", registers)
            with count_launches() as n:
                runs[registers] = _grads(x, w, bias, gy, dilation, channels, precision)
                with poisoned_outputs():
                    runs[registers] = (causal_conv1d(x, w, bias, dilation, channels, precision),) + runs[registers]
            assert n["depthwise"] == (3 if multiplier == 1 else 2), (label, n)  # forwards, and dx at x1
        names = ("y", "dx", "dw", "db")
        for name, a, e in zip(names, runs["1"], runs["0"]):
            if name in ("y", "dx"):
                assert torch.equal(a, e), f"{label}: {name} differs between the register and staged kernels"
        exact_y = exact_forward(x, w, bias, dilation, channels, precision)
        assert_close(runs["1"][0], exact_y, dtype, precision, label=label, terms=k)
        exact_dx, exact_dw = exact_grads(x, w, bias, gy, dilation, channels, precision)[:2]
        assert_close(runs["1"][1], exact_dx, dtype, precision, "dx", label=label, terms=multiplier * k)
        for registers in ("1", "0"):  # the weight gradient's register and staged kernels sum in different orders
            assert_close(runs[registers][2], exact_dw, dtype, precision, "dw", label=f"{label} registers {registers}")


@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16], ids=str)
def test_weight_gradient_of_unaligned_tensors(dtype):
    """Contiguous views that start off a 16-byte boundary cannot be TMA sources: the CUDA-core
    kernel takes them, with the same answer."""
    g = torch.Generator().manual_seed(3)
    shape = (2, 64, 512)
    n = shape[0] * shape[1] * shape[2]
    x = torch.randn(n + 1, generator=g).to(DEV, dtype)[1:].view(shape)
    gy = torch.randn(2 * 48 * 512 + 1, generator=g).to(DEV, dtype)[1:].view(2, 48, 512)
    w = (torch.randn(48, 64, 3, generator=g) / 8).to(DEV, dtype).requires_grad_(True)
    precision = "tf32" if dtype == torch.float32 else "auto"
    with count_launches() as launches, poisoned_outputs():
        dw = torch.autograd.grad(causal_conv1d(x, w, None, 2, 1, precision), [w], gy)[0]
    assert launches["wgrad_generic"] == 1, launches
    exact = exact_grads(x, w, None, gy, 2, 1, precision)[1]
    assert_close(dw, exact, dtype, precision, "dw", label="unaligned")


@pytest.mark.parametrize("depth", ["2", "4"])
def test_raw_window_kernels_at_each_fragment_depth(depth, monkeypatch):
    """CAUSALCONV_FRAGMENT_DEPTH sets how many k-steps of fragments the raw-window kernels
    keep in flight; the input gradient runs their forward, the weight gradient their own."""
    if not ext().has_wgmma():
        pytest.skip("wgmma needs an sm_90 GPU")
    monkeypatch.setenv("CAUSALCONV_FRAGMENT_DEPTH", depth)
    with forced_kernel("wgmma-window"):
        for c_in, c_out, k, dilation, length in ((256, 256, 4, 1, 4096), (96, 160, 5, 3, 1000), (64, 64, 2, 512, 512),
                                                 (40, 72, 7, 40, 264)):
            _check(c_in, c_out, 1, k, dilation, length, torch.float32, "tf32", True, "contiguous", length,
                   f"wgmma-window depth {depth} {c_in}->{c_out} K={k} d={dilation} L={length}")


@pytest.mark.parametrize("tile", ["1,1", "1,2", "1,4", "2,1", "2,2", "3,1", "4,1", "columns"])
def test_16bit_weight_gradient_at_each_forced_tile(tile, monkeypatch):
    """CAUSALCONV_WGRAD_TILE forces the MN-major weight gradient's taps per tile and channel
    blocks, or the cost model that counts MMA columns alone; every tile must give the same
    gradients (partial tap tiles at K = 3, 5, 7)."""
    if not ext().has_wgmma():
        pytest.skip("wgmma needs an sm_90 GPU")
    monkeypatch.setenv("CAUSALCONV_WGRAD_TILE", tile)
    taps = 1 if tile == "columns" else int(tile.split(",")[0])
    for c_in, c_out, k, dilation, length in ((256, 256, 4, 1, 1024), (96, 160, 5, 3, 1000), (512, 128, 3, 1, 512),
                                             (64, 192, 7, 4, 264)):
        if taps > k:
            continue
        _check(c_in, c_out, 1, k, dilation, length, torch.bfloat16, "auto", False, "contiguous", length,
               f"tile {tile} {c_in}->{c_out} K={k} d={dilation} L={length}")


@pytest.mark.parametrize("value,dilation,message", [
    ("5,1", 1, "or 'taps,blocks'"), ("2,4", 1, "or 'taps,blocks'"), ("1", 1, "or 'taps,blocks'"),
    ("4,1", 1, "does not fit K = 3"),
    ("3,1", 200, "does not fit K = 3, dilation 200")])  # three taps span a raw window wider than 256
def test_forced_weight_gradient_tile_errors(value, dilation, message, monkeypatch):
    if not ext().has_wgmma():
        pytest.skip("wgmma needs an sm_90 GPU")
    monkeypatch.setenv("CAUSALCONV_WGRAD_TILE", value)
    x = torch.randn(1, 64, 256, device=DEV, dtype=torch.bfloat16)
    w = torch.randn(64, 64, 3, device=DEV, dtype=torch.bfloat16, requires_grad=True)
    with pytest.raises(RuntimeError, match=message):
        torch.autograd.grad(causal_conv1d(x, w, dilation=dilation), [w],
                            torch.ones(1, 64, 256, device=DEV, dtype=torch.bfloat16))


@pytest.mark.parametrize("kernel", ["auto", "generic", "wgmma-window"])
@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16], ids=str)
def test_weight_gradient_is_deterministic(kernel, dtype):
    if kernel == "wgmma-window" and not ext().has_wgmma():
        pytest.skip("wgmma needs an sm_90 GPU")
    torch.manual_seed(0)
    x = torch.randn(8, 256, 2048, device=DEV, dtype=dtype)
    w = torch.randn(256, 256, 4, device=DEV, dtype=dtype, requires_grad=True)
    gy = torch.randn(8, 256, 2048, device=DEV, dtype=dtype)
    with forced_kernel(kernel):
        runs = [torch.autograd.grad(causal_conv1d(x, w), [w], gy)[0] for _ in range(3)]
    for r in runs[1:]:
        assert torch.equal(r, runs[0]), "weight gradient differs between identical runs"


def test_only_needed_kernels_launch():
    m = CausalConv1d(64, 64, 4).to(DEV)
    x = torch.randn(2, 64, 512, device=DEV)
    m.weight.requires_grad_(False)
    xg = x.clone().requires_grad_(True)
    y = m(xg)
    with count_launches() as n:
        y.sum().backward()
    assert n["input_grad"] == 1 and n["wgrad_generic"] + n["wgrad_wgmma"] == 0, n
    m.weight.requires_grad_(True)
    y = m(x)  # x does not require grad
    with count_launches() as n:
        y.sum().backward()
    assert n["input_grad"] == 0 and n["wgrad_generic"] + n["wgrad_wgmma"] == 1, n
    assert m.weight.grad is not None and m.bias.grad is not None


def test_gradcheck_on_cuda():
    torch.manual_seed(0)
    # float64 runs PyTorch's conv on CUDA; the kernels are checked in fp32 at full
    # accuracy ('ieee'), where finite differences of a bilinear op are accurate to ~1e-5.
    x = torch.randn(2, 6, 17, device=DEV, dtype=torch.float64, requires_grad=True)
    w = torch.randn(4, 3, 3, device=DEV, dtype=torch.float64, requires_grad=True)
    assert torch.autograd.gradcheck(lambda x, w: causal_conv1d(x, w, None, 2, 2), (x, w))
    x32 = x.detach().float().requires_grad_(True)
    w32 = w.detach().float().requires_grad_(True)
    for kernel in ("generic", "auto"):
        with forced_kernel(kernel):
            assert torch.autograd.gradcheck(lambda x, w: causal_conv1d(x, w, None, 2, 2, "ieee"), (x32, w32),
                                            eps=1e-2, atol=2e-3, rtol=2e-3)


def test_double_backward_on_cuda():
    torch.manual_seed(1)
    x = torch.randn(2, 32, 64, device=DEV, requires_grad=True)
    w = torch.randn(32, 32, 3, device=DEV, requires_grad=True)

    def second_order(fn):
        (gx,) = torch.autograd.grad(fn(x, w).square().sum(), [x], create_graph=True)
        (gw,) = torch.autograd.grad(gx.square().sum(), [w])
        return gw

    ours = second_order(lambda x, w: causal_conv1d(x, w, None, 2, 1, "ieee"))
    exact = second_order(lambda x, w: causal_conv1d_reference(x.double(), w.double(), None, 2, 1))
    assert_close(ours, exact.double(), torch.float32, "ieee", "dw", label="d(|dx|^2)/dw")


def test_opcheck_on_cuda():
    x = torch.randn(2, 32, 64, device=DEV, requires_grad=True)
    w = torch.randn(48, 16, 3, device=DEV, requires_grad=True)
    b = torch.randn(48, device=DEV, requires_grad=True)
    torch.library.opcheck(torch.ops.causalconv.conv_fwd.default, (x, w, b, 2, 2, "auto"))
    gy = torch.randn(2, 48, 64, device=DEV)
    torch.library.opcheck(torch.ops.causalconv.conv_input_grad.default, (gy, w, 2, 2, "auto"))
    torch.library.opcheck(torch.ops.causalconv.conv_weight_grad.default, (gy, x, 3, 2, 2, "auto"))
    torch.library.opcheck(torch.ops.causalconv.conv_backward.default, (gy, x, w, 2, 2, "auto"))


def test_compiled_training_step_on_gpu():
    torch.manual_seed(0)
    m = torch.nn.Sequential(ModelNew(64, 64, 4, 1, True), torch.nn.GELU(), ModelNew(64, 64, 3, 2)).to(DEV)
    x = torch.randn(4, 64, 1024, device=DEV)

    def loss_fn(x):
        return m(x).square().mean()

    torch.compile(loss_fn, fullgraph=True)(x).backward()
    compiled = [p.grad.clone() for p in m.parameters()]
    m.zero_grad()
    loss_fn(x).backward()
    for a, p in zip(compiled, m.parameters()):
        torch.testing.assert_close(a, p.grad, atol=1e-5, rtol=1e-4)


def test_eager_fast_path_matches_the_operator():
    """Plain eager CUDA calls skip the dispatcher (causalconv/ops.py, "Eager fast path") and
    record the extension's C++ autograd node: they must compute exactly what the operator
    computes, gradients included, and leave the work to the operator under a torch function
    mode."""
    torch.manual_seed(3)
    x = torch.randn(2, 64, 300, device=DEV, requires_grad=True)
    w = torch.randn(96, 32, 3, device=DEV, requires_grad=True)
    b = torch.randn(96, device=DEV, requires_grad=True)
    gy = torch.randn(2, 96, 300, device=DEV)
    y_fast = causal_conv1d(x, w, b, 2, 2)
    y_op = torch.ops.causalconv.conv_fwd(x, w, b, 2, 2, "auto")
    assert "ConvFwdFunction" in y_fast.grad_fn.name()
    assert "ConvFwdFunction" not in y_op.grad_fn.name()
    assert torch.equal(y_fast, y_op)
    for wanted in ([x], [w], [b], [x, w, b]):  # only the gradients asked for are computed
        fast = torch.autograd.grad(y_fast, wanted, gy, retain_graph=True)
        for a, c in zip(fast, torch.autograd.grad(y_op, wanted, gy, retain_graph=True)):
            assert torch.equal(a, c)
    xh, wh = x.detach().bfloat16().requires_grad_(True), w.detach().bfloat16()  # no bias, frozen weight
    yh_fast, yh_op = causal_conv1d(xh, wh, None, 2, 2), torch.ops.causalconv.conv_fwd(xh, wh, None, 2, 2, "auto")
    assert "ConvFwdFunction" in yh_fast.grad_fn.name() and torch.equal(yh_fast, yh_op)
    gyh = gy.bfloat16()
    assert torch.equal(torch.autograd.grad(yh_fast, xh, gyh)[0], torch.autograd.grad(yh_op, xh, gyh)[0])
    with torch.no_grad():
        y_nograd = causal_conv1d(x, w, b, 2, 2)
    assert y_nograd.grad_fn is None and torch.equal(y_nograd, y_op)
    m = CausalConv1d(64, 96, 3, dilation=2, groups=2).to(DEV)  # Parameters take the fast path too
    with torch.no_grad():
        m.weight.copy_(w)
        m.bias.copy_(b)
    y_module = m(x)
    assert "ConvFwdFunction" in y_module.grad_fn.name() and torch.equal(y_module, y_op)

    class PassThrough(torch.overrides.TorchFunctionMode):
        def __torch_function__(self, func, types, args=(), kwargs=None):
            return func(*args, **(kwargs or {}))

    with PassThrough():
        y_mode = causal_conv1d(x, w, b, 2, 2)
    assert "ConvFwdFunction" not in y_mode.grad_fn.name()
    assert torch.equal(y_mode, y_op)


def _small_problem(dtype, gen):
    x = torch.randn(3, 96, 1000, device=DEV, dtype=dtype, generator=gen)
    w = torch.randn(160, 96, 5, device=DEV, dtype=dtype, generator=gen)
    gy = torch.randn(3, 160, 1000, device=DEV, dtype=dtype, generator=gen)
    return x, w, gy


@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16], ids=str)
def test_small_backward_on_two_streams_matches_one(dtype, monkeypatch):
    """A small backward runs its weight gradient on a second stream (dispatch.cu): the
    gradients must be bitwise those of the one-stream order, and on a caller's own stream
    both gradients must wait for the kernel there that produced x (a large matmul, so that
    reading x early would read what the allocator left)."""
    results = {}
    for streams in ("0", "1"):
        monkeypatch.setenv("CAUSALCONV_BACKWARD_STREAMS", streams)
        s = torch.cuda.Stream()
        with torch.cuda.stream(s):
            x, w, gy = _small_problem(dtype, torch.Generator(device=DEV).manual_seed(1))
            big = torch.randn(4096, 4096, device=DEV)
            x = (x + (big @ big).sum().to(dtype) * 0).requires_grad_(True)
            w.requires_grad_(True)
            with poisoned_outputs():
                results[streams] = torch.autograd.grad(causal_conv1d(x, w, dilation=3), [x, w], gy)
        s.synchronize()
    for one, two in zip(results["0"], results["1"]):
        assert torch.isfinite(two).all()
        assert torch.equal(one, two)


def test_small_backward_under_graph_capture(monkeypatch):
    """A stream being captured keeps both gradients on it; replays match the eager call."""
    monkeypatch.setenv("CAUSALCONV_BACKWARD_STREAMS", "1")
    x, w, gy = _small_problem(torch.float32, torch.Generator(device=DEV).manual_seed(2))
    tf32 = 1  # the precision code the Python layer passes for 'tf32'
    eager = ext().backward(gy, x, w, 3, 1, tf32)
    s = torch.cuda.Stream()
    s.wait_stream(torch.cuda.current_stream())
    with torch.cuda.stream(s):
        ext().backward(gy, x, w, 3, 1, tf32)
    torch.cuda.current_stream().wait_stream(s)
    graph = torch.cuda.CUDAGraph()
    with torch.cuda.graph(graph):
        captured = ext().backward(gy, x, w, 3, 1, tf32)
    graph.replay()
    torch.cuda.synchronize()
    assert torch.equal(captured[0], eager[0]) and torch.equal(captured[1], eager[1])


@pytest.mark.parametrize("dtype,precision", DTYPE_PRECISIONS, ids=lambda v: str(v).replace("torch.", ""))
def test_weight_gradient_reduction_as_dependent_launch(dtype, precision, monkeypatch):
    """The split reduction launches as a programmatic dependent of the weight-gradient
    kernel (CAUSALCONV_PDL unset or 1), which lets it start as its blocks begin; the
    reduction waits for the slices, so the gradients must be bitwise those of normal launches
    (CAUSALCONV_PDL=0), on a user stream right after a matmul that produced dy and x, with
    the poisoned workspace showing any slice read before it was written."""
    if not ext().has_wgmma():
        pytest.skip("the weight-gradient kernels that split their reduction over blocks need an sm_90 GPU")
    monkeypatch.setenv("CAUSALCONV_BACKWARD_STREAMS", "0")
    s = torch.cuda.Stream()
    for seed, (b, c_in, c_out, k, dilation, length) in enumerate(((4, 256, 256, 4, 1, 4096), (3, 96, 160, 5, 3, 1000),
                                                                  (1, 256, 256, 4, 1, 64))):
        x0 = make_x((b, c_in, length), dtype, DEV, "contiguous", 5000 + seed)
        g = torch.Generator().manual_seed(5000 + seed)
        w = (torch.randn(c_out, c_in, k, generator=g) / (c_in * k) ** 0.5).to(DEV, dtype)
        gy0 = torch.randn(b, c_out, length, generator=g).to(DEV, dtype)
        eye_x, eye_y = torch.eye(c_in, device=DEV, dtype=dtype), torch.eye(c_out, device=DEV, dtype=dtype)
        got = {}
        for pdl in ("0", "1"):
            monkeypatch.setenv("CAUSALCONV_PDL", pdl)
            s.wait_stream(torch.cuda.current_stream())
            with torch.cuda.stream(s):
                x = torch.matmul(eye_x, x0)  # produced on this stream just before
                gy = torch.matmul(eye_y, gy0)
                got[pdl] = _grads(x, w, None, gy, dilation, 1, precision)
            torch.cuda.current_stream().wait_stream(s)
        torch.cuda.synchronize()
        label = f"PDL {b}x{c_in}->{c_out} K={k} d={dilation} L={length}"
        for name, off, on in zip(("dx", "dw"), got["0"], got["1"]):
            assert torch.equal(off, on), f"{label}: dependent launch changed {name}"
        exact = exact_grads(x0, w, None, gy0, dilation, 1, precision)
        assert_close(got["1"][1], exact[1], dtype, precision, "dw", label=label)


@pytest.mark.parametrize("knob,kernel,dtype", [
    ("CAUSALCONV_WGRAD_TAP_MAJOR", "wgmma-window", torch.float32),
    ("CAUSALCONV_WGRAD_TC_TAP_MAJOR", "wgmma", torch.bfloat16),
    ("CAUSALCONV_WGRAD_TC_TAP_MAJOR", "wgmma", torch.float16),
    ("CAUSALCONV_WGRAD_TC_TAP_MAJOR", "wgmma", torch.float32)], ids=lambda v: str(v).replace("torch.", ""))
def test_tap_major_weight_gradient_slices(knob, kernel, dtype, monkeypatch):
    """A tensor-core weight gradient writing its partial sums tap-major (the raw-window fp32
    kernel with CAUSALCONV_WGRAD_TAP_MAJOR=1, the default; the shared-memory one, 16-bit or
    fp32 forced, with CAUSALCONV_WGRAD_TC_TAP_MAJOR=1, also the default) and the reduction reading them so:
    bitwise the gradient of dw's own layout (=0, the same sums in the same order) and within
    float64's tolerance, the workspace poisoned.  Split reductions over B x L, partial
    channel blocks, groups, taps spread over several tiles (K=7 at dilation 40, whose span
    exceeds one window; K=40, more taps than a tile holds)."""
    if not ext().has_wgmma():
        pytest.skip("the tensor-core weight gradients need an sm_90 GPU")
    cases = ((4, 256, 256, 1, 4, 1, 4096), (3, 96, 160, 1, 5, 3, 1000), (2, 128, 128, 2, 3, 2, 2048),
             (1, 40, 72, 1, 7, 40, 264), (1, 48, 40, 1, 40, 1, 512))
    precision = "tf32" if dtype == torch.float32 else "auto"
    with forced_kernel(kernel):
        for seed, (b, c_in, c_out, groups, k, dilation, length) in enumerate(cases, 6100):
            x, w, gy, _ = _problem(b, c_in, c_out, groups, k, length, dtype, seed)
            got = {}
            for tap_major in ("1", "0"):
                monkeypatch.setenv(knob, tap_major)
                got[tap_major] = _grads(x, w, None, gy, dilation, groups, precision)[1]
            label = f"{knob} {kernel} {b}x{c_in}->{c_out} g={groups} K={k} d={dilation} L={length}"
            assert torch.equal(got["1"], got["0"]), f"{label}: differs from dw's own layout"
            exact = exact_grads(x, w, None, gy, dilation, groups, precision)[1]
            assert_close(got["1"], exact, dtype, precision, "dw", label=label)
