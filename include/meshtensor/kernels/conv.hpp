#pragma once
// The convolution family: forward, and the gradients of the input (into the box) and of the weight
// (added, in double), on one block (kernels/common/conv_geometry.hpp says the layout). The CPU's
// kernels are chosen at compile time: oneDNN when the program links meshtensor::onednn
// (MESHTENSOR_WITH_ONEDNN), else the register-blocked ones; the plain reference loops with
// MESHTENSOR_REFERENCE_KERNELS (for cross-checks). Shapes with 8 channels or fewer on one side
// run on the row kernels (kernels/cpu/rows/conv.hpp) where the CPU has AVX2 or AVX-512. bfloat16
// blocks run on oneDNN's bf16 kernels (AMX or AVX512_BF16) or on the float kernels a slab of rows
// widened at a time (with few channels: the row kernels' bfloat16 forms), whichever runs the
// shape faster (bf16_kernels). A GPU runs cuDNN's (bfloat16
// on its tensor cores), and the CPU's for what cuDNN cannot run (double). A plan counts a
// multiply-add per (output, tap) pair that reads the box.

#include <algorithm>
#include <cstdint>
#include <cstdlib>
#include <memory>
#include <stdexcept>
#include <string>
#include <type_traits>

#include "meshtensor/kernels/backend.hpp"
#include "meshtensor/kernels/common/channel_parts.hpp"
#include "meshtensor/kernels/common/conv_geometry.hpp"
#include "meshtensor/kernels/copy.hpp"
#include "meshtensor/kernels/cpu/blocked/conv.hpp"
#include "meshtensor/kernels/cpu/pointwise.hpp"
#include "meshtensor/kernels/cpu/reference/conv.hpp"
#include "meshtensor/kernels/cpu/rows/conv.hpp"
#include "meshtensor/kernels/norm.hpp"
#if defined(MESHTENSOR_WITH_ONEDNN) && !defined(MESHTENSOR_REFERENCE_KERNELS)
#include "meshtensor/kernels/cpu/onednn/conv.hpp"
#endif
#if defined(MESHTENSOR_WITH_CUDA)
#include "meshtensor/kernels/cuda/cudnn_conv.hpp"
#endif

namespace meshtensor::kernels {
#if defined(MESHTENSOR_REFERENCE_KERNELS)
inline constexpr bool reference_kernels = true;
namespace cpu_conv = reference;
#elif defined(MESHTENSOR_WITH_ONEDNN)
inline constexpr bool reference_kernels = false;
namespace cpu_conv = onednn;
#else
inline constexpr bool reference_kernels = false;
namespace cpu_conv = blocked;
#endif

/// The operations of one pass of a convolution: two per (output, tap) pair that reads inside the
/// box, per input and output channel.
inline double conv_flops(const ConvGeometry& g) {
  double pairs = 2.0 * double(g.batch) * double(g.c_in) * double(g.c_out);
  for (int d = 0; d < 3; ++d) {
    std::int64_t reading = 0;
    for (std::int64_t o = 0; o < g.out[d]; ++o)
      for (std::int64_t k = 0; k < g.kernel[d]; ++k) {
        const std::int64_t i = g.taps[d].reads(o, k);
        reading += i >= 0 && i < g.in[d];
      }
    pairs *= double(reading);
  }
  return pairs;
}

/// The class a plan counts a pass of `g` under (kernels/plan/counts.hpp).
inline std::size_t conv_class(const ConvGeometry& g, plan::ConvClass::Pass pass) {
  const bool one_tap = g.kernel[0] * g.kernel[1] * g.kernel[2] == 1;
  return plan::ConvClass::of(pass, one_tap, g.c_in, g.c_out);
}

/// A plan's count of one pass of `g` (the plan arm of dispatch()).
inline auto counted(const ConvGeometry& g, plan::ConvClass::Pass pass) {
  return [&g, pass] { plan::count_conv(conv_class(g, pass), conv_flops(g)); };
}

/// Whether a block has nothing to sum: no channels on one side (an uneven channel split leaves
/// some processors none) or no positions. oneDNN and cuDNN refuse such shapes.
inline bool conv_is_empty(const ConvGeometry& g) {
  std::int64_t product = g.batch * g.c_in * g.c_out;
  for (int d = 0; d < 3; ++d) product *= g.in[d] * g.out[d];
  return product == 0;
}

namespace detail {
template <class T>
void cpu_forward(const ConvGeometry& g, const T* input, const T* weight, T* output);
template <class T>
void cpu_backward_input(const ConvGeometry& g, const T* grad_output, const T* weight,
                        T* grad_input);
template <class T>
void cpu_backward_weight(const ConvGeometry& g, const T* input, const T* grad_output,
                         double* grad_weight);

// Positions of the box, each a row of channels (the parts' rows side by side).
inline std::int64_t box_positions(const ConvGeometry& g) {
  return g.batch * g.in[0] * g.in[1] * g.in[2];
}

// The parts as the copy kernels' pieces of each position's row.
template <class T>
std::vector<cpu::RowsPart<T>> row_pieces(const ChannelParts<T>& parts) {
  std::vector<cpu::RowsPart<T>> pieces;
  for (std::size_t i = 0; i < parts.size(); ++i)
    pieces.push_back({parts.data[i], parts.channels[i]});
  return pieces;
}

// The parts with each affine map applied into a copy (norm_affine: the same values), for the
// kernels that read only data.
template <class T>
ChannelParts<const T> mapped_copies(const ConvGeometry& g, const ChannelParts<const T>& input,
                                    std::vector<Buffer<T>>& copies) {
  const std::int64_t positions = g.batch * g.in[0] * g.in[1] * g.in[2];
  ChannelParts<const T> plain;
  copies.reserve(input.size());
  for (std::size_t i = 0; i < input.size(); ++i) {
    const ChannelAffine* f = input.affine_of(i);
    if (!f) {
      plain.add(input.data[i], input.channels[i]);
      continue;
    }
    copies.emplace_back(static_cast<std::size_t>(positions * input.channels[i]));
    norm_affine(*f, positions, input.data[i], copies.back().data());
    plain.add(copies.back().data(), input.channels[i]);
  }
  return plain;
}

// The parts as one box of data (what kernels that read no parts take), each affine map applied.
template <class T>
Buffer<T> joined(const ConvGeometry& g, const ChannelParts<const T>& parts) {
  std::vector<Buffer<T>> copies;
  const ChannelParts<const T> plain = mapped_copies(g, parts, copies);
  if (plain.size() == 1 && copies.size() == 1) return std::move(copies.front());
  Buffer<T> box(static_cast<std::size_t>(conv_input_size(g)));
  kernels::join_rows(box_positions(g), row_pieces(plain), box.data());
  return box;
}

// bfloat16 operands on the CPU run the float kernels a slab of rows at a time (rows along the
// first dim, per batch entry), each slab widened for its call and its result rounded once: the
// float copies stay about 1 MiB whatever the block, so bfloat16 keeps its halved memory (larger
// slabs are no faster; bench/RESULTS.md, "Figures behind the kernels' choices").
constexpr std::int64_t widened_slab_bytes = std::int64_t(1) << 20;

// A slab's rows: about 1 MiB of them, and at least one per compute thread, since the float kernels
// share a call's rows among the threads (thinner slabs leave threads idle).
inline std::int64_t rows_per_slab(std::int64_t row_size) {
  const std::int64_t fitting =
      widened_slab_bytes / std::int64_t(sizeof(float)) / std::max<std::int64_t>(1, row_size);
  return std::max<std::int64_t>({1, fitting, compute_threads()});
}

inline void widen_into(const bfloat16* data, std::int64_t n, Buffer<float>& into) {
  into.resize(static_cast<std::size_t>(n));
  cpu::convert(data, n, into.data());
}

// f(entry, first, last): the row slabs [first, last) of `rows` rows of each batch entry.
template <class F>
void for_each_row_slab(std::int64_t batch, std::int64_t rows, std::int64_t row_size, F&& f) {
  const std::int64_t step = rows_per_slab(row_size);
  for (std::int64_t b = 0; b < batch; ++b)
    for (std::int64_t a = 0; a < rows; a += step) f(b, a, std::min(rows, a + step));
}

inline ConvGeometry one_entry(ConvGeometry g) {
  g.batch = 1;
  return g;
}

// Few channels run the row kernels' bfloat16 forms, with no float copies: in AVX512_BF16's dot
// products where they pay (more products a second than float multiply-adds), else in float
// products on values widened as the rows are turned; the first layer's forward pass channels last
// where that kernel runs (faster than widened slabs); one-tap ones with few channels (the head)
// run cpu/pointwise.hpp; the rest the float kernels on widened slabs.
inline bool bf16_rows_run(bool fits) { return !reference_kernels && fits; }

inline void bf16_forward(const ConvGeometry& g, const bfloat16* input, const bfloat16* weight,
                         bfloat16* output) {
  if (bf16_rows_run(rows::fits_one_channel_forward_bf16(g)))
    return rows::conv_forward_one_channel(
        g, input, weight, output,
        rows::writes_around_cache(g, rows::OutputStores::by_size, sizeof(bfloat16)));
  if (bf16_rows_run(rows::fits_forward_bf16(g)))
    return rows::conv_forward(g, input, weight, output);
  if (bf16_rows_run(cpu::pointwise_takes(g)))
    return cpu::pointwise_forward(g, input, weight, output);
  Buffer<float> w, in, out;
  widen_into(weight, conv_weight_size(g), w);
  const ConvGeometry one = one_entry(g);
  const std::int64_t in_row = input_row_size(g), out_row = output_row_size(g);
  for_each_row_slab(g.batch, g.out[0], std::max(in_row, out_row), [&](auto b, auto a, auto e) {
    const RowSlab slab = output_rows(one, a, e);
    bfloat16* to = output + (b * g.out[0] + a) * out_row;
    const std::int64_t n = (e - a) * out_row;
    if (conv_is_empty(slab.geometry)) return std::fill(to, to + n, bfloat16(0.0f));
    widen_into(input + (b * g.in[0] + slab.r0) * in_row, (slab.r1 - slab.r0) * in_row, in);
    out.resize(static_cast<std::size_t>(n));
    cpu_forward(slab.geometry, in.data(), w.data(), out.data());
    cpu::convert(out.data(), n, to);
  });
}

inline void bf16_backward_input(const ConvGeometry& g, const bfloat16* grad_output,
                                const bfloat16* weight, bfloat16* grad_input) {
  if (bf16_rows_run(rows::fits_backward_input_bf16(g)))
    return rows::conv_backward_input(g, grad_output, weight, grad_input);
  if (bf16_rows_run(cpu::pointwise_takes(g)))
    return cpu::pointwise_backward_input(g, grad_output, weight, grad_input);
  Buffer<float> w, go, gi;
  widen_into(weight, conv_weight_size(g), w);
  const ConvGeometry one = one_entry(g);
  const std::int64_t in_row = input_row_size(g), out_row = output_row_size(g);
  for_each_row_slab(g.batch, g.in[0], std::max(in_row, out_row), [&](auto b, auto r0, auto r1) {
    const InputSlab slab = input_rows(one, r0, r1);
    bfloat16* to = grad_input + (b * g.in[0] + r0) * in_row;
    const std::int64_t n = (r1 - r0) * in_row;
    if (conv_is_empty(slab.geometry)) return std::fill(to, to + n, bfloat16(0.0f));
    widen_into(grad_output + (b * g.out[0] + slab.o0) * out_row, (slab.o1 - slab.o0) * out_row, go);
    gi.resize(static_cast<std::size_t>(n));
    cpu_backward_input(slab.geometry, go.data(), w.data(), gi.data());
    cpu::convert(gi.data(), n, to);
  });
}

inline void bf16_backward_weight(const ConvGeometry& g, const bfloat16* input,
                                 const bfloat16* grad_output, double* grad_weight) {
  if (bf16_rows_run(rows::fits_backward_weight_bf16(g)))
    return rows::conv_backward_weight(g, input, grad_output, grad_weight);
  if (bf16_rows_run(cpu::pointwise_takes(g)))
    return cpu::pointwise_backward_weight(g, input, grad_output, grad_weight);
  Buffer<float> in, go;
  const ConvGeometry one = one_entry(g);
  const std::int64_t in_row = input_row_size(g), out_row = output_row_size(g);
  for_each_row_slab(g.batch, g.out[0], std::max(in_row, out_row), [&](auto b, auto a, auto e) {
    const RowSlab slab = output_rows(one, a, e);
    if (conv_is_empty(slab.geometry)) return;  // adds nothing
    widen_into(input + (b * g.in[0] + slab.r0) * in_row, (slab.r1 - slab.r0) * in_row, in);
    widen_into(grad_output + (b * g.out[0] + a) * out_row, (e - a) * out_row, go);
    cpu_backward_weight(slab.geometry, in.data(), go.data(), grad_weight);
  });
}

#if defined(MESHTENSOR_WITH_ONEDNN) && !defined(MESHTENSOR_REFERENCE_KERNELS)
// Which kernels run a bfloat16 pass: oneDNN's bf16 ones (native; each slab it has none for runs
// widened) or meshtensor's (widened: the row kernels' bfloat16 forms where they take the shape,
// else the float kernels on widened slabs). KernelPolicy::bf16_conv forces one; chosen, each
// shape and pass is timed at its first call on a processor and runs the faster (which one wins
// depends on the CPU and the channels), or under the fixed rule oneDNN's where it has AMX.
enum class Bf16Kernels { native, widened, timed };

inline bool onednn_has_amx() {
  const auto amx = static_cast<unsigned>(dnnl::cpu_isa::avx512_core_amx);
  return (static_cast<unsigned>(dnnl::get_effective_cpu_isa()) & amx) == amx;
}

inline Bf16Kernels bf16_kernels_setting() {
  const KernelPolicy& policy = current_processor().settings().kernels;
  switch (policy.bf16_conv) {
    case KernelPolicy::Bf16Conv::native:
      return Bf16Kernels::native;
    case KernelPolicy::Bf16Conv::widened:
      return Bf16Kernels::widened;
    case KernelPolicy::Bf16Conv::chosen:
      break;
  }
  if (!policy.fixed()) return Bf16Kernels::timed;
  return onednn_has_amx() ? Bf16Kernels::native : Bf16Kernels::widened;
}

struct Bf16Choice {
  bool native = true;
};

// Runs run(native, trial) as the setting or the shape's timing says. A timing runs each variant
// once to build and warm it, then the best of three interleaved timed runs each (one slow moment
// on a shared machine should not decide; the float formats' choice takes the best of two), with
// trial = true (a pass that adds into its result, the weight
// gradient, then adds into scratch), and the chosen one last, for real. The trials allocate from
// scratch memory, given back when they end: the processor's pool would otherwise keep caching
// their buffers (both variants' at once) for the rest of the run.
template <class Run>
void bf16_kernels(const ConvGeometry& g, int pass, Run&& run) {
  const Bf16Kernels setting = bf16_kernels_setting();
  if (setting != Bf16Kernels::timed) return run(setting == Bf16Kernels::native, false);
  std::vector<std::int64_t> key = onednn::detail::key_of(g, dnnl::memory::data_type::bf16);
  key.push_back(pass);
  auto& choice = onednn::detail::cache_of<Bf16Choice>()[key];
  if (!choice) {
    // One scratch pool for all four runs: the timed ones reuse the warm-up's pages.
    const ScratchMemory trials;
    const auto seconds = [&](bool native) {
      return onednn::detail::seconds_of([&] { run(native, true); });
    };
    seconds(true), seconds(false);
    double widened = 1e300, native = 1e300;
    for (int round = 0; round < 3; ++round) {
      widened = std::min(widened, seconds(false));
      native = std::min(native, seconds(true));
    }
    choice = std::make_unique<Bf16Choice>(Bf16Choice{native <= widened});
  }
  run(choice->native, false);
}

inline void bf16_forward_faster(const ConvGeometry& g, const bfloat16* input,
                                const bfloat16* weight, bfloat16* output) {
  bf16_kernels(g, 0, [&](bool native, bool) {
    if (native) return onednn::conv_forward_or(g, input, weight, output, &bf16_forward);
    bf16_forward(g, input, weight, output);
  });
}

inline void bf16_backward_input_faster(const ConvGeometry& g, const bfloat16* grad_output,
                                       const bfloat16* weight, bfloat16* grad_input) {
  bf16_kernels(g, 1, [&](bool native, bool) {
    if (native)
      return onednn::conv_backward_input_or(g, grad_output, weight, grad_input,
                                            &bf16_backward_input);
    bf16_backward_input(g, grad_output, weight, grad_input);
  });
}

// bf16_kernels for the weight gradient: run(native, into) adds into grad_weight, or (a trial,
// whose sums are discarded) into scratch.
template <class Run>
void bf16_weight_kernels(const ConvGeometry& g, double* grad_weight, Run&& run, int pass = 2) {
  bf16_kernels(g, pass, [&](bool native, bool trial) {
    Buffer<double> discarded(trial ? static_cast<std::size_t>(conv_weight_size(g)) : 0, 0.0);
    run(native, trial ? discarded.data() : grad_weight);
  });
}

inline void bf16_backward_weight_faster(const ConvGeometry& g, const bfloat16* input,
                                        const bfloat16* grad_output, double* grad_weight) {
  bf16_weight_kernels(g, grad_weight, [&](bool native, double* into) {
    if (native)
      return onednn::conv_backward_weight_or(g, input, grad_output, into, &bf16_backward_weight);
    bf16_backward_weight(g, input, grad_output, into);
  });
}

// A pass with an operand in parts along the channels: the row kernels read (or write) the parts
// in place, oneDNN's bf16 kernels a joined copy, as bf16_kernels picks for the shape. Input parts
// given as affine maps are mapped by the row kernels as they read them, written into oneDNN's
// copy: a pass that reads some is timed apart (the copy is part of oneDNN's cost there).
inline int timed_as(int pass, const ChannelParts<const bfloat16>& input) {
  return input.has_affine() ? pass + 3 : pass;
}

inline void bf16_forward_faster(const ConvGeometry& g, const ChannelParts<const bfloat16>& input,
                                const bfloat16* weight, bfloat16* output) {
  bf16_kernels(g, timed_as(0, input), [&](bool native, bool) {
    if (native)
      return onednn::conv_forward_or(g, joined(g, input).data(), weight, output, &bf16_forward);
    rows::conv_forward(g, input, weight, ChannelParts<bfloat16>(output, g.c_out));
  });
}

inline void bf16_backward_input_faster(const ConvGeometry& g, const bfloat16* grad_output,
                                       const bfloat16* weight,
                                       const ChannelParts<bfloat16>& grad_input) {
  bf16_kernels(g, 1, [&](bool native, bool) {
    if (!native) return rows::conv_backward_input(g, grad_output, weight, grad_input);
    Buffer<bfloat16> box(static_cast<std::size_t>(conv_input_size(g)));
    onednn::conv_backward_input_or(g, grad_output, weight, box.data(), &bf16_backward_input);
    kernels::split_rows(box_positions(g), box.data(), row_pieces(grad_input));
  });
}

inline void bf16_backward_weight_faster(const ConvGeometry& g,
                                        const ChannelParts<const bfloat16>& input,
                                        const bfloat16* grad_output, double* grad_weight) {
  bf16_weight_kernels(
      g, grad_weight,
      [&](bool native, double* into) {
        if (native)
          return onednn::conv_backward_weight_or(g, joined(g, input).data(), grad_output, into,
                                                 &bf16_backward_weight);
        rows::conv_backward_weight(g, input, grad_output, into);
      },
      timed_as(2, input));
}
#else
inline void bf16_forward_faster(const ConvGeometry& g, const ChannelParts<const bfloat16>& input,
                                const bfloat16* weight, bfloat16* output) {
  rows::conv_forward(g, input, weight, ChannelParts<bfloat16>(output, g.c_out));
}
inline void bf16_backward_input_faster(const ConvGeometry& g, const bfloat16* grad_output,
                                       const bfloat16* weight,
                                       const ChannelParts<bfloat16>& grad_input) {
  rows::conv_backward_input(g, grad_output, weight, grad_input);
}
inline void bf16_backward_weight_faster(const ConvGeometry& g,
                                        const ChannelParts<const bfloat16>& input,
                                        const bfloat16* grad_output, double* grad_weight) {
  rows::conv_backward_weight(g, input, grad_output, grad_weight);
}
inline void bf16_forward_faster(const ConvGeometry& g, const bfloat16* input,
                                const bfloat16* weight, bfloat16* output) {
  bf16_forward(g, input, weight, output);
}
inline void bf16_backward_input_faster(const ConvGeometry& g, const bfloat16* grad_output,
                                       const bfloat16* weight, bfloat16* grad_input) {
  bf16_backward_input(g, grad_output, weight, grad_input);
}
inline void bf16_backward_weight_faster(const ConvGeometry& g, const bfloat16* input,
                                        const bfloat16* grad_output, double* grad_weight) {
  bf16_backward_weight(g, input, grad_output, grad_weight);
}
#endif

// Whether a bfloat16 pass may run on the row kernels: not where oneDNN's are set to run it.
inline bool bf16_rows_may_run() {
#if defined(MESHTENSOR_WITH_ONEDNN) && !defined(MESHTENSOR_REFERENCE_KERNELS)
  return bf16_kernels_setting() != Bf16Kernels::native;
#else
  return true;
#endif
}

// The row kernels where they fit (float, few channels), else the CPU family's.
template <class T>
void cpu_forward(const ConvGeometry& g, const T* input, const T* weight, T* output) {
  if constexpr (std::is_same_v<T, bfloat16>) {
    bf16_forward_faster(g, input, weight, output);
  } else {
    if constexpr (std::is_same_v<T, float> && !reference_kernels)
      if (rows::fits_forward(g)) return rows::conv_forward(g, input, weight, output);
    cpu_conv::conv_forward(g, input, weight, output);
  }
}
template <class T>
void cpu_backward_input(const ConvGeometry& g, const T* grad_output, const T* weight,
                        T* grad_input) {
  if constexpr (std::is_same_v<T, bfloat16>) {
    bf16_backward_input_faster(g, grad_output, weight, grad_input);
  } else {
    if constexpr (std::is_same_v<T, float> && !reference_kernels)
      if (rows::fits_backward_input(g))
        return rows::conv_backward_input(g, grad_output, weight, grad_input);
    cpu_conv::conv_backward_input(g, grad_output, weight, grad_input);
  }
}
template <class T>
void cpu_backward_weight(const ConvGeometry& g, const T* input, const T* grad_output,
                         double* grad_weight) {
  if constexpr (std::is_same_v<T, bfloat16>) {
    bf16_backward_weight_faster(g, input, grad_output, grad_weight);
  } else {
    if constexpr (std::is_same_v<T, float> && !reference_kernels)
      if (rows::fits_backward_weight(g))
        return rows::conv_backward_weight(g, input, grad_output, grad_weight);
    cpu_conv::conv_backward_weight(g, input, grad_output, grad_weight);
  }
}

#if defined(MESHTENSOR_WITH_CUDA)
// cuDNN's passes for float and bfloat16; false for the type it does not run (double).
template <class T>
constexpr bool cudnn_runs = std::is_same_v<T, float> || std::is_same_v<T, bfloat16>;
template <class T>
bool cudnn_forward(const ConvGeometry& g, const T* input, const T* weight, T* output) {
  if constexpr (cudnn_runs<T>) return cudnn::conv_forward(g, input, weight, output);
  return false;
}
template <class T>
bool cudnn_backward_input(const ConvGeometry& g, const T* grad_output, const T* weight,
                          T* grad_input) {
  if constexpr (cudnn_runs<T>)
    return cudnn::conv_backward_input(g, grad_output, weight, grad_input);
  return false;
}
template <class T>
bool cudnn_backward_weight(const ConvGeometry& g, const T* input, const T* grad_output,
                           double* grad_weight) {
  if constexpr (cudnn_runs<T>)
    return cudnn::conv_backward_weight(g, input, grad_output, grad_weight);
  return false;
}
#endif

// A plan's count of a pass of `g` on T that, where the plan stands for a run on GPUs, also holds
// for the call what cuDNN's road allocates there.
template <class T>
auto counted_on_road(const ConvGeometry& g, plan::ConvClass::Pass pass) {
  return [&g, pass] {
    counted(g, pass)();
#if defined(MESHTENSOR_WITH_CUDA)
    if constexpr (cudnn_runs<T>)
      if (takes_gpu_roads()) cudnn::take_own_buffers<T>(g, pass);
#endif
  };
}
}  // namespace detail

template <class T>
void conv_forward(const ConvGeometry& g, const T* input, const T* weight, T* output) {
  if (conv_is_empty(g)) return fill_values(output, conv_output_size(g), T(0));
  dispatch(detail::counted_on_road<T>(g, plan::ConvClass::forward),
           MESHTENSOR_ON_GPU(detail::cudnn_forward(g, input, weight, output)),
           [&] { detail::cpu_forward(g, input, weight, output); });
}

template <class T>
void conv_backward_input(const ConvGeometry& g, const T* grad_output, const T* weight,
                         T* grad_input) {
  if (conv_is_empty(g)) return fill_values(grad_input, conv_input_size(g), T(0));
  dispatch(detail::counted_on_road<T>(g, plan::ConvClass::backward_input),
           MESHTENSOR_ON_GPU(detail::cudnn_backward_input(g, grad_output, weight, grad_input)),
           [&] { detail::cpu_backward_input(g, grad_output, weight, grad_input); });
}

template <class T>
void conv_backward_weight(const ConvGeometry& g, const T* input, const T* grad_output,
                          double* grad_weight) {
  if (conv_is_empty(g)) return;  // adds nothing
  dispatch(detail::counted_on_road<T>(g, plan::ConvClass::backward_weight),
           MESHTENSOR_ON_GPU(detail::cudnn_backward_weight(g, input, grad_output, grad_weight)),
           [&] { detail::cpu_backward_weight(g, input, grad_output, grad_weight); });
}

// A convolution's input held as parts along its channels (a concatenation never written out):
// the row kernels read the parts (float, and bfloat16 where bf16_kernels picks them), every other
// kernel a copy of them joined. The input gradient goes to the parts the same way.
namespace detail {

// Whether the row kernels run a float or bfloat16 pass whose operand is in parts: on the CPU (or
// a plan of a run there), where they fit the pass.
template <class T>
constexpr bool rows_type = std::is_same_v<T, float> || std::is_same_v<T, bfloat16>;
template <class T>
bool rows_run_parts(const ConvGeometry& g, bool fits) {
  return rows_type<T> && !reference_kernels && fits && !conv_is_empty(g) && !takes_gpu_roads();
}
constexpr auto no_gpu_arm = [] { return false; };

inline void parts_forward(const ConvGeometry& g, const ChannelParts<const float>& input,
                          const float* weight, float* output) {
  rows::conv_forward(g, input, weight, ChannelParts<float>(output, g.c_out));
}
inline void parts_forward(const ConvGeometry& g, const ChannelParts<const bfloat16>& input,
                          const bfloat16* weight, bfloat16* output) {
  bf16_forward_faster(g, input, weight, output);
}
inline void parts_backward_input(const ConvGeometry& g, const float* grad_output,
                                 const float* weight, const ChannelParts<float>& grad_input) {
  rows::conv_backward_input(g, grad_output, weight, grad_input);
}
inline void parts_backward_input(const ConvGeometry& g, const bfloat16* grad_output,
                                 const bfloat16* weight, const ChannelParts<bfloat16>& grad_input) {
  bf16_backward_input_faster(g, grad_output, weight, grad_input);
}
inline void parts_backward_weight(const ConvGeometry& g, const ChannelParts<const float>& input,
                                  const float* grad_output, double* grad_weight) {
  rows::conv_backward_weight(g, input, grad_output, grad_weight);
}
inline void parts_backward_weight(const ConvGeometry& g, const ChannelParts<const bfloat16>& input,
                                  const bfloat16* grad_output, double* grad_weight) {
  bf16_backward_weight_faster(g, input, grad_output, grad_weight);
}

}  // namespace detail

/// conv_backward_input with the input's gradient written to parts along its channels.
template <class T>
void conv_backward_input(const ConvGeometry& g, const T* grad_output, const T* weight,
                         const ChannelParts<T>& grad_input) {
  if (grad_input.size() == 1)
    return conv_backward_input(g, grad_output, weight, grad_input.data[0]);
  if constexpr (std::is_same_v<T, float> || std::is_same_v<T, bfloat16>)
    if (detail::rows_run_parts<T>(g, rows::fits_backward_input(g)) &&
        rows::takes_output_parts(grad_input))
      return dispatch(counted(g, plan::ConvClass::backward_input), detail::no_gpu_arm,
                      [&] { detail::parts_backward_input(g, grad_output, weight, grad_input); });
  Buffer<T> box(static_cast<std::size_t>(conv_input_size(g)));
  conv_backward_input(g, grad_output, weight, box.data());
  kernels::split_rows(detail::box_positions(g), box.data(), detail::row_pieces(grad_input));
}

/// Whether a part given as an affine map is read through it (the default) or written out first
/// (KernelPolicy::mapped_inputs off: the normalisation recomputed into a copy, to compare).
inline bool mapped_inputs_enabled() { return current_processor().settings().kernels.mapped_inputs; }

/// Whether `pass` (forward or the weight gradient) computes parts given as affine maps
/// (ChannelParts::affine) as it reads them, with no copy of the mapped part: the row kernels on
/// the CPU, where they read the input as planes — float ones not on the first layer's
/// one-channel forward, bfloat16 ones in either products unless oneDNN's are set to run them.
/// (Where oneDNN's bf16 kernels time faster they read a mapped copy.)
template <class T>
bool takes_mapped_input(const ConvGeometry& g, plan::ConvClass::Pass pass) {
  if (pass != plan::ConvClass::forward && pass != plan::ConvClass::backward_weight)
    throw std::invalid_argument("internal: only forward and the weight gradient read the input");
  const bool forward = pass == plan::ConvClass::forward;
  if (!mapped_inputs_enabled()) return false;
  if constexpr (std::is_same_v<T, bfloat16>) {
    const rows::Bf16Products products = rows::bf16_products();
    const bool fits =
        forward ? rows::fits_forward_bf16(g) : rows::fits_backward_weight_bf16(g, products);
    return detail::rows_run_parts<T>(g, fits) && detail::bf16_rows_may_run();
  }
  const bool fits = forward ? rows::forward_reads_planes(g) : rows::fits_backward_weight(g);
  return std::is_same_v<T, float> && detail::rows_run_parts<T>(g, fits);
}

/// conv_forward with the input held as parts along its channels (g.c_in in all), each its data or
/// an affine map of it (a normalisation's output, never written out where takes_mapped_input).
template <class T>
void conv_forward(const ConvGeometry& g, const ChannelParts<const T>& input, const T* weight,
                  T* output) {
  if (input.has_affine()) {
    if (conv_is_empty(g)) return fill_values(output, conv_output_size(g), T(0));
    if (takes_mapped_input<T>(g, plan::ConvClass::forward))
      return dispatch(counted(g, plan::ConvClass::forward), detail::no_gpu_arm, [&] {
        if constexpr (detail::rows_type<T>) detail::parts_forward(g, input, weight, output);
      });
    std::vector<Buffer<T>> copies;
    return conv_forward(g, detail::mapped_copies(g, input, copies), weight, output);
  }
  if (input.size() == 1) return conv_forward(g, input.data[0], weight, output);
  if constexpr (std::is_same_v<T, float> || std::is_same_v<T, bfloat16>)
    if (detail::rows_run_parts<T>(g, rows::fits_forward(g)))
      return dispatch(counted(g, plan::ConvClass::forward), detail::no_gpu_arm,
                      [&] { detail::parts_forward(g, input, weight, output); });
  conv_forward(g, detail::joined(g, input).data(), weight, output);
}

/// conv_backward_weight with the input held as parts along its channels, each its data or an
/// affine map of it (a normalisation's output, never written out where takes_mapped_input).
template <class T>
void conv_backward_weight(const ConvGeometry& g, const ChannelParts<const T>& input,
                          const T* grad_output, double* grad_weight) {
  if (input.has_affine()) {
    if (conv_is_empty(g)) return;  // adds nothing
    if (takes_mapped_input<T>(g, plan::ConvClass::backward_weight))
      return dispatch(counted(g, plan::ConvClass::backward_weight), detail::no_gpu_arm, [&] {
        if constexpr (detail::rows_type<T>)
          detail::parts_backward_weight(g, input, grad_output, grad_weight);
      });
    std::vector<Buffer<T>> copies;
    return conv_backward_weight(g, detail::mapped_copies(g, input, copies), grad_output,
                                grad_weight);
  }
  if (input.size() == 1) return conv_backward_weight(g, input.data[0], grad_output, grad_weight);
  if constexpr (std::is_same_v<T, float> || std::is_same_v<T, bfloat16>) {
    const bool fits = std::is_same_v<T, float> ? rows::fits_backward_weight(g)
                                               : rows::fits_backward_weight_bf16(g);
    if (detail::rows_run_parts<T>(g, fits))
      return dispatch(counted(g, plan::ConvClass::backward_weight), detail::no_gpu_arm,
                      [&] { detail::parts_backward_weight(g, input, grad_output, grad_weight); });
  }
  conv_backward_weight(g, detail::joined(g, input).data(), grad_output, grad_weight);
}

}  // namespace meshtensor::kernels
