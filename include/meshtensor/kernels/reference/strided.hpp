#pragma once
// The loop under every reference kernel: visit each index of a box in row-major order while keeping
// one linear offset per operand, each operand with its own strides (0 where it is broadcast).

#include <array>
#include <cstdint>
#include <vector>

namespace meshtensor::kernels {

using Sizes = std::vector<std::int64_t>;
using Strides = std::vector<std::int64_t>;

/// Row-major strides (in elements) of an array with these sizes.
inline Strides row_major_strides(const Sizes& sizes) {
  Strides strides(sizes.size());
  std::int64_t stride = 1;
  for (std::size_t d = sizes.size(); d-- > 0;) {
    strides[d] = stride;
    stride *= sizes[d];
  }
  return strides;
}

inline std::int64_t num_elements(const Sizes& sizes) {
  std::int64_t n = 1;
  for (auto s : sizes) n *= s;
  return n;
}

/**
 * Calls `f(offsets)` for every index i of `sizes` (row-major), where
 * offsets[k] = sum_d i[d] * strides[k][d]. Nothing is visited if a size is 0; a rank-0 box is
 * visited once with all offsets 0.
 */
template <std::size_t N, class F>
void for_each_offset(const Sizes& sizes, const std::array<Strides, N>& strides, F&& f) {
  const int rank = static_cast<int>(sizes.size());
  for (auto s : sizes)
    if (s == 0) return;
  std::array<std::int64_t, N> base{};
  if (rank == 0) {
    f(base);
    return;
  }
  std::vector<std::int64_t> index(rank, 0);
  const std::int64_t inner = sizes[rank - 1];
  std::array<std::int64_t, N> inner_stride{};
  for (std::size_t k = 0; k < N; ++k) inner_stride[k] = strides[k][rank - 1];
  while (true) {
    auto offsets = base;
    for (std::int64_t i = 0; i < inner; ++i) {
      f(offsets);
      for (std::size_t k = 0; k < N; ++k) offsets[k] += inner_stride[k];
    }
    int d = rank - 2;
    for (; d >= 0; --d) {
      for (std::size_t k = 0; k < N; ++k) base[k] += strides[k][d];
      if (++index[d] < sizes[d]) break;
      for (std::size_t k = 0; k < N; ++k) base[k] -= strides[k][d] * sizes[d];
      index[d] = 0;
    }
    if (d < 0) return;
  }
}

}  // namespace meshtensor::kernels
