#pragma once
// The input gradient of a convolution with stride 1 is itself a forward convolution: of the output
// gradient, with the weights flipped in space and their two channel dims swapped, reading
// (extent - 1 - p) positions of zeros where the convolution read p. A backend whose forward
// kernels outrun its input-gradient ones (oneDNN's bf16 kernels on AMX: 2.5x at 8 channels) can
// run the gradient there.

#include <cstdint>
#include <optional>
#include <utility>

#include "meshtensor/kernels/common/conv_geometry.hpp"

namespace meshtensor::kernels {

/// The forward convolution that computes g's input gradient, or nothing where g is strided or
/// transposed.
inline std::optional<ConvGeometry> input_gradient_as_forward(const ConvGeometry& g) {
  ConvGeometry f = g;
  std::swap(f.in, f.out);
  std::swap(f.c_in, f.c_out);
  for (int d = 0; d < 3; ++d) {
    const Taps& t = g.taps[d];
    if (t.transposed || t.stride != 1) return std::nullopt;
    // Output o reads box row origin + o + k dilation, so box row i gets output-gradient rows
    // i - origin - k dilation: through the flipped tap K - 1 - k, from -origin - (K - 1) dilation.
    f.taps[d].origin = -t.origin - (g.kernel[d] - 1) * t.dilation;
  }
  return f;
}

/// The weights of input_gradient_as_forward(g): w [K0][K1][K2][Ci][Co] flipped along each kernel
/// dim, as [K0][K1][K2][Co][Ci].
template <class T>
void flip_weights(const ConvGeometry& g, const T* w, T* flipped) {
  const std::int64_t taps = g.kernel[0] * g.kernel[1] * g.kernel[2];
  for (std::int64_t k = 0; k < taps; ++k) {
    // Tap (k0, k1, k2) row-major goes to (K0-1-k0, K1-1-k1, K2-1-k2): index taps - 1 - k.
    const T* from = w + k * g.c_in * g.c_out;
    T* to = flipped + (taps - 1 - k) * g.c_in * g.c_out;
    for (std::int64_t i = 0; i < g.c_in; ++i)
      for (std::int64_t o = 0; o < g.c_out; ++o) to[o * g.c_in + i] = from[i * g.c_out + o];
  }
}

}  // namespace meshtensor::kernels
