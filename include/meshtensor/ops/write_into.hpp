#pragma once
// Values written into a tensor that already holds its block, in place: the inputs a step captured
// as a graph reads (StepGraph) stay the same blocks from one call to the next.

#include <cstdint>
#include <string>

#include "meshtensor/core/error.hpp"
#include "meshtensor/kernels/copy.hpp"
#include "meshtensor/tensor/tensor.hpp"

namespace meshtensor {

/**
 * Writes `from`'s values into `to`'s block, which stays where it is (no gradient is recorded).
 * Both must have the same shape and layout.
 * ```cpp
 * write_into(fixed.input, next_batch.input);   // then graph.run(...) reads fixed.input
 * ```
 */
template <class T>
void write_into(Tensor<T>& to, const Tensor<T>& from) {
  if (!(to.layout() == from.layout()))
    throw ShapeError("write_into: the tensor written " + from.layout().to_string() +
                     " is not laid out as the one it goes into " + to.layout().to_string() +
                     "; give both the same shape and layout");
  const auto& source = from.array();
  kernels::copy_values(source.data(), std::int64_t(source.size()), to.array().data());
}

}  // namespace meshtensor
