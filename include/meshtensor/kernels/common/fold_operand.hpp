#pragma once
// One input of a fold (einsum's sums of products, the reductions): its data and strides.

#include "meshtensor/kernels/common/strided.hpp"

namespace meshtensor::kernels {

/// One input of a fold: its data and its strides over the outer and the inner dims (0 where the
/// operand lacks the dim).
template <class T>
struct FoldOperand {
  const T* data = nullptr;
  Strides outer_strides;
  Strides inner_strides;
};

}  // namespace meshtensor::kernels
