#pragma once
// Convolution kernels through oneDNN (the library behind PyTorch's CPU convolutions), same contract
// as kernels/cpu/reference/conv.hpp.
//
// Formats. meshtensor blocks are channels-last (ndhwc), and oneDNN's brgemm/jit kernels run on
// that format directly — twice as fast as its blocked formats at 8 channels, where the blocked
// backward pass wastes half of each 16-lane vector — while at many channels and large volumes its
// blocked formats win even with the reorders in and out. By default each pass of each shape is
// timed once both ways and runs the faster. Like cuDNN's benchmark mode, that makes a run's last
// bits depend on the machine's load (the two formats round differently): for bitwise reproducible
// runs MESHTENSOR_ONEDNN_FORMATS=by_channels picks by a fixed rule, and =channels_last|blocked
// forces one.
// Where oneDNN has no optimised kernel for the plain format (its implementation name starts with
// "ref"), only the blocked one is considered. Weights (small) go to the format oneDNN wants.
//
// Memory. Reorder buffers and oneDNN's scratchpad come from the processor's pool for the duration
// of one call (scratchpad_mode::user), so they count in its memory and are reused, not kept per
// shape; big shapes run in slabs of rows (rows_per_call) so that those stay an eighth of an
// operand. Timing the formats takes scratch memory that is given back at once (ScratchMemory).
// Primitives are built once per shape and thread (each threads-transport processor is a thread).
// Transposed convolutions run on oneDNN's deconvolution; boxes that are not exactly a
// convolution's read range go to the blocked kernels. Each processor runs oneDNN on
// compute_threads() OpenMP threads.
//
// bfloat16 blocks run on oneDNN's bf16 kernels (AMX or AVX512_BF16 instructions, f32 sums, the
// weight gradient in f32) where it has optimised ones; elsewhere on the caller's fallback.

#include <oneapi/dnnl/dnnl.hpp>

#include <algorithm>
#include <array>
#include <chrono>
#include <cstdint>
#include <cstdlib>
#include <map>
#include <memory>
#include <optional>
#include <stdexcept>
#include <string>
#include <type_traits>
#include <unordered_map>
#include <vector>

#include "meshtensor/core/bfloat16.hpp"
#include "meshtensor/kernels/common/input_gradient_as_forward.hpp"
#include "meshtensor/kernels/cpu/blocked/conv.hpp"
#include "meshtensor/kernels/cpu/onednn/context.hpp"
#include "meshtensor/kernels/cpu/onednn/pass.hpp"
#include "meshtensor/kernels/cpu/onednn/weight_planes.hpp"
#include "meshtensor/memory/array.hpp"

namespace meshtensor::kernels::onednn {
namespace detail {

struct Primitives {
  Pass forward;           // reads src, weights; writes dst
  Pass backward_data;     // reads diff_dst, weights; writes diff_src
  Pass backward_weights;  // reads src, diff_dst; writes diff_weights
  // Whether any pass runs on oneDNN.
  bool usable() const {
    return forward.optimised || backward_data.optimised || backward_weights.optimised;
  }
};

// The primitives of the calling processor, per shape.
inline std::map<std::vector<std::int64_t>, std::unique_ptr<Primitives>>& cache() {
  return cache_of<Primitives>();
}

// Whether `g` is a transposed convolution (oneDNN's deconvolution). Dims a window leaves unused
// have plain one-tap taps, which read the same either way.
inline bool transposed(const ConvGeometry& g) {
  return g.taps[0].transposed || g.taps[1].transposed || g.taps[2].transposed;
}

// oneDNN's padding along dim d, before and after. A convolution reads zeros beyond its box: the
// box starts -origin positions after output 0's first read (kernels/cpu/reference/conv.hpp). A
// transposed convolution writes input i to outputs i*stride - origin + k*dilation: its padding is
// the outputs cut off the full result, origin before and the rest after.
inline std::array<std::int64_t, 2> padding(const ConvGeometry& g, int d) {
  const Taps& t = g.taps[d];
  const std::int64_t extent = (g.kernel[d] - 1) * t.dilation + 1;
  if (transposed(g)) {
    const std::int64_t full = (g.in[d] - 1) * t.stride + extent;
    return {t.origin, full - t.origin - g.out[d]};
  }
  const std::int64_t before = -t.origin;
  const std::int64_t reads = (g.out[d] - 1) * t.stride + extent;
  return {before, reads - before - g.in[d]};
}

// A convolution oneDNN can run: ordinary taps, reading the box and zero padding around it; or a
// transposed one that cuts less than a kernel's extent off each side.
inline bool supported(const ConvGeometry& g) {
  for (int d = 0; d < 3; ++d) {
    const Taps& t = g.taps[d];
    if (t.transposed != transposed(g) && g.kernel[d] > 1) return false;
    const auto [before, after] = padding(g, d);
    const std::int64_t extent = (g.kernel[d] - 1) * t.dilation + 1;
    if (before < 0 || after < 0 || before >= extent || after >= extent) return false;
  }
  return g.batch > 0 && g.out[0] * g.out[1] * g.out[2] > 0 && g.in[0] * g.in[1] * g.in[2] > 0;
}

// The type oneDNN stores a block of T in: f32 or bf16 (a weight gradient is f32 either way).
template <class T>
constexpr memory::data_type data_type_of() {
  static_assert(std::is_same_v<T, float> || std::is_same_v<T, bfloat16>);
  return std::is_same_v<T, float> ? memory::data_type::f32 : memory::data_type::bf16;
}

inline std::vector<std::int64_t> key_of(const ConvGeometry& g, memory::data_type type) {
  std::vector<std::int64_t> key{static_cast<std::int64_t>(type), transposed(g), g.batch, g.c_in,
                                g.c_out};
  for (int d = 0; d < 3; ++d)
    for (auto v :
         {g.in[d], g.out[d], g.kernel[d], g.taps[d].stride, g.taps[d].dilation, g.taps[d].origin})
      key.push_back(v);
  return key;
}

struct Descriptors {
  memory::desc src, weights, dst;
  // The same with f32 weights (a weight gradient's type), in the same format.
  Descriptors f32_weights() const {
    const bool any = weights.data.format_kind == dnnl_format_kind_any;  // (else dhwio)
    return {src, memory::desc(weights.dims(), memory::data_type::f32, any ? tag::any : tag::dhwio),
            dst};
  }
};

// The primitives of one shape from one family (convolution or deconvolution) on activations and
// weights of `type`: each pass on channels-last activations if `channels_last` and oneDNN has an
// optimised kernel there, else on the formats oneDNN prefers.
template <class Forward, class BackwardData, class BackwardWeights>
Primitives build_family(const ConvGeometry& g, bool channels_last_first, dnnl::algorithm algorithm,
                        memory::data_type type, bool with_kernels) {
  Context& c = context();
  // Weights are [kernel..., c_in, c_out] (dhwio) for both families: oneDNN's deconvolution
  // weights are (output channels, input channels, kernel) in its own terms too.
  const memory::dims src_dims{g.batch, g.c_in, g.in[0], g.in[1], g.in[2]},
      weight_dims{g.c_out, g.c_in, g.kernel[0], g.kernel[1], g.kernel[2]},
      dst_dims{g.batch, g.c_out, g.out[0], g.out[1], g.out[2]};
  const Descriptors plain{memory::desc(src_dims, type, tag::ndhwc),
                          memory::desc(weight_dims, type, tag::dhwio),
                          memory::desc(dst_dims, type, tag::ndhwc)};
  const Descriptors free_choice{memory::desc(src_dims, type, tag::any),
                                memory::desc(weight_dims, type, tag::any),
                                memory::desc(dst_dims, type, tag::any)};
  const Descriptors channels_last =
      channels_last_first
          ? Descriptors{plain.src, memory::desc(weight_dims, type, tag::any), plain.dst}
          : free_choice;
  memory::dims strides, dilates, pad_before, pad_after;
  for (int k = 0; k < 3; ++k) {
    strides.push_back(g.taps[k].stride);
    dilates.push_back(g.taps[k].dilation - 1);  // oneDNN counts the gaps
    pad_before.push_back(padding(g, k)[0]);
    pad_after.push_back(padding(g, k)[1]);
  }
  dnnl::primitive_attr attr;
  attr.set_scratchpad_mode(dnnl::scratchpad_mode::user);
  const auto creating = convolution_creation_lock();

  auto forward_on = [&](const Descriptors& d) {
    return typename Forward::primitive_desc(
        {dnnl::prop_kind::forward_training, algorithm, d.src, d.weights, d.dst, strides, dilates,
         pad_before, pad_after},
        attr, c.engine);
  };
  auto forward = forward_on(channels_last);
  if (!optimised(forward)) forward = forward_on(free_choice);
  auto backward_data_on = [&](const Descriptors& d) {
    return typename BackwardData::primitive_desc(
        {algorithm, d.src, d.weights, d.dst, strides, dilates, pad_before, pad_after}, attr,
        c.engine, forward);
  };
  auto backward_data = backward_data_on(channels_last);
  if (!optimised(backward_data)) backward_data = backward_data_on(free_choice);
  auto backward_weights_on = [&](const Descriptors& with_weights) {
    const Descriptors d = with_weights.f32_weights();
    return typename BackwardWeights::primitive_desc(
        {algorithm, d.src, d.weights, d.dst, strides, dilates, pad_before, pad_after}, attr,
        c.engine, forward);
  };
  auto backward_weights = backward_weights_on(channels_last);
  if (!optimised(backward_weights)) backward_weights = backward_weights_on(free_choice);

  // A pass no optimised kernel runs gets no primitive (building one would compile its kernel);
  // nor does any pass of a plan's primitives (with_kernels false), which only count.
  auto pass = [with_kernels](const auto& pd, auto make, Operand first, Operand second,
                             Operand result) {
    if (!optimised(pd)) return Pass{{}, first, second, result, false};
    return Pass{{with_kernels ? make(pd) : dnnl::primitive(), pd.scratchpad_desc()},
                first,
                second,
                result,
                true};
  };
  return Primitives{
      pass(forward, [](const auto& pd) { return Forward(pd); }, {plain.src, forward.src_desc()},
           {plain.weights, forward.weights_desc()}, {plain.dst, forward.dst_desc()}),
      pass(backward_data, [](const auto& pd) { return BackwardData(pd); },
           {plain.dst, backward_data.diff_dst_desc()},
           {plain.weights, backward_data.weights_desc()},
           {plain.src, backward_data.diff_src_desc()}),
      pass(backward_weights, [](const auto& pd) { return BackwardWeights(pd); },
           {plain.src, backward_weights.src_desc()}, {plain.dst, backward_weights.diff_dst_desc()},
           {plain.f32_weights().weights, backward_weights.diff_weights_desc()})};
}

// No primitive at all for a type the CPU lacks (bf16 without AVX-512 or AVX2-VNNI-2): no pass
// runs on oneDNN, each takes its fallback.
inline Primitives build(const ConvGeometry& g, bool channels_last_first, memory::data_type type,
                        bool with_kernels = true) {
  try {
    if (transposed(g))
      return build_family<dnnl::deconvolution_forward, dnnl::deconvolution_backward_data,
                          dnnl::deconvolution_backward_weights>(
          g, channels_last_first, dnnl::algorithm::deconvolution_direct, type, with_kernels);
    return build_family<dnnl::convolution_forward, dnnl::convolution_backward_data,
                        dnnl::convolution_backward_weights>(
        g, channels_last_first, dnnl::algorithm::convolution_direct, type, with_kernels);
  } catch (const dnnl::error& e) {
    if (e.status != dnnl_unimplemented) throw;
    return Primitives{};
  }
}

inline Primitives choose_faster(Primitives channels_last, Primitives blocked);

// The wall-clock seconds one call of `run` takes.
template <class Run>
double seconds_of(Run&& run) {
  const auto start = std::chrono::steady_clock::now();
  run();
  return std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
}

// Whether two variants of a pass run on the same formats (then there is nothing to time).
inline bool same_formats(const Pass& a, const Pass& b) {
  return a.optimised == b.optimised && a.result.chosen == b.result.chosen &&
         a.first.chosen == b.first.chosen;
}

// The shape the formats are timed on: `g` itself, or where its activations are big, a slab of its
// first rows (same channels and cross-section, so the same per-row speed). Timing the whole shape
// would hold a copy of its activations in both formats at the moment of first use, on top of every
// saved activation.
inline ConvGeometry timing_slab(const ConvGeometry& g) {
  constexpr std::int64_t budget = std::int64_t{4} << 20;  // floats per activation (16 MiB)
  const std::int64_t in_row = g.batch * g.in[1] * g.in[2] * g.c_in;
  const std::int64_t out_row = g.batch * g.out[1] * g.out[2] * g.c_out;
  // Rows of the side with more rows per row of the other: outputs for a convolution, inputs for
  // a transposed one (each input row spreads over `stride` output rows).
  const std::int64_t stride = std::max<std::int64_t>(1, g.taps[0].stride);
  const std::int64_t per_row = transposed(g)
                                   ? std::max<std::int64_t>({in_row, out_row * stride, 1})
                                   : std::max<std::int64_t>({in_row * stride, out_row, 1});
  const std::int64_t rows = std::max<std::int64_t>(1, budget / per_row);
  ConvGeometry slab = g;
  if (transposed(g)) {
    if (rows >= g.in[0]) return g;
    slab.in[0] = rows;
    slab.out[0] = g.out[0] - (g.in[0] - rows) * stride;  // the same padding after
  } else {
    if (rows >= g.out[0]) return g;
    slab.out[0] = rows;
    slab.in[0] = g.in[0] - (g.out[0] - rows) * stride;
  }
  return slab.in[0] >= 1 && slab.out[0] >= 1 && supported(slab) ? slab : g;
}

// `channels_last` with each pass that runs faster on the blocked formats taken from `blocked`,
// timed on timing_slab(g).
inline Primitives choose_formats(const ConvGeometry& g, memory::data_type type,
                                 Primitives channels_last, Primitives blocked) {
  const ConvGeometry probe = timing_slab(g);
  if (key_of(probe, type) == key_of(g, type))
    return choose_faster(std::move(channels_last), std::move(blocked));
  // (Handles: copies share the kernels.)
  const Primitives probe_channels_last = build(probe, true, type);
  const Primitives timed = choose_faster(probe_channels_last, build(probe, false, type));
  Primitives chosen = channels_last;
  if (!same_formats(timed.forward, probe_channels_last.forward)) chosen.forward = blocked.forward;
  if (!same_formats(timed.backward_data, probe_channels_last.backward_data))
    chosen.backward_data = blocked.backward_data;
  if (!same_formats(timed.backward_weights, probe_channels_last.backward_weights))
    chosen.backward_weights = blocked.backward_weights;
  return chosen;
}

// Whether `formats` puts g's operands channels-last first: the fixed rule (by channels: 16
// channels or fewer on both sides) where they are timed or by channels.
inline bool channels_last_first(const ConvGeometry& g, KernelPolicy::Formats formats) {
  if (formats == KernelPolicy::Formats::channels_last) return true;
  return formats != KernelPolicy::Formats::blocked && std::max(g.c_in, g.c_out) <= 16;
}

inline Primitives& primitives(const ConvGeometry& g, memory::data_type type) {
  auto& slot = cache()[key_of(g, type)];
  if (slot) return *slot;
  const KernelPolicy::Formats formats = current_processor().settings().kernels.formats();
  switch (formats) {
    case KernelPolicy::Formats::chosen: {
      Primitives channels_last = build(g, true, type);
      const ScratchMemory timing;  // its buffers do not stay cached in the processor's pool
      // A shape the blocked kernels run (not usable) has nothing to time.
      slot = std::make_unique<Primitives>(
          channels_last.usable() ? choose_formats(g, type, channels_last, build(g, false, type))
                                 : channels_last);
      break;
    }
    case KernelPolicy::Formats::channels_last:
    case KernelPolicy::Formats::blocked:
    case KernelPolicy::Formats::by_channels:
      slot = std::make_unique<Primitives>(build(g, channels_last_first(g, formats), type));
      break;
  }
  return *slot;
}

struct PlannedTag;

// What a plan counts of a shape's passes: their formats by the fixed rule where a run would time
// them (a plan cannot), and no kernels (none runs).
inline const Primitives& planned_primitives(const ConvGeometry& g, memory::data_type type) {
  auto& slot = cache_of<Primitives, PlannedTag>()[key_of(g, type)];
  if (slot) return *slot;
  const KernelPolicy::Formats formats = current_processor().settings().kernels.formats();
  slot = std::make_unique<Primitives>(
      build(g, channels_last_first(g, formats), type, /*with_kernels=*/false));
  return *slot;
}

// Per pass, the variant that runs faster on this shape (reorders included), timed on zeros; passes
// whose variants use the same formats are not timed.
inline Primitives choose_faster(Primitives channels_last, Primitives blocked) {
  // Zeros of any element type, in floats, as many as the largest pass reading or writing the
  // tensor needs: a bf16 weight gradient is written in f32, twice the bf16 weights' bytes.
  const auto count = [&](Operand Pass::*forward_role, Operand Pass::*data_role,
                         Operand Pass::*weights_role) {
    std::size_t bytes = 0;
    for (const Primitives* p : {&channels_last, &blocked})
      bytes = std::max({bytes, (p->forward.*forward_role).plain.get_size(),
                        (p->backward_data.*data_role).plain.get_size(),
                        (p->backward_weights.*weights_role).plain.get_size()});
    return (bytes + sizeof(float) - 1) / sizeof(float);
  };
  Buffer<float> src(count(&Pass::first, &Pass::result, &Pass::first), 0.0f),
      weights(count(&Pass::second, &Pass::second, &Pass::result), 0.0f),
      dst(count(&Pass::result, &Pass::first, &Pass::second), 0.0f);
  // Warm-up runs, then the best of two interleaved runs each: one slow moment on a shared
  // machine should not decide.
  auto choose = [&](Pass& chosen, const Pass& other, const std::array<int, 3>& args,
                    const float* first, const float* second, float* result) {
    if (!other.optimised || same_formats(chosen, other)) return;  // nothing to choose
    if (!chosen.optimised) {
      chosen = other;
      return;
    }
    auto with = [&](const Pass& pass) { return [&] { run(pass, args, first, second, result); }; };
    with(chosen)();
    with(other)();
    double mine = 1e300, theirs = 1e300;
    for (int round = 0; round < 2; ++round) {
      mine = std::min(mine, seconds_of(with(chosen)));
      theirs = std::min(theirs, seconds_of(with(other)));
    }
    if (theirs < mine) chosen = other;
  };
  Primitives chosen = channels_last;
  choose(chosen.forward, blocked.forward, forward_args, src.data(), weights.data(), dst.data());
  choose(chosen.backward_data, blocked.backward_data, backward_data_args, dst.data(),
         weights.data(), src.data());
  choose(chosen.backward_weights, blocked.backward_weights, backward_weights_args, src.data(),
         dst.data(), weights.data());
  return chosen;
}

// The shape's primitives, or null where another kernel runs it instead.
inline const Primitives* fast_path(const ConvGeometry& g, memory::data_type type) {
  if (!supported(g)) return nullptr;
  const Primitives& p = primitives(g, type);
  return p.usable() ? &p : nullptr;
}

// grad_weight += the weight gradient of `g`, in one call: oneDNN's kernel, else (float) the 2-D
// one per tap, else `fallback`.
template <class T, class Fallback>
void weight_gradient(const ConvGeometry& g, const T* input, const T* grad_output,
                     double* grad_weight, Fallback&& fallback) {
  const Primitives* p = fast_path(g, data_type_of<T>());
  if (p && p->backward_weights.optimised) {
    Buffer<float> result(
        static_cast<std::size_t>(g.kernel[0] * g.kernel[1] * g.kernel[2] * g.c_in * g.c_out));
    run(p->backward_weights, backward_weights_args, input, grad_output, result.data());
    // The float result joins the caller's double sum.
    for (std::size_t i = 0; i < result.size(); ++i) grad_weight[i] += result[i];
    return;
  }
  if constexpr (std::is_same_v<T, float>)
    if (p && weight_gradient_by_planes(g, {padding(g, 1), padding(g, 2)}, input, grad_output,
                                       grad_weight))
      return;
  fallback(g, input, grad_output, grad_weight);
}

// Rows of the first dim per oneDNN call (output rows for forward and the weight gradient, input
// rows for the input gradient). Every output row, and the gradient of every input row, depends
// only on the rows around it, and the weight gradient is a sum over rows: a convolution is the
// same computation done slab by slab. Two things make that pay. oneDNN's fastest kernels often
// want blocked copies of their operands; whole, those copies were the largest transients of a
// U-Net's backward pass, and with each processor's shape timed to its own format, why a split
// run's peak fell slower than 1/P. In slabs of an eighth of the operand (at least `min_floats`,
// below which calls get too thin to run fast) they cost at most an eighth of it on any split. And
// rows away from the box's edges read no padding: on AVX2, oneDNN 2.6 has a direct 3-D
// weight-gradient kernel only for those, faster than the 2-D one per tap.
inline std::int64_t& min_slab_floats() {               // tests lower it to cut small shapes too
  static std::int64_t floats = std::int64_t{1} << 18;  // 1 MiB
  return floats;
}

inline std::int64_t rows_per_call(const ConvGeometry& g, Pass Primitives::*pass,
                                  memory::data_type type, const Primitives* planned = nullptr) {
  const std::int64_t whole = std::max(g.in[0], g.out[0]);
  // A transposed convolution's weight gradient runs in slabs of output rows too (output_rows),
  // where its scratchpad is large.
  const bool weights = pass == &Primitives::backward_weights;
  if ((transposed(g) && !weights) || g.batch != 1 || !supported(g)) return whole;
  const std::int64_t per_row =
      std::max<std::int64_t>({input_row_size(g) * g.taps[0].stride, output_row_size(g), 1});
  const std::int64_t largest = std::max(input_row_size(g) * g.in[0], output_row_size(g) * g.out[0]);
  const std::int64_t rows =
      std::max<std::int64_t>(1, std::max(min_slab_floats(), largest / 8) / per_row);
  if (rows >= whole) return whole;  // small enough: no need to look at the pass
  // A pass that runs optimised on the activations in place has no copies to bound: whole, it
  // needs no more primitives (a one-off prediction pays for each one it builds).
  const Pass& p = (planned ? *planned : primitives(g, type)).*pass;
  const bool activations_copied =
      p.first.reordered() ||
      (pass == &Primitives::backward_weights ? p.second.reordered() : p.result.reordered());
  // (A transposed one's copies stay whole: the passes' slabs are output rows, which a transposed
  // convolution's input gradient cannot take.)
  if (!transposed(g) && (!p.optimised || activations_copied)) return rows;
  if (!p.optimised) return whole;
  // Unless its scratchpad holds copies (AMX's and AVX512_BF16's bf16 passes: several times the
  // activations whole). Slabs keep it under an eighth of the largest operand, as the copies (in
  // proportion to their rows; a few rows run as fast as the whole), a transposed one's in whole
  // strides, so that each slab reads whole input rows.
  const double scratch = double(p.step.scratchpad.get_size());
  const double budget = std::max(double(min_slab_floats()) * sizeof(float),
                                 double(largest) * double(memory::data_type_size(type)) / 8);
  if (scratch <= budget) return whole;
  const std::int64_t step = transposed(g) ? std::max<std::int64_t>(1, g.taps[0].stride) : 1;
  return std::max<std::int64_t>(step, std::int64_t(double(whole) * budget / scratch) / step * step);
}

// The blocked kernels (single-threaded) on the processor's compute threads: each thread takes a
// slab of rows, output rows forward and input rows for the input gradient (of a convolution that
// is not transposed), which depend on nothing the other slabs compute. (oneDNN 2.6 on AVX2 has no
// optimised kernel for a transposed convolution's forward pass: the U-Net's up-sampling runs here.)
template <class Slab>
void on_row_slabs(std::int64_t rows, Slab&& slab) {
  const int parts = static_cast<int>(std::min<std::int64_t>(compute_threads(), rows));
  if (parts <= 1) return slab(0, rows);
#ifdef _OPENMP
#pragma omp parallel for num_threads(parts) schedule(static, 1)
#endif
  for (int p = 0; p < parts; ++p) slab(rows * p / parts, rows * (p + 1) / parts);
}

inline void blocked_forward(const ConvGeometry& g, const float* input, const float* weight,
                            float* output) {
  if (g.batch != 1) return blocked::conv_forward(g, input, weight, output);
  on_row_slabs(g.out[0], [&](std::int64_t a, std::int64_t b) {
    const RowSlab slab = output_rows(g, a, b);
    blocked::conv_forward(slab.geometry, input + slab.r0 * input_row_size(g), weight,
                          output + a * output_row_size(g));
  });
}

inline void blocked_backward_data(const ConvGeometry& g, const float* grad_output,
                                  const float* weight, float* grad_input) {
  if (g.batch != 1 || g.taps[0].transposed)  // (input_rows: not transposed)
    return blocked::conv_backward_input(g, grad_output, weight, grad_input);
  on_row_slabs(g.in[0], [&](std::int64_t r0, std::int64_t r1) {
    reference::input_gradient_rows(g, r0, r1, grad_output, weight,
                                   grad_input + r0 * input_row_size(g),
                                   &blocked::conv_backward_input<float>);
  });
}

template <class T, class Fallback>
void forward(const ConvGeometry& g, const T* input, const T* weight, T* output,
             Fallback&& fallback) {
  const Primitives* p = fast_path(g, data_type_of<T>());
  if (!p || !p->forward.optimised) return fallback(g, input, weight, output);
  run(p->forward, forward_args, input, weight, output);
}

// A shape's input gradient as a forward convolution (input_gradient_as_forward): its primitives,
// or null where it does not run that way.
struct AsForward {
  const Primitives* forward = nullptr;
};

// The primitives that run g's input gradient as a forward convolution, or null where oneDNN has
// no optimised forward kernel for it or (`bounded`) it would take more memory than the direct
// pass: a copy of activations the direct one does not make (rows_per_call bounds those), or a
// larger scratchpad (a 1 x 1 x 1 convolution to 3 classes at 128^3: 32 MiB forward, 0.04 direct).
inline const Primitives* as_forward_primitives(const ConvGeometry& g, memory::data_type type,
                                               const Pass& direct, bool bounded) {
  const std::optional<ConvGeometry> f = input_gradient_as_forward(g);
  const Primitives* q = f ? fast_path(*f, type) : nullptr;
  if (!q || !q->forward.optimised) return nullptr;
  if (!bounded) return q;
  const auto copies = [](const Pass& pass) {
    return pass.first.reordered() || pass.result.reordered();
  };
  const auto scratch = [](const Pass& pass) { return pass.step.scratchpad.get_size(); };
  const bool costs_memory = (copies(q->forward) && !copies(direct)) ||
                            scratch(q->forward) > std::max(scratch(direct), std::size_t(1) << 20);
  return costs_memory ? nullptr : q;
}

// The input gradient on oneDNN: its backward-data pass, or for a stride-1 convolution its forward
// pass on flipped weights where that takes no more memory and runs faster — timed once per shape,
// at its first call, both ways on the call's own arrays. Like the formats, chosen only where they
// are timed: the two round differently. KernelPolicy::input_gradient_as_forward forces either.
template <class T, class Fallback>
void backward_data(const ConvGeometry& g, const T* grad_output, const T* weight, T* grad_input,
                   Fallback&& fallback) {
  const memory::data_type type = data_type_of<T>();
  // oneDNN 2.6's bfloat16 input gradients sum output channels in pairs, and with an odd count
  // (the U-Net's head, 8 -> 3) both its kernels (backward data, and forward on flipped weights)
  // gave wrong values (test_bf16_kernels): those run meshtensor's.
  if (type == memory::data_type::bf16 && g.c_out % 2 == 1)
    return fallback(g, grad_output, weight, grad_input);
  const Primitives* p = fast_path(g, type);
  if (!p || !p->backward_data.optimised) return fallback(g, grad_output, weight, grad_input);
  const auto direct = [&] {
    run(p->backward_data, backward_data_args, grad_output, weight, grad_input);
  };
  const KernelPolicy::AsForward forced =
      current_processor().settings().kernels.input_gradient_as_forward;
  if (forced == KernelPolicy::AsForward::never) return direct();
  const Primitives* q = nullptr;
  AsForward* first_call = nullptr;  // where the shape's choice goes, on its first call
  if (forced == KernelPolicy::AsForward::always) {
    q = as_forward_primitives(g, type, p->backward_data, /*bounded=*/false);
  } else {
    auto& choice = cache_of<AsForward>()[key_of(g, type)];
    if (!choice) {
      choice = std::make_unique<AsForward>(AsForward{
          current_processor().settings().kernels.formats() == KernelPolicy::Formats::chosen
              ? as_forward_primitives(g, type, p->backward_data, true)
              : nullptr});
      first_call = choice.get();
    }
    q = choice->forward;
  }
  if (!q) return direct();
  Buffer<T> flipped(static_cast<std::size_t>(conv_weight_size(g)));
  flip_weights(g, weight, flipped.data());
  const auto as_forward = [&] {
    run(q->forward, forward_args, grad_output, flipped.data(), grad_input);
  };
  if (!first_call) return as_forward();
  // Warm-up, then one timed run each, in this order (the operands of < are unsequenced): the
  // result must come from the way chosen, which later calls take, so a faster as_forward runs
  // again.
  as_forward(), direct();
  const double as_forward_s = seconds_of(as_forward);
  const double direct_s = seconds_of(direct);
  if (as_forward_s < direct_s)
    as_forward();
  else
    first_call->forward = nullptr;
}

// The blocks (bytes each) one float call of `pass` on `g` takes beside its operands on `p`, in
// the order it takes them: the weight gradient's float result (or its 2-D passes' blocks), then
// the pass's (call_blocks). None where it runs on its fallback.
inline std::vector<std::size_t> pass_blocks(const ConvGeometry& g, const Primitives& p,
                                            Pass Primitives::*pass) {
  const bool weights = pass == &Primitives::backward_weights;
  if (weights && !p.backward_weights.optimised && p.usable())
    return planes_blocks(g, {padding(g, 1), padding(g, 2)});
  if (!(p.*pass).optimised) return {};
  std::vector<std::size_t> blocks;
  if (weights) blocks.push_back(std::size_t(conv_weight_size(g)) * sizeof(float));
  for (const std::size_t bytes : call_blocks(p.*pass)) blocks.push_back(bytes);
  return blocks;
}

// What a plan holds for a float call of `pass` on oneDNN (conv_*_or below, formats as
// planned_primitives): the blocks of its largest slab.
inline std::vector<std::size_t> planned_blocks(const ConvGeometry& g, Pass Primitives::*pass) {
  constexpr memory::data_type type = memory::data_type::f32;
  if (!supported(g)) return {};
  const auto blocks_of = [&](const ConvGeometry& slab) {
    return supported(slab) ? pass_blocks(slab, planned_primitives(slab, type), pass)
                           : std::vector<std::size_t>{};
  };
  const bool input_rows_slabs = pass == &Primitives::backward_data;
  const std::int64_t whole = input_rows_slabs ? g.in[0] : g.out[0];
  const std::int64_t rows = rows_per_call(g, pass, type, &planned_primitives(g, type));
  if (rows >= whole) return blocks_of(g);
  std::vector<std::size_t> largest;
  for (std::int64_t a = 0; a < whole; a += rows) {
    const std::int64_t b = std::min(whole, a + rows);
    if (input_rows_slabs) {
      const InputSlab slab = input_rows(g, a, b);
      if (slab.o0 < slab.o1) keep_largest(largest, blocks_of(slab.geometry));
    } else {
      const RowSlab slab = output_rows(g, a, b);
      if (slab.r0 < slab.r1 || pass == &Primitives::forward)
        keep_largest(largest, blocks_of(slab.geometry));
    }
  }
  return largest;
}

}  // namespace detail

/// The passes on oneDNN for float or bfloat16 blocks, slab by slab (detail::rows_per_call), each
/// slab oneDNN has no optimised kernel for on `fallback` (a kernel of the same pass and contract).
template <class T, class Fallback>
void conv_forward_or(const ConvGeometry& g, const T* input, const T* weight, T* output,
                     Fallback&& fallback) {
  const std::int64_t rows =
      detail::rows_per_call(g, &detail::Primitives::forward, detail::data_type_of<T>());
  if (rows >= g.out[0]) return detail::forward(g, input, weight, output, fallback);
  for (std::int64_t a = 0; a < g.out[0]; a += rows) {
    const RowSlab slab = output_rows(g, a, std::min(g.out[0], a + rows));
    detail::forward(slab.geometry, input + slab.r0 * input_row_size(g), weight,
                    output + a * output_row_size(g), fallback);
  }
}

template <class T, class Fallback>
void conv_backward_input_or(const ConvGeometry& g, const T* grad_output, const T* weight,
                            T* grad_input, Fallback&& fallback) {
  const std::int64_t rows =
      detail::rows_per_call(g, &detail::Primitives::backward_data, detail::data_type_of<T>());
  auto slab = [&](const ConvGeometry& s, const T* go, const T* w, T* gi) {
    detail::backward_data(s, go, w, gi, fallback);
  };
  if (rows >= g.in[0]) return slab(g, grad_output, weight, grad_input);
  for (std::int64_t r0 = 0; r0 < g.in[0]; r0 += rows)
    reference::input_gradient_rows(g, r0, std::min(g.in[0], r0 + rows), grad_output, weight,
                                   grad_input + r0 * input_row_size(g), slab);
}

template <class T, class Fallback>
void conv_backward_weight_or(const ConvGeometry& g, const T* input, const T* grad_output,
                             double* grad_weight, Fallback&& fallback) {
  const std::int64_t rows =
      detail::rows_per_call(g, &detail::Primitives::backward_weights, detail::data_type_of<T>());
  if (rows >= g.out[0])
    return detail::weight_gradient(g, input, grad_output, grad_weight, fallback);
  for (std::int64_t a = 0; a < g.out[0]; a += rows) {
    const RowSlab slab = output_rows(g, a, std::min(g.out[0], a + rows));
    if (slab.r0 < slab.r1)  // else every read is padding
      detail::weight_gradient(slab.geometry, input + slab.r0 * input_row_size(g),
                              grad_output + a * output_row_size(g), grad_weight, fallback);
  }
}

/// The passes for float blocks (oneDNN, else meshtensor's blocked kernels) and the blocked kernels
/// for other types.
template <class T>
void conv_forward(const ConvGeometry& g, const T* input, const T* weight, T* output) {
  if constexpr (std::is_same_v<T, float>)
    conv_forward_or(g, input, weight, output, &detail::blocked_forward);
  else
    blocked::conv_forward(g, input, weight, output);
}

template <class T>
void conv_backward_input(const ConvGeometry& g, const T* grad_output, const T* weight,
                         T* grad_input) {
  if constexpr (std::is_same_v<T, float>)
    conv_backward_input_or(g, grad_output, weight, grad_input, &detail::blocked_backward_data);
  else
    blocked::conv_backward_input(g, grad_output, weight, grad_input);
}

template <class T>
void conv_backward_weight(const ConvGeometry& g, const T* input, const T* grad_output,
                          double* grad_weight) {
  if constexpr (std::is_same_v<T, float>)
    conv_backward_weight_or(g, input, grad_output, grad_weight,
                            &blocked::conv_backward_weight<float>);
  else
    blocked::conv_backward_weight(g, input, grad_output, grad_weight);
}

}  // namespace meshtensor::kernels::onednn
