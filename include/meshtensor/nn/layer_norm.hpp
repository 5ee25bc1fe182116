#pragma once
// The transformer's normalisation layers over named dims, with their learned scale (and shift).

#include <string>

#include "meshtensor/nn/parameters.hpp"
#include "meshtensor/ops/cast.hpp"
#include "meshtensor/ops/layer_norm.hpp"
#include "meshtensor/tensor/create.hpp"

namespace meshtensor::nn {

/**
 * layer_norm over the dims of `normalized` (usually the model dim) with gamma [normalized] = 1 and
 * beta [normalized] = 0; `layout` splits them as the activations' normalised dims are split.
 *
 * ```cpp
 * nn::LayerNorm<float> norm(mesh, params, "block0/norm", Shape{Dim("model", 512)});
 * auto h = norm(x);   // x [batch, seq, model]
 * ```
 */
template <class T = float>
class LayerNorm {
 public:
  LayerNorm(Mesh& mesh, Parameters<T>& params, const std::string& name, const Shape& normalized,
            double epsilon = 1e-5, const Layout& layout = {})
      : dims_(normalized),
        epsilon_(epsilon),
        gamma_(params.add(name + "/gamma", full<T>(mesh, normalized, layout, T(1)))),
        beta_(params.add(name + "/beta", zeros<T>(mesh, normalized, layout))) {}

  /// bfloat16 x takes gamma and beta rounded to bfloat16 (their gradients summed into T).
  template <class A>
  Tensor<A> operator()(const Tensor<A>& x) const {
    return layer_norm(x, dims_, cast<A>(gamma_), cast<A>(beta_), epsilon_);
  }

  const Tensor<T>& gamma() const { return gamma_; }
  const Tensor<T>& beta() const { return beta_; }

 private:
  DimNames dims_;
  double epsilon_;
  Tensor<T> gamma_, beta_;
};

/// rms_norm over the dims of `normalized` with gamma [normalized] = 1, as LayerNorm.
template <class T = float>
class RmsNorm {
 public:
  RmsNorm(Mesh& mesh, Parameters<T>& params, const std::string& name, const Shape& normalized,
          double epsilon = 1e-6, const Layout& layout = {})
      : dims_(normalized),
        epsilon_(epsilon),
        gamma_(params.add(name + "/gamma", full<T>(mesh, normalized, layout, T(1)))) {}

  template <class A>
  Tensor<A> operator()(const Tensor<A>& x) const {
    return rms_norm(x, dims_, cast<A>(gamma_), epsilon_);
  }

  const Tensor<T>& gamma() const { return gamma_; }

 private:
  DimNames dims_;
  double epsilon_;
  Tensor<T> gamma_;
};

}  // namespace meshtensor::nn
