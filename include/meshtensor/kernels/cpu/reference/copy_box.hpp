#pragma once
// Copies a box of elements between two strided arrays: the building block of slicing, packing
// messages and unpacking them.

#include <array>
#include <cstdint>

#include "meshtensor/core/tensor_layout.hpp"
#include "meshtensor/kernels/cpu/loops.hpp"

namespace meshtensor::kernels::reference {

/// dst[i * dst_strides] = src[i * src_strides] for every index i of `box`.
template <class T>
void copy_box(const Sizes& box, const T* src, const Strides& src_strides, T* dst,
              const Strides& dst_strides) {
  for_each_offset<2>(box, {src_strides, dst_strides},
                     [&](const std::array<std::int64_t, 2>& o) { dst[o[1]] = src[o[0]]; });
}

}  // namespace meshtensor::kernels::reference
