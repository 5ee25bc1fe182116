#pragma once
// Reorders the dims of a row-major array: how ops bring a block into the layout a kernel expects
// (batch, spatial dims, channels last) and back.

#include <array>
#include <cstdint>
#include <utility>
#include <vector>

#include "meshtensor/kernels/cpu/loops.hpp"

namespace meshtensor::kernels::reference {

/// dst (row-major over sizes[order[0]], sizes[order[1]], ...) = src (row-major over `sizes`).
template <class T>
void permute(const T* src, const Sizes& sizes, const std::vector<std::size_t>& order, T* dst) {
  const auto [new_sizes, gathered] = reordered(sizes, order);
  for_each_offset<2>(new_sizes, {gathered, row_major_strides(new_sizes)},
                     [&](const std::array<std::int64_t, 2>& o) { dst[o[1]] = src[o[0]]; });
}

}  // namespace meshtensor::kernels::reference
