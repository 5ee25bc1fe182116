#pragma once
// Where einsum's and the reductions' sums of products run: on the GPU when the processor computes
// on one and its blocks are there (kernels/gpu/sum.hpp, with the GPU backend); otherwise the
// caller runs kernels::parallel_sum on the CPU.

#include <array>
#include <cstddef>

#include "meshtensor/kernels/reference/fold.hpp"
#if defined(MESHTENSOR_WITH_CUDA)
#include "meshtensor/kernels/gpu/sum.hpp"
#endif

namespace meshtensor::kernels {

/// parallel_sum's result on the GPU; false when it did not run there.
template <class Acc, class T, std::size_t N>
bool sum_on_gpu([[maybe_unused]] const Sizes& outer, [[maybe_unused]] const Sizes& inner,
                [[maybe_unused]] const std::array<FoldOperand<T>, N>& operands,
                [[maybe_unused]] Acc* out) {
#if defined(MESHTENSOR_WITH_CUDA)
  return gpu::sum<Acc, T, N>(outer, inner, operands, out);
#else
  return false;
#endif
}

}  // namespace meshtensor::kernels
