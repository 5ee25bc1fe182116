#pragma once
// The geometry of pooling on one block, spatial dims in the middle: input [P][I0][I1][I2][C] (the
// read box), output [P][O0][O1][O2][C]; each output reads kernel[0] x kernel[1] x kernel[2]
// positions through the same Taps as a convolution.

#include <algorithm>
#include <array>
#include <cstdint>
#include <optional>
#include <vector>

#include "meshtensor/kernels/common/conv_geometry.hpp"

namespace meshtensor::kernels {

struct PoolGeometry {
  std::int64_t batch = 1, channels = 1;
  std::array<std::int64_t, 3> in{1, 1, 1}, out{1, 1, 1}, kernel{1, 1, 1};
  std::array<Taps, 3> taps{};
  // Box positions inside the tensor, per dim: average pooling without padding counts only these.
  std::array<std::int64_t, 3> inside_begin{0, 0, 0}, inside_end{1, 1, 1};
};

/// The pooling of a row-major block of `sizes` by windows that tile it, `strides[d]` along dim d
/// (1: not pooled; each divides its size): the dims before the first pooled one as the batch, those
/// after the last as the channels. None where the pooled dims and those between them are more than
/// three.
inline std::optional<PoolGeometry> tiling_pool_geometry(const std::vector<std::int64_t>& sizes,
                                                        const std::vector<std::int64_t>& strides) {
  std::size_t first = sizes.size(), last = 0;
  for (std::size_t d = 0; d < sizes.size(); ++d)
    if (strides[d] != 1) first = std::min(first, d), last = d;
  if (first == sizes.size()) first = last = 0;  // nothing pooled: a window of one
  if (last - first >= 3) return std::nullopt;
  PoolGeometry g;
  for (std::size_t d = 0; d < first; ++d) g.batch *= sizes[d];
  for (std::size_t d = last + 1; d < sizes.size(); ++d) g.channels *= sizes[d];
  for (std::size_t d = first; d <= last && d < sizes.size(); ++d) {
    const std::size_t a = d - first;
    g.in[a] = g.inside_end[a] = sizes[d];
    g.kernel[a] = strides[d];
    g.out[a] = sizes[d] / strides[d];
    g.taps[a] = Taps{false, 0, strides[d], 1};
  }
  return g;
}

}  // namespace meshtensor::kernels
