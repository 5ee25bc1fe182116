#pragma once
// Reorders the dims of a row-major array: how ops bring a block into the layout a kernel expects
// (batch, spatial dims, channels last) and back.

#include <array>
#include <cstdint>
#include <vector>

#include "meshtensor/kernels/reference/strided.hpp"

namespace meshtensor::kernels {

/// dst (row-major over sizes[order[0]], sizes[order[1]], ...) = src (row-major over `sizes`).
template <class T>
void permute(const T* src, const Sizes& sizes, const std::vector<std::size_t>& order, T* dst) {
  const auto src_strides = row_major_strides(sizes);
  Sizes new_sizes;
  Strides gathered;
  for (auto d : order) {
    new_sizes.push_back(sizes[d]);
    gathered.push_back(src_strides[d]);
  }
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
