#pragma once
// What each built-in element-wise op computes, said once for the CPU loops and the GPU kernels
// (kernels/common/shared_source.hpp): the unary ops (with one scalar operand, s) and their
// derivatives, and the binary ops. The ops in ops/ pass them as Unary / Binary functors, which
// carry their code so that a processor on a GPU can run the same formula there
// (kernels/cuda/elementwise.hpp). A map or zip over a user's function has no code and runs on the
// CPU. GELU is x erfc(-x / sqrt 2) / 2 and its tanh form x / (1 + exp(-2u)) (= x (1 + tanh u) / 2):
// no 1 + erf or 1 + tanh that loses the small values of negative x.

#include "meshtensor/kernels/common/shared_source.hpp"

namespace meshtensor::kernels {
namespace shared {
// clang-format off
MESHTENSOR_SHARED_SOURCE(elementwise_formulas_text,
struct UnaryOp {
  enum Code : int {
    plus_scalar, minus_scalar, times_scalar, over_scalar, scalar_minus, scalar_over, negate,
    absolute, square, exponential, logarithm, square_root, hyperbolic_tangent, power, relu,
    leaky_relu, sigmoid, one_minus,
    constant, minus_scalar_over_square, sign, twice, identity, reciprocal, half_over,
    one_minus_square, power_derivative, positive_step, leaky_step, at_least, at_most,
    at_least_step, at_most_step, unequal_mask, sigmoid_derivative,
    gelu, gelu_tanh, silu, gelu_derivative, gelu_tanh_derivative, silu_derivative,
    count
  };
};
struct BinaryOp {
  enum Code : int {
    add, subtract, multiply, divide, larger, smaller, larger_mask, smaller_mask, equal_mask,
    count
  };
};
template <int op, class T>
MESHTENSOR_DEVICE inline T unary_formula(T x, T s) {
  using C = decltype(x * x);
  if constexpr (op == UnaryOp::plus_scalar) return x + s;
  else if constexpr (op == UnaryOp::minus_scalar) return x - s;
  else if constexpr (op == UnaryOp::times_scalar) return x * s;
  else if constexpr (op == UnaryOp::over_scalar) return x / s;
  else if constexpr (op == UnaryOp::scalar_minus) return s - x;
  else if constexpr (op == UnaryOp::scalar_over) return s / x;
  else if constexpr (op == UnaryOp::negate) return -x;
  else if constexpr (op == UnaryOp::absolute) return x < T(0) ? -x : x;
  else if constexpr (op == UnaryOp::square) return x * x;
  else if constexpr (op == UnaryOp::exponential) return exp(x);
  else if constexpr (op == UnaryOp::logarithm) return log(x);
  else if constexpr (op == UnaryOp::square_root) return sqrt(x);
  else if constexpr (op == UnaryOp::hyperbolic_tangent) return tanh(x);
  else if constexpr (op == UnaryOp::power) return pow(x, s);
  else if constexpr (op == UnaryOp::relu) return x > T(0) ? x : T(0);
  else if constexpr (op == UnaryOp::leaky_relu) return x > T(0) ? x : T(s * x);
  else if constexpr (op == UnaryOp::sigmoid) return T(1) / (T(1) + exp(-x));
  else if constexpr (op == UnaryOp::one_minus) return T(1) - x;
  else if constexpr (op == UnaryOp::constant) return s;
  else if constexpr (op == UnaryOp::minus_scalar_over_square) return -s / (x * x);
  else if constexpr (op == UnaryOp::sign) return x < T(0) ? T(-1) : T(1);
  else if constexpr (op == UnaryOp::twice) return T(2) * x;
  else if constexpr (op == UnaryOp::identity) return x;
  else if constexpr (op == UnaryOp::reciprocal) return T(1) / x;
  else if constexpr (op == UnaryOp::half_over) return T(0.5) / x;
  else if constexpr (op == UnaryOp::one_minus_square) return T(1) - x * x;
  else if constexpr (op == UnaryOp::power_derivative) return s * pow(x, s - T(1));
  else if constexpr (op == UnaryOp::positive_step) return x > T(0) ? T(1) : T(0);
  else if constexpr (op == UnaryOp::leaky_step) return x > T(0) ? T(1) : s;
  else if constexpr (op == UnaryOp::at_least) return !(x < s) ? x : s;
  else if constexpr (op == UnaryOp::at_most) return !(s < x) ? x : s;
  else if constexpr (op == UnaryOp::at_least_step) return !(x < s) ? T(1) : T(0);
  else if constexpr (op == UnaryOp::at_most_step) return !(s < x) ? T(1) : T(0);
  else if constexpr (op == UnaryOp::unequal_mask) return x != s ? T(1) : T(0);
  else if constexpr (op == UnaryOp::sigmoid_derivative) return x * (T(1) - x);
  else if constexpr (op == UnaryOp::gelu) return C(0.5) * x * erfc(x * C(-0.70710678118654752440));
  else if constexpr (op == UnaryOp::gelu_tanh)
    return x / (C(1) + exp(C(-1.5957691216057307118) * (x + C(0.044715) * x * x * x)));
  else if constexpr (op == UnaryOp::silu) return x / (C(1) + exp(-x));
  else if constexpr (op == UnaryOp::gelu_derivative)
    return C(0.5) * erfc(x * C(-0.70710678118654752440)) +
           x * C(0.39894228040143267794) * exp(C(-0.5) * x * x);
  else if constexpr (op == UnaryOp::gelu_tanh_derivative) {
    const C sigma = C(1) / (C(1) + exp(C(-1.5957691216057307118) * (x + C(0.044715) * x * x * x)));
    return sigma * (C(1) + C(1.5957691216057307118) * x * (C(1) - sigma) *
                               (C(1) + C(0.134145) * x * x));
  }
  else {
    const C sigma = C(1) / (C(1) + exp(-x));
    return sigma * (C(1) + x * (C(1) - sigma));
  }
}
template <int op, class T>
MESHTENSOR_DEVICE inline T binary_formula(T x, T y) {
  if constexpr (op == BinaryOp::add) return x + y;
  else if constexpr (op == BinaryOp::subtract) return x - y;
  else if constexpr (op == BinaryOp::multiply) return x * y;
  else if constexpr (op == BinaryOp::divide) return x / y;
  else if constexpr (op == BinaryOp::larger) return !(x < y) ? x : y;
  else if constexpr (op == BinaryOp::smaller) return !(y < x) ? x : y;
  else if constexpr (op == BinaryOp::larger_mask) return T(!(x < y));
  else if constexpr (op == BinaryOp::smaller_mask) return T(!(y < x));
  else return T(x == y);
}
)
// clang-format on
static_assert(UnaryOp::silu_derivative + 1 == UnaryOp::count,
              "unary_formula's last branch is silu_derivative");
static_assert(BinaryOp::equal_mask + 1 == BinaryOp::count,
              "binary_formula's last branch is equal_mask");
}  // namespace shared

using shared::BinaryOp;
using shared::UnaryOp;

/// Unary op `op` with scalar operand `s`: f(x) = unary_formula<op>(x, s).
template <class T, int op>
struct Unary {
  static constexpr int code = op;
  T s = T(0);
  T operator()(T x) const { return shared::unary_formula<op>(x, s); }
};

/// Binary op `op`: f(x, y) = binary_formula<op>(x, y).
template <class T, int op>
struct Binary {
  static constexpr int code = op;
  T operator()(T x, T y) const { return shared::binary_formula<op>(x, y); }
};

/// Whether F is a Unary or Binary functor: an op the GPU kernels also run.
template <class F, class = void>
constexpr bool has_code = false;
template <class F>
constexpr bool has_code<F, decltype(void(F::code))> = true;

}  // namespace meshtensor::kernels
