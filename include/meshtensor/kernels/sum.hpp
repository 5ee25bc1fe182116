#pragma once
// The sum family: einsum's and the reductions' sums of products (accumulated in Acc: double for
// floating point, int64 for integers), narrowing those accumulators into a result, and the max and
// min folds, and argmax. A GPU sends a matrix product to cuBLAS and any other sum to its own
// kernels; the CPU runs a product of two floating-point operands on the candidate
// kernels/sum_candidates.hpp chooses (oneDNN's matmul for matrix products) and folds the rest on
// its compute threads (kernels/cpu/reference/fold.hpp). A plan counts a multiply-add as two
// operations.

#include <array>
#include <cstddef>
#include <cstdint>
#include <string>
#include <type_traits>
#include <vector>

#include "meshtensor/kernels/backend.hpp"
#include "meshtensor/kernels/common/accumulator.hpp"
#include "meshtensor/kernels/common/elementwise_formulas.hpp"
#include "meshtensor/kernels/common/fold_operand.hpp"
#include "meshtensor/kernels/cpu/loops.hpp"
#include "meshtensor/kernels/cpu/reference/fold.hpp"
#include "meshtensor/kernels/sum_candidates.hpp"
#include "meshtensor/memory/array.hpp"
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

namespace detail {
// Whether a sum of N operands into Acc runs on kernels/sum_candidates.hpp's list.
template <class Acc, class T, std::size_t N>
constexpr bool has_product_candidates =
    N == 2 && std::is_same_v<Acc, double> && !std::is_same_v<T, long double> && is_floating_v<T>;

template <class T>
std::size_t chosen_products(const ProductProblem<T>& p) {
  return ProductCandidates::select(p, current_processor().settings().kernels.sum_kernel,
                                   "MESHTENSOR_SUM_KERNEL")
      .chosen;
}

// Holds for a planned product the blocks its CPU candidate states, as the call would take them.
template <class T>
void hold_product_workspace(const ProductProblem<T>& p) {
  const auto blocks = ProductCandidates::ask<std::vector<std::size_t>>(
      chosen_products(p), [&](auto candidate) { return decltype(candidate)::workspace(p); });
  std::vector<Buffer<unsigned char>> held;
  held.reserve(blocks.size());
  for (const std::size_t bytes : blocks) held.emplace_back(bytes);
}

// A product of two operands on its CPU candidate: sums into `sums` or, rounded, into `rounded`.
template <class T>
void run_products(const Sizes& outer, const Sizes& inner,
                  const std::array<FoldOperand<T>, 2>& operands, const ProductOutput<T>& out) {
  const bool rounded = out.rounded != nullptr;
  dispatch(
      [&] {
        plan::count(plan::Family::sum, 2.0 * double(num_elements(outer) * num_elements(inner)));
        hold_product_workspace(ProductProblem<T>(outer, inner, operands, rounded));
      },
      [] { return false; },
      [&](HostOperands& h) {
        std::array<FoldOperand<T>, 2> read = operands;
        for (auto& o : read) o.data = h.in(o.data, fold_span(outer, inner, o));
        const std::int64_t n = num_elements(outer);
        const ProductOutput<T> into{rounded ? nullptr : h.out(out.sums, n),
                                    rounded ? h.out(out.rounded, n) : nullptr};
        const ProductProblem<T> p(outer, inner, read, rounded);
        ProductCandidates::visit(chosen_products(p),
                                 [&](auto candidate) { decltype(candidate)::run(p, into); });
      });
}
}  // namespace detail

/// The candidate (kernels/sum_candidates.hpp) that sums these products of two operands here.
template <class T>
std::string product_kernel_name(const Sizes& outer, const Sizes& inner,
                                const std::array<FoldOperand<T>, 2>& operands,
                                bool rounded = false) {
  const ProductProblem<T> p(outer, inner, operands, rounded);
  return std::string(ProductCandidates::names[detail::chosen_products(p)]);
}

/// out[o] = the sum over every inner index i of the product of the operands at (o, i), in Acc.
template <class Acc, class T, std::size_t N>
void sum(const Sizes& outer, const Sizes& inner, const std::array<FoldOperand<T>, N>& operands,
         Acc* out) {
  if constexpr (detail::has_product_candidates<Acc, T, N>)
    if (!takes_gpu_roads()) return detail::run_products<T>(outer, inner, operands, {out, nullptr});
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

/// out[o] = the sum over every inner index i of the product of the operands at (o, i), rounded
/// once to T: a CPU candidate for two floating-point operands writes T itself (oneDNN's matmul,
/// float into float); elsewhere the sums go through accumulators (accumulator_t<T>).
template <class T, std::size_t N>
void sum_rounded(const Sizes& outer, const Sizes& inner,
                 const std::array<FoldOperand<T>, N>& operands, T* out) {
  using Acc = accumulator_t<T>;
  if constexpr (detail::has_product_candidates<Acc, T, N>)
    if (!takes_gpu_roads()) return detail::run_products<T>(outer, inner, operands, {nullptr, out});
  Buffer<Acc> sums(static_cast<std::size_t>(num_elements(outer)));
  sum<Acc, T, N>(outer, inner, operands, sums.data());
  narrow(sums.data(), out, num_elements(outer), 1.0);
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
