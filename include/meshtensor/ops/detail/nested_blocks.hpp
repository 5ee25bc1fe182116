#pragma once
// Blocks of a fine tensor and of a coarse one (the fine divided by a stride per dim: a pooling's
// output, an up-sampling's input) that nest: each fine block is its coarse block's rows times the
// stride, so each processor pools or up-samples its own rows, and the coarse rows under a
// neighbour's fine rows have one owner.

#include <cstdint>
#include <vector>

#include "meshtensor/core/tensor_layout.hpp"

namespace meshtensor::detail {

// Whether every block of `fine` along every split dim starts and ends at a multiple of its
// stride, at the coarse block's bounds of the same index times the stride.
inline bool blocks_nest(const TensorLayout& fine, const std::vector<std::int64_t>& strides) {
  for (std::size_t d = 0; d < fine.rank(); ++d) {
    const auto axis = fine.mesh_axis_of(d);
    if (!axis || strides[d] == 1) continue;
    const int parts = fine.mesh_shape()[*axis].size;
    const std::int64_t n = fine.shape()[d].size;
    if (n % strides[d] != 0) return false;
    for (int j = 0; j < parts; ++j) {
      const Range block = block_range(n, parts, j), coarse = block_range(n / strides[d], parts, j);
      if (block.begin != coarse.begin * strides[d] || block.end != coarse.end * strides[d])
        return false;
    }
  }
  return true;
}

}  // namespace meshtensor::detail
