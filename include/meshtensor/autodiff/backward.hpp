#pragma once
// backward(loss): fills the gradients of every tensor that requires one, by replaying this
// processor's tape in reverse.

#include "meshtensor/autodiff/tape.hpp"
#include "meshtensor/core/error.hpp"
#include "meshtensor/memory/processor_memory.hpp"
#include "meshtensor/tensor/create.hpp"
#include "meshtensor/tensor/tensor.hpp"

namespace meshtensor {

namespace detail {
// Seeds `output`'s gradient with `seed` and replays the tape back to the leaves.
template <class T>
void backward_from(const Tensor<T>& output, const Tensor<T>& seed, const char* what) {
  if (!output.requires_grad())
    throw Error(std::string("backward: the ") + what +
                " does not depend on any tensor that requires a gradient; call "
                "set_requires_grad() on the parameters before computing it");
  auto& steps = autodiff::tape(output.mesh());
  autodiff::NoGrad no_grad(output.mesh());
  const MemoryUseScope backward_pass(MemoryUse::gradients);
  Tensor<T>::accumulate(output.node()->grad, seed);
  steps.replay_and_clear();
}
}  // namespace detail

/**
 * Accumulates d(loss)/d(t) into t.grad() for every tensor t that requires a gradient, then clears
 * the tape. `loss` must have no dims (reduce it first); every processor calls backward together.
 *
 * ```cpp
 * auto loss = reduce_mean(square(prediction - target));
 * backward(loss);
 * weight.grad();   // same layout as weight
 * ```
 */
template <class T>
void backward(const Tensor<T>& loss) {
  if (loss.rank() != 0)
    throw ShapeError("backward needs a loss without dims, but got " + loss.layout().to_string() +
                     "; reduce it to a scalar first (e.g. reduce_mean)");
  detail::backward_from(loss, full<T>(loss.mesh(), Shape{}, Layout{}, T(1)), "loss");
}

/**
 * Backward from a tensor with dims, given its gradient (PyTorch's `y.backward(g)`): accumulates
 * d(sum(output * grad_output))/d(t) into t.grad(). `grad_output` must have `output`'s layout.
 */
template <class T>
void backward(const Tensor<T>& output, const Tensor<T>& grad_output) {
  if (grad_output.layout() != output.layout())
    throw ShapeError("backward: the gradient " + grad_output.layout().to_string() +
                     " must have the output's layout " + output.layout().to_string());
  detail::backward_from(output, grad_output, "output");
}

}  // namespace meshtensor
