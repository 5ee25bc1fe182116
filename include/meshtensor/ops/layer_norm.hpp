#pragma once
// The transformer's normalisations over named dims (the model dim, or several): layer norm and RMS
// norm. Their statistics are sums over those dims, all-reduced where a mesh axis splits them, so a
// split model dim gives one processor's result.

#include <string>
#include <type_traits>

#include "meshtensor/core/bfloat16.hpp"
#include "meshtensor/core/dim_names.hpp"
#include "meshtensor/ops/cast.hpp"
#include "meshtensor/ops/detail/dim_of.hpp"
#include "meshtensor/ops/elementwise.hpp"
#include "meshtensor/ops/norm.hpp"
#include "meshtensor/ops/reduce.hpp"

namespace meshtensor {
namespace detail {
template <class T>
void require_norm_operands(const std::string& op, const Tensor<T>& x, const DimNames& dims,
                           const Tensor<T>& gamma) {
  if (dims.empty()) throw ShapeError(op + ": name the dims to normalise over, e.g. \"model\"");
  require_dims(op, x, dims);
  require_dims_of_x(op, "gamma", gamma, x);
}
}  // namespace detail

/**
 * (x - mean) / sqrt(variance + epsilon) * gamma + beta, the mean and (biased) variance taken over
 * `dims` for each index of the other dims (PyTorch's LayerNorm over its last dims). gamma and beta
 * have some of x's dims, usually exactly `dims`.
 *
 * ```cpp
 * auto h = layer_norm(x, "model", gamma, beta);   // x [batch, seq, model], gamma [model]
 * ```
 */
template <class T>
Tensor<T> layer_norm(const Tensor<T>& x, const DimNames& dims, const Tensor<T>& gamma,
                     const Tensor<T>& beta, double epsilon = 1e-5) {
  detail::require_norm_operands("layer_norm", x, dims, gamma);
  detail::require_dims_of_x("layer_norm", "beta", beta, x);
  return normalize(x, dims, epsilon) * gamma + beta;
}

/**
 * x / sqrt(mean(x^2) + epsilon) * gamma, the mean taken over `dims` for each index of the other
 * dims (Zhang and Sennrich's RMSNorm, as in T5 and LLaMA). bfloat16 x is normalised in fp32 and
 * rounded once.
 */
template <class T>
Tensor<T> rms_norm(const Tensor<T>& x, const DimNames& dims, const Tensor<T>& gamma,
                   double epsilon = 1e-6) {
  detail::require_norm_operands("rms_norm", x, dims, gamma);
  if constexpr (std::is_same_v<T, bfloat16>) {
    return cast<T>(rms_norm(cast<float>(x), dims, cast<float>(gamma), epsilon));
  } else {
    const auto inverse_rms = T(1) / sqrt(reduce_mean(square(x), dims) + T(epsilon));
    return x * inverse_rms * gamma;
  }
}

}  // namespace meshtensor
