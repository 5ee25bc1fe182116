#pragma once
// Initialisers: the usual distributions scaled by fan-in and fan-out, drawn from the
// layout-independent random streams, so a seed gives the same weights on any mesh and layout.

#include <cmath>
#include <cstdint>
#include <string>

#include "meshtensor/core/dim_names.hpp"
#include "meshtensor/tensor/random.hpp"

namespace meshtensor::nn {

/// The product of the sizes of the named dims of `shape`.
inline std::int64_t fan(const Shape& shape, const DimNames& dims) {
  std::int64_t n = 1;
  for (const auto& d : dims) n *= shape.dim(d).size;
  return n;
}

/// Normal with standard deviation sqrt(2 / fan_in) (He et al., for ReLU networks).
template <class T>
Tensor<T> he_normal(Mesh& mesh, const Shape& shape, const Layout& layout, std::uint64_t seed,
                    const std::string& name, std::int64_t fan_in) {
  return random_normal<T>(mesh, shape, layout, seed, name, 0.0, std::sqrt(2.0 / double(fan_in)));
}

/// Uniform in ±sqrt(6 / (fan_in + fan_out)) (Glorot and Bengio).
template <class T>
Tensor<T> xavier_uniform(Mesh& mesh, const Shape& shape, const Layout& layout, std::uint64_t seed,
                         const std::string& name, std::int64_t fan_in, std::int64_t fan_out) {
  const double a = std::sqrt(6.0 / double(fan_in + fan_out));
  return random_uniform<T>(mesh, shape, layout, seed, name, -a, a);
}

/// Normal with standard deviation sqrt(2 / (fan_in + fan_out)) (Glorot and Bengio).
template <class T>
Tensor<T> xavier_normal(Mesh& mesh, const Shape& shape, const Layout& layout, std::uint64_t seed,
                        const std::string& name, std::int64_t fan_in, std::int64_t fan_out) {
  return random_normal<T>(mesh, shape, layout, seed, name, 0.0,
                          std::sqrt(2.0 / double(fan_in + fan_out)));
}

/// Uniform in ±sqrt(6 / fan_in) (He et al., uniform variant).
template <class T>
Tensor<T> he_uniform(Mesh& mesh, const Shape& shape, const Layout& layout, std::uint64_t seed,
                     const std::string& name, std::int64_t fan_in) {
  const double a = std::sqrt(6.0 / double(fan_in));
  return random_uniform<T>(mesh, shape, layout, seed, name, -a, a);
}

}  // namespace meshtensor::nn
