#pragma once
// Up-sampling by a transposed convolution whose windows tile its output (kernel = stride), for
// every backend: each output position reads one input position through one tap. Used on pieces
// of a block (the halo rows a receiver up-samples itself), so positions are listed, not walked.

#include <cstdint>
#include <vector>

namespace meshtensor::kernels {

/// Per output position p: where its input channels start (`input[p]`, channels
/// `in_channel_stride` apart), where its output channels start (`output[p]`, channels
/// `out_channel_stride` apart) and its tap (weights [tap][c_in][c_out], input channels first).
struct TileUpSampling {
  std::vector<std::int64_t> input, output, tap;
  std::int64_t c_in = 0, c_out = 0, in_channel_stride = 1, out_channel_stride = 1;

  std::int64_t positions() const { return std::int64_t(input.size()); }
};

}  // namespace meshtensor::kernels
