#pragma once
// The convolution family: forward, and the gradients of the input (into the box) and of the weight
// (added, in double), on one block (kernels/common/conv_geometry.hpp says the layout), each operand
// whole or, for the input and its gradient, in parts along the channels (a concatenation never
// written out), input parts possibly given as affine maps (a normalisation never written out). A
// GPU runs cuDNN's kernels (float, and bfloat16 on its tensor cores); the CPU, and a GPU for what
// cuDNN cannot run (double), the first of kernels/conv_candidates.hpp's list that supports the
// call. Parts and maps go to the candidate that reads them in place (the row kernels, on the
// CPU) where it runs the call; elsewhere they are written out first — maps into copies, parts
// joined into one box — and the call chosen again. A plan counts a multiply-add per (output, tap)
// pair that reads the box.

#include <algorithm>
#include <cstdint>
#include <numeric>
#include <stdexcept>
#include <string>
#include <type_traits>
#include <vector>

#include "meshtensor/kernels/backend.hpp"
#include "meshtensor/kernels/common/channel_parts.hpp"
#include "meshtensor/kernels/common/conv_geometry.hpp"
#include "meshtensor/kernels/conv_candidates.hpp"
#include "meshtensor/kernels/copy.hpp"
#include "meshtensor/kernels/registry.hpp"
#if defined(MESHTENSOR_WITH_CUDA)
#include "meshtensor/kernels/cuda/cudnn_conv.hpp"
#endif

namespace meshtensor::kernels {

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

namespace detail {
// What identifies a raced problem on a processor: the problem and the two candidates.
inline std::vector<std::int64_t> race_key(const ConvProblem& p, Selection s) {
  const ConvGeometry& g = p.geometry;
  std::vector<std::int64_t> key{std::int64_t(p.pass),
                                std::int64_t(p.element),
                                p.mapped,
                                std::int64_t(s.chosen),
                                std::int64_t(s.rival),
                                g.batch,
                                g.c_in,
                                g.c_out};
  key.insert(key.end(), p.parts.begin(), p.parts.end());
  for (int d = 0; d < 3; ++d)
    for (auto v : {g.in[d], g.out[d], g.kernel[d], std::int64_t(g.taps[d].transposed),
                   g.taps[d].stride, g.taps[d].dilation, g.taps[d].origin})
      key.push_back(v);
  return key;
}

inline Selection select_conv(const ConvProblem& p, std::size_t from) {
  if (from > 0) return ConvCandidates::select_from(p, from);
  return ConvCandidates::select(p, current_processor().settings().kernels.conv_kernel,
                                "MESHTENSOR_CONV_KERNEL");
}

template <class T>
void run_candidate(std::size_t index, const ConvProblem& p, const ConvOperands<T>& o) {
  ConvCandidates::visit(index, [&](auto candidate) { candidate.template run<T>(p, o); });
}

template <class T>
void run_conv_candidates_from(const ConvProblem& p, const ConvOperands<T>& o, std::size_t from) {
  const Selection s = select_conv(p, from);
  if (!s.found())
    throw std::logic_error("internal: no convolution kernel runs this call (its parts or maps)");
  if (s.rival == Selection::none) return run_candidate(s.chosen, p, o);
  // A trial of the weight gradient adds into scratch: the sums it makes are thrown away.
  const auto run = [&](std::size_t index, bool trial) {
    if (!trial || p.pass != plan::ConvClass::backward_weight) return run_candidate(index, p, o);
    Buffer<double> discarded(static_cast<std::size_t>(conv_weight_size(p.geometry)), 0.0);
    ConvOperands<T> scratch = o;
    scratch.grad_weight = discarded.data();
    run_candidate(index, p, scratch);
  };
  run(raced(race_key(p, s), s, run), false);
}

// Whether p's parts or maps go to a candidate that reads them in place (chosen, or raced).
inline bool reads_in_place(const ConvProblem& p) {
  if (conv_is_empty(p.geometry) || takes_gpu_roads()) return false;
  const Selection s = select_conv(p, 0);
  const auto in_place = [](auto candidate) { return decltype(candidate)::in_place_parts; };
  return ConvCandidates::ask<bool>(s.chosen, in_place) ||
         ConvCandidates::ask<bool>(s.rival, in_place);
}

constexpr auto no_gpu_arm = [] { return false; };

#if defined(MESHTENSOR_WITH_CUDA)
// cuDNN's passes for float and bfloat16; false for the type it does not run (double).
template <class T>
constexpr bool cudnn_runs = std::is_same_v<T, float> || std::is_same_v<T, bfloat16>;
template <class T>
bool cudnn_run(const ConvProblem& p, const ConvOperands<T>& o) {
  if constexpr (cudnn_runs<T>) {
    const ConvGeometry& g = p.geometry;
    switch (p.pass) {
      case plan::ConvClass::forward:
        return cudnn::conv_forward(g, o.input.data[0], o.weight, o.output);
      case plan::ConvClass::backward_input:
        return cudnn::conv_backward_input(g, o.grad_output, o.weight, o.grad_input.data[0]);
      case plan::ConvClass::backward_weight:
        return cudnn::conv_backward_weight(g, o.input.data[0], o.grad_output, o.grad_weight);
      case plan::ConvClass::passes:  // the count of passes, not one
        break;
    }
  }
  return false;
}
#endif

// Holds for a planned call the workspace the CPU candidate chosen for it states (of a raced pair,
// the larger), as the call would take it.
inline void hold_workspace(const ConvProblem& p) {
  const Selection s = select_conv(p, 0);
  if (!s.found()) return;
  const auto stated = [&](std::size_t index) {
    return ConvCandidates::ask<std::vector<std::size_t>>(
        index, [&](auto candidate) { return decltype(candidate)::workspace(p); });
  };
  const auto total = [](const std::vector<std::size_t>& blocks) {
    return std::accumulate(blocks.begin(), blocks.end(), std::size_t{0});
  };
  std::vector<std::size_t> blocks = stated(s.chosen);
  if (s.rival != Selection::none)
    if (auto rival = stated(s.rival); total(rival) > total(blocks)) blocks = std::move(rival);
  std::vector<Buffer<unsigned char>> held;
  held.reserve(blocks.size());
  for (const std::size_t bytes : blocks) held.emplace_back(bytes);
}

// A plan's count of call p on T, holding what the call takes beside its operands: on a GPU's road
// (a plan standing for a run on GPUs) what cuDNN's allocates, else the CPU candidate's workspace.
template <class T>
auto counted_on_road(const ConvProblem& p) {
  return [&p] {
    counted(p.geometry, p.pass)();
#if defined(MESHTENSOR_WITH_CUDA)
    if constexpr (cudnn_runs<T>)
      if (takes_gpu_roads()) return cudnn::take_own_buffers<T>(p.geometry, p.pass);
#endif
    if (!takes_gpu_roads()) hold_workspace(p);
  };
}

template <class T>
void run_conv(const ConvProblem& p, const ConvOperands<T>& o);

// Runs p with its maps written into copies, or its parts joined into one box (the input
// gradient: computed into one, then split), chosen again.
template <class T>
void run_written_out(ConvProblem p, const ConvOperands<T>& o) {
  const ConvGeometry& g = p.geometry;
  if (p.mapped) {
    std::vector<Buffer<T>> copies;
    ConvOperands<T> plain = o;
    plain.input = mapped_copies(g, o.input, copies);
    p.mapped = false;
    return run_conv(p, plain);
  }
  const ConvProblem whole = whole_problem(g, p.pass, p.element);
  if (p.pass == plan::ConvClass::backward_input) {
    Buffer<T> box(static_cast<std::size_t>(conv_input_size(g)));
    run_conv(whole, backward_input_operands(g, o.grad_output, o.weight, box.data()));
    return kernels::split_rows(box_positions(g), box.data(), row_pieces(o.grad_input));
  }
  const Buffer<T> box = joined(g, o.input);
  ConvOperands<T> joined_operands = o;
  joined_operands.input = ChannelParts<const T>(box.data(), g.c_in);
  run_conv(whole, joined_operands);
}

template <class T>
void run_conv(const ConvProblem& p, const ConvOperands<T>& o) {
  const auto on_cpu = [&] { run_conv_candidates_from(p, o, 0); };
  if (p.whole()) return dispatch(counted_on_road<T>(p), MESHTENSOR_ON_GPU(cudnn_run(p, o)), on_cpu);
  if (reads_in_place(p)) return dispatch(counted_on_road<T>(p), no_gpu_arm, on_cpu);
  run_written_out(p, o);
}
}  // namespace detail

template <class T>
void conv_forward(const ConvGeometry& g, const T* input, const T* weight, T* output) {
  if (conv_is_empty(g)) return fill_values(output, conv_output_size(g), T(0));
  detail::run_conv(detail::whole_problem(g, plan::ConvClass::forward, element_of<T>()),
                   detail::forward_operands(g, input, weight, output));
}

template <class T>
void conv_backward_input(const ConvGeometry& g, const T* grad_output, const T* weight,
                         T* grad_input) {
  if (conv_is_empty(g)) return fill_values(grad_input, conv_input_size(g), T(0));
  detail::run_conv(detail::whole_problem(g, plan::ConvClass::backward_input, element_of<T>()),
                   detail::backward_input_operands(g, grad_output, weight, grad_input));
}

template <class T>
void conv_backward_weight(const ConvGeometry& g, const T* input, const T* grad_output,
                          double* grad_weight) {
  if (conv_is_empty(g)) return;  // adds nothing
  detail::run_conv(detail::whole_problem(g, plan::ConvClass::backward_weight, element_of<T>()),
                   detail::backward_weight_operands(g, input, grad_output, grad_weight));
}

namespace detail {
template <class T>
ConvProblem parts_problem(const ConvGeometry& g, plan::ConvClass::Pass pass,
                          const ChannelParts<T>& parts) {
  return ConvProblem{g, pass, element_of<std::remove_const_t<T>>(), parts.channels,
                     parts.has_affine()};
}
}  // namespace detail

/// conv_forward with the input held as parts along its channels (g.c_in in all), each its data or
/// an affine map of it (a normalisation's output, never written out where takes_mapped_input).
template <class T>
void conv_forward(const ConvGeometry& g, const ChannelParts<const T>& input, const T* weight,
                  T* output) {
  if (conv_is_empty(g)) return fill_values(output, conv_output_size(g), T(0));
  ConvOperands<T> o;
  o.input = input, o.weight = weight, o.output = output;
  detail::run_conv(detail::parts_problem(g, plan::ConvClass::forward, input), o);
}

/// conv_backward_input with the input's gradient written to parts along its channels.
template <class T>
void conv_backward_input(const ConvGeometry& g, const T* grad_output, const T* weight,
                         const ChannelParts<T>& grad_input) {
  if (conv_is_empty(g)) {
    for (std::size_t i = 0; i < grad_input.size(); ++i)
      fill_values(grad_input.data[i], detail::box_positions(g) * grad_input.channels[i], T(0));
    return;
  }
  ConvOperands<T> o;
  o.grad_output = grad_output, o.weight = weight, o.grad_input = grad_input;
  detail::run_conv(detail::parts_problem(g, plan::ConvClass::backward_input, grad_input), o);
}

/// conv_backward_weight with the input held as parts along its channels, each its data or an
/// affine map of it (a normalisation's output, never written out where takes_mapped_input).
template <class T>
void conv_backward_weight(const ConvGeometry& g, const ChannelParts<const T>& input,
                          const T* grad_output, double* grad_weight) {
  if (conv_is_empty(g)) return;  // adds nothing
  ConvOperands<T> o;
  o.input = input, o.grad_output = grad_output, o.grad_weight = grad_weight;
  detail::run_conv(detail::parts_problem(g, plan::ConvClass::backward_weight, input), o);
}

/// Whether `pass` (forward or the weight gradient) computes parts given as affine maps
/// (ChannelParts::affine) as it reads them, with no copy of the mapped part: where the
/// candidate chosen (or raced) for the call reads them in place (the row kernels, on the CPU).
template <class T>
bool takes_mapped_input(const ConvGeometry& g, plan::ConvClass::Pass pass) {
  if (pass != plan::ConvClass::forward && pass != plan::ConvClass::backward_weight)
    throw std::invalid_argument("internal: only forward and the weight gradient read the input");
  return detail::reads_in_place(ConvProblem{g, pass, element_of<T>(), {g.c_in}, true});
}

/// The candidate (kernels/conv_candidates.hpp) that runs a whole-operand pass of `g` on T on this
/// processor: "cudnn" where a GPU runs it; for two raced, the winner once the race has run, else
/// both ("onednn_bf16|rows").
template <class T>
std::string conv_kernel_name(const ConvGeometry& g, plan::ConvClass::Pass pass) {
  const ConvProblem p = detail::whole_problem(g, pass, element_of<T>());
#if defined(MESHTENSOR_WITH_CUDA)
  if (takes_gpu_roads() && detail::cudnn_runs<T>) return "cudnn";
#endif
  const Selection s = detail::select_conv(p, 0);
  if (s.rival == Selection::none) return std::string(ConvCandidates::names[s.chosen]);
  const std::size_t winner = race_winner(detail::race_key(p, s));
  if (winner != Selection::none) return std::string(ConvCandidates::names[winner]);
  return std::string(ConvCandidates::names[s.chosen]) + "|" +
         std::string(ConvCandidates::names[s.rival]);
}

}  // namespace meshtensor::kernels
