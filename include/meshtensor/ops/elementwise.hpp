#pragma once
// Elementwise ops. Binary ops align operands by dim name and broadcast over the dims one operand
// lacks: [batch, x, c] + [c] adds the per-channel vector everywhere. The result has the first
// operand's dims, then the second's that the first lacks. Nothing is communicated unless the two
// operands are split differently. Every op here is differentiable.

#include <array>
#include <cmath>
#include <string>
#include <tuple>
#include <type_traits>
#include <vector>

#include <xtensor/xarray.hpp>

#include "meshtensor/autodiff/tape.hpp"
#include "meshtensor/kernels/common/strided.hpp"
#include "meshtensor/kernels/elementwise.hpp"
#include "meshtensor/memory/array.hpp"
#include "meshtensor/ops/align.hpp"
#include "meshtensor/ops/broadcast.hpp"
#include "meshtensor/ops/cast.hpp"
#include "meshtensor/tensor/new_block.hpp"
#include "meshtensor/tensor/tensor.hpp"

namespace meshtensor {
namespace detail {
using kernels::BinaryOp;
using kernels::UnaryOp;

// The built-in ops (kernels/common/elementwise_formulas.hpp): unary op `code` with scalar operand
// s, and binary op `code`.
template <int code, class T>
kernels::Unary<T, code> unary_op(T s = T(0)) {
  return {s};
}
template <int code, class T>
kernels::Binary<T, code> binary_op() {
  return {};
}

template <class T, class F>
Tensor<T> map_values(const Tensor<T>& t, F&& f) {
  Array<T> out = Array<T>::from_shape(t.array().shape());
  const T* in = t.array().data();
  T* o = out.data();
  const auto n = static_cast<std::int64_t>(out.size());
  kernels::map(f, in, o, n);
  return Tensor<T>(t.mesh(), t.layout(), std::move(out));
}

// f of the elements of a and b with the same global index, broadcasting missing dims. With
// `a_consumed`, a's block holds the result when a has the result's layout and no other owner.
template <class T, class F>
Tensor<T> zip_values(const Tensor<T>& a, const Tensor<T>& b, F&& f, const std::string& op,
                     Tensor<T>* a_consumed = nullptr) {
  check_same_mesh<T>(op, {&a, &b});
  const Shape shape = merged_shape(op, {&a.shape(), &b.shape()});
  const Layout common = common_layout(a.mesh(), op, {&a.layout(), &b.layout()});
  TensorLayout layout(shape, a.mesh().shape(), common);
  const Block block = layout.block(a.mesh().coord());
  const auto sizes = block.sizes();
  const bool in_place = a_consumed && a.layout() == layout && a.sole_owner();
  // A broadcast can make a block bigger than either operand's: one too big names its tensor.
  Array<T> out = in_place ? a_consumed->release_local() : new_block<T>(a.mesh(), layout, block);
  auto operands = aligned<T>({&a, &b}, common);  // (a, without its block if it went to `out`)
  const auto names = shape.names();
  std::array<kernels::Strides, 3> strides{
      strides_over(operands[0].shape(), operands[0].block().sizes(), names),
      strides_over(operands[1].shape(), operands[1].block().sizes(), names),
      kernels::row_major_strides(sizes)};
  const T* pa = in_place ? out.data() : operands[0].array().data();
  const T* pb = operands[1].array().data();
  T* po = out.data();
  kernels::zip(f, sizes, strides, pa, pb, po);
  return Tensor<T>(a.mesh(), std::move(layout), std::move(out));
}

// g times d(x) elementwise, where x has g's layout: the gradient of a unary op.
template <class T, class D>
Tensor<T> times_derivative(const Tensor<T>& g, const Tensor<T>& x, D&& derivative) {
  Array<T> out = Array<T>::from_shape(g.array().shape());
  const T* pg = g.array().data();
  const T* px = x.array().data();
  T* o = out.data();
  const auto n = static_cast<std::int64_t>(out.size());
  kernels::times_derivative(derivative, pg, px, o, n);
  return Tensor<T>(g.mesh(), g.layout(), std::move(out));
}

enum class DerivativeOf { input, output };

// A differentiable unary op: `derivative` takes the input or the output element, as `of` says.
template <class T, class F, class D>
Tensor<T> unary(const Tensor<T>& t, F f, D derivative, DerivativeOf of) {
  auto out = map_values(t, f);
  const Tensor<T> keep = of == DerivativeOf::input ? t.detach() : out.detach();  // data, no history
  autodiff::record(out, {t}, [keep, derivative](const Tensor<T>& g, const std::vector<bool>&) {
    return std::vector<Tensor<T>>{times_derivative(g, keep, derivative)};
  });
  return out;
}

}  // namespace detail

/// f applied to every element, for inputs that need no gradient (the derivative is unknown). f (and
/// df, f of zip) may run on several of the processor's compute threads at once: keep it pure.
template <class T, class F>
Tensor<T> map(const Tensor<T>& t, F&& f) {
  if (t.requires_grad() && autodiff::tape(t.mesh()).recording())
    throw Error("map: tensor " + t.layout().to_string() +
                " needs a gradient but map(t, f) has no derivative; use map(t, f, df) or detach()");
  return detail::map_values(t, std::forward<F>(f));
}

/// f applied to every element, differentiable with df(x) = f'(x).
template <class T, class F, class D>
Tensor<T> map(const Tensor<T>& t, F f, D df) {
  return detail::unary(t, f, df, detail::DerivativeOf::input);
}

/// f applied to every pair of elements with the same global index, broadcasting missing dims; for
/// inputs that need no gradient.
template <class T, class F>
Tensor<T> zip(const Tensor<T>& a, const Tensor<T>& b, F&& f, const std::string& op = "zip") {
  if ((a.requires_grad() || b.requires_grad()) && autodiff::tape(a.mesh()).recording())
    throw Error(op + ": zip(a, b, f) has no derivative; use the arithmetic operators or detach()");
  return detail::zip_values(a, b, std::forward<F>(f), op);
}

/// The same tensor, through which no gradient flows.
template <class T>
Tensor<T> stop_gradient(const Tensor<T>& t) {
  return t.detach();
}

namespace detail {
template <class T>
Tensor<T> add(const Tensor<T>& a, const Tensor<T>& b, Tensor<T>* a_consumed) {
  auto out = zip_values(a, b, binary_op<detail::BinaryOp::add, T>(), "add", a_consumed);
  autodiff::record(
      out, {a, b},
      [la = a.layout(), lb = b.layout()](const Tensor<T>& g, const std::vector<bool>& need) {
        return std::vector<Tensor<T>>{need[0] ? sum_to(g, la) : Tensor<T>(),
                                      need[1] ? sum_to(g, lb) : Tensor<T>()};
      });
  return out;
}
}  // namespace detail

namespace detail {
// A bfloat16 tensor plus an fp32 one (a bias or shift kept in fp32): added in bfloat16, b rounded
// once; b's gradient summed in double and rounded once into fp32.
template <class T, class W>
Tensor<T> add_mixed(const Tensor<T>& a, const Tensor<W>& b, Tensor<T>* a_consumed) {
  auto out =
      zip_values(a, converted<T>(b), binary_op<detail::BinaryOp::add, T>(), "add", a_consumed);
  autodiff::record_mixed(
      out, std::make_tuple(a, b),
      [la = a.layout(), lb = b.layout()](const Tensor<T>& g, const std::array<bool, 2>& need) {
        return std::make_tuple(need[0] ? sum_to(g, la) : Tensor<T>(),
                               need[1] ? sum_to_as<W>(g, lb) : Tensor<W>());
      });
  return out;
}
template <class T, class W>
using if_bf16_with_fp32 =
    std::enable_if_t<std::is_same_v<T, bfloat16> && std::is_same_v<W, float>, int>;
}  // namespace detail

template <class T>
Tensor<T> operator+(const Tensor<T>& a, const Tensor<T>& b) {
  return detail::add<T>(a, b, nullptr);
}

/// bfloat16 + fp32 (activations plus a parameter kept in fp32): a bfloat16 result, the fp32
/// operand's gradient in fp32.
template <class T, class W, detail::if_bf16_with_fp32<T, W> = 0>
Tensor<T> operator+(const Tensor<T>& a, const Tensor<W>& b) {
  return detail::add_mixed(a, b, nullptr);
}
template <class T, class W, detail::if_bf16_with_fp32<T, W> = 0>
Tensor<T> operator+(Tensor<T>&& a, const Tensor<W>& b) {
  return detail::add_mixed(a, b, &a);
}

/// a + b into a's block when a is an rvalue nothing else holds (`std::move(y) + bias`).
template <class T>
Tensor<T> operator+(Tensor<T>&& a, const Tensor<T>& b) {
  return detail::add(a, b, &a);
}

template <class T>
Tensor<T> operator-(const Tensor<T>& a, const Tensor<T>& b) {
  auto out =
      detail::zip_values(a, b, detail::binary_op<detail::BinaryOp::subtract, T>(), "subtract");
  autodiff::record(
      out, {a, b},
      [la = a.layout(), lb = b.layout()](const Tensor<T>& g, const std::vector<bool>& need) {
        return std::vector<Tensor<T>>{
            need[0] ? sum_to(g, la) : Tensor<T>(),
            need[1]
                ? sum_to(detail::map_values(g, detail::unary_op<detail::UnaryOp::negate, T>()), lb)
                : Tensor<T>()};
      });
  return out;
}

template <class T>
Tensor<T> operator*(const Tensor<T>& a, const Tensor<T>& b) {
  auto out =
      detail::zip_values(a, b, detail::binary_op<detail::BinaryOp::multiply, T>(), "multiply");
  // Each operand's gradient needs the other operand only: keep just what will be needed (a loss
  // weighting predictions by labels keeps the labels, not the predictions).
  autodiff::record(out, {a, b},
                   [kept_a = b.requires_grad() ? a.detach() : Tensor<T>(),
                    kept_b = a.requires_grad() ? b.detach() : Tensor<T>(), la = a.layout(),
                    lb = b.layout()](const Tensor<T>& g, const std::vector<bool>& need) {
                     return std::vector<Tensor<T>>{need[0] ? sum_to(g * kept_b, la) : Tensor<T>(),
                                                   need[1] ? sum_to(g * kept_a, lb) : Tensor<T>()};
                   });
  return out;
}

template <class T>
Tensor<T> operator/(const Tensor<T>& a, const Tensor<T>& b) {
  auto out = detail::zip_values(a, b, detail::binary_op<detail::BinaryOp::divide, T>(), "divide");
  autodiff::record(
      out, {a, b},
      [a = a.detach(), b = b.detach()](const Tensor<T>& g, const std::vector<bool>& need) {
        auto ga = need[0] ? sum_to(g / b, a.layout()) : Tensor<T>();
        Tensor<T> gb;
        if (need[1])
          gb = sum_to(
              detail::map_values(g * a / (b * b), detail::unary_op<detail::UnaryOp::negate, T>()),
              b.layout());
        return std::vector<Tensor<T>>{ga, gb};
      });
  return out;
}

namespace detail {
// max or min of two tensors: `pick` is BinaryOp::larger or smaller, `chosen` its mask (1 where a
// is picked). The gradient goes to the operand that was picked (to a on ties).
template <int pick, int chosen, class T>
Tensor<T> choose(const Tensor<T>& a, const Tensor<T>& b, const std::string& name) {
  auto out = zip_values(a, b, binary_op<pick, T>(), name);
  autodiff::record(
      out, {a, b},
      [a = a.detach(), b = b.detach()](const Tensor<T>& g, const std::vector<bool>& need) {
        auto mask = zip_values(a, b, binary_op<chosen, T>(), "mask");
        auto ga = need[0] ? sum_to(g * mask, a.layout()) : Tensor<T>();
        auto gb = need[1]
                      ? sum_to(g * map_values(mask, unary_op<UnaryOp::one_minus, T>()), b.layout())
                      : Tensor<T>();
        return std::vector<Tensor<T>>{ga, gb};
      });
  return out;
}
}  // namespace detail

template <class T>
Tensor<T> maximum(const Tensor<T>& a, const Tensor<T>& b) {
  return detail::choose<detail::BinaryOp::larger, detail::BinaryOp::larger_mask>(a, b, "maximum");
}
template <class T>
Tensor<T> minimum(const Tensor<T>& a, const Tensor<T>& b) {
  return detail::choose<detail::BinaryOp::smaller, detail::BinaryOp::smaller_mask>(a, b, "minimum");
}

/// The larger of each element and s (a NaN stays NaN); the gradient passes where the element is
/// picked, ties included, as in maximum(a, b).
template <class T>
Tensor<T> maximum(const Tensor<T>& a, T s) {
  return detail::unary(a, detail::unary_op<detail::UnaryOp::at_least>(s),
                       detail::unary_op<detail::UnaryOp::at_least_step>(s),
                       detail::DerivativeOf::input);
}
/// The smaller of each element and s (a NaN stays NaN); the gradient passes where the element is
/// picked, ties included.
template <class T>
Tensor<T> minimum(const Tensor<T>& a, T s) {
  return detail::unary(a, detail::unary_op<detail::UnaryOp::at_most>(s),
                       detail::unary_op<detail::UnaryOp::at_most_step>(s),
                       detail::DerivativeOf::input);
}
/// Each element held to [lo, hi] (torch.clamp, std::clamp for lo <= hi); the gradient passes where
/// lo <= a <= hi.
template <class T>
Tensor<T> clamp(const Tensor<T>& a, T lo, T hi) {
  return minimum(maximum(a, lo), hi);
}

/// 1 where an element differs from s, 0 where it equals it: a mask, with no gradient.
template <class T>
Tensor<T> not_equal(const Tensor<T>& a, T s) {
  return detail::map_values(a, detail::unary_op<detail::UnaryOp::unequal_mask>(s));
}

/// 1 where `a` equals `b` (aligned by name, broadcast as the other binary ops), 0 elsewhere: a
/// mask, with no gradient. `equal(logits, reduce_max(logits, "classes"))` marks each voxel's
/// predicted class.
template <class T>
Tensor<T> equal(const Tensor<T>& a, const Tensor<T>& b) {
  return detail::zip_values(a, b, detail::binary_op<detail::BinaryOp::equal_mask, T>(), "equal");
}

// Arithmetic with a scalar, and the named unary ops, each with its derivative
// (kernels/common/elementwise_formulas.hpp says what each computes).
// clang-format off
template <class T> Tensor<T> operator+(const Tensor<T>& a, T s) { return detail::unary(a, detail::unary_op<detail::UnaryOp::plus_scalar>(s), detail::unary_op<detail::UnaryOp::constant>(T(1)), detail::DerivativeOf::input); }
template <class T> Tensor<T> operator-(const Tensor<T>& a, T s) { return detail::unary(a, detail::unary_op<detail::UnaryOp::minus_scalar>(s), detail::unary_op<detail::UnaryOp::constant>(T(1)), detail::DerivativeOf::input); }
template <class T> Tensor<T> operator*(const Tensor<T>& a, T s) { return detail::unary(a, detail::unary_op<detail::UnaryOp::times_scalar>(s), detail::unary_op<detail::UnaryOp::constant>(s), detail::DerivativeOf::input); }
template <class T> Tensor<T> operator/(const Tensor<T>& a, T s) { return detail::unary(a, detail::unary_op<detail::UnaryOp::over_scalar>(s), detail::unary_op<detail::UnaryOp::constant>(T(1) / s), detail::DerivativeOf::input); }
template <class T> Tensor<T> operator+(T s, const Tensor<T>& a) { return a + s; }
template <class T> Tensor<T> operator-(T s, const Tensor<T>& a) { return detail::unary(a, detail::unary_op<detail::UnaryOp::scalar_minus>(s), detail::unary_op<detail::UnaryOp::constant>(T(-1)), detail::DerivativeOf::input); }
template <class T> Tensor<T> operator*(T s, const Tensor<T>& a) { return a * s; }
template <class T> Tensor<T> operator/(T s, const Tensor<T>& a) { return detail::unary(a, detail::unary_op<detail::UnaryOp::scalar_over>(s), detail::unary_op<detail::UnaryOp::minus_scalar_over_square>(s), detail::DerivativeOf::input); }
template <class T> Tensor<T> operator-(const Tensor<T>& a) { return detail::unary(a, detail::unary_op<detail::UnaryOp::negate, T>(), detail::unary_op<detail::UnaryOp::constant>(T(-1)), detail::DerivativeOf::input); }

template <class T> Tensor<T> abs(const Tensor<T>& a) { return detail::unary(a, detail::unary_op<detail::UnaryOp::absolute, T>(), detail::unary_op<detail::UnaryOp::sign, T>(), detail::DerivativeOf::input); }
template <class T> Tensor<T> square(const Tensor<T>& a) { return detail::unary(a, detail::unary_op<detail::UnaryOp::square, T>(), detail::unary_op<detail::UnaryOp::twice, T>(), detail::DerivativeOf::input); }
template <class T> Tensor<T> exp(const Tensor<T>& a) { return detail::unary(a, detail::unary_op<detail::UnaryOp::exponential, T>(), detail::unary_op<detail::UnaryOp::identity, T>(), detail::DerivativeOf::output); }
template <class T> Tensor<T> log(const Tensor<T>& a) { return detail::unary(a, detail::unary_op<detail::UnaryOp::logarithm, T>(), detail::unary_op<detail::UnaryOp::reciprocal, T>(), detail::DerivativeOf::input); }
template <class T> Tensor<T> sqrt(const Tensor<T>& a) { return detail::unary(a, detail::unary_op<detail::UnaryOp::square_root, T>(), detail::unary_op<detail::UnaryOp::half_over, T>(), detail::DerivativeOf::output); }
template <class T> Tensor<T> tanh(const Tensor<T>& a) { return detail::unary(a, detail::unary_op<detail::UnaryOp::hyperbolic_tangent, T>(), detail::unary_op<detail::UnaryOp::one_minus_square, T>(), detail::DerivativeOf::output); }
template <class T> Tensor<T> pow(const Tensor<T>& a, T p) { return detail::unary(a, detail::unary_op<detail::UnaryOp::power>(p), detail::unary_op<detail::UnaryOp::power_derivative>(p), detail::DerivativeOf::input); }
// clang-format on

}  // namespace meshtensor
