#pragma once
// Where einsum's and the reductions' sums of products, and the max and min folds, run: on the GPU
// when the processor computes on one and its blocks are there (kernels/gpu/sum.hpp, with the GPU
// backend); otherwise the caller runs kernels::parallel_sum on the CPU. A function below returns
// false only once the GPU has finished its queued work (kernels/host_access.hpp), but for
// gemm_on_gpu, which sum_on_gpu follows.

#include <array>
#include <cstddef>
#include <cstdint>
#include <type_traits>

#include "meshtensor/kernels/host_access.hpp"
#include "meshtensor/kernels/reference/fold.hpp"
#if defined(MESHTENSOR_WITH_CUDA)
#include "meshtensor/kernels/cublas/gemm.hpp"
#include "meshtensor/kernels/gpu/sum.hpp"
#endif

namespace meshtensor::kernels {

/// parallel_sum's result on the GPU; false when it did not run there.
template <class Acc, class T, std::size_t N>
bool sum_on_gpu([[maybe_unused]] const Sizes& outer, [[maybe_unused]] const Sizes& inner,
                [[maybe_unused]] const std::array<FoldOperand<T>, N>& operands,
                [[maybe_unused]] Acc* out) {
#if defined(MESHTENSOR_WITH_CUDA)
  return ran_or_waited(gpu::sum<Acc, T, N>(outer, inner, operands, out));
#else
  return false;
#endif
}

/// out[i] = in[i] / divisor rounded to T (einsum's and the sums' double accumulators into their
/// results), for i < n, on the GPU; false when it did not run there.
template <class Acc, class T>
bool narrow_on_gpu([[maybe_unused]] const Acc* in, [[maybe_unused]] T* out,
                   [[maybe_unused]] std::int64_t n, [[maybe_unused]] double divisor) {
#if defined(MESHTENSOR_WITH_CUDA)
  if constexpr (std::is_same_v<Acc, double>)
    return ran_or_waited(gpu::narrow<T>(in, out, n, divisor));
#endif
  return ran_or_waited(false);
}

/// A sum of products of two operands that is a batch of matrix products, through cuBLAS on the
/// GPU (accumulated in T, not in double); false when it did not run there.
template <class Acc, class T>
bool gemm_on_gpu([[maybe_unused]] const Sizes& outer, [[maybe_unused]] const Sizes& inner,
                 [[maybe_unused]] const std::array<FoldOperand<T>, 2>& operands,
                 [[maybe_unused]] Acc* out) {
#if defined(MESHTENSOR_WITH_CUDA)
  if constexpr (std::is_same_v<Acc, double>)
    return cublas::gemm_sum<T>(outer, inner, operands, out);
#endif
  return false;
}

/// The max (is_max) or min reduction's fold of one operand on the GPU, from `init`; false when it
/// did not run there.
template <class T>
bool extreme_on_gpu([[maybe_unused]] const Sizes& outer, [[maybe_unused]] const Sizes& inner,
                    [[maybe_unused]] const FoldOperand<T>& operand, [[maybe_unused]] T* out,
                    [[maybe_unused]] bool is_max, [[maybe_unused]] T init) {
#if defined(MESHTENSOR_WITH_CUDA)
  return ran_or_waited(gpu::extreme<T>(outer, inner, operand, out, is_max, init));
#else
  return false;
#endif
}

}  // namespace meshtensor::kernels
