#pragma once
// Cases for the GPU element-wise and optimiser kernels (against the CPU loops): every built-in
// unary op and derivative on inputs inside its domain, every binary op over boxes where an
// operand is broadcast or stored in another dim order, and optimiser steps.

#include <algorithm>
#include <array>
#include <cmath>
#include <cstdint>
#include <functional>
#include <utility>
#include <vector>

#include <meshtensor/kernels/common/elementwise_formulas.hpp>
#include <meshtensor/kernels/common/optimizer_formulas.hpp>
#include <meshtensor/kernels/common/strided.hpp>
#include <meshtensor/kernels/cpu/reference/fold.hpp>

namespace meshtensor::testing {
namespace detail {
template <class T, int... ops>
std::function<T(T, T)> unary_table(int code, std::integer_sequence<int, ops...>) {
  std::function<T(T, T)> found;
  ((ops == code ? void(found = [](T x, T s) { return kernels::Unary<T, ops>{s}(x); }) : void()),
   ...);
  return found;
}
template <class T, int... ops>
std::function<T(T, T)> binary_table(int code, std::integer_sequence<int, ops...>) {
  std::function<T(T, T)> found;
  ((ops == code ? void(found = [](T x, T y) { return kernels::Binary<T, ops>{}(x, y); }) : void()),
   ...);
  return found;
}
}  // namespace detail

/// The CPU formula of unary op `code`: f(x, s).
template <class T>
std::function<T(T, T)> unary_on_cpu(int code) {
  return detail::unary_table<T>(code, std::make_integer_sequence<int, kernels::UnaryOp::count>{});
}

/// The CPU formula of binary op `code`: f(x, y).
template <class T>
std::function<T(T, T)> binary_on_cpu(int code) {
  return detail::binary_table<T>(code, std::make_integer_sequence<int, kernels::BinaryOp::count>{});
}

/// Whether unary op `code` takes only positive inputs (logarithms, roots, powers, reciprocals).
inline bool positive_inputs_only(int code) {
  using U = kernels::UnaryOp;
  for (int c : {U::logarithm, U::square_root, U::power, U::power_derivative, U::reciprocal,
                U::half_over, U::scalar_over, U::minus_scalar_over_square})
    if (c == code) return true;
  return false;
}

/// n inputs for unary op `code`: mixed signs, zeros and ties where its domain allows.
template <class T>
std::vector<T> unary_inputs(int code, std::size_t n) {
  std::vector<T> x(n);
  for (std::size_t i = 0; i < n; ++i) {
    const double v = 3 * std::sin(0.37 * double(i) + 0.1);
    x[i] = T(positive_inputs_only(code) ? std::abs(v) + 0.05 : (i % 7 == 0 ? 0.0 : v));
  }
  return x;
}

/// The scalar operand each unary op gets in the cases (a leaky slope, a power, a constant...).
template <class T>
T unary_scalar(int code) {
  return code == kernels::UnaryOp::power || code == kernels::UnaryOp::power_derivative ? T(1.7)
                                                                                       : T(0.3);
}

/// Values for a binary case's operands, with ties between a and b.
template <class T>
std::vector<T> zip_operand(std::int64_t n, double phase) {
  std::vector<T> v(static_cast<std::size_t>(n));
  for (std::size_t i = 0; i < v.size(); ++i)
    v[i] = T(i % 5 == 0 ? 1.0 : std::cos(1.3 * double(i) + phase) + 0.01);
  return v;
}

/// Unary op `code` on n inputs, and what the CPU computes: y = f(x), dy = g * f(x) (f taken as a
/// derivative).
template <class T>
struct UnaryCheck {
  T s;
  std::vector<T> x, g, y_ref, dy_ref;
  UnaryCheck(int code, std::size_t n)
      : s(unary_scalar<T>(code)),
        x(unary_inputs<T>(code, n)),
        g(zip_operand<T>(std::int64_t(n), 0.5)),
        y_ref(n),
        dy_ref(n) {
    const auto f = unary_on_cpu<T>(code);
    for (std::size_t i = 0; i < n; ++i) {
      y_ref[i] = f(x[i], s);
      dy_ref[i] = g[i] * f(x[i], s);
    }
  }
};

/// A box and the strides of a, b and the output over it (the output row-major).
struct ZipCase {
  kernels::Sizes sizes;
  std::array<kernels::Strides, 3> strides;
  std::int64_t a_elements, b_elements;
};

inline std::vector<ZipCase> zip_cases() {
  // [4, 5, 6] with a contiguous and b a per-channel vector; b broadcast along the middle dim; a
  // stored transposed ([6, 5, 4]); a scalar against a box; and a box of size-1 dims.
  return {
      {{4, 5, 6}, {kernels::Strides{30, 6, 1}, {0, 0, 1}, {30, 6, 1}}, 120, 6},
      {{4, 5, 6}, {kernels::Strides{30, 6, 1}, {6, 0, 1}, {30, 6, 1}}, 120, 24},
      {{4, 5, 6}, {kernels::Strides{1, 4, 20}, {30, 6, 1}, {30, 6, 1}}, 120, 120},
      {{3, 7}, {kernels::Strides{0, 0}, {7, 1}, {7, 1}}, 1, 21},
      {{1, 1, 1}, {kernels::Strides{1, 1, 1}, {1, 1, 1}, {1, 1, 1}}, 1, 1},
  };
}

/// A copy between strided boxes: from a block into a message, a halo into a block, a broadcast
/// (stride 0 reads), a block into another dim order.
struct CopyCase {
  kernels::Sizes box;
  kernels::Strides from_strides, to_strides;
  std::int64_t from_elements, to_elements;
};

inline std::vector<CopyCase> copy_cases() {
  return {
      // a 2x3x4 face of a 6x5x4 block, packed row-major
      {{2, 3, 4}, {20, 4, 1}, {12, 4, 1}, 120, 24},
      // unpacked into the middle of an 8x5x4 block
      {{2, 3, 4}, {12, 4, 1}, {20, 4, 1}, 24, 160},
      // a [4] vector broadcast over [3, 5, 4]
      {{3, 5, 4}, {0, 0, 1}, {20, 4, 1}, 4, 60},
      // a 3x4x5 block written in the order [5, 3, 4]
      {{3, 4, 5}, {20, 5, 1}, {4, 1, 12}, 60, 60},
      // one element
      {{1, 1}, {1, 1}, {1, 1}, 1, 1},
  };
}

/// out = f(a, b) over a case's box, as the CPU walks it.
template <class T, class F>
std::vector<T> zip_on_cpu(const ZipCase& c, const std::vector<T>& a, const std::vector<T>& b,
                          F&& f) {
  std::vector<T> out(std::size_t(kernels::num_elements(c.sizes)));
  kernels::for_each_offset<3>(c.sizes, c.strides, [&](const std::array<std::int64_t, 3>& o) {
    out[std::size_t(o[2])] = f(a[std::size_t(o[0])], b[std::size_t(o[1])]);
  });
  return out;
}

/// Binary op `code` over a case's box: the operands, and what the CPU computes.
template <class T>
struct ZipCheck {
  std::vector<T> a, b, out_ref;
  ZipCheck(const ZipCase& c, int code)
      : a(zip_operand<T>(c.a_elements, 0.0)),
        b(zip_operand<T>(c.b_elements, 2.0)),
        out_ref(zip_on_cpu(c, a, b, binary_on_cpu<T>(code))) {}
};

/// A sum of products: for each outer index, the sum over the inner box of one operand or of the
/// product of two (strides 0 where an operand lacks a dim).
struct SumCase {
  kernels::Sizes outer, inner;
  std::vector<kernels::Strides> outer_strides, inner_strides;
  std::vector<std::int64_t> elements;
};

/// A reduction over a middle dim, a per-channel sum over a volume (a bias gradient), a matrix
/// product, a sum of everything, and sums of one term; `scale` multiplies the inner box's first
/// dim (large enough on a GPU to take its chunked kernel).
inline std::vector<SumCase> sum_cases(std::int64_t scale = 1) {
  const std::int64_t x = 5 * scale;
  return {
      {{4, 6}, {x}, {{x * 6, 1}}, {{6}}, {4 * x * 6}},
      {{6}, {x, 4}, {{1}}, {{24, 6}}, {x * 24}},
      {{3, 5}, {x}, {{x, 0}, {0, 1}}, {{1}, {5}}, {3 * x, x * 5}},
      {{}, {x, 4, 3}, {{}}, {{12, 3, 1}}, {x * 12}},
      {{7, 2}, {}, {{2, 1}, {2, 1}}, {{}, {}}, {14, 14}},
  };
}

/// The operands of a case, over the given values (one array per operand).
template <class T, std::size_t N>
std::array<kernels::FoldOperand<T>, N> sum_operands(const SumCase& c,
                                                    const std::vector<std::vector<T>>& values) {
  std::array<kernels::FoldOperand<T>, N> operands;
  for (std::size_t k = 0; k < N; ++k)
    operands[k] = {values[k].data(), c.outer_strides[k], c.inner_strides[k]};
  return operands;
}

/// A sum case's float operands, and the CPU's sums (parallel_sum on one thread). The operands
/// point into `values`: not copied.
template <std::size_t N>
struct SumCheck {
  std::vector<std::vector<float>> values;
  std::array<kernels::FoldOperand<float>, N> operands;
  std::vector<double> ref;
  explicit SumCheck(const SumCase& c) {
    for (std::size_t k = 0; k < N; ++k)
      values.push_back(zip_operand<float>(c.elements[k], double(k)));
    operands = sum_operands<float, N>(c, values);
    ref.assign(std::size_t(kernels::num_elements(c.outer)), 7.0);
    kernels::reference::parallel_sum<double, float, N>(c.outer, c.inner, operands, ref.data(), 1);
  }
  SumCheck(const SumCheck&) = delete;
  SumCheck& operator=(const SumCheck&) = delete;
};

/// The CPU's max (is_max) or min reduction of a one-operand sum case's values: fold on one thread,
/// with the reduction's identity and formula.
inline std::vector<float> extreme_on_cpu(const SumCase& c, const SumCheck<1>& check, bool is_max) {
  std::vector<float> out(std::size_t(kernels::num_elements(c.outer)), 7.0f);
  kernels::reference::fold<float, float, 1>(
      c.outer, c.inner, check.operands, out.data(), is_max ? -INFINITY : INFINITY,
      [is_max](float a, float b) {
        return is_max ? kernels::Binary<float, kernels::BinaryOp::larger>{}(a, b)
                      : kernels::Binary<float, kernels::BinaryOp::smaller>{}(a, b);
      });
  return out;
}

/// The largest gap between two sums, relative to the sum of the magnitudes of their terms' scale.
inline double sum_gap(const std::vector<double>& got, const std::vector<double>& want) {
  double gap = 0;
  for (std::size_t i = 0; i < want.size(); ++i)
    gap = std::max(gap, std::abs(got[i] - want[i]) / std::max(1.0, std::abs(want[i])));
  return gap;
}

/// Optimiser state after a few steps (so the moments are not zero): parameters, moments,
/// gradients.
template <class T>
struct OptimizerState {
  std::vector<T> parameter, first, second, gradient;
  explicit OptimizerState(std::size_t n) : parameter(n), first(n), second(n), gradient(n) {
    for (std::size_t i = 0; i < n; ++i) {
      parameter[i] = T(std::sin(0.7 * double(i)));
      first[i] = T(0.01 * std::cos(double(i)));
      second[i] = T(1e-4 * (1.5 + std::sin(0.3 * double(i))));
      gradient[i] = T(0.1 * std::cos(0.2 * double(i) + 1));
    }
  }
};

/// Adam and AdamW steps: step 3, weight decay coupled and decoupled.
inline std::vector<kernels::shared::AdamStep> adam_steps() {
  auto step = [](double weight_decay, long long decoupled) {
    return kernels::shared::AdamStep{1e-3,
                                     0.9,
                                     0.999,
                                     1e-8,
                                     weight_decay,
                                     1 - 0.9 * 0.9 * 0.9,
                                     1 - 0.999 * 0.999 * 0.999,
                                     decoupled,
                                     /*steps=*/0,
                                     /*first_power=*/0,
                                     /*second_power=*/0};
  };
  return {step(0.0, 0), step(0.01, 0), step(0.01, 1)};
}

inline std::vector<kernels::shared::SgdStep> sgd_steps() {
  return {{0.01, 0.0, 0.0}, {0.01, 0.9, 1e-4}};
}

}  // namespace meshtensor::testing
