#pragma once
// The sum family: einsum's and the reductions' sums of products (accumulated in Acc: double for
// floating point, int64 for integers), narrowing those accumulators into a result, and the max and
// min folds, and argmax. A GPU sends a matrix product to cuBLAS and any other sum to its own
// kernels; the CPU folds on its compute threads (kernels/cpu/reference/fold.hpp). A plan counts a
// multiply-add as two operations.

#include <array>
#include <cstddef>
#include <cstdint>
#include <type_traits>

#include "meshtensor/kernels/backend.hpp"
#include "meshtensor/kernels/common/elementwise_formulas.hpp"
#include "meshtensor/kernels/common/fold_operand.hpp"
#include "meshtensor/kernels/cpu/loops.hpp"
#include "meshtensor/kernels/cpu/reference/fold.hpp"
#if defined(MESHTENSOR_WITH_CUDA)
#include "meshtensor/kernels/cuda/cublas_gemm.hpp"
#include "meshtensor/kernels/cuda/sum.hpp"
#endif

namespace meshtensor::kernels {

/// The elements a fold's operand spans from its first.
template <class T>
std::int64_t fold_span(const Sizes& outer, const Sizes& inner, const FoldOperand<T>& o) {
  const std::int64_t a = span_of(outer, o.outer_strides), b = span_of(inner, o.inner_strides);
  return a == 0 || b == 0 ? 0 : a + b - 1;
}

#if defined(MESHTENSOR_WITH_CUDA)
namespace detail {
// A product of two operands that is a batch of matrix products goes to cuBLAS (accumulated in T,
// not in double); any other sum to meshtensor's kernels.
template <class Acc, class T, std::size_t N>
bool sum_on_gpu(const Sizes& outer, const Sizes& inner,
                const std::array<FoldOperand<T>, N>& operands, Acc* out) {
  if constexpr (N == 2 && std::is_same_v<Acc, double>)
    if (cublas::gemm_sum<T>(outer, inner, operands, out)) return true;
  return gpu::sum<Acc, T, N>(outer, inner, operands, out);
}
template <class Acc, class T>
bool narrow_on_gpu(const Acc* in, T* out, std::int64_t n, double divisor) {
  if constexpr (std::is_same_v<Acc, double>) return gpu::narrow<T>(in, out, n, divisor);
  return false;
}
}  // namespace detail
#endif

/// out[o] = the sum over every inner index i of the product of the operands at (o, i), in Acc.
template <class Acc, class T, std::size_t N>
void sum(const Sizes& outer, const Sizes& inner, const std::array<FoldOperand<T>, N>& operands,
         Acc* out) {
  dispatch(
      [&] {
        plan::count(plan::Family::sum,
                    double(N) * double(num_elements(outer)) * double(num_elements(inner)));
      },
      MESHTENSOR_ON_GPU(detail::sum_on_gpu<Acc, T, N>(outer, inner, operands, out)),
      [&](HostOperands& h) {
        std::array<FoldOperand<T>, N> read = operands;
        for (auto& o : read) o.data = h.in(o.data, fold_span(outer, inner, o));
        reference::parallel_sum<Acc, T, N>(outer, inner, read, h.out(out, num_elements(outer)),
                                           compute_threads());
      });
}

/// out[i] = in[i] / divisor rounded to T, for i < n (accumulators into results; a mean).
template <class Acc, class T>
void narrow(const Acc* in, T* out, std::int64_t n, double divisor = 1.0) {
  dispatch([&] { plan::count(plan::Family::sum, double(n)); },
           MESHTENSOR_ON_GPU(detail::narrow_on_gpu(in, out, n, divisor)),
           [&](HostOperands& h) {
             const Acc* in_h = h.in(in, n);
             T* out_h = h.out(out, n);
             const Acc by = static_cast<Acc>(divisor);
             parallel_for_ranges(n, compute_threads(), [&](std::int64_t begin, std::int64_t end) {
               for (std::int64_t i = begin; i < end; ++i) out_h[i] = static_cast<T>(in_h[i] / by);
             });
           });
}

/// out[o] = the max (is_max) or min over every inner index of the operand at (o, i), from `init`.
template <class T>
void extreme(const Sizes& outer, const Sizes& inner, const FoldOperand<T>& operand, T* out,
             bool is_max, T init) {
  dispatch(
      [&] {
        plan::count(plan::Family::sum, double(num_elements(outer)) * double(num_elements(inner)));
      },
      MESHTENSOR_ON_GPU(gpu::extreme<T>(outer, inner, operand, out, is_max, init)),
      [&](HostOperands& h) {
        FoldOperand<T> read = operand;
        read.data = h.in(operand.data, fold_span(outer, inner, operand));
        reference::parallel_fold<T, T, 1>(
            outer, inner, {read}, h.out(out, num_elements(outer)), init,
            [is_max](T a, T b) {
              return is_max ? shared::binary_formula<BinaryOp::larger>(a, b)
                            : shared::binary_formula<BinaryOp::smaller>(a, b);
            },
            compute_threads());
      });
}

/// out[a, b] = the position k of the largest in[a, k, b] over k < n (the first on ties), for the
/// [outer][n][inner] block `in`: a class map from scores.
template <class Out, class T>
void argmax(const T* in, std::int64_t outer, std::int64_t n, std::int64_t inner, Out* out) {
  dispatch([&] { plan::count(plan::Family::sum, double(outer) * double(n) * double(inner)); },
           MESHTENSOR_ON_GPU(gpu::argmax(in, outer, n, inner, out)),
           [&](HostOperands& h) {
             const T* in_h = h.in(in, outer * n * inner);
             Out* out_h = h.out(out, outer * inner);
             parallel_for(outer * inner, compute_threads(), [&](std::int64_t e) {
               const T* first = in_h + e / inner * n * inner + e % inner;
               std::int64_t best = 0;
               for (std::int64_t k = 1; k < n; ++k)
                 if (first[k * inner] > first[best * inner]) best = k;
               out_h[e] = static_cast<Out>(best);
             });
           });
}

}  // namespace meshtensor::kernels
