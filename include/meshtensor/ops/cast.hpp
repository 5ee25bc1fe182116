#pragma once
// cast<To>(t): the same tensor in another element type (float <-> bfloat16 above all), on the same
// layout, nothing communicated. Its gradient is the output's gradient cast back, so fp32 master
// weights cast to bfloat16 for compute receive their gradient in fp32.

#include <tuple>
#include <type_traits>

#include "meshtensor/autodiff/tape.hpp"
#include "meshtensor/kernels/copy.hpp"
#include "meshtensor/memory/array.hpp"
#include "meshtensor/tensor/tensor.hpp"

namespace meshtensor {
namespace detail {
template <class To, class From>
Tensor<To> converted(const Tensor<From>& t) {
  Array<To> out = Array<To>::from_shape(t.array().shape());
  kernels::convert_values(t.array().data(), static_cast<std::int64_t>(out.size()), out.data());
  return Tensor<To>(t.mesh(), t.layout(), std::move(out));
}
}  // namespace detail

/// `t` with each element converted to To (rounded to nearest, ties to even, into bfloat16).
template <class To, class From>
Tensor<To> cast(const Tensor<From>& t) {
  if constexpr (std::is_same_v<To, From>) {
    return t;
  } else {
    Tensor<To> out = detail::converted<To>(t);
    if constexpr (is_floating_v<To> && is_floating_v<From>)
      autodiff::record_mixed(out, std::make_tuple(t), [](const Tensor<To>& grad, auto) {
        return std::make_tuple(detail::converted<From>(grad));
      });
    return out;
  }
}

}  // namespace meshtensor
