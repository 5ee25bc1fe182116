#pragma once
// Convolution kernels on one block through cuDNN, for a processor that computes on a GPU: the
// same geometry and the same channels-last buffers as the reference kernels
// (kernels/cpu/reference/conv.hpp): forward, the input's gradient (over the whole box, zeros where
// no output reads) and the weight's gradient (added into a double accumulator: on the GPU when the
// accumulator is in its memory, else on the host). Operands must be in
// GPU memory; each call returns false, computing nothing, when cuDNN cannot run it
// (host operands, a geometry cuDNN does not support), and the caller runs the CPU kernel instead.
// The calls are queued on the compute stream and return without waiting for them
// (device/host_access.hpp).
//
// cuDNN sees every call as a convolution x -> y with symmetric padding. An ordinary convolution is
// x = the box, y = the output; where the padding before and after differ (a split block's edge
// has a halo on one side and padding on the other) x is a zero-padded copy of the box. A
// transposed convolution is the adjoint of the convolution from its output space to its input:
// x = a buffer over every output position the input reaches, y = the input. Float calls use FMA
// math, not TF32 tensor cores (unless KernelPolicy::math allows them), so results match the CPU
// kernels to float rounding; deterministic algorithms only, the fastest of the heuristics'
// candidates timed at a shape's first call unless the kernel policy is fixed. bfloat16 blocks run
// on the tensor cores (bf16 operands, float accumulation, each output rounded once, as the CPU's
// bf16 kernels do); their weight gradient runs on the operands widened to float, so that it is
// summed in float as on the CPU.

#include <cuda_runtime_api.h>
#include <cudnn.h>

#include <algorithm>
#include <array>
#include <cstdint>
#include <map>
#include <optional>
#include <string>
#include <type_traits>
#include <utility>
#include <vector>

#include "meshtensor/core/bfloat16.hpp"
#include "meshtensor/core/error.hpp"
#include "meshtensor/device/cuda.hpp"
#include "meshtensor/device/memory.hpp"
#include "meshtensor/device/runtime_compiler.hpp"
#include "meshtensor/kernels/cpu/reference/conv.hpp"
#include "meshtensor/kernels/cuda/elementwise.hpp"
#include "meshtensor/kernels/cuda/sum.hpp"
#include "meshtensor/kernels/plan/counts.hpp"

namespace meshtensor::kernels::cudnn {
namespace detail {

inline void check(cudnnStatus_t status, const char* call) {
  if (status == CUDNN_STATUS_SUCCESS) return;
  throw DeviceError(std::string(call) + " failed: " + cudnnGetErrorString(status));
}

/// The calling thread's cuDNN handle, on its current GPU and its compute stream.
class Context {
 public:
  Context() : stream_(cuda::compute_stream()) {
    check(cudnnCreate(&handle_), "cudnnCreate");
    check(cudnnSetStream(handle_, stream_), "cudnnSetStream");
  }
  ~Context() {
    if (handle_) (void)cudnnDestroy(handle_);
  }
  Context(const Context&) = delete;
  Context& operator=(const Context&) = delete;

  cudnnHandle_t handle() const { return handle_; }
  cudaStream_t stream() const { return stream_; }

  /// The algorithm each pass of each problem ran with (a key of algorithm_key()), chosen at its
  /// first call: cuDNN's heuristics are asked once per shape, not per call.
  struct Chosen {
    int algo;
    cudnnMathType_t math;
    std::size_t memory;
  };
  std::map<std::vector<std::int64_t>, Chosen>& chosen() { return chosen_; }

  void synchronize() { cuda::check(cudaStreamSynchronize(stream_), "cudaStreamSynchronize"); }

 private:
  cudaStream_t stream_ = nullptr;
  cudnnHandle_t handle_ = nullptr;
  std::map<std::vector<std::int64_t>, Chosen> chosen_;
};

inline Context& context() { return current_processor().state<Context>(); }

/// cuDNN's name for the element types it runs here.
template <class T>
constexpr cudnnDataType_t data_type() {
  static_assert(std::is_same_v<T, float> || std::is_same_v<T, bfloat16>);
  return std::is_same_v<T, float> ? CUDNN_DATA_FLOAT : CUDNN_DATA_BFLOAT16;
}

// RAII cuDNN descriptors.
struct TensorDescriptor {
  cudnnTensorDescriptor_t d = nullptr;
  TensorDescriptor() { check(cudnnCreateTensorDescriptor(&d), "cudnnCreateTensorDescriptor"); }
  ~TensorDescriptor() { (void)cudnnDestroyTensorDescriptor(d); }
  TensorDescriptor(const TensorDescriptor&) = delete;
  TensorDescriptor& operator=(const TensorDescriptor&) = delete;
};
struct FilterDescriptor {
  cudnnFilterDescriptor_t d = nullptr;
  FilterDescriptor() { check(cudnnCreateFilterDescriptor(&d), "cudnnCreateFilterDescriptor"); }
  ~FilterDescriptor() { (void)cudnnDestroyFilterDescriptor(d); }
  FilterDescriptor(const FilterDescriptor&) = delete;
  FilterDescriptor& operator=(const FilterDescriptor&) = delete;
};
struct ConvolutionDescriptor {
  cudnnConvolutionDescriptor_t d = nullptr;
  ConvolutionDescriptor() {
    check(cudnnCreateConvolutionDescriptor(&d), "cudnnCreateConvolutionDescriptor");
  }
  ~ConvolutionDescriptor() { (void)cudnnDestroyConvolutionDescriptor(d); }
  ConvolutionDescriptor(const ConvolutionDescriptor&) = delete;
  ConvolutionDescriptor& operator=(const ConvolutionDescriptor&) = delete;
};

/// A channels-last box [batch][e0][e1][e2][channels] inside a buffer whose rows have `full`
/// spatial extents (so that a box may be a view of a bigger one), as cuDNN's N, C, D, H, W.
struct Box {
  std::int64_t batch = 1, channels = 1;
  std::array<std::int64_t, 3> extent{1, 1, 1};
  std::array<std::int64_t, 3> full{1, 1, 1};

  std::int64_t elements_of_full() const { return batch * full[0] * full[1] * full[2] * channels; }
  std::array<std::int64_t, 3> spatial_strides() const {
    return {full[1] * full[2] * channels, full[2] * channels, channels};
  }
  /// Offset of spatial position `at` in the buffer.
  std::int64_t offset(const std::array<std::int64_t, 3>& at) const {
    const auto s = spatial_strides();
    return at[0] * s[0] + at[1] * s[1] + at[2] * s[2];
  }
  void describe(TensorDescriptor& t, cudnnDataType_t type) const {
    const auto s = spatial_strides();
    const int dims[5] = {int(batch), int(channels), int(extent[0]), int(extent[1]), int(extent[2])};
    const int strides[5] = {int(full[0] * s[0]), 1, int(s[0]), int(s[1]), int(s[2])};
    check(cudnnSetTensorNdDescriptor(t.d, type, 5, dims, strides), "cudnnSetTensorNdDescriptor");
  }
};

/// y = x + beta y between two boxes of the same sizes (strided copies, and adds).
template <class T>
void transform(Context& c, const Box& from, const T* x, float beta, const Box& to, T* y) {
  TensorDescriptor a, b;
  from.describe(a, data_type<T>());
  to.describe(b, data_type<T>());
  const float one = 1.0f;
  check(cudnnTransformTensor(c.handle(), &one, a.d, x, &beta, b.d, y), "cudnnTransformTensor");
}

/// One convolution as cuDNN's x -> y with symmetric padding, and where the caller's buffer sits in
/// x: `x_is_caller` when x is a view of it (offset `caller_x`), else x is a buffer of its own with
/// the caller's region [caller_at, + region) at `x_at`.
struct Problem {
  Box x, y;
  std::array<int, 3> pad{0, 0, 0}, stride{1, 1, 1}, dilation{1, 1, 1};
  std::array<int, 3> kernel{1, 1, 1};
  int filter_out = 1, filter_in = 1;  // cuDNN's K (y's channels) and C (x's channels)
  bool x_is_caller = true;
  std::int64_t caller_x = 0;  // offset of x's first element in the caller's buffer
  Box caller;                 // the caller's whole buffer (x side)
  std::array<std::int64_t, 3> caller_at{0, 0, 0}, x_at{0, 0, 0}, region{0, 0, 0};
  bool empty = false;  // no output reads any input: results are zeros
};

// What both kinds of problem share: x holds `x_channels` over the caller's buffer of `caller`
// extents, y holds the other channels over `y` extents; taps as in `g`.
inline Problem problem(const ConvGeometry& g, std::int64_t x_channels, std::int64_t y_channels,
                       const std::array<std::int64_t, 3>& caller,
                       const std::array<std::int64_t, 3>& y) {
  Problem p;
  p.caller.batch = p.x.batch = p.y.batch = g.batch;
  p.caller.channels = p.x.channels = x_channels;
  p.caller.extent = p.caller.full = caller;
  p.y.channels = y_channels;
  p.y.extent = p.y.full = y;
  p.filter_out = int(y_channels);
  p.filter_in = int(x_channels);
  for (int d = 0; d < 3; ++d) {
    p.kernel[d] = int(g.kernel[d]);
    p.stride[d] = int(g.taps[d].stride);
    p.dilation[d] = int(g.taps[d].dilation);
  }
  return p;
}

// The problem of an ordinary convolution; x is the box (or its zero-padded copy).
inline Problem ordinary(const ConvGeometry& g) {
  Problem p = problem(g, g.c_in, g.c_out, g.in, g.out);
  std::array<std::int64_t, 3> before{}, after{}, needed{};
  for (int d = 0; d < 3; ++d) {
    const Taps& t = g.taps[d];
    needed[d] = (g.out[d] - 1) * t.stride + (g.kernel[d] - 1) * t.dilation + 1;
    // Output 0 reads box row origin first: rows before it are skipped, padding fills in before.
    before[d] = std::max<std::int64_t>(0, -t.origin);
    p.caller_at[d] = std::max<std::int64_t>(0, t.origin);
    p.region[d] = std::min(g.in[d] - p.caller_at[d], needed[d] - before[d]);
    if (p.region[d] <= 0) p.empty = true;
    after[d] = needed[d] - before[d] - p.region[d];
  }
  p.x_is_caller = before == after;
  if (p.x_is_caller) {
    p.x.extent = p.region;
    p.x.full = g.in;
    p.caller_x = p.caller.offset(p.caller_at);
    for (int d = 0; d < 3; ++d) p.pad[d] = int(before[d]);
  } else {
    p.x.extent = p.x.full = needed;
    p.x_at = before;
  }
  return p;
}

// The problem of a transposed convolution: x spans every output position the input reaches
// (output o is x's o + origin), y is the input; the caller's buffer (x side) is the output.
inline Problem transposed(const ConvGeometry& g) {
  Problem p = problem(g, g.c_out, g.c_in, g.out, g.in);
  p.x_is_caller = false;
  for (int d = 0; d < 3; ++d) {
    const Taps& t = g.taps[d];
    p.x.extent[d] = p.x.full[d] = (g.in[d] - 1) * t.stride + (g.kernel[d] - 1) * t.dilation + 1;
    const std::int64_t first = std::max<std::int64_t>(0, t.origin);
    const std::int64_t last = std::min<std::int64_t>(p.x.extent[d], t.origin + g.out[d]);
    p.x_at[d] = first;
    p.caller_at[d] = first - t.origin;
    p.region[d] = last - first;
    if (p.region[d] <= 0) p.empty = true;
  }
  return p;
}

inline std::int64_t weight_elements(const ConvGeometry& g) {
  return g.kernel[0] * g.kernel[1] * g.kernel[2] * g.c_in * g.c_out;
}

inline bool is_transposed(const ConvGeometry& g) {
  for (int d = 0; d < 3; ++d)
    if (g.taps[d].transposed && g.kernel[d] > 1) return true;
  return g.taps[0].transposed && g.taps[1].transposed && g.taps[2].transposed;
}

// Whether cuDNN's plain taps describe `g`: every dim transposed or none (a dim of kernel 1 and
// stride 1 is the same either way), and the sizes fit cuDNN's ints.
inline bool describable(const ConvGeometry& g) {
  const bool t = is_transposed(g);
  for (int d = 0; d < 3; ++d) {
    const Taps& taps = g.taps[d];
    if (taps.transposed != t && !(g.kernel[d] == 1 && taps.stride == 1)) return false;
    if (taps.stride < 1 || taps.dilation < 1) return false;
  }
  // Every buffer cuDNN sees, the padded box and the transposed convolution's output space
  // included, must be indexable with int.
  const Problem p = t ? transposed(g) : ordinary(g);
  const std::int64_t biggest = std::max({g.batch * g.in[0] * g.in[1] * g.in[2] * g.c_in,
                                         g.batch * g.out[0] * g.out[1] * g.out[2] * g.c_out,
                                         p.x.elements_of_full(), weight_elements(g)});
  return biggest < (std::int64_t{1} << 31);
}

// What cuDNN sees of a problem: the element type, both boxes, the taps and the filter.
inline std::vector<std::int64_t> problem_key(const Problem& p, cudnnDataType_t type) {
  std::vector<std::int64_t> key{std::int64_t(type), p.filter_out, p.filter_in};
  for (const Box* b : {&p.x, &p.y}) {
    key.insert(key.end(), {b->batch, b->channels});
    key.insert(key.end(), b->extent.begin(), b->extent.end());
    key.insert(key.end(), b->full.begin(), b->full.end());
  }
  for (const auto* taps : {&p.pad, &p.stride, &p.dilation, &p.kernel})
    key.insert(key.end(), taps->begin(), taps->end());
  return key;
}

/// The descriptors of a problem on elements of `type`, and its filter in cuDNN's K, D, H, W, C
/// order. Float accumulates in float (FMA math, never TF32); bfloat16 on the tensor cores.
struct Descriptors {
  TensorDescriptor x, y;
  FilterDescriptor w;
  ConvolutionDescriptor conv;
  cudnnDataType_t type;

  std::vector<std::int64_t> key;          // what identifies the problem to cuDNN (algorithm_key)
  std::size_t x_bytes, y_bytes, w_bytes;  // what a buffer of each operand spans
  bool tf32;                              // float may run on TF32 tensor cores (KernelPolicy::math)

  Descriptors(const Problem& p, cudnnDataType_t element_type)
      : type(element_type),
        key(problem_key(p, element_type)),
        x_bytes(std::size_t(p.x.elements_of_full()) * element_bytes()),
        y_bytes(std::size_t(p.y.elements_of_full()) * element_bytes()),
        w_bytes(std::size_t(p.filter_out) * p.filter_in * p.kernel[0] * p.kernel[1] * p.kernel[2] *
                element_bytes()),
        tf32(current_processor().settings().kernels.math == KernelPolicy::Math::tf32) {
    p.x.describe(x, type);
    p.y.describe(y, type);
    const int filter[5] = {p.filter_out, p.filter_in, p.kernel[0], p.kernel[1], p.kernel[2]};
    check(cudnnSetFilterNdDescriptor(w.d, type, CUDNN_TENSOR_NHWC, 5, filter),
          "cudnnSetFilterNdDescriptor");
    check(
        cudnnSetConvolutionNdDescriptor(conv.d, 3, p.pad.data(), p.stride.data(), p.dilation.data(),
                                        CUDNN_CROSS_CORRELATION, CUDNN_DATA_FLOAT),
        "cudnnSetConvolutionNdDescriptor");
    check(cudnnSetConvolutionMathType(conv.d, math()), "cudnnSetConvolutionMathType");
  }

  std::size_t element_bytes() const { return type == CUDNN_DATA_FLOAT ? 4 : 2; }
  cudnnMathType_t math() const {
    return type == CUDNN_DATA_FLOAT && !tf32 ? CUDNN_FMA_MATH : CUDNN_TENSOR_OP_MATH;
  }
  // Whether an algorithm's math keeps to the precision promised: float on the tensor cores only
  // where TF32 is allowed (it rounds the operands); bfloat16 on whichever unit (it accumulates in
  // float).
  bool allows(cudnnMathType_t algorithm_math) const {
    return type != CUDNN_DATA_FLOAT || tf32 || algorithm_math == CUDNN_FMA_MATH;
  }
};

// Our weight [K0][K1][K2][Ci][Co] and cuDNN's filter [K][k0][k1][k2][C] (K = Co for an ordinary
// convolution, Ci for a transposed one) as two views of one tensor of dims (K, C, k0, k1, k2).
inline void describe_weights(const ConvGeometry& g, const Problem& p, cudnnDataType_t type,
                             TensorDescriptor& ours, TensorDescriptor& theirs) {
  const std::int64_t ci = g.c_in, co = g.c_out;
  const std::int64_t k1 = g.kernel[1], k2 = g.kernel[2];
  const bool t = is_transposed(g);
  const int dims[5] = {p.filter_out, p.filter_in, p.kernel[0], p.kernel[1], p.kernel[2]};
  const int co_stride = 1, ci_stride = int(co);
  const int ours_strides[5] = {t ? ci_stride : co_stride, t ? co_stride : ci_stride,
                               int(k1 * k2 * ci * co), int(k2 * ci * co), int(ci * co)};
  check(cudnnSetTensorNdDescriptor(ours.d, type, 5, dims, ours_strides),
        "cudnnSetTensorNdDescriptor");
  const int c = p.filter_in;
  const int theirs_strides[5] = {int(g.kernel[0] * k1 * k2 * c), 1, int(k1 * k2 * c), int(k2 * c),
                                 c};
  check(cudnnSetTensorNdDescriptor(theirs.d, type, 5, dims, theirs_strides),
        "cudnnSetTensorNdDescriptor");
}

// cuDNN's filter from our weight, or (to_ours) our order from cuDNN's filter; overwrites.
template <class T>
void reorder_weight(Context& c, const ConvGeometry& g, const Problem& p, const T* from, T* to,
                    bool to_ours) {
  TensorDescriptor ours, theirs;
  describe_weights(g, p, data_type<T>(), ours, theirs);
  const float one = 1.0f, zero = 0.0f;
  check(cudnnTransformTensor(c.handle(), &one, to_ours ? theirs.d : ours.d, from, &zero,
                             to_ours ? ours.d : theirs.d, to),
        "cudnnTransformTensor (weight)");
}

// The caller's region and the part of x that holds it, as two boxes of the same sizes.
inline std::pair<Box, Box> region_boxes(const Problem& p) {
  Box caller = p.caller, x = p.x;
  caller.extent = x.extent = p.region;
  return {caller, x};
}

// x filled from the caller's buffer: zeros around the region.
template <class T>
void embed(Context& c, const Problem& p, const T* from, T* x) {
  cuda::check(cudaMemsetAsync(x, 0, p.x.elements_of_full() * sizeof(T), c.stream()),
              "cudaMemsetAsync");
  const auto [caller, inside] = region_boxes(p);
  transform(c, caller, from + p.caller.offset(p.caller_at), 0.0f, inside, x + p.x.offset(p.x_at));
}

// The region of x into the caller's buffer: overwritten (beta 0) or added (beta 1).
template <class T>
void extract(Context& c, const Problem& p, const T* x, float beta, T* to) {
  const auto [caller, inside] = region_boxes(p);
  transform(c, inside, x + p.x.offset(p.x_at), beta, caller, to + p.caller.offset(p.caller_at));
}

// The deterministic algorithms cuDNN's heuristics suggest, of a math the descriptors allow, best
// first.
template <class Perf, class Query>
std::vector<Perf> candidates(const Descriptors& d, Query&& query, const char* call) {
  Perf results[16];
  int count = 0;
  check(query(16, &count, results), call);
  std::vector<Perf> usable;
  for (int i = 0; i < count; ++i)
    if (results[i].status == CUDNN_STATUS_SUCCESS &&
        results[i].determinism == CUDNN_DETERMINISTIC && d.allows(results[i].mathType))
      usable.push_back(results[i]);
  return usable;
}

// Runs `call(algo, workspace, bytes, out, beta)` with each candidate, in the math it was suggested
// for, until one succeeds: an algorithm the heuristics suggest may still refuse the problem, or its
// workspace may not fit. The one that ran, or none; other failures throw.
template <class Perf, class Call>
std::optional<Perf> run_first(Descriptors& d, const std::vector<Perf>& perfs, const char* what,
                              void* out, float beta, Call&& call) {
  for (const Perf& perf : perfs) {
    check(cudnnSetConvolutionMathType(d.conv.d, perf.mathType), "cudnnSetConvolutionMathType");
    std::optional<cuda::StreamBuffer> workspace;
    try {
      workspace.emplace(perf.memory);  // from the processor's pool: its peak counts it
    } catch (const OutOfMemoryError&) {
      continue;  // another algorithm may need less
    }
    const cudnnStatus_t status = call(perf.algo, workspace->as<void>(), perf.memory, out, beta);
    ++device_activity().library_calls;
    if (status == CUDNN_STATUS_SUCCESS) return perf;
    if (status != CUDNN_STATUS_NOT_SUPPORTED && status != CUDNN_STATUS_BAD_PARAM &&
        status != CUDNN_STATUS_ALLOC_FAILED)
      check(status, what);
  }
  return std::nullopt;
}

// The candidates fastest first, as PyTorch's cudnn.benchmark orders them: each run once on this
// problem into a scratch output (the caller's untouched), timed by events on the compute stream;
// those that do not run go last. Waits for the GPU once, at a shape's first call.
template <class Perf, class Call>
std::vector<Perf> fastest_first(Context& c, Descriptors& d, const std::vector<Perf>& perfs,
                                const char* what, std::size_t out_bytes, Call&& call) {
  const ScratchMemory trials;  // the trials' buffers do not stay cached in the processor's pool
  cuda::StreamBuffer out(out_bytes);
  cuda::TimingEvent start, end;
  std::vector<std::pair<float, Perf>> timed;
  for (const Perf& perf : perfs) {
    start.record(c.stream());
    if (!run_first(d, std::vector<Perf>{perf}, what, out.as<void>(), 0.0f, call)) continue;
    end.record(c.stream());
    timed.emplace_back(end.ms_since(start, "a cuDNN algorithm's timing"), perf);
  }
  std::stable_sort(timed.begin(), timed.end(),
                   [](const auto& a, const auto& b) { return a.first < b.first; });
  std::vector<Perf> ordered;
  for (const auto& [ms, perf] : timed) ordered.push_back(perf);
  return ordered;
}

// Runs pass `pass` of the problem with the algorithm chosen for it at its first call: the fastest
// of the heuristics' candidates (`query`) where the kernel policy times them, else the first that
// runs, which is kept. Writes `out` (beta: added to it).
template <class Perf, class Query, class Call>
bool run_chosen(Context& c, Descriptors& d, int pass, Query&& query, const char* query_name,
                const char* what, void* out, float beta, std::size_t out_bytes, Call&& call) {
  std::vector<std::int64_t> key = d.key;
  key.push_back(pass);
  auto& chosen = c.chosen();
  if (const auto found = chosen.find(key); found != chosen.end()) {
    Perf perf{};
    perf.algo = static_cast<decltype(perf.algo)>(found->second.algo);
    perf.mathType = found->second.math;
    perf.memory = found->second.memory;
    if (run_first(d, std::vector<Perf>{perf}, what, out, beta, call)) return true;
    chosen.erase(found);
  }
  ++device_activity().library_queries;
  std::vector<Perf> perfs = candidates<Perf>(d, query, query_name);
  // A captured step (StepGraph) cannot wait for a timing; its eager first call chose already.
  const Processor& processor = current_processor();
  if (perfs.size() > 1 && !processor.settings().kernels.fixed() && !processor.capturing())
    perfs = fastest_first(c, d, perfs, what, out_bytes, call);
  const auto ran = run_first(d, perfs, what, out, beta, call);
  if (ran) chosen[key] = {int(ran->algo), ran->mathType, ran->memory};
  return ran.has_value();
}

// x -> y forward: y = conv(x) + beta y.
template <class T>
bool forward(Context& c, Descriptors& d, const T* x, const T* filter, float beta, T* y) {
  const float one = 1.0f;
  return run_chosen<cudnnConvolutionFwdAlgoPerf_t>(
      c, d, 0,
      [&](int n, int* count, cudnnConvolutionFwdAlgoPerf_t* out) {
        return cudnnGetConvolutionForwardAlgorithm_v7(c.handle(), d.x.d, d.w.d, d.conv.d, d.y.d, n,
                                                      count, out);
      },
      "cudnnGetConvolutionForwardAlgorithm_v7", "cudnnConvolutionForward", y, beta, d.y_bytes,
      [&](cudnnConvolutionFwdAlgo_t algo, void* workspace, std::size_t bytes, void* out,
          float out_beta) {
        return cudnnConvolutionForward(c.handle(), &one, d.x.d, x, d.w.d, filter, d.conv.d, algo,
                                       workspace, bytes, &out_beta, d.y.d, out);
      });
}

// The adjoint: x = conv^T(y) + beta x.
template <class T>
bool backward_data(Context& c, Descriptors& d, const T* filter, const T* y, float beta, T* x) {
  const float one = 1.0f;
  return run_chosen<cudnnConvolutionBwdDataAlgoPerf_t>(
      c, d, 1,
      [&](int n, int* count, cudnnConvolutionBwdDataAlgoPerf_t* out) {
        return cudnnGetConvolutionBackwardDataAlgorithm_v7(c.handle(), d.w.d, d.y.d, d.conv.d,
                                                           d.x.d, n, count, out);
      },
      "cudnnGetConvolutionBackwardDataAlgorithm_v7", "cudnnConvolutionBackwardData", x, beta,
      d.x_bytes,
      [&](cudnnConvolutionBwdDataAlgo_t algo, void* workspace, std::size_t bytes, void* out,
          float out_beta) {
        return cudnnConvolutionBackwardData(c.handle(), &one, d.w.d, filter, d.y.d, y, d.conv.d,
                                            algo, workspace, bytes, &out_beta, d.x.d, out);
      });
}

// The filter's gradient from x and y's gradient (overwritten).
inline bool backward_filter(Context& c, Descriptors& d, const float* x, const float* y,
                            float* filter) {
  const float one = 1.0f, zero = 0.0f;
  return run_chosen<cudnnConvolutionBwdFilterAlgoPerf_t>(
      c, d, 2,
      [&](int n, int* count, cudnnConvolutionBwdFilterAlgoPerf_t* out) {
        return cudnnGetConvolutionBackwardFilterAlgorithm_v7(c.handle(), d.x.d, d.y.d, d.conv.d,
                                                             d.w.d, n, count, out);
      },
      "cudnnGetConvolutionBackwardFilterAlgorithm_v7", "cudnnConvolutionBackwardFilter", filter,
      zero, d.w_bytes,
      [&](cudnnConvolutionBwdFilterAlgo_t algo, void* workspace, std::size_t bytes, void* out,
          float out_beta) {
        return cudnnConvolutionBackwardFilter(c.handle(), &one, d.x.d, x, d.y.d, y, d.conv.d, algo,
                                              workspace, bytes, &out_beta, d.w.d, out);
      });
}

inline std::int64_t elements(std::int64_t batch, const std::array<std::int64_t, 3>& e,
                             std::int64_t channels) {
  return batch * e[0] * e[1] * e[2] * channels;
}

// Whether the processor computes on a GPU and cuDNN can run `g`.
inline bool usable(const ConvGeometry& g) { return cuda::computes_on_gpu() && describable(g); }

}  // namespace detail

/// output = the convolution of `input` (the box) with `weight`; false when cuDNN cannot run it.
template <class T>
bool conv_forward(const ConvGeometry& g, const T* input, const T* weight, T* output) {
  if (!detail::usable(g)) return false;
  detail::Context& c = detail::context();
  const bool t = detail::is_transposed(g);
  const detail::Problem p = t ? detail::transposed(g) : detail::ordinary(g);
  const std::int64_t out_elements = detail::elements(g.batch, g.out, g.c_out);
  // Outputs no input reaches are zeros (all of them in an empty problem).
  if (p.empty || (t && p.region != g.out))
    cuda::check(cudaMemsetAsync(output, 0, std::size_t(out_elements) * sizeof(T), c.stream()),
                "cudaMemsetAsync");
  if (p.empty) return true;
  detail::Descriptors d(p, detail::data_type<T>());
  cuda::StreamBuffer filter(detail::weight_elements(g) * sizeof(T));
  detail::reorder_weight(c, g, p, weight, filter.as<T>(), /*to_ours=*/false);
  if (!t && p.x_is_caller)
    return detail::forward(c, d, input + p.caller_x, filter.as<T>(), 0.0f, output);
  cuda::StreamBuffer x(p.x.elements_of_full() * sizeof(T));
  if (!t) {
    detail::embed(c, p, input, x.as<T>());
    return detail::forward(c, d, x.as<T>(), filter.as<T>(), 0.0f, output);
  }
  if (!detail::backward_data(c, d, filter.as<T>(), input, 0.0f, x.as<T>())) return false;
  detail::extract(c, p, x.as<T>(), 0.0f, output);
  return true;
}

/// grad_input = the gradient of the box from `grad_output`; false when cuDNN cannot run it.
template <class T>
bool conv_backward_input(const ConvGeometry& g, const T* grad_output, const T* weight,
                         T* grad_input) {
  if (!detail::usable(g)) return false;
  detail::Context& c = detail::context();
  const bool t = detail::is_transposed(g);
  const detail::Problem p = t ? detail::transposed(g) : detail::ordinary(g);
  const std::int64_t in_elements = detail::elements(g.batch, g.in, g.c_in);
  // Box rows no output reads get zeros; the rest is added on top.
  cuda::check(cudaMemsetAsync(grad_input, 0, std::size_t(in_elements) * sizeof(T), c.stream()),
              "cudaMemsetAsync");
  if (p.empty) return true;
  detail::Descriptors d(p, detail::data_type<T>());
  cuda::StreamBuffer filter(detail::weight_elements(g) * sizeof(T));
  detail::reorder_weight(c, g, p, weight, filter.as<T>(), /*to_ours=*/false);
  if (!t && p.x_is_caller)
    return detail::backward_data(c, d, filter.as<T>(), grad_output, 1.0f, grad_input + p.caller_x);
  cuda::StreamBuffer x(p.x.elements_of_full() * sizeof(T));
  if (t) {
    detail::embed(c, p, grad_output, x.as<T>());
    return detail::forward(c, d, x.as<T>(), filter.as<T>(), 1.0f, grad_input);
  }
  if (!detail::backward_data(c, d, filter.as<T>(), grad_output, 0.0f, x.as<T>())) return false;
  detail::extract(c, p, x.as<T>(), 1.0f, grad_input);
  return true;
}

namespace detail {
// grad_weight (double, our weight order) += the weight gradient of problem `p`, from float operands
// already in the GPU's memory; false when cuDNN cannot run it.
inline bool add_weight_gradient(Context& c, const ConvGeometry& g, const Problem& p,
                                const float* input, const float* grad_output, double* grad_weight) {
  const bool t = is_transposed(g);
  Descriptors d(p, CUDNN_DATA_FLOAT);
  const std::int64_t n = weight_elements(g);
  cuda::StreamBuffer filter(n * sizeof(float));
  cuda::StreamBuffer ours(n * sizeof(float));
  bool ran = false;
  if (!t && p.x_is_caller) {
    ran = backward_filter(c, d, input + p.caller_x, grad_output, filter.as<float>());
  } else {
    // x: the zero-padded box, or the transposed convolution's output space holding grad_output;
    // y: the output's gradient, or the transposed convolution's input.
    cuda::StreamBuffer x(p.x.elements_of_full() * sizeof(float));
    embed(c, p, t ? grad_output : input, x.as<float>());
    ran = backward_filter(c, d, x.as<float>(), t ? input : grad_output, filter.as<float>());
  }
  if (!ran) return false;
  reorder_weight(c, g, p, filter.as<float>(), ours.as<float>(), /*to_ours=*/true);
  // Added into the caller's double sum (in the GPU's memory), widened there.
  cuda::StreamBuffer wide(n * sizeof(double));
  cuda::launch(cuda::kernel(gpu::sum_source(), "widen_f32"), n, c.stream(),
               static_cast<const float*>(ours.as<float>()), wide.as<double>(),
               static_cast<long long>(n));
  cuda::launch(cuda::kernel(gpu::elementwise_source(), "accumulate_f64"), n, c.stream(),
               grad_weight, static_cast<const double*>(wide.as<double>()),
               static_cast<long long>(n));
  return true;
}

// `n` bfloat16 values widened to float in a buffer of the GPU's, in stream order.
inline cuda::StreamBuffer widened(Context& c, const bfloat16* from, std::int64_t n) {
  cuda::StreamBuffer wide(std::size_t(n) * sizeof(float));
  cuda::launch(cuda::kernel(gpu::elementwise_source(), "convert_bf16_f32"), n, c.stream(),
               static_cast<const void*>(from), static_cast<void*>(wide.as<float>()),
               static_cast<long long>(n));
  return wide;
}
}  // namespace detail

/// grad_weight (double, our weight order) += the weight gradient; false when cuDNN cannot. bfloat16
/// blocks are widened to float on the GPU first, so that the products are summed in float as on
/// the CPU (cuDNN's bf16 weight gradient would round its sums to bf16).
template <class T>
bool conv_backward_weight(const ConvGeometry& g, const T* input, const T* grad_output,
                          double* grad_weight) {
  if (!detail::usable(g)) return false;
  detail::Context& c = detail::context();
  const detail::Problem p = detail::is_transposed(g) ? detail::transposed(g) : detail::ordinary(g);
  if (p.empty) return true;  // every read is padding
  const std::int64_t in_n = detail::elements(g.batch, g.in, g.c_in);
  const std::int64_t out_n = detail::elements(g.batch, g.out, g.c_out);
  if constexpr (std::is_same_v<T, float>) {
    return detail::add_weight_gradient(c, g, p, input, grad_output, grad_weight);
  } else {
    const cuda::StreamBuffer wide_input = detail::widened(c, input, in_n);
    const cuda::StreamBuffer wide_grad = detail::widened(c, grad_output, out_n);
    return detail::add_weight_gradient(c, g, p, static_cast<const float*>(wide_input.as<float>()),
                                       static_cast<const float*>(wide_grad.as<float>()),
                                       grad_weight);
  }
}

/// For a plan of a run on GPUs: takes and frees, in a pass's order above, the buffers it takes
/// beside its operands — the filter in cuDNN's order, the padded or transposed box, the weight
/// gradient's float and double sums, bfloat16 operands widened to float — so that the plan's pool
/// holds what the GPU's would. cuDNN's workspace, which the algorithm chosen at run time sets, is
/// not among them.
template <class T>
void take_own_buffers(const ConvGeometry& g, plan::ConvClass::Pass pass) {
  if (!detail::describable(g)) return;
  const bool t = detail::is_transposed(g);
  const detail::Problem p = t ? detail::transposed(g) : detail::ordinary(g);
  if (p.empty) return;
  const auto n = std::size_t(detail::weight_elements(g));
  const bool boxed = t || !p.x_is_caller;
  const auto box = std::size_t(p.x.elements_of_full());
  if (pass != plan::ConvClass::backward_weight) {
    const cuda::StreamBuffer filter(n * sizeof(T));
    if (boxed) const cuda::StreamBuffer x(box * sizeof(T));
    return;
  }
  std::optional<cuda::StreamBuffer> wide_input, wide_grad;
  if constexpr (!std::is_same_v<T, float>) {
    wide_input.emplace(std::size_t(detail::elements(g.batch, g.in, g.c_in)) * sizeof(float));
    wide_grad.emplace(std::size_t(detail::elements(g.batch, g.out, g.c_out)) * sizeof(float));
  }
  const cuda::StreamBuffer filter(n * sizeof(float)), ours(n * sizeof(float));
  if (boxed) const cuda::StreamBuffer x(box * sizeof(float));
  const cuda::StreamBuffer wide(n * sizeof(double));
}

}  // namespace meshtensor::kernels::cudnn
