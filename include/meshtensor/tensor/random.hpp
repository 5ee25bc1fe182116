#pragma once
// Layout-independent randomness: every random value is a pure function of (seed, stream, global
// index) — a counter-based generator — so the same seed gives the same global tensor on any mesh
// and layout, and each processor draws only its own block.

#include <cmath>
#include <cstdint>
#include <string>
#include <string_view>

#include "meshtensor/tensor/create.hpp"

namespace meshtensor {

namespace detail {
// SplitMix64's finaliser: a bijective mix with full avalanche.
inline std::uint64_t mix(std::uint64_t z) {
  z += 0x9e3779b97f4a7c15ull;
  z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ull;
  z = (z ^ (z >> 27)) * 0x94d049bb133111ebull;
  return z ^ (z >> 31);
}
inline std::uint64_t hash_name(std::string_view name) {
  std::uint64_t h = 1469598103934665603ull;  // FNV-1a
  for (unsigned char c : name) h = (h ^ c) * 1099511628211ull;
  return h;
}
inline std::uint64_t linear_index(const Index& i) {
  std::uint64_t linear = 0;
  for (std::size_t d = 0; d < i.coords().size(); ++d)
    linear =
        linear * static_cast<std::uint64_t>(i.shape()[d].size) + static_cast<std::uint64_t>(i[d]);
  return linear;
}
}  // namespace detail

/// The random stream of one named use (a parameter's initialiser, a dropout layer, a data
/// generator) under a seed. `uniform(i)` and `normal(i)` are pure functions of the global index.
class RandomStream {
 public:
  RandomStream(std::uint64_t seed, std::string_view name)
      : key_(detail::mix(seed ^ detail::mix(detail::hash_name(name)))) {}

  /// A 64-bit value for counter `counter`.
  std::uint64_t bits(std::uint64_t counter) const {
    return detail::mix(key_ ^ detail::mix(counter));
  }
  /// Uniform in [0, 1), 53 random bits.
  double uniform(std::uint64_t counter) const { return (bits(counter) >> 11) * 0x1.0p-53; }
  /// Standard normal (Box-Muller from two independent uniforms).
  double normal(std::uint64_t counter) const {
    const double u1 = (bits(2 * counter) >> 11) * 0x1.0p-53 + 0x1.0p-54;  // never 0
    const double u2 = uniform(2 * counter + 1);
    return std::sqrt(-2.0 * std::log(u1)) * std::cos(6.283185307179586 * u2);
  }
  double uniform(const Index& i) const { return uniform(detail::linear_index(i)); }
  double normal(const Index& i) const { return normal(detail::linear_index(i)); }

 private:
  std::uint64_t key_;
};

/// Uniform values in [low, high), the same global tensor on any layout for a given seed and name.
template <class T>
Tensor<T> random_uniform(Mesh& mesh, const Shape& shape, const Layout& layout, std::uint64_t seed,
                         std::string_view name, double low = 0.0, double high = 1.0) {
  const RandomStream stream(seed, name);
  return generate<T>(mesh, shape, layout, [&](const Index& i) {
    return static_cast<T>(low + (high - low) * stream.uniform(i));
  });
}

/// Normal values with this mean and standard deviation, layout-independent like random_uniform.
template <class T>
Tensor<T> random_normal(Mesh& mesh, const Shape& shape, const Layout& layout, std::uint64_t seed,
                        std::string_view name, double mean = 0.0, double stddev = 1.0) {
  const RandomStream stream(seed, name);
  return generate<T>(mesh, shape, layout, [&](const Index& i) {
    return static_cast<T>(mean + stddev * stream.normal(i));
  });
}

}  // namespace meshtensor
