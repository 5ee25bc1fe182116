#pragma once
// Recomputation (gradient checkpointing): run part of a model without keeping its intermediate
// activations, and run it again during backward to get them back. Memory for compute: a U-Net
// level keeps its input and output instead of every convolution's and normalisation's.

#include <memory>
#include <vector>

#include "meshtensor/autodiff/backward.hpp"
#include "meshtensor/autodiff/tape.hpp"
#include "meshtensor/comm/mesh.hpp"
#include "meshtensor/tensor/tensor.hpp"

namespace meshtensor::autodiff {

namespace detail {
struct RecomputeState {
  int depth = 0;
};

// While alive: recording on, and layers know the forward pass is a recomputation.
class Recomputing {
 public:
  explicit Recomputing(Mesh& mesh)
      : state_(mesh.context<RecomputeState>()),
        tape_(tape(mesh)),
        was_recording_(tape_.recording()) {
    ++state_.depth;
    tape_.set_recording(true);
  }
  ~Recomputing() {
    tape_.set_recording(was_recording_);
    --state_.depth;
  }
  Recomputing(const Recomputing&) = delete;
  Recomputing& operator=(const Recomputing&) = delete;

 private:
  RecomputeState& state_;
  Tape& tape_;
  bool was_recording_;
};
}  // namespace detail

/// True while backward runs a recomputed function again: layers skip side effects that must happen
/// once per step (batch norm's running statistics).
inline bool recomputing(Mesh& mesh) { return mesh.context<detail::RecomputeState>().depth > 0; }

/**
 * `fn(inputs)`, keeping none of its intermediate activations for backward: backward runs `fn`
 * again on the same inputs and goes back through that. Gradients reach the inputs and every
 * parameter `fn` uses, as without recomputation. `fn` must compute the same thing twice (it may
 * use random numbers only through meshtensor's counter-based streams), and must stay callable
 * until backward.
 *
 * ```cpp
 * x = autodiff::recompute<float>([&](const auto& in) { return level(in[0], true); }, {x});
 * ```
 */
template <class T, class F>
Tensor<T> recompute(F fn, const std::vector<Tensor<T>>& inputs) {
  if (inputs.empty()) throw Error("recompute needs at least one input tensor");
  Mesh& mesh = inputs.front().mesh();
  Tape& steps = tape(mesh);
  if (!steps.recording()) return fn(inputs);
  Tensor<T> out;
  {
    NoGrad no_grad(mesh);
    out = fn(inputs);
  }
  std::vector<std::shared_ptr<GradNode<T>>> nodes;
  std::vector<Tensor<T>> saved;
  for (const auto& input : inputs) {
    nodes.push_back(input.node());
    saved.push_back(input.detach());
  }
  // Recorded even when no input needs a gradient: the parameters inside fn do.
  auto out_node = out.make_node();
  steps.push([out_node, nodes, saved, fn]() {
    if (!out_node->grad.defined()) return;
    Mesh& mesh = saved.front().mesh();
    std::vector<Tensor<T>> leaves;
    for (std::size_t i = 0; i < saved.size(); ++i) {
      leaves.push_back(saved[i].detach());
      if (nodes[i]) leaves.back().set_requires_grad();
    }
    {
      detail::Recomputing again(mesh);
      const Tensor<T> redone = fn(leaves);
      // The outer replay has taken its steps off the tape: these are the only ones on it.
      if (redone.requires_grad())
        meshtensor::detail::backward_from(redone, out_node->grad, "recomputed output");
    }
    for (std::size_t i = 0; i < nodes.size(); ++i)
      if (nodes[i] && leaves[i].grad().defined())
        Tensor<T>::accumulate(nodes[i]->grad, leaves[i].grad());
    if (!out_node->keep) out_node->grad = Tensor<T>();
  });
  return out;
}

}  // namespace meshtensor::autodiff
