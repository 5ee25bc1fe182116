#pragma once
// Pooling geometries for the GPU kernel tests (against the reference loops): the U-Net's
// down-sampling, odd channel counts, overlapping and dilated windows, padding; with inputs full of
// ties (as after a ReLU).

#include <array>
#include <cmath>
#include <cstdint>
#include <vector>

#include <meshtensor/kernels/cpu/reference/pool.hpp>

namespace meshtensor::testing {

struct PoolCase {
  std::array<std::int64_t, 3> out, kernel, stride, dilation;
  std::int64_t batch, channels, pad;
};

inline std::vector<PoolCase> pool_cases() {
  return {
      {{8, 6, 4}, {2, 2, 2}, {2, 2, 2}, {1, 1, 1}, 1, 8, 0},  // the U-Net's down-sampling
      {{3, 5, 4}, {2, 2, 2}, {2, 2, 2}, {1, 1, 1}, 2, 5, 0},
      {{4, 3, 5}, {3, 3, 3}, {2, 2, 2}, {1, 1, 1}, 1, 3, 1},  // overlapping windows, padding
      {{5, 4, 3}, {3, 1, 2}, {1, 1, 2}, {1, 1, 1}, 3, 1, 0},
      {{4, 4, 3}, {3, 2, 3}, {1, 2, 1}, {2, 1, 2}, 1, 2, 2},  // dilated
  };
}

/// The geometry of a case whose box is what its windows read, less the padding; box positions
/// before `inside_from` lie outside the tensor (a halo beyond its edge: average pooling does not
/// count them).
inline kernels::PoolGeometry pool_geometry(const PoolCase& c, std::int64_t inside_from = 0) {
  kernels::PoolGeometry g;
  g.batch = c.batch;
  g.channels = c.channels;
  g.out = c.out;
  g.kernel = c.kernel;
  for (int d = 0; d < 3; ++d) {
    g.taps[d] = kernels::Taps{false, -c.pad, c.stride[d], c.dilation[d]};
    g.in[d] = (c.out[d] - 1) * c.stride[d] + (c.kernel[d] - 1) * c.dilation[d] + 1 - 2 * c.pad;
    g.inside_begin[d] = inside_from;
    g.inside_end[d] = g.in[d];
  }
  return g;
}

/// Inputs of a geometry (rounded: many ties) and output gradients.
struct PoolData {
  std::size_t in_n = 0, out_n = 0;
  std::vector<float> x, dy;
  explicit PoolData(const kernels::PoolGeometry& g)
      : in_n(g.batch * g.in[0] * g.in[1] * g.in[2] * g.channels),
        out_n(g.batch * g.out[0] * g.out[1] * g.out[2] * g.channels),
        x(in_n),
        dy(out_n) {
    for (std::size_t i = 0; i < in_n; ++i) x[i] = float(std::round(4 * std::sin(0.7 * i)));
    for (std::size_t i = 0; i < out_n; ++i) dy[i] = float(std::sin(2.1 * i + 1));
  }
};

}  // namespace meshtensor::testing
