#pragma once
// The CPU's kernels for a sum of products of two operands (einsum's contractions), in the order
// kernels/sum.hpp tries them (kernels/registry.hpp says how one is chosen). A GPU sends matrix
// products to cuBLAS and other sums to its own kernels.
//   onednn     oneDNN's matmul: float and bfloat16 contractions that are batches of matrix
//              products (kernels/common/gemm_shape.hpp), summed in float
//   onednn_packed  the same on packed copies of the operands, for contractions that are matrix
//              products but for the order of their dims (kernels/common/packed_product.hpp),
//              and bfloat16 ones packed as float where oneDNN has no bfloat16 kernel
//   reference  the fold on the compute threads, summed in double: every contraction
// Each states the blocks a call takes beside its operands (`workspace`), which a plan holds.
// To add a kernel: a struct like these below, placed in ProductCandidates where it should be tried.

#include <array>
#include <cstddef>
#include <cstdint>
#include <optional>
#include <string_view>
#include <type_traits>
#include <vector>

#include "meshtensor/kernels/common/gemm_shape.hpp"
#include "meshtensor/kernels/common/packed_product.hpp"
#include "meshtensor/kernels/cpu/convert.hpp"
#include "meshtensor/kernels/cpu/loops.hpp"
#include "meshtensor/kernels/cpu/reference/fold.hpp"
#include "meshtensor/kernels/registry.hpp"
#include "meshtensor/memory/array.hpp"
#if defined(MESHTENSOR_WITH_ONEDNN) && !defined(MESHTENSOR_REFERENCE_KERNELS)
#include "meshtensor/kernels/cpu/onednn/matmul.hpp"
#endif

namespace meshtensor::kernels {

/// What a sum of products of two operands asks of its kernel: the GEMM it is, if it is one, on an
/// element type, the fold that states it in full, and where the sums go: into double accumulators
/// (to be completed by an all-reduce) or `rounded` once into T.
template <class T>
struct ProductProblem {
  Sizes outer, inner;
  std::array<FoldOperand<T>, 2> operands;
  std::optional<GemmShape> gemm;
  std::optional<PackedProduct> packed;  // where it is no GEMM as it lies, and for bfloat16
  bool rounded = false;
  Element element = element_of<T>();

  ProductProblem(const Sizes& outer_sizes, const Sizes& inner_sizes,
                 const std::array<FoldOperand<T>, 2>& read, bool rounded_to_t)
      : outer(outer_sizes),
        inner(inner_sizes),
        operands(read),
        gemm(gemm_shape_of(outer_sizes, inner_sizes, read)),
        rounded(rounded_to_t) {
    if (!gemm || element == Element::bfloat16)
      packed = packed_product_of(outer_sizes, inner_sizes, read);
  }

  std::size_t outputs() const { return std::size_t(num_elements(outer)); }
};

/// Where a product's results go: `sums` (double) or, for a rounded problem, `rounded` (T).
template <class T>
struct ProductOutput {
  double* sums = nullptr;
  T* rounded = nullptr;
};

struct ProductCandidate {
  template <class T>
  static bool races_next(const ProductProblem<T>&) {
    return false;
  }
};

/// oneDNN's matmul (where the program links oneDNN and it has an optimised kernel for the GEMM).
/// Its float results land in a float result directly, else in a float block widened or rounded.
struct OnednnProducts : ProductCandidate {
  static constexpr std::string_view name = "onednn";
  template <class T>
  static bool supports([[maybe_unused]] const ProductProblem<T>& p) {
#if defined(MESHTENSOR_WITH_ONEDNN) && !defined(MESHTENSOR_REFERENCE_KERNELS)
    return p.gemm && onednn::matmul_runs<T>(*p.gemm);
#else
    return false;
#endif
  }
  template <class T>
  static std::vector<std::size_t> workspace([[maybe_unused]] const ProductProblem<T>& p) {
    std::vector<std::size_t> blocks;
#if defined(MESHTENSOR_WITH_ONEDNN) && !defined(MESHTENSOR_REFERENCE_KERNELS)
    if constexpr (onednn::detail::multiplied_type<T>) {
      if (!in_place<T>(p)) blocks.push_back(p.outputs() * sizeof(float));
      blocks.push_back(onednn::matmul_scratchpad_bytes<T>(*p.gemm));
    }
#endif
    return blocks;
  }
  template <class T>
  static void run([[maybe_unused]] const ProductProblem<T>& p,
                  [[maybe_unused]] const ProductOutput<T>& out) {
#if defined(MESHTENSOR_WITH_ONEDNN) && !defined(MESHTENSOR_REFERENCE_KERNELS)
    if constexpr (onednn::detail::multiplied_type<T>) {
      const GemmShape& g = *p.gemm;
      const T* a = p.operands[g.a_operand].data;
      const T* b = p.operands[1 - g.a_operand].data;
      if constexpr (std::is_same_v<T, float>)
        if (in_place<T>(p)) return onednn::matmul(g, a, b, out.rounded);
      Buffer<float> product(p.outputs());
      onednn::matmul(g, a, b, product.data());
      const auto n = std::int64_t(p.outputs());
      if (p.rounded) return cpu::convert(product.data(), n, out.rounded);
      cpu::convert(product.data(), n, out.sums);
    }
#endif
  }

 private:
  template <class T>
  static bool in_place(const ProductProblem<T>& p) {
    return p.rounded && std::is_same_v<T, float>;
  }
};

/// oneDNN's matmul on the operands packed as one GEMM; the product scattered into the result.
/// bfloat16 operands pack as float where oneDNN has no bfloat16 kernel for the GEMM (products of
/// two bfloat16 values are exact in float, and the sums are float either way).
struct PackedProducts : ProductCandidate {
  static constexpr std::string_view name = "onednn_packed";
  template <class T>
  static bool supports([[maybe_unused]] const ProductProblem<T>& p) {
#if defined(MESHTENSOR_WITH_ONEDNN) && !defined(MESHTENSOR_REFERENCE_KERNELS)
    if (!p.packed) return false;
    return onednn::matmul_runs<T>(p.packed->gemm) ||
           (std::is_same_v<T, bfloat16> && onednn::matmul_runs<float>(p.packed->gemm));
#else
    return false;
#endif
  }
  template <class T>
  static std::vector<std::size_t> workspace([[maybe_unused]] const ProductProblem<T>& p) {
#if defined(MESHTENSOR_WITH_ONEDNN) && !defined(MESHTENSOR_REFERENCE_KERNELS)
    if constexpr (onednn::detail::multiplied_type<T>) {
      if (onednn::matmul_runs<T>(p.packed->gemm)) return blocks<T>(*p.packed);
      return blocks<float>(*p.packed);
    }
#endif
    return {};
  }
  template <class T>
  static void run([[maybe_unused]] const ProductProblem<T>& p,
                  [[maybe_unused]] const ProductOutput<T>& out) {
#if defined(MESHTENSOR_WITH_ONEDNN) && !defined(MESHTENSOR_REFERENCE_KERNELS)
    if constexpr (onednn::detail::multiplied_type<T>) {
      if (onednn::matmul_runs<T>(p.packed->gemm)) return run_as<T>(p, out);
      run_as<float>(p, out);
    }
#endif
  }

 private:
#if defined(MESHTENSOR_WITH_ONEDNN) && !defined(MESHTENSOR_REFERENCE_KERNELS)
  // The packed operands (as P), the float product and oneDNN's scratchpad, in bytes.
  template <class P>
  static std::vector<std::size_t> blocks(const PackedProduct& k) {
    return {std::size_t(k.x_elements()) * sizeof(P), std::size_t(k.y_elements()) * sizeof(P),
            std::size_t(k.outputs()) * sizeof(float), onednn::matmul_scratchpad_bytes<P>(k.gemm)};
  }

  template <class P, class T>
  static void run_as(const ProductProblem<T>& p, const ProductOutput<T>& out) {
    const PackedProduct& k = *p.packed;
    Buffer<P> x(std::size_t(k.x_elements())), y(std::size_t(k.y_elements()));
    convert_box(k.x_sizes, p.operands[k.x_operand].data, k.x_strides, x.data(),
                row_major_strides(k.x_sizes));
    convert_box(k.y_sizes, p.operands[1 - k.x_operand].data, k.y_strides, y.data(),
                row_major_strides(k.y_sizes));
    Buffer<float> product(std::size_t(k.outputs()));
    const P* packed[2] = {x.data(), y.data()};
    onednn::matmul(k.gemm, packed[k.gemm.a_operand], packed[1 - k.gemm.a_operand], product.data());
    const Strides product_strides = row_major_strides(k.out_sizes);
    if (p.rounded)
      return convert_box(k.out_sizes, product.data(), product_strides, out.rounded, k.out_strides);
    convert_box(k.out_sizes, product.data(), product_strides, out.sums, k.out_strides);
  }
#endif

  // to[i * to_strides] = from[i * from_strides] converted, for every index i of `box` (runs in
  // order on both sides through the vector conversions).
  template <class From, class To>
  static void convert_box(const Sizes& box, const From* from, const Strides& from_strides, To* to,
                          const Strides& to_strides) {
    parallel_for_each_run<2>(
        box, {from_strides, to_strides}, compute_threads(),
        [&](const std::array<std::int64_t, 2>& at, std::int64_t n,
            const std::array<std::int64_t, 2>& step) {
          const From* src = from + at[0];
          To* dst = to + at[1];
          if (step[0] == 1 && step[1] == 1) {
            if constexpr (std::is_same_v<From, float> && std::is_same_v<To, bfloat16>)
              return cpu::to_bf16_run(src, dst, n);
            if constexpr (std::is_same_v<From, bfloat16> && std::is_same_v<To, float>)
              return cpu::to_float_run(src, dst, n);
          }
          for (std::int64_t i = 0; i < n; ++i) dst[i * step[1]] = To(src[i * step[0]]);
        });
  }
};

/// The fold on the compute threads (kernels/cpu/reference/fold.hpp), in double; a rounded result
/// from double sums of its own.
struct ReferenceProducts : ProductCandidate {
  static constexpr std::string_view name = "reference";
  template <class T>
  static bool supports(const ProductProblem<T>&) {
    return true;
  }
  template <class T>
  static std::vector<std::size_t> workspace(const ProductProblem<T>& p) {
    if (!p.rounded) return {};
    return {p.outputs() * sizeof(double)};
  }
  template <class T>
  static void run(const ProductProblem<T>& p, const ProductOutput<T>& out) {
    if (!p.rounded)
      return reference::parallel_sum<double, T, 2>(p.outer, p.inner, p.operands, out.sums,
                                                   compute_threads());
    Buffer<double> sums(p.outputs());
    reference::parallel_sum<double, T, 2>(p.outer, p.inner, p.operands, sums.data(),
                                          compute_threads());
    cpu::convert(sums.data(), std::int64_t(p.outputs()), out.rounded);
  }
};

using ProductCandidates = CandidateList<OnednnProducts, PackedProducts, ReferenceProducts>;

}  // namespace meshtensor::kernels
