#pragma once
// Reorders the dims of a row-major array: how ops bring a block into the layout a kernel expects
// (batch, spatial dims, channels last) and back.

#include <array>
#include <cstdint>
#include <utility>
#include <vector>

#include "meshtensor/kernels/reference/strided.hpp"

namespace meshtensor::kernels {

/// A row-major array over `sizes` seen with its dims in `order`: the reordered sizes, and the
/// array's strides along them.
inline std::pair<Sizes, Strides> reordered(const Sizes& sizes,
                                           const std::vector<std::size_t>& order) {
  const auto strides = row_major_strides(sizes);
  std::pair<Sizes, Strides> out;
  for (auto d : order) {
    out.first.push_back(sizes[d]);
    out.second.push_back(strides[d]);
  }
  return out;
}

/// dst (row-major over sizes[order[0]], sizes[order[1]], ...) = src (row-major over `sizes`).
template <class T>
void permute(const T* src, const Sizes& sizes, const std::vector<std::size_t>& order, T* dst) {
  const auto [new_sizes, gathered] = reordered(sizes, order);
  for_each_offset<2>(new_sizes, {gathered, row_major_strides(new_sizes)},
                     [&](const std::array<std::int64_t, 2>& o) { dst[o[1]] = src[o[0]]; });
}

inline bool is_identity(const std::vector<std::size_t>& order) {
  for (std::size_t i = 0; i < order.size(); ++i)
    if (order[i] != i) return false;
  return true;
}

/// The inverse permutation: permute(permute(a, order), inverse(order)) == a.
inline std::vector<std::size_t> inverse(const std::vector<std::size_t>& order) {
  std::vector<std::size_t> out(order.size());
  for (std::size_t i = 0; i < order.size(); ++i) out[order[i]] = i;
  return out;
}

}  // namespace meshtensor::kernels
