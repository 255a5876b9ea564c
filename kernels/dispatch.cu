// The one place that maps runtime arguments to kernels: checks the preconditions the
// kernels rely on, resolves fp32 precision, picks the kernel family and tile, owns the
// outputs and workspaces, and runs on the tensors' device and current stream.
#include <ATen/ATen.h>
#include <c10/cuda/CUDAGuard.h>
#include <c10/cuda/CUDAStream.h>

#include <atomic>
#include <limits>
#include <string>

#include "chunks.cuh"
#include "common.cuh"
#include "dispatch.h"
#include "launchers.h"
#include "scratch.h"

namespace causalconv {
namespace {

std::atomic<int> g_forced{static_cast<int>(KernelChoice::kAuto)};
std::atomic<int64_t> g_counts[kNumKernelKinds];
std::atomic<bool> g_poison{false};

// Tests fill outputs and workspaces with NaN before the kernels run, so an element a
// kernel fails to write cannot pass as a correct value left over in memory.
void poison(at::Tensor& t) {
  if (g_poison.load(std::memory_order_relaxed)) t.fill_(std::numeric_limits<float>::quiet_NaN());
}

void count(KernelKind k) { g_counts[static_cast<int>(k)].fetch_add(1, std::memory_order_relaxed); }

bool built_for_sm90a() {
#ifdef CAUSALCONV_SM90A_BUILT
  return true;
#else
  return false;
#endif
}

// 'auto' is resolved in Python (causalconv/_precision.py) at call time.
Precision resolve(at::ScalarType dtype, int64_t precision) {
  CAUSALCONV_CHECK(precision == kPrecisionTF32 || precision == kPrecisionIEEE,
                   "causalconv: precision code must be 1 (tf32) or 2 (ieee), got ", precision);
  if (dtype != at::kFloat) return Precision::kNative;
  return precision == kPrecisionTF32 ? Precision::kTF32 : Precision::kTF32x3;
}

int vec_elems(at::ScalarType dtype) { return 16 / static_cast<int>(c10::elementSize(dtype)); }

// The tensor-core kernels copy 16-byte chunks of x rows.
bool tc_layout_ok(const at::Tensor& x) {
  const int v = vec_elems(x.scalar_type());
  return x.stride(2) == 1 && x.stride(1) % v == 0 && x.stride(0) % v == 0 && x.size(2) % v == 0 &&
         reinterpret_cast<uintptr_t>(x.data_ptr()) % 16 == 0;
}

// Multiprocessor count and major compute capability of the current device, read once
// per device.
struct DeviceInfo {
  int sms = 0, major = 0;
};
const DeviceInfo& device_info() {
  static DeviceInfo info[64];
  static std::atomic<bool> ready[64];
  const int dev = c10::cuda::current_device();
  CAUSALCONV_CHECK(dev >= 0 && dev < 64, "causalconv: device index ", dev, " out of range");
  if (!ready[dev].load(std::memory_order_acquire)) {
    CAUSALCONV_CUDA_CHECK(cudaDeviceGetAttribute(&info[dev].sms, cudaDevAttrMultiProcessorCount, dev));
    CAUSALCONV_CUDA_CHECK(cudaDeviceGetAttribute(&info[dev].major, cudaDevAttrComputeCapabilityMajor, dev));
    ready[dev].store(true, std::memory_order_release);
  }
  return info[dev];
}
int sm_count() { return device_info().sms; }
int sm_major() { return device_info().major; }

struct FwdChoice {
  KernelKind kind;
  int bn = 64;
  bool copy_x = false;  // after one contiguous copy of x (tensor cores; depthwise, see below)
  bool tma = false;     // the wgmma family's TMA kernel rather than the register-A one
  bool window = false;  // fp32 TF32 on the TMA kernel that reads x from raw windows into registers
};

// The raw-window TF32 forward (fwd_rs.cu) tiles output channels by 128 and time by 256.
// Measured on an H100 (scripts/ab_forward.py with bias, 2026-12-05, against the shifter
// kernel): faster from 64 channels per group up where B*L >= 8192 (default problem 0.491 ->
// 0.472 ms, 64x320 3.64 -> 3.36, 8x1024 0.947 -> 0.862, 16x64 K2 d512 0.080 -> 0.076), slower
// at B*L of 3000 and 64 (3x96 0.018 -> 0.022, L=64 0.024 -> 0.027), where the shifter
// kernel's shorter time tiles give more blocks.  The dtype is checked at launch.
bool window_forward_pays(const ConvParams& p) {
  return p.precision == Precision::kTF32 && p.cout_g >= 64 && p.B * p.L >= 8192;
}

// With the depthwise register kernels on (chunks::enabled(), opt-in), x whose steps are not
// adjacent (channel-last: a (B, L, C) activation viewed as (B, C, L)) is copied to contiguous
// rows first: the depthwise kernels read a row's steps, which such x scatters one per sector
// (estimated several times the contiguous time on large layers, NOTES next steps 7; the copy
// costs one read and write of x).
bool depthwise_copies_x(const at::Tensor& x) { return x.size(2) > 1 && x.stride(2) != 1 && chunks::enabled(); }

FwdChoice choose_forward(const ConvParams& p, const at::Tensor& x, KernelChoice forced) {
  const bool tc_arch = sm_major() >= 8;
  const bool wgmma = sm_major() == 9 && built_for_sm90a();
  const bool x_ok = tc_layout_ok(x);
  const bool can_copy = x.size(2) % vec_elems(x.scalar_type()) == 0;
  FwdChoice c{KernelKind::kFwdGeneric};
  auto tensor_cores = [&](bool use_wgmma, bool register_a) {
    c.kind = use_wgmma ? KernelKind::kFwdWgmma : KernelKind::kFwdMma;
    c.copy_x = !x_ok;
    // After the copy (if any) x meets the TMA kernel's layout needs.
    c.tma = use_wgmma && !register_a;
    // 128 output channels per block when the channel count and the grid are large
    // enough; the 3xTF32 split always uses 64 (register budget).
    const int64_t blocks128 = ceil_div(p.cout_g, 128) * p.groups * ceil_div(p.L, 256) * p.B;
    c.bn = (use_wgmma && p.precision != Precision::kTF32x3 && p.cout_g > 64 && blocks128 >= sm_count()) ? 128 : 64;
  };
  switch (forced) {
    case KernelChoice::kGeneric: return c;
    case KernelChoice::kDepthwise:
      CAUSALCONV_CHECK(p.cin_g == 1, "causalconv: the depthwise kernel needs one input channel per group");
      c.kind = KernelKind::kFwdDepthwise;
      c.copy_x = depthwise_copies_x(x);
      return c;
    case KernelChoice::kWgmma:
    case KernelChoice::kWgmmaRegisterA:
    case KernelChoice::kWgmmaWindow:
    case KernelChoice::kMma: {
      const bool use_wgmma = forced != KernelChoice::kMma;
      CAUSALCONV_CHECK(!use_wgmma || wgmma, "causalconv: wgmma needs an sm_90 GPU and an sm_90a build");
      CAUSALCONV_CHECK(tc_arch, "causalconv: tensor cores need compute capability 8.0 or newer");
      CAUSALCONV_CHECK(x_ok || can_copy, "causalconv: tensor-core kernels need L to be a multiple of ",
                       vec_elems(x.scalar_type()));
      tensor_cores(use_wgmma, forced == KernelChoice::kWgmmaRegisterA);
      c.window = forced == KernelChoice::kWgmmaWindow;
      return c;
    }
    case KernelChoice::kAuto: break;
  }
  if (p.cin_g == 1) {
    c.kind = KernelKind::kFwdDepthwise;
    c.copy_x = depthwise_copies_x(x);
  } else if (tc_arch && (x_ok || can_copy) && p.cin_g >= 16 && p.cout_g >= 16) {
    // Narrow groups would fill the 32/64-channel chunks mostly with zeros.
    tensor_cores(wgmma, false);
    c.window = c.tma && window_forward_pays(p);
  }
  return c;
}

// `transposed`: w is the forward's weight of an input gradient, whose x (dy) has the
// forward's C_out channels (ConvParams::w_transposed).
void check_common(const at::Tensor& x, const at::Tensor& w, int64_t dilation, int64_t groups,
                  bool transposed = false) {
  CAUSALCONV_CHECK(x.is_cuda() && w.is_cuda(), "causalconv: CUDA tensors expected");
  CAUSALCONV_CHECK(x.dim() == 3, "causalconv: x must be (B, C, L), got ", x.sizes());
  CAUSALCONV_CHECK(w.dim() == 3, "causalconv: weight must be (C_out, C_in/groups, K), got ", w.sizes());
  CAUSALCONV_CHECK(x.scalar_type() == w.scalar_type(), "causalconv: x and weight dtypes differ: ", x.scalar_type(), " vs ",
                   w.scalar_type());
  CAUSALCONV_CHECK(x.get_device() == w.get_device(), "causalconv: x and weight are on different devices");
  CAUSALCONV_CHECK(dilation >= 1 && groups >= 1, "causalconv: dilation and groups must be >= 1");
  const int64_t channels = transposed ? w.size(0) : w.size(1) * groups;
  CAUSALCONV_CHECK(x.size(1) == channels, "causalconv: x has ", x.size(1), " channels, weight expects ", channels);
  CAUSALCONV_CHECK(w.size(0) % groups == 0, "causalconv: C_out ", w.size(0), " not divisible by groups ", groups);
  CAUSALCONV_CHECK(w.size(2) >= 1, "causalconv: kernel size must be >= 1");
  CAUSALCONV_CHECK((w.size(2) - 1) * dilation <= INT32_MAX / 2, "causalconv: (K-1)*dilation too large");
  const auto t = x.scalar_type();
  CAUSALCONV_CHECK(t == at::kFloat || t == at::kHalf || t == at::kBFloat16,
                   "causalconv: CUDA kernels support float32, float16, bfloat16; got ", t);
}

// Whether a split reduction launches as a programmatic dependent of the kernel that writes its
// slices (dependent_launch.cuh): yes when the call has the GPU to itself, not while the other
// gradient runs on a second stream, where the reduction's blocks, launched early, would wait
// on multiprocessors that stream's kernels need (on an H200, NOTES v22: 3x96->160 'ieee'
// backward 0.061 -> 0.064 ms with them launched early).
enum class Neighbours { kNone, kOtherStream };

// Whether the input gradient's tensor-core kernels read the forward's weight transposed while
// writing their image (ConvParams::w_transposed) instead of a transposed copy written first
// (the same image, bit for bit).  It saves a launch, and costs the image kernel its coalesced
// reads: measured on an H100 (NOTES v34 measured), 1x256->256 L=64 backward -15 to -39%, but
// the default problem's fp32 backward +2%, so by default only below 2^32 multiply-adds;
// CAUSALCONV_TRANSPOSED_IMAGE=1 or =0 always or never.
bool transposed_image_pays(const ConvParams& p) {
  const char* v = std::getenv("CAUSALCONV_TRANSPOSED_IMAGE");
  if (v == nullptr || *v == '\0') {
    const double macs = static_cast<double>(p.B) * p.L * p.C_out * p.cin_g * p.K;
    return macs < 4294967296.0;
  }
  return env_switch("CAUSALCONV_TRANSPOSED_IMAGE");
}

// Forward-style launch: y[b, o, t] = bias + sum w[o, i, k] * x[b, i, t + k*dilation + shift].
// For the input gradient (is_input_grad) w_in is the forward's weight and the launch's w its
// per-group transpose, tap-reversed (ConvParams::w_transposed): every kernel reads it so,
// unless the weight image of a large problem is cheaper to write from a copy written here.
at::Tensor run_forward(const at::Tensor& x_in, const at::Tensor& w_in, const c10::optional<at::Tensor>& bias,
                       int64_t dilation, int64_t groups, int64_t shift, Precision prec, bool is_input_grad,
                       Neighbours neighbours = Neighbours::kNone) {
  at::Tensor x = x_in;
  const at::Tensor w = w_in.contiguous();
  const int64_t B = x.size(0), C_in = x.size(1), L = x.size(2), K = w.size(2);
  const int64_t C_out = is_input_grad ? w.size(1) * groups : w.size(0);
  at::Tensor y = at::empty({B, C_out, L}, x.options());
  if (y.numel() == 0) return y;
  poison(y);
  cudaStream_t stream = c10::cuda::getCurrentCUDAStream().stream();

  ConvParams p;
  p.B = B;
  p.C_in = C_in;
  p.C_out = C_out;
  p.L = L;
  p.groups = static_cast<int>(groups);
  p.cin_g = static_cast<int>(C_in / groups);
  p.cout_g = static_cast<int>(C_out / groups);
  p.K = static_cast<int>(K);
  p.dilation = static_cast<int>(dilation);
  p.shift = static_cast<int>(shift);
  p.precision = prec;

  const FwdChoice c = choose_forward(p, x, static_cast<KernelChoice>(g_forced.load()));
  // clone, not contiguous(): a contiguous view that starts off a 16-byte boundary must be
  // copied too, and contiguous() would return it as it is.
  if (c.copy_x) x = x.clone(at::MemoryFormat::Contiguous);
  p.x = x.data_ptr();
  p.sx_b = x.stride(0);
  p.sx_c = x.stride(1);
  p.sx_t = x.stride(2);
  // The tensor-core families read the weights through the image, the CUDA-core kernels
  // directly; all can read them transposed (the depthwise ones tap-reversed, the per-group
  // transpose of one input channel being the identity).
  const bool reads_image = c.kind == KernelKind::kFwdWgmma || c.kind == KernelKind::kFwdMma;
  const bool reads_transposed = !reads_image || transposed_image_pays(p);
  at::Tensor w_copy;
  if (is_input_grad && !reads_transposed) {
    w_copy = at::empty({C_out, p.cin_g, K}, w.options());
    launch_weight_flip(w.data_ptr(), w_copy.data_ptr(), groups, p.cin_g, p.cout_g, static_cast<int>(K),
                       w.element_size(), stream);
    p.w = w_copy.data_ptr();
  } else {
    p.w = w.data_ptr();
    p.w_transposed = is_input_grad;
  }
  at::Tensor b_c;
  if (bias.has_value() && bias->defined()) {
    b_c = bias->contiguous();
    p.bias = b_c.data_ptr();
  }
  p.y = y.data_ptr();
  p.sy_b = y.stride(0);
  p.sy_c = y.stride(1);

  const auto dtype = x.scalar_type();
  switch (c.kind) {
    case KernelKind::kFwdDepthwise: launch_fwd_depthwise(p, dtype, stream); break;
    case KernelKind::kFwdWgmma:
      if (c.tma && c.window && fwd_rs_supports(p, dtype)) {
        launch_fwd_rs(p, dtype, sm_count(), stream);
      } else if (c.tma) {  // launch_fwd_tma checks fwd_tma_supports
        // Small grids split the input channels over several blocks per tile (fwd_tma.cu):
        // fp32 partial sums, added into y in split order.
        p.csplits = fwd_tma_channel_splits(p, dtype, sm_count());
        at::Tensor ws;
        if (p.csplits > 1) {
          ws = at::empty({p.csplits * y.numel()}, y.options().dtype(at::kFloat));
          poison(ws);
          p.ws = ws.data_ptr<float>();
        }
        launch_fwd_tma(p, dtype, sm_count(), stream);
        if (p.csplits > 1)
          launch_split_reduce(p.ws, p.y, y.numel(), p.csplits, dtype, stream, neighbours == Neighbours::kNone);
      } else {
        launch_fwd_tc(p, dtype, TcKernel::kWgmma, c.bn, stream);
      }
      break;
    case KernelKind::kFwdMma: launch_fwd_tc(p, dtype, TcKernel::kMmaSync, c.bn, stream); break;
    default: launch_fwd_generic(p, dtype, stream); break;
  }
  count(c.kind);
  if (is_input_grad) count(KernelKind::kInputGrad);
  return y;
}

}  // namespace

void set_forced_kernel(const std::string& name) {
  KernelChoice k;
  if (name == "auto") k = KernelChoice::kAuto;
  else if (name == "generic") k = KernelChoice::kGeneric;
  else if (name == "depthwise") k = KernelChoice::kDepthwise;
  else if (name == "wgmma") k = KernelChoice::kWgmma;
  else if (name == "wgmma-ra") k = KernelChoice::kWgmmaRegisterA;
  else if (name == "wgmma-window") k = KernelChoice::kWgmmaWindow;
  else if (name == "mma") k = KernelChoice::kMma;
  else CAUSALCONV_CHECK(false, "causalconv: kernel must be one of auto, generic, depthwise, wgmma, wgmma-ra, wgmma-window, mma; got '", name, "'");
  g_forced.store(static_cast<int>(k));
}

void set_poison_outputs(bool on) { g_poison.store(on); }

std::vector<int64_t> launch_counts() {
  std::vector<int64_t> v(kNumKernelKinds);
  for (int i = 0; i < kNumKernelKinds; ++i) v[i] = g_counts[i].load();
  return v;
}

bool has_wgmma() {
  const c10::cuda::CUDAGuard guard(c10::cuda::current_device());
  return sm_major() == 9 && built_for_sm90a();
}

at::Tensor forward(const at::Tensor& x, const at::Tensor& weight, const c10::optional<at::Tensor>& bias,
                   int64_t dilation, int64_t groups, int64_t precision) {
  check_common(x, weight, dilation, groups);
  if (bias.has_value() && bias->defined()) {
    CAUSALCONV_CHECK(bias->dim() == 1 && bias->size(0) == weight.size(0), "causalconv: bias must be (C_out,), got ",
                     bias->sizes());
    CAUSALCONV_CHECK(bias->scalar_type() == x.scalar_type() && bias->get_device() == x.get_device(),
                     "causalconv: bias dtype/device must match x");
  }
  const c10::cuda::CUDAGuard guard(x.device());
  const int64_t shift = -(weight.size(2) - 1) * dilation;
  return run_forward(x, weight, bias, dilation, groups, shift, resolve(x.scalar_type(), precision), false);
}

namespace {

at::Tensor input_grad_beside(const at::Tensor& dy, const at::Tensor& weight, int64_t dilation, int64_t groups,
                             int64_t precision, Neighbours neighbours) {
  CAUSALCONV_CHECK(dy.dim() == 3 && weight.dim() == 3 && dy.size(1) == weight.size(0),
                   "causalconv: grad_output must be (B, C_out, L) for a (C_out, C_in/groups, K) weight, got ",
                   dy.sizes(), " and ", weight.sizes());
  check_common(dy, weight, dilation, groups, true);
  const c10::cuda::CUDAGuard guard(dy.device());
  // dx[b, i, t] = sum_{o, k} w[o, i, K-1-k] * dy[b, o, t + k*dilation]: the forward
  // kernels on dy with per-group transposed, tap-reversed weights and no left shift.
  return run_forward(dy, weight, c10::nullopt, dilation, groups, 0, resolve(dy.scalar_type(), precision), true,
                     neighbours);
}

// dw: the output, when the caller allocates it (on its own stream, beside which this runs),
// else undefined.
at::Tensor weight_grad_beside(const at::Tensor& dy_in, const at::Tensor& x_in, int64_t K, int64_t dilation,
                              int64_t groups, int64_t precision, Neighbours neighbours, at::Tensor dw = {}) {
  CAUSALCONV_CHECK(dy_in.is_cuda() && x_in.is_cuda() && dy_in.dim() == 3 && x_in.dim() == 3,
                   "causalconv: weight_grad needs CUDA (B, C, L) tensors");
  CAUSALCONV_CHECK(dy_in.scalar_type() == x_in.scalar_type(), "causalconv: grad_output and x dtypes differ");
  CAUSALCONV_CHECK(groups >= 1 && x_in.size(1) % groups == 0 && dy_in.size(1) % groups == 0 && K >= 1 && dilation >= 1,
                   "causalconv: weight_grad needs groups >= 1 dividing both channel counts (x ", x_in.size(1),
                   ", grad_output ", dy_in.size(1), ", groups ", groups, "), K >= 1 and dilation >= 1; got K ", K,
                   ", dilation ", dilation);
  const c10::cuda::CUDAGuard guard(x_in.device());
  const at::Tensor dy = dy_in.contiguous(), x = x_in.contiguous();
  const int64_t B = x.size(0), C_in = x.size(1), L = x.size(2), C_out = dy.size(1);
  const auto dtype = x.scalar_type();
  if (!dw.defined()) dw = at::empty({C_out, C_in / groups, K}, x.options());
  if (B == 0 || L == 0) return dw.zero_();

  WgradParams p;
  p.dy = dy.data_ptr();
  p.x = x.data_ptr();
  p.B = B;
  p.L = L;
  p.groups = static_cast<int>(groups);
  p.cin_g = static_cast<int>(C_in / groups);
  p.cout_g = static_cast<int>(C_out / groups);
  p.K = static_cast<int>(K);
  p.dilation = static_cast<int>(dilation);
  p.shift = static_cast<int>(-(K - 1) * dilation);
  p.precision = resolve(dtype, precision);

  const auto forced = static_cast<KernelChoice>(g_forced.load());
  const bool wgmma = sm_major() == 9 && built_for_sm90a();
  bool tc = wgmma && wgrad_tc_supports(p, dtype);
  // A forced forward family forces the weight gradient only where it has a kernel of that
  // family (wgmma); otherwise the CUDA-core kernel runs.
  if (forced == KernelChoice::kAuto) tc = tc && p.cin_g >= 16 && p.cout_g >= 16;
  else if (forced != KernelChoice::kWgmma && forced != KernelChoice::kWgmmaRegisterA &&
           forced != KernelChoice::kWgmmaWindow)
    tc = false;

  // fp32 TF32 takes the raw-window kernel (x loaded into registers at each tap's offset, no
  // shifted copies): on an H100 it measured 1.4-1.7x faster than the shared-memory kernel on
  // every shape timed (scripts/ab_knobs.sh, 2026-12-05; NOTES v18).  'wgmma' forces the latter.
  const bool rs = tc && (forced == KernelChoice::kAuto || forced == KernelChoice::kWgmmaWindow) &&
                  wgrad_rs_supports(p, dtype);
  // One input channel per group on CUDA cores: the depthwise kernel, unless 'generic' forces
  // the dense one.
  const bool depthwise = !tc && p.cin_g == 1 && forced != KernelChoice::kGeneric;
  const int sms = sm_count();
  p.splits = rs          ? wgrad_rs_splits(p, sms)
             : tc        ? wgrad_tc_splits(p, dtype, sms)
             : depthwise ? wgrad_depthwise_splits(p, dtype, sms)
                         : wgrad_generic_splits(p, sms);
  p.tap_major = rs ? wgrad_rs_tap_major() : tc && wgrad_tc_tap_major();
  const int64_t n = dw.numel();
  cudaStream_t stream = c10::cuda::getCurrentCUDAStream().stream();
  // Partial sums in this stream's scratch buffer, held until the reduction is enqueued.
  ScratchLease scratch(static_cast<size_t>(p.splits * n) * sizeof(float), stream);
  p.ws = static_cast<float*>(scratch.data());
  if (g_poison.load()) {
    at::Tensor ws = at::from_blob(p.ws, {p.splits * n}, x.options().dtype(at::kFloat));
    poison(ws);
  }
  poison(dw);
  if (rs) {
    launch_wgrad_rs(p, dtype, sms, stream);
    count(KernelKind::kWgradWgmma);
  } else if (tc) {
    launch_wgrad_tc(p, dtype, sms, stream);
    count(KernelKind::kWgradWgmma);
  } else if (depthwise) {
    launch_wgrad_depthwise(p, dtype, sms, stream);
    count(KernelKind::kWgradDepthwise);
  } else {
    launch_wgrad_generic(p, dtype, sms, stream);
    count(KernelKind::kWgradGeneric);
  }
  launch_split_reduce(p.ws, dw.data_ptr(), n, p.splits, dtype, stream, neighbours == Neighbours::kNone,
                      p.tap_major ? p.K : 0);
  return dw;
}

}  // namespace

at::Tensor input_grad(const at::Tensor& dy, const at::Tensor& weight, int64_t dilation, int64_t groups,
                      int64_t precision) {
  return input_grad_beside(dy, weight, dilation, groups, precision, Neighbours::kNone);
}

at::Tensor weight_grad(const at::Tensor& dy, const at::Tensor& x, int64_t K, int64_t dilation, int64_t groups,
                       int64_t precision) {
  return weight_grad_beside(dy, x, K, dilation, groups, precision, Neighbours::kNone);
}

namespace {

// Whether both gradients may run side by side, from CAUSALCONV_BACKWARD_STREAMS (1, the
// default, or 0: the knob that times the small rows with the gradients one after another).
bool backward_streams_enabled() { return env_switch("CAUSALCONV_BACKWARD_STREAMS"); }

// A small backward is four short launches in a row (weight image, the input gradient's
// forward; weight gradient, reduction), each on a few multiprocessors while the rest idle,
// so the weight gradient's chain runs on a second stream beside the input gradient's.  The
// second stream cost ~10-15 us of host time per call when measured (with a weight-flip
// launch more, and two events created and destroyed per call: NOTES v34), so it pays only
// where the kernels are long enough to hide it.  Measured on an H100 (scripts/bwd_overhead.py,
// both settings in one process, NOTES v20): 3x96->160 K5 L1000 (2^27.8 multiply-adds per
// gradient) 59 -> 49 us in bf16, 68 -> 61 us in fp32; 1x256->256 K4 L64 (2^24) 48-55 -> 63-71
// us in bf16, 52-62 -> 78 us in fp32.  Hence from 2^26 to 2^28 multiply-adds (above that the
// kernels fill more of the GPU and overlap less; not measured).  Never while the stream is
// captured into a graph: a capture keeps one stream.
bool overlap_gradients(const at::Tensor& x, const at::Tensor& weight) {
  if (!backward_streams_enabled()) return false;
  const double macs = static_cast<double>(x.size(0)) * x.size(2) * weight.size(0) * weight.size(1) * weight.size(2);
  if (macs < static_cast<double>(1 << 26) || macs >= static_cast<double>(1 << 28)) return false;
  cudaStreamCaptureStatus status = cudaStreamCaptureStatusNone;
  CAUSALCONV_CUDA_CHECK(cudaStreamIsCapturing(c10::cuda::getCurrentCUDAStream().stream(), &status));
  return status == cudaStreamCaptureStatusNone;
}

// The two events that fork the side stream from the caller's and join it back, made once
// per host thread and device rather than created and destroyed on every call (four driver
// calls fewer per small backward).  Reusing an event is safe: a stream wait captures the
// event's record as of the wait's enqueueing, and one thread's calls enqueue in turn.
struct JoinEvents {
  cudaEvent_t fork = nullptr, join = nullptr;
  ~JoinEvents() {  // errors ignored: at exit the runtime may already be gone
    if (fork != nullptr) (void)cudaEventDestroy(fork);
    if (join != nullptr) (void)cudaEventDestroy(join);
  }
};

const JoinEvents& join_events(int device) {
  thread_local JoinEvents per_device[64];
  CAUSALCONV_CHECK(device >= 0 && device < 64, "causalconv: device index ", device, " out of range");
  JoinEvents& e = per_device[device];
  if (e.fork == nullptr) {  // on `device`: the caller's device guard is set
    CAUSALCONV_CUDA_CHECK(cudaEventCreateWithFlags(&e.fork, cudaEventDisableTiming));
    CAUSALCONV_CUDA_CHECK(cudaEventCreateWithFlags(&e.join, cudaEventDisableTiming));
  }
  return e;
}

}  // namespace

std::vector<at::Tensor> backward(const at::Tensor& dy, const at::Tensor& x, const at::Tensor& weight, int64_t dilation,
                                 int64_t groups, int64_t precision) {
  CAUSALCONV_CHECK(dy.is_cuda() && x.is_cuda() && weight.is_cuda() && dy.dim() == 3 && x.dim() == 3 &&
                       weight.dim() == 3,
                   "causalconv: backward needs CUDA (B, C, L) tensors and a (C_out, C_in/groups, K) weight");
  CAUSALCONV_CHECK(groups >= 1 && x.size(1) % groups == 0,
                   "causalconv: groups must be >= 1 and divide x's channels (", x.size(1), "), got ", groups);
  const c10::cuda::CUDAGuard guard(dy.device());
  const int64_t K = weight.size(2);
  if (!overlap_gradients(x, weight))
    return {input_grad(dy, weight, dilation, groups, precision), weight_grad(dy, x, K, dilation, groups, precision)};
  const c10::cuda::CUDAStream main = c10::cuda::getCurrentCUDAStream();
  const c10::cuda::CUDAStream side = c10::cuda::getStreamFromPool(false, dy.device().index());
  // The side stream starts after everything already enqueued on the caller's stream (which
  // produced dy and x), and the caller's stream goes on only after the side stream's work.
  const JoinEvents& events = join_events(dy.device().index());
  const auto order = [](cudaEvent_t e, cudaStream_t first, cudaStream_t then) {
    CAUSALCONV_CUDA_CHECK(cudaEventRecord(e, first));
    CAUSALCONV_CUDA_CHECK(cudaStreamWaitEvent(then, e, 0));
  };
  order(events.fork, main.stream(), side.stream());
  // dw is allocated on the caller's stream, which uses it only after the join below, so the
  // caching allocator needs no record_stream (an event per freed block) to reuse it safely.
  at::Tensor dw = at::empty({dy.size(1), x.size(1) / groups, K}, x.options());
  {
    const c10::cuda::CUDAStreamGuard on_side(side);
    weight_grad_beside(dy, x, K, dilation, groups, precision, Neighbours::kOtherStream, dw);
  }
  at::Tensor dx = input_grad_beside(dy, weight, dilation, groups, precision, Neighbours::kOtherStream);
  order(events.join, side.stream(), main.stream());
  return {dx, dw};
}

}  // namespace causalconv
