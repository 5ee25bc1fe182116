#pragma once
// Elementwise ops. Binary ops align operands by dim name and broadcast over the dims one operand
// lacks: [batch, x, c] + [c] adds the per-channel vector everywhere. The result has the first
// operand's dims, then the second's that the first lacks. Nothing is communicated unless the two
// operands are split differently.

#include <array>
#include <cmath>
#include <string>
#include <vector>

#include <xtensor/xarray.hpp>

#include "meshtensor/kernels/reference/strided.hpp"
#include "meshtensor/ops/align.hpp"
#include "meshtensor/tensor/tensor.hpp"

namespace meshtensor {

/// f applied to every element; the layout is kept.
template <class T, class F>
Tensor<T> map(const Tensor<T>& t, F&& f) {
  xt::xarray<T> out = xt::xarray<T>::from_shape(t.local().shape());
  const T* in = t.local().data();
  T* o = out.data();
  const std::size_t n = out.size();
  for (std::size_t i = 0; i < n; ++i) o[i] = static_cast<T>(f(in[i]));
  return Tensor<T>(t.mesh(), t.layout(), std::move(out));
}

/// f applied to every pair of elements with the same global index, broadcasting missing dims.
template <class T, class F>
Tensor<T> zip(const Tensor<T>& a, const Tensor<T>& b, F&& f, const std::string& op = "zip") {
  detail::check_same_mesh<T>(op, {&a, &b});
  const Shape shape = detail::merged_shape(op, {&a.shape(), &b.shape()});
  const Layout common = detail::common_layout({&a.layout(), &b.layout()});
  auto operands = detail::aligned<T>({&a, &b}, common);
  TensorLayout layout(shape, a.mesh().shape(), common);
  const auto sizes = layout.block(a.mesh().coord()).sizes();
  xt::xarray<T> out = xt::xarray<T>::from_shape(detail::to_xshape(sizes));
  const auto names = shape.names();
  std::array<kernels::Strides, 3> strides{
      detail::strides_over(operands[0].shape(), operands[0].block().sizes(), names),
      detail::strides_over(operands[1].shape(), operands[1].block().sizes(), names),
      kernels::row_major_strides(sizes)};
  const T* pa = operands[0].local().data();
  const T* pb = operands[1].local().data();
  T* po = out.data();
  kernels::for_each_offset<3>(sizes, strides, [&](const std::array<std::int64_t, 3>& o) {
    po[o[2]] = static_cast<T>(f(pa[o[0]], pb[o[1]]));
  });
  return Tensor<T>(a.mesh(), std::move(layout), std::move(out));
}

// clang-format off
template <class T> Tensor<T> operator+(const Tensor<T>& a, const Tensor<T>& b) { return zip(a, b, [](T x, T y) { return x + y; }, "add"); }
template <class T> Tensor<T> operator-(const Tensor<T>& a, const Tensor<T>& b) { return zip(a, b, [](T x, T y) { return x - y; }, "subtract"); }
template <class T> Tensor<T> operator*(const Tensor<T>& a, const Tensor<T>& b) { return zip(a, b, [](T x, T y) { return x * y; }, "multiply"); }
template <class T> Tensor<T> operator/(const Tensor<T>& a, const Tensor<T>& b) { return zip(a, b, [](T x, T y) { return x / y; }, "divide"); }
template <class T> Tensor<T> maximum(const Tensor<T>& a, const Tensor<T>& b) { return zip(a, b, [](T x, T y) { return x < y ? y : x; }, "maximum"); }
template <class T> Tensor<T> minimum(const Tensor<T>& a, const Tensor<T>& b) { return zip(a, b, [](T x, T y) { return y < x ? y : x; }, "minimum"); }

template <class T> Tensor<T> operator+(const Tensor<T>& a, T s) { return map(a, [s](T x) { return x + s; }); }
template <class T> Tensor<T> operator-(const Tensor<T>& a, T s) { return map(a, [s](T x) { return x - s; }); }
template <class T> Tensor<T> operator*(const Tensor<T>& a, T s) { return map(a, [s](T x) { return x * s; }); }
template <class T> Tensor<T> operator/(const Tensor<T>& a, T s) { return map(a, [s](T x) { return x / s; }); }
template <class T> Tensor<T> operator+(T s, const Tensor<T>& a) { return map(a, [s](T x) { return s + x; }); }
template <class T> Tensor<T> operator-(T s, const Tensor<T>& a) { return map(a, [s](T x) { return s - x; }); }
template <class T> Tensor<T> operator*(T s, const Tensor<T>& a) { return map(a, [s](T x) { return s * x; }); }
template <class T> Tensor<T> operator/(T s, const Tensor<T>& a) { return map(a, [s](T x) { return s / x; }); }
template <class T> Tensor<T> operator-(const Tensor<T>& a) { return map(a, [](T x) { return -x; }); }

template <class T> Tensor<T> abs(const Tensor<T>& a) { return map(a, [](T x) { return x < T(0) ? -x : x; }); }
template <class T> Tensor<T> square(const Tensor<T>& a) { return map(a, [](T x) { return x * x; }); }
template <class T> Tensor<T> exp(const Tensor<T>& a) { return map(a, [](T x) { return std::exp(x); }); }
template <class T> Tensor<T> log(const Tensor<T>& a) { return map(a, [](T x) { return std::log(x); }); }
template <class T> Tensor<T> sqrt(const Tensor<T>& a) { return map(a, [](T x) { return std::sqrt(x); }); }
template <class T> Tensor<T> tanh(const Tensor<T>& a) { return map(a, [](T x) { return std::tanh(x); }); }
template <class T> Tensor<T> pow(const Tensor<T>& a, T p) { return map(a, [p](T x) { return std::pow(x, p); }); }
// clang-format on

}  // namespace meshtensor
