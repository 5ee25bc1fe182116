#pragma once
// The tape: each processor records, in order, one backward step per op whose inputs need a
// gradient. All processors run the same ops in the same order (SPMD), so their tapes match, and
// replaying them in reverse meets the same collectives on every processor.

#include <array>
#include <functional>
#include <memory>
#include <tuple>
#include <type_traits>
#include <utility>
#include <vector>

#include "meshtensor/comm/mesh.hpp"
#include "meshtensor/core/bfloat16.hpp"
#include "meshtensor/core/error.hpp"
#include "meshtensor/tensor/tensor.hpp"

namespace meshtensor::autodiff {

/// One processor's record of backward steps; kept with its Mesh.
class Tape {
 public:
  bool recording() const { return recording_; }
  void set_recording(bool on) { recording_ = on; }
  std::size_t size() const { return steps_.size(); }

  /// Records a step; it may own move-only state (saved blocks), which it keeps until released.
  template <class Step>
  void push(Step step) {
    auto owned = std::make_shared<Step>(std::move(step));
    steps_.push_back([owned] { (*owned)(); });
  }

  /// Runs the steps newest first and forgets them (and with them the tensors they kept alive).
  void replay_and_clear() {
    auto steps = std::move(steps_);
    steps_.clear();
    for (auto it = steps.rbegin(); it != steps.rend(); ++it) {
      (*it)();
      *it = nullptr;  // release what the step held as soon as it has run
    }
  }
  void clear() { steps_.clear(); }

 private:
  bool recording_ = true;
  std::vector<std::function<void()>> steps_;
};

inline Tape& tape(Mesh& mesh) { return mesh.context<Tape>(); }

/// While alive, ops on this mesh record nothing (inference, optimiser updates, backward itself).
class NoGrad {
 public:
  explicit NoGrad(Mesh& mesh) : tape_(tape(mesh)), was_recording_(tape_.recording()) {
    tape_.set_recording(false);
  }
  ~NoGrad() { tape_.set_recording(was_recording_); }
  NoGrad(const NoGrad&) = delete;
  NoGrad& operator=(const NoGrad&) = delete;

 private:
  Tape& tape_;
  bool was_recording_;
};

}  // namespace meshtensor::autodiff

namespace meshtensor::detail {
// Adds `grad` to `node`'s gradient where both exist; a gradient laid out other than its input is
// a bug in the op's backward step.
template <class T>
void accumulate_checked(const std::shared_ptr<GradNode<T>>& node, const TensorLayout& layout,
                        const Tensor<T>& grad) {
  if (!node || !grad.defined()) return;
  if (grad.layout() != layout)
    throw Error("internal: a backward step returned a gradient of layout " +
                grad.layout().to_string() + " for an input of layout " + layout.to_string());
  Tensor<T>::accumulate(node->grad, grad);
}

// An op's inputs as its backward step keeps them: their gradient nodes (null where none is
// needed) and layouts.
template <class T>
struct TapeInputs {
  std::vector<std::shared_ptr<GradNode<T>>> nodes;
  std::vector<TensorLayout> layouts;

  explicit TapeInputs(const std::vector<Tensor<T>>& inputs) {
    for (const auto& input : inputs) {
      nodes.push_back(input.node());
      layouts.push_back(input.layout());
    }
  }
  bool any_needed() const {
    for (const auto& node : nodes)
      if (node) return true;
    return false;
  }
  std::vector<bool> needed() const {
    std::vector<bool> flags;
    for (const auto& node : nodes) flags.push_back(node != nullptr);
    return flags;
  }
  template <class Grads>
  void accumulate(const Grads& grads) const {
    for (std::size_t i = 0; i < nodes.size(); ++i)
      accumulate_checked(nodes[i], layouts[i], grads.at(i));
  }
};
}  // namespace meshtensor::detail

namespace meshtensor::autodiff {

/**
 * Records the backward step of an op with output `out` and inputs `inputs`, if recording is on and
 * some input needs a gradient. `backward(grad_out, needed)` returns one gradient per input (an
 * empty Tensor where `needed[i]` is false), each in its input's layout.
 */
template <class T, class Backward>
void record(Tensor<T>& out, const std::vector<Tensor<T>>& inputs, Backward backward) {
  if constexpr (!is_floating_v<T>) {
    return;
  } else {
    Tape& steps = tape(out.mesh());
    if (!steps.recording()) return;
    const meshtensor::detail::TapeInputs<T> in(inputs);
    if (!in.any_needed()) return;
    auto out_node = out.make_node();
    // The step owns the backward closure (moved, never copied: it may hold big saved arrays).
    steps.push([out_node, in, backward = std::move(backward)]() {
      if (!out_node->grad.defined()) return;  // nothing downstream reached this op
      in.accumulate(backward(out_node->hand_over(), in.needed()));
      if (!out_node->keep) out_node->grad = Tensor<T>();
    });
  }
}

/**
 * record() for an op whose inputs are `inputs`, of the output's type, and `other`, of another (a
 * bfloat16 concatenation's parts and their convolution's fp32 weight): `backward(grad_out,
 * needed)`, `needed` one flag per input and then other's, returns the inputs' gradients and
 * other's as a pair.
 */
template <class T, class U, class Backward>
void record_with(Tensor<T>& out, const std::vector<Tensor<T>>& inputs, const Tensor<U>& other,
                 Backward backward) {
  Tape& steps = tape(out.mesh());
  if (!steps.recording()) return;
  const meshtensor::detail::TapeInputs<T> in(inputs);
  if (!in.any_needed() && !other.node()) return;
  auto out_node = out.make_node();
  steps.push([out_node, in, other_node = other.node(), other_layout = other.layout(),
              backward = std::move(backward)]() {
    if (!out_node->grad.defined()) return;
    std::vector<bool> needed = in.needed();
    needed.push_back(other_node != nullptr);
    auto [grads, other_grad] = backward(out_node->hand_over(), needed);
    in.accumulate(grads);
    meshtensor::detail::accumulate_checked(other_node, other_layout, other_grad);
    if (!out_node->keep) out_node->grad = Tensor<T>();
  });
}

}  // namespace meshtensor::autodiff

namespace meshtensor::detail {
// Adds each returned gradient to its input's node (where it has one and the gradient is defined).
template <class Nodes, class Layouts, class Grads, std::size_t... i>
void accumulate_each(const Nodes& nodes, const Layouts& layouts, Grads& grads,
                     std::index_sequence<i...>) {
  auto one = [](const auto& node, const TensorLayout& layout, const auto& grad) {
    accumulate_checked(node, layout, grad);
  };
  (one(std::get<i>(nodes), std::get<i>(layouts), std::get<i>(grads)), ...);
}
}  // namespace meshtensor::detail

namespace meshtensor::autodiff {

/**
 * record() for inputs of different element types (a bfloat16 activation with its fp32 weight, a
 * cast): `backward(grad_out, needed)` returns a tuple with one gradient per input, each of its
 * input's type and layout (an empty Tensor where not needed).
 */
template <class T, class... In, class Backward>
void record_mixed(Tensor<T>& out, const std::tuple<Tensor<In>...>& inputs, Backward backward) {
  constexpr std::size_t n = sizeof...(In);
  Tape& steps = tape(out.mesh());
  if (!steps.recording()) return;
  auto nodes = std::apply([](const auto&... t) { return std::make_tuple(t.node()...); }, inputs);
  auto layouts =
      std::apply([](const auto&... t) { return std::make_tuple(t.layout()...); }, inputs);
  const bool any =
      std::apply([](const auto&... node) { return (... || (node != nullptr)); }, nodes);
  if (!any) return;
  auto out_node = out.make_node();
  steps.push([out_node, nodes, layouts, backward = std::move(backward)]() {
    if (!out_node->grad.defined()) return;
    std::array<bool, n> needed{};
    std::apply(
        [&](const auto&... node) {
          std::size_t i = 0;
          ((needed[i++] = node != nullptr), ...);
        },
        nodes);
    auto grads = backward(out_node->hand_over(), needed);
    meshtensor::detail::accumulate_each(nodes, layouts, grads, std::make_index_sequence<n>{});
    if (!out_node->keep) out_node->grad = Tensor<T>();
  });
}

}  // namespace meshtensor::autodiff
