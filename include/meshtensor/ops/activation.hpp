#pragma once
// Activations: relu, leaky relu, sigmoid, GELU, SiLU, softmax and log-softmax over a named dim (its
// max and sum all-reduced when the dim is split), and dropout with masks that do not depend on the
// layout.

#include <cmath>
#include <cstdint>
#include <string>
#include <string_view>

#include "meshtensor/ops/broadcast.hpp"
#include "meshtensor/ops/detail/dim_of.hpp"
#include "meshtensor/ops/elementwise.hpp"
#include "meshtensor/ops/reduce.hpp"
#include "meshtensor/tensor/random.hpp"

namespace meshtensor {

template <class T>
Tensor<T> relu(const Tensor<T>& x) {
  return detail::unary(x, detail::unary_op<detail::UnaryOp::relu, T>(),
                       detail::unary_op<detail::UnaryOp::positive_step, T>(),
                       detail::DerivativeOf::output);
}

template <class T>
Tensor<T> leaky_relu(const Tensor<T>& x, T slope = T(0.01)) {
  return detail::unary(x, detail::unary_op<detail::UnaryOp::leaky_relu>(slope),
                       detail::unary_op<detail::UnaryOp::leaky_step>(slope),
                       detail::DerivativeOf::input);
}

template <class T>
Tensor<T> sigmoid(const Tensor<T>& x) {
  return detail::unary(x, detail::unary_op<detail::UnaryOp::sigmoid, T>(),
                       detail::unary_op<detail::UnaryOp::sigmoid_derivative, T>(),
                       detail::DerivativeOf::output);
}

/// How gelu computes Phi(x): exactly, with erf, or with PyTorch's and BERT's tanh approximation.
enum class GeluApproximation { none, tanh };

/// x Phi(x), Phi the standard normal's distribution function (PyTorch's `gelu`, the same
/// `approximate` choice).
template <class T>
Tensor<T> gelu(const Tensor<T>& x, GeluApproximation approximate = GeluApproximation::none) {
  if (approximate == GeluApproximation::tanh)
    return detail::unary(x, detail::unary_op<detail::UnaryOp::gelu_tanh, T>(),
                         detail::unary_op<detail::UnaryOp::gelu_tanh_derivative, T>(),
                         detail::DerivativeOf::input);
  return detail::unary(x, detail::unary_op<detail::UnaryOp::gelu, T>(),
                       detail::unary_op<detail::UnaryOp::gelu_derivative, T>(),
                       detail::DerivativeOf::input);
}

/// x sigmoid(x), also called swish.
template <class T>
Tensor<T> silu(const Tensor<T>& x) {
  return detail::unary(x, detail::unary_op<detail::UnaryOp::silu, T>(),
                       detail::unary_op<detail::UnaryOp::silu_derivative, T>(),
                       detail::DerivativeOf::input);
}

/// log(softmax(x)) over `dim`, computed stably as x - max - log(sum(exp(x - max))). Backward keeps
/// the output alone: dx = g - softmax * sum(g).
template <class T>
Tensor<T> log_softmax(const Tensor<T>& x, const std::string& dim) {
  detail::position_in("log_softmax", x, dim);
  Tensor<T> out;
  {
    autodiff::NoGrad no_grad(x.mesh());
    const auto shifted = x - reduce_max(x, dim);
    out = shifted - log(reduce_sum(exp(shifted), dim));
  }
  autodiff::record(out, {x}, [y = out.detach(), dim](const Tensor<T>& g, const std::vector<bool>&) {
    return std::vector<Tensor<T>>{g - exp(y) * reduce_sum(g, dim)};
  });
  return out;
}

/// exp(x) / sum(exp(x)) over `dim`. Backward keeps the output alone: dx = y (g - sum(g y)).
template <class T>
Tensor<T> softmax(const Tensor<T>& x, const std::string& dim) {
  detail::position_in("softmax", x, dim);
  Tensor<T> out;
  {
    autodiff::NoGrad no_grad(x.mesh());
    const auto e = exp(x - reduce_max(x, dim));
    out = e / reduce_sum(e, dim);
  }
  autodiff::record(out, {x}, [y = out.detach(), dim](const Tensor<T>& g, const std::vector<bool>&) {
    return std::vector<Tensor<T>>{y * (g - reduce_sum(g * y, dim))};
  });
  return out;
}

/// Zeroes each element with probability `rate` and scales the rest by 1 / (1 - rate). The mask is
/// a function of (seed, name, global index): the same on any layout.
template <class T>
Tensor<T> dropout(const Tensor<T>& x, double rate, std::uint64_t seed, std::string_view name) {
  if (rate < 0 || rate >= 1)
    throw Error("dropout: the rate must be in [0, 1), got " + std::to_string(rate));
  if (rate == 0) return x;
  const RandomStream stream(seed, name);
  const T keep_scale = T(1.0 / (1.0 - rate));
  auto mask = generate<T>(x.mesh(), x.shape(), x.layout().layout(), [&](const Index& i) {
    return stream.uniform(i) < rate ? T(0) : keep_scale;
  });
  return x * mask;
}

}  // namespace meshtensor
