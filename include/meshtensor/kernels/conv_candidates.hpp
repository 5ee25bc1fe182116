#pragma once
// The CPU's convolution kernels, in the order kernels/conv.hpp tries them (kernels/registry.hpp
// says how one is chosen). A GPU runs cuDNN's and comes here for what cuDNN cannot run.
//   onednn_bf16  oneDNN's bfloat16 kernels; raced per shape against the next candidate that runs
//                it (KernelPolicy::bf16_conv: native forces them, widened rules them out; the
//                fixed rule takes them where the CPU has AMX). Slabs oneDNN has no fast kernel
//                for run on the candidates after it.
//   rows         meshtensor's row kernels: 8 channels or fewer on a side, float and bfloat16, AVX2
//                or AVX-512 (kernels/cpu/rows/); the only candidate that reads an input in parts
//                or through affine maps, and writes an input gradient in parts, in place
//   pointwise    one-tap bfloat16 convolutions of few channels (kernels/cpu/pointwise.hpp)
//   widened      bfloat16 on the float candidates, a slab of about 1 MiB of rows at a time
//   onednn       oneDNN's float kernels (formats timed or by channels: KernelPolicy::formats)
//   blocked      meshtensor's register-blocked loops: float without oneDNN, double
//   reference    the plain loops (MESHTENSOR_REFERENCE_KERNELS: every shape)
// To add a kernel: a struct like these below, placed in ConvCandidates where it should be tried.

#include <algorithm>
#include <cstdint>
#include <string>
#include <string_view>
#include <type_traits>
#include <vector>

#include "meshtensor/core/bfloat16.hpp"
#include "meshtensor/kernels/common/channel_parts.hpp"
#include "meshtensor/kernels/common/conv_geometry.hpp"
#include "meshtensor/kernels/copy.hpp"
#include "meshtensor/kernels/cpu/blocked/conv.hpp"
#include "meshtensor/kernels/cpu/convert.hpp"
#include "meshtensor/kernels/cpu/pointwise.hpp"
#include "meshtensor/kernels/cpu/reference/conv.hpp"
#include "meshtensor/kernels/cpu/rows/conv.hpp"
#include "meshtensor/kernels/norm.hpp"
#include "meshtensor/kernels/plan/counts.hpp"
#include "meshtensor/kernels/registry.hpp"
#include "meshtensor/memory/array.hpp"
#if defined(MESHTENSOR_WITH_ONEDNN) && !defined(MESHTENSOR_REFERENCE_KERNELS)
#include "meshtensor/kernels/cpu/onednn/conv.hpp"
#endif

namespace meshtensor::kernels {

#if defined(MESHTENSOR_REFERENCE_KERNELS)
inline constexpr bool reference_kernels = true;
#else
inline constexpr bool reference_kernels = false;
#endif
#if defined(MESHTENSOR_WITH_ONEDNN) && !defined(MESHTENSOR_REFERENCE_KERNELS)
inline constexpr bool onednn_kernels = true;
#else
inline constexpr bool onednn_kernels = false;
#endif

/// What a convolution call asks of its kernel: a pass of a geometry on an element type, with the
/// input (forward, weight gradient) or the input's gradient in parts along the channels (`parts`:
/// their channels; one: held whole) and input parts given as affine maps of their data (`mapped`).
struct ConvProblem {
  ConvGeometry geometry;
  plan::ConvClass::Pass pass = plan::ConvClass::forward;
  Element element = Element::float32;
  std::vector<std::int64_t> parts;
  bool mapped = false;

  bool in_parts() const { return parts.size() > 1; }
  bool whole() const { return !in_parts() && !mapped; }
  bool is(Element e) const { return element == e; }
};

/// A call's operands, those of its pass set: forward reads input and weight into output; the input
/// gradient reads grad_output and weight into grad_input; the weight gradient reads input and
/// grad_output and adds into grad_weight (double, our weight order).
template <class T>
struct ConvOperands {
  ChannelParts<const T> input;
  const T* weight = nullptr;
  const T* grad_output = nullptr;
  T* output = nullptr;
  ChannelParts<T> grad_input;
  double* grad_weight = nullptr;
};

/// Whether a part given as an affine map is read through it (the default) or written out first
/// (KernelPolicy::mapped_inputs off: the normalisation recomputed into a copy, to compare).
inline bool mapped_inputs_enabled() { return current_processor().settings().kernels.mapped_inputs; }

namespace detail {
// The problem and operands of the same call on other operands (a slab, a joined copy: whole).
inline ConvProblem whole_problem(const ConvGeometry& g, plan::ConvClass::Pass pass,
                                 Element element) {
  return ConvProblem{g, pass, element, {g.c_in}, false};
}
template <class T>
ConvOperands<T> forward_operands(const ConvGeometry& g, const T* input, const T* weight,
                                 T* output) {
  ConvOperands<T> o;
  o.input = ChannelParts<const T>(input, g.c_in);
  o.weight = weight;
  o.output = output;
  return o;
}
template <class T>
ConvOperands<T> backward_input_operands(const ConvGeometry& g, const T* grad_output,
                                        const T* weight, T* grad_input) {
  ConvOperands<T> o;
  o.grad_output = grad_output;
  o.weight = weight;
  o.grad_input = ChannelParts<T>(grad_input, g.c_in);
  return o;
}
template <class T>
ConvOperands<T> backward_weight_operands(const ConvGeometry& g, const T* input,
                                         const T* grad_output, double* grad_weight) {
  ConvOperands<T> o;
  o.input = ChannelParts<const T>(input, g.c_in);
  o.grad_output = grad_output;
  o.grad_weight = grad_weight;
  return o;
}

// Runs p on the candidates at or after `from` (none forced): a candidate's fallback, a slab's
// float pass. Defined after ConvCandidates.
template <class T>
void run_conv_candidates_from(const ConvProblem& p, const ConvOperands<T>& o, std::size_t from);
}  // namespace detail

/// What a candidate is unless it says otherwise: raced against none, taking parts and maps only
/// whole (the family writes them out first).
struct ConvCandidate {
  static bool races_next(const ConvProblem&) { return false; }
  static constexpr bool in_place_parts = false;
  /// The blocks (bytes each) a call takes of the processor's memory at once beyond its operands,
  /// which a plan holds for the call: none stated.
  static std::vector<std::size_t> workspace(const ConvProblem&) { return {}; }
};

/// oneDNN's bfloat16 kernels (where the program links oneDNN), raced against meshtensor's; parts
/// and maps taken only where raced against the row kernels, which read them in place (a joined
/// copy for oneDNN's).
struct OnednnBf16Conv : ConvCandidate {
  static constexpr std::string_view name = "onednn_bf16";
  // Which kernels run a bfloat16 pass: oneDNN's (native), meshtensor's (widened) or the faster.
  enum class Setting { native, widened, timed };
  static Setting setting();
  static bool supports(const ConvProblem& p) {
    return onednn_kernels && p.is(Element::bfloat16) && setting() != Setting::widened;
  }
  static bool races_next(const ConvProblem&) { return setting() == Setting::timed; }
  template <class T>
  static void run(const ConvProblem& p, const ConvOperands<T>& o);
};

/// The row kernels (kernels/cpu/rows/conv.hpp) where they fit the pass.
struct RowsConv : ConvCandidate {
  static constexpr std::string_view name = "rows";
  static bool supports(const ConvProblem& p);
  static constexpr bool in_place_parts = true;
  /// Its threads' planes and its weights' copies (rows/form/workspace.hpp).
  static std::vector<std::size_t> workspace(const ConvProblem& p) {
    return rows::workspace(p.geometry, {p.pass, p.is(Element::bfloat16), p.whole(), p.parts});
  }
  template <class T>
  static void run(const ConvProblem& p, const ConvOperands<T>& o);
};

/// One-tap bfloat16 convolutions of few channels (the U-Net's head).
struct PointwiseConv : ConvCandidate {
  static constexpr std::string_view name = "pointwise";
  static bool supports(const ConvProblem& p) {
    return !reference_kernels && p.is(Element::bfloat16) && p.whole() &&
           cpu::pointwise_takes(p.geometry);
  }
  template <class T>
  static void run(const ConvProblem& p, const ConvOperands<T>& o);
};

/// bfloat16 on the float candidates, a slab of rows (along the first dim, per batch entry) at a
/// time, each widened for its call and its result rounded once: the float copies stay about
/// 1 MiB whatever the block, so bfloat16 keeps its halved memory.
struct WidenedConv : ConvCandidate {
  static constexpr std::string_view name = "widened";
  static bool supports(const ConvProblem& p) { return p.is(Element::bfloat16) && p.whole(); }
  template <class T>
  static void run(const ConvProblem& p, const ConvOperands<T>& o);
};

/// oneDNN's float kernels.
struct OnednnConv : ConvCandidate {
  static constexpr std::string_view name = "onednn";
  static bool supports(const ConvProblem& p) {
    return onednn_kernels && p.is(Element::float32) && p.whole();
  }
  /// The copies of its operands in the formats its primitive chose, and its scratchpad (formats
  /// by the fixed rule where a run times them).
  static std::vector<std::size_t> workspace(const ConvProblem& p);
  template <class T>
  static void run(const ConvProblem& p, const ConvOperands<T>& o);
};

/// meshtensor's register-blocked loops (kernels/cpu/blocked/conv.hpp).
struct BlockedConv : ConvCandidate {
  static constexpr std::string_view name = "blocked";
  static bool supports(const ConvProblem& p) {
    return !reference_kernels && !p.is(Element::bfloat16) && p.whole();
  }
  template <class T>
  static void run(const ConvProblem& p, const ConvOperands<T>& o);
};

/// The plain loops (kernels/cpu/reference/conv.hpp).
struct ReferenceConv : ConvCandidate {
  static constexpr std::string_view name = "reference";
  static bool supports(const ConvProblem& p) { return !p.is(Element::bfloat16) && p.whole(); }
  template <class T>
  static void run(const ConvProblem& p, const ConvOperands<T>& o);
};

using ConvCandidates = CandidateList<OnednnBf16Conv, RowsConv, PointwiseConv, WidenedConv,
                                     OnednnConv, BlockedConv, ReferenceConv>;

// ---- onednn_bf16

inline OnednnBf16Conv::Setting OnednnBf16Conv::setting() {
  const KernelPolicy& policy = current_processor().settings().kernels;
  switch (policy.bf16_conv) {
    case KernelPolicy::Bf16Conv::native:
      return Setting::native;
    case KernelPolicy::Bf16Conv::widened:
      return Setting::widened;
    case KernelPolicy::Bf16Conv::chosen:
      break;
  }
  if (!policy.fixed()) return Setting::timed;
#if defined(MESHTENSOR_WITH_ONEDNN) && !defined(MESHTENSOR_REFERENCE_KERNELS)
  const auto amx = static_cast<unsigned>(dnnl::cpu_isa::avx512_core_amx);
  const bool has_amx = (static_cast<unsigned>(dnnl::get_effective_cpu_isa()) & amx) == amx;
  return has_amx ? Setting::native : Setting::widened;
#else
  return Setting::widened;
#endif
}

namespace detail {
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
  const std::int64_t positions = box_positions(g);
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

// The input as one box: itself where it is one part of plain data, else joined into `held`.
template <class T>
const T* one_box(const ConvGeometry& g, const ChannelParts<const T>& input, Buffer<T>& held) {
  if (input.size() == 1 && !input.has_affine()) return input.data[0];
  held = joined(g, input);
  return held.data();
}
}  // namespace detail

template <class T>
void OnednnBf16Conv::run([[maybe_unused]] const ConvProblem& p,
                         [[maybe_unused]] const ConvOperands<T>& o) {
#if defined(MESHTENSOR_WITH_ONEDNN) && !defined(MESHTENSOR_REFERENCE_KERNELS)
  if constexpr (std::is_same_v<T, bfloat16>) {
    using detail::run_conv_candidates_from;
    // The candidates after this one run the slabs oneDNN has no fast kernel for.
    const std::size_t after = ConvCandidates::index_of(name) + 1;
    const ConvGeometry& g = p.geometry;
    const auto whole = [&](const ConvGeometry& s) {
      return detail::whole_problem(s, p.pass, Element::bfloat16);
    };
    switch (p.pass) {
      case plan::ConvClass::forward: {
        const auto rest = [&](const ConvGeometry& s, const T* in, const T* w, T* out) {
          run_conv_candidates_from(whole(s), detail::forward_operands(s, in, w, out), after);
        };
        Buffer<T> held;
        return onednn::conv_forward_or(g, detail::one_box(g, o.input, held), o.weight, o.output,
                                       rest);
      }
      case plan::ConvClass::backward_input: {
        const auto rest = [&](const ConvGeometry& s, const T* go, const T* w, T* gi) {
          run_conv_candidates_from(whole(s), detail::backward_input_operands(s, go, w, gi), after);
        };
        if (o.grad_input.size() == 1)
          return onednn::conv_backward_input_or(g, o.grad_output, o.weight, o.grad_input.data[0],
                                                rest);
        Buffer<T> box(static_cast<std::size_t>(conv_input_size(g)));
        onednn::conv_backward_input_or(g, o.grad_output, o.weight, box.data(), rest);
        return kernels::split_rows(detail::box_positions(g), box.data(),
                                   detail::row_pieces(o.grad_input));
      }
      case plan::ConvClass::backward_weight: {
        const auto rest = [&](const ConvGeometry& s, const T* in, const T* go, double* gw) {
          run_conv_candidates_from(whole(s), detail::backward_weight_operands(s, in, go, gw),
                                   after);
        };
        Buffer<T> held;
        return onednn::conv_backward_weight_or(g, detail::one_box(g, o.input, held), o.grad_output,
                                               o.grad_weight, rest);
      }
      case plan::ConvClass::passes:  // the count of passes, not one
        break;
    }
  }
#endif
}

// ---- rows

inline bool RowsConv::supports(const ConvProblem& p) {
  if (reference_kernels || p.is(Element::float64)) return false;
  if (p.mapped && !mapped_inputs_enabled()) return false;
  const ConvGeometry& g = p.geometry;
  const bool bf16 = p.is(Element::bfloat16);
  switch (p.pass) {
    case plan::ConvClass::forward:
      if (bf16)
        return rows::fits_forward_bf16(g) || (p.whole() && rows::fits_one_channel_forward_bf16(g));
      return p.mapped ? rows::forward_reads_planes(g) : rows::fits_forward(g);
    case plan::ConvClass::backward_input: {
      if (!rows::fits_backward_input(g)) return false;
      ChannelParts<const float> shape;  // the parts' channels (takes_output_parts reads no data)
      for (std::int64_t c : p.parts) shape.add(nullptr, c);
      return !p.in_parts() || rows::takes_output_parts(shape);
    }
    case plan::ConvClass::backward_weight:
      return bf16 ? rows::fits_backward_weight_bf16(g) : rows::fits_backward_weight(g);
    case plan::ConvClass::passes:  // the count of passes, not one
      break;
  }
  return false;
}

template <class T>
void RowsConv::run(const ConvProblem& p, const ConvOperands<T>& o) {
  if constexpr (std::is_same_v<T, float> || std::is_same_v<T, bfloat16>) {
    const ConvGeometry& g = p.geometry;
    switch (p.pass) {
      case plan::ConvClass::forward:
        if (!p.whole())
          return rows::conv_forward(g, o.input, o.weight, ChannelParts<T>(o.output, g.c_out));
        if constexpr (std::is_same_v<T, bfloat16>)
          if (rows::fits_one_channel_forward_bf16(g))
            return rows::conv_forward_one_channel(
                g, o.input.data[0], o.weight, o.output,
                rows::writes_around_cache(g, rows::OutputStores::by_size, sizeof(bfloat16)));
        return rows::conv_forward(g, o.input.data[0], o.weight, o.output);
      case plan::ConvClass::backward_input:
        if (p.in_parts())
          return rows::conv_backward_input(g, o.grad_output, o.weight, o.grad_input);
        return rows::conv_backward_input(g, o.grad_output, o.weight, o.grad_input.data[0]);
      case plan::ConvClass::backward_weight:
        if (!p.whole()) return rows::conv_backward_weight(g, o.input, o.grad_output, o.grad_weight);
        return rows::conv_backward_weight(g, o.input.data[0], o.grad_output, o.grad_weight);
      case plan::ConvClass::passes:  // the count of passes, not one
        break;
    }
  }
}

// ---- pointwise

template <class T>
void PointwiseConv::run(const ConvProblem& p, const ConvOperands<T>& o) {
  if constexpr (std::is_same_v<T, bfloat16>) {
    const ConvGeometry& g = p.geometry;
    switch (p.pass) {
      case plan::ConvClass::forward:
        return cpu::pointwise_forward(g, o.input.data[0], o.weight, o.output);
      case plan::ConvClass::backward_input:
        return cpu::pointwise_backward_input(g, o.grad_output, o.weight, o.grad_input.data[0]);
      case plan::ConvClass::backward_weight:
        return cpu::pointwise_backward_weight(g, o.input.data[0], o.grad_output, o.grad_weight);
      case plan::ConvClass::passes:  // the count of passes, not one
        break;
    }
  }
}

// ---- widened

namespace detail {
// Larger slabs are no faster (bench/RESULTS.md, "Figures behind the kernels' choices").
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

// A slab's float pass on the float candidates.
template <class Operands>
void run_float(const ConvGeometry& slab, plan::ConvClass::Pass pass, const Operands& o) {
  run_conv_candidates_from(whole_problem(slab, pass, Element::float32), o, 0);
}

inline void widened_forward(const ConvGeometry& g, const bfloat16* input, const bfloat16* weight,
                            bfloat16* output) {
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
    run_float(slab.geometry, plan::ConvClass::forward,
              forward_operands<float>(slab.geometry, in.data(), w.data(), out.data()));
    cpu::convert(out.data(), n, to);
  });
}

inline void widened_backward_input(const ConvGeometry& g, const bfloat16* grad_output,
                                   const bfloat16* weight, bfloat16* grad_input) {
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
    run_float(slab.geometry, plan::ConvClass::backward_input,
              backward_input_operands<float>(slab.geometry, go.data(), w.data(), gi.data()));
    cpu::convert(gi.data(), n, to);
  });
}

inline void widened_backward_weight(const ConvGeometry& g, const bfloat16* input,
                                    const bfloat16* grad_output, double* grad_weight) {
  Buffer<float> in, go;
  const ConvGeometry one = one_entry(g);
  const std::int64_t in_row = input_row_size(g), out_row = output_row_size(g);
  for_each_row_slab(g.batch, g.out[0], std::max(in_row, out_row), [&](auto b, auto a, auto e) {
    const RowSlab slab = output_rows(one, a, e);
    if (conv_is_empty(slab.geometry)) return;  // adds nothing
    widen_into(input + (b * g.in[0] + slab.r0) * in_row, (slab.r1 - slab.r0) * in_row, in);
    widen_into(grad_output + (b * g.out[0] + a) * out_row, (e - a) * out_row, go);
    run_float(slab.geometry, plan::ConvClass::backward_weight,
              backward_weight_operands<float>(slab.geometry, in.data(), go.data(), grad_weight));
  });
}
}  // namespace detail

template <class T>
void WidenedConv::run(const ConvProblem& p, const ConvOperands<T>& o) {
  if constexpr (std::is_same_v<T, bfloat16>) {
    switch (p.pass) {
      case plan::ConvClass::forward:
        return detail::widened_forward(p.geometry, o.input.data[0], o.weight, o.output);
      case plan::ConvClass::backward_input:
        return detail::widened_backward_input(p.geometry, o.grad_output, o.weight,
                                              o.grad_input.data[0]);
      case plan::ConvClass::backward_weight:
        return detail::widened_backward_weight(p.geometry, o.input.data[0], o.grad_output,
                                               o.grad_weight);
      case plan::ConvClass::passes:  // the count of passes, not one
        break;
    }
  }
}

// ---- onednn, blocked, reference: whole float (and double) operands, one call per pass

#define MESHTENSOR_CONV_PASSES(kernels_namespace)                                                \
  switch (p.pass) {                                                                              \
    case plan::ConvClass::forward:                                                               \
      return kernels_namespace::conv_forward(p.geometry, o.input.data[0], o.weight, o.output);   \
    case plan::ConvClass::backward_input:                                                        \
      return kernels_namespace::conv_backward_input(p.geometry, o.grad_output, o.weight,         \
                                                    o.grad_input.data[0]);                       \
    case plan::ConvClass::backward_weight:                                                       \
      return kernels_namespace::conv_backward_weight(p.geometry, o.input.data[0], o.grad_output, \
                                                     o.grad_weight);                             \
    case plan::ConvClass::passes: /* not a pass */                                               \
      break;                                                                                     \
  }

inline std::vector<std::size_t> OnednnConv::workspace([[maybe_unused]] const ConvProblem& p) {
#if defined(MESHTENSOR_WITH_ONEDNN) && !defined(MESHTENSOR_REFERENCE_KERNELS)
  using Primitives = onednn::detail::Primitives;
  switch (p.pass) {
    case plan::ConvClass::forward:
      return onednn::detail::planned_blocks(p.geometry, &Primitives::forward);
    case plan::ConvClass::backward_input:
      return onednn::detail::planned_blocks(p.geometry, &Primitives::backward_data);
    case plan::ConvClass::backward_weight:
      return onednn::detail::planned_blocks(p.geometry, &Primitives::backward_weights);
    case plan::ConvClass::passes:  // not a pass
      break;
  }
#endif
  return {};
}

template <class T>
void OnednnConv::run([[maybe_unused]] const ConvProblem& p,
                     [[maybe_unused]] const ConvOperands<T>& o) {
#if defined(MESHTENSOR_WITH_ONEDNN) && !defined(MESHTENSOR_REFERENCE_KERNELS)
  if constexpr (std::is_same_v<T, float>) MESHTENSOR_CONV_PASSES(onednn)
#endif
}

template <class T>
void BlockedConv::run(const ConvProblem& p, const ConvOperands<T>& o) {
  if constexpr (!std::is_same_v<T, bfloat16>) MESHTENSOR_CONV_PASSES(blocked)
}

template <class T>
void ReferenceConv::run(const ConvProblem& p, const ConvOperands<T>& o) {
  if constexpr (!std::is_same_v<T, bfloat16>) MESHTENSOR_CONV_PASSES(reference)
}
#undef MESHTENSOR_CONV_PASSES

}  // namespace meshtensor::kernels
