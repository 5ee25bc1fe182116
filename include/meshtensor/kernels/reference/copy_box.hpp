#pragma once
// Copies a box of elements between two strided arrays: the building block of slicing, packing
// messages and unpacking them.

#include <array>
#include <cstdint>

#include "meshtensor/core/tensor_layout.hpp"
#include "meshtensor/kernels/reference/strided.hpp"

namespace meshtensor::kernels {

/// dst[i * dst_strides] = src[i * src_strides] for every index i of `box`.
template <class T>
void copy_box(const Sizes& box, const T* src, const Strides& src_strides, T* dst,
              const Strides& dst_strides) {
  for_each_offset<2>(box, {src_strides, dst_strides},
                     [&](const std::array<std::int64_t, 2>& o) { dst[o[1]] = src[o[0]]; });
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

}  // namespace meshtensor::kernels
