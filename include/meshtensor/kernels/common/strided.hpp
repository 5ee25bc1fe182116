#pragma once
// The geometry of strided boxes, shared by every backend: a box's sizes, an operand's strides over
// it (0 where it is broadcast), row-major strides, offsets of sub-boxes, and dims merged or
// reordered. The loops over boxes are the CPU's (kernels/cpu/loops.hpp).

#include <array>
#include <cstdint>
#include <utility>
#include <vector>

#include "meshtensor/core/tensor_layout.hpp"

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

/// The same box with dims of size 1 dropped and each dim that every operand walks as one with the
/// dim before it (strides[k][d - 1] == strides[k][d] * sizes[d] for all k) merged into it: fewer,
/// longer loops over the same offsets in the same order.
template <std::size_t N>
std::pair<Sizes, std::array<Strides, N>> merge_dims(const Sizes& sizes,
                                                    const std::array<Strides, N>& strides) {
  Sizes merged;
  std::array<Strides, N> merged_strides;
  for (std::size_t d = 0; d < sizes.size(); ++d) {
    if (sizes[d] == 1) continue;
    bool joins = !merged.empty();
    for (std::size_t k = 0; joins && k < N; ++k)
      joins = merged_strides[k].back() == strides[k][d] * sizes[d];
    if (joins) {
      merged.back() *= sizes[d];
      for (std::size_t k = 0; k < N; ++k) merged_strides[k].back() = strides[k][d];
    } else {
      merged.push_back(sizes[d]);
      for (std::size_t k = 0; k < N; ++k) merged_strides[k].push_back(strides[k][d]);
    }
  }
  return {merged, merged_strides};
}

/// Where `box` starts inside the row-major storage of `holder` (both boxes of global indices, `box`
/// inside `holder`), in elements.
inline std::int64_t offset_of_box(const Block& box, const Block& holder, const Strides& strides) {
  std::int64_t offset = 0;
  for (std::size_t d = 0; d < box.ranges.size(); ++d)
    offset += (box.ranges[d].begin - holder.ranges[d].begin) * strides[d];
  return offset;
}

/// The linear offset of `origin` in an array with these strides.
inline std::int64_t offset_of(const Sizes& origin, const Strides& strides) {
  std::int64_t offset = 0;
  for (std::size_t d = 0; d < origin.size(); ++d) offset += origin[d] * strides[d];
  return offset;
}

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

/// Whether `order` keeps every dim in place.
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
