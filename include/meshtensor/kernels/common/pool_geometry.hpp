#pragma once
// The geometry of pooling on one block, spatial dims in the middle: input [P][I0][I1][I2][C] (the
// read box), output [P][O0][O1][O2][C]; each output reads kernel[0] x kernel[1] x kernel[2]
// positions through the same Taps as a convolution.

#include <array>
#include <cstdint>
#include "meshtensor/kernels/common/conv_geometry.hpp"

namespace meshtensor::kernels {

struct PoolGeometry {
  std::int64_t batch = 1, channels = 1;
  std::array<std::int64_t, 3> in{1, 1, 1}, out{1, 1, 1}, kernel{1, 1, 1};
  std::array<Taps, 3> taps{};
  // Box positions inside the tensor, per dim: average pooling without padding counts only these.
  std::array<std::int64_t, 3> inside_begin{0, 0, 0}, inside_end{1, 1, 1};
};

}  // namespace meshtensor::kernels
