#pragma once
// Folds over an inner box for each index of an outer box: the kernel under einsum (a sum of
// products) and under the reductions (sum, max, min of one operand).

#include <array>
#include <cstdint>

#include "meshtensor/kernels/reference/strided.hpp"

namespace meshtensor::kernels {

/// One input of a fold: its data and its strides over the outer and the inner dims (0 where the
/// operand lacks the dim).
template <class T>
struct FoldOperand {
  const T* data = nullptr;
  Strides outer_strides;
  Strides inner_strides;
};

/**
 * out[o] = fold of combine(acc, product of operands at (o, i)) over every inner index i, starting
 * from `init`, accumulated in Acc and stored as Out; `out` is row-major over `outer`. With an empty
 * inner box every output is `init` (the identity of the reduction).
 */
template <class Acc, class T, std::size_t N, class Out, class Combine>
void fold(const Sizes& outer, const Sizes& inner, const std::array<FoldOperand<T>, N>& operands,
          Out* out, Acc init, Combine combine) {
  std::array<Strides, N> outer_strides, inner_strides;
  for (std::size_t k = 0; k < N; ++k) {
    outer_strides[k] = operands[k].outer_strides;
    inner_strides[k] = operands[k].inner_strides;
  }
  std::int64_t o = 0;
  for_each_offset<N>(outer, outer_strides, [&](const std::array<std::int64_t, N>& base) {
    Acc acc = init;
    for_each_offset<N>(inner, inner_strides, [&](const std::array<std::int64_t, N>& offset) {
      Acc product = static_cast<Acc>(operands[0].data[base[0] + offset[0]]);
      for (std::size_t k = 1; k < N; ++k)
        product *= static_cast<Acc>(operands[k].data[base[k] + offset[k]]);
      acc = combine(acc, product);
    });
    out[o++] = static_cast<Out>(acc);
  });
}

}  // namespace meshtensor::kernels
