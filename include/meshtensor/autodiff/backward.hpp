#pragma once
// backward(loss): fills the gradients of every tensor that requires one, by replaying this
// processor's tape in reverse.

#include "meshtensor/autodiff/tape.hpp"
#include "meshtensor/core/error.hpp"
#include "meshtensor/tensor/create.hpp"
#include "meshtensor/tensor/tensor.hpp"

namespace meshtensor {

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
  if (!loss.requires_grad())
    throw Error(
        "backward: the loss does not depend on any tensor that requires a gradient; call "
        "set_requires_grad() on the parameters before computing the loss");
  auto& steps = autodiff::tape(loss.mesh());
  autodiff::NoGrad no_grad(loss.mesh());
  Tensor<T>::accumulate(loss.node()->grad, full<T>(loss.mesh(), Shape{}, Layout{}, T(1)));
  steps.replay_and_clear();
}

}  // namespace meshtensor
