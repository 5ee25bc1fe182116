#pragma once
// Resampling one dim of a block: each output position along it is the weighted sum of up to two
// positions of the source box (nearest and linear upsampling, padding, cropping). Blocks are
// row-major [outer][dim][inner]; the other dims' extents are the same on both sides.

#include <array>
#include <cstdint>
#include <vector>
#include "meshtensor/kernels/common/resample_taps.hpp"

namespace meshtensor::kernels::reference {

/// out = the weighted sum of each output's taps into `box`, added in tap order from zero.
template <class T>
void resample(const ResampleTaps& taps, const T* box, T* out) {
  const std::int64_t outputs = taps.outputs(), inner = taps.inner;
  for (std::int64_t a = 0; a < taps.outer; ++a)
    for (std::int64_t o = 0; o < outputs; ++o) {
      T* dst = out + (a * outputs + o) * inner;
      for (std::int64_t b = 0; b < inner; ++b) dst[b] = T(0);
      for (int k = 0; k < 2; ++k) {
        const std::int64_t i = taps.index[2 * o + k];
        if (i < 0) continue;
        const T* src = box + (a * taps.sources + i) * inner;
        const T w = static_cast<T>(taps.weight[2 * o + k]);
        for (std::int64_t b = 0; b < inner; ++b) dst[b] += w * src[b];
      }
    }
}

/// The adjoint: grad_box = for each source position, the weighted sum of the gradients of the
/// outputs that read it, added in output (then tap) order from zero.
template <class T>
void resample_adjoint(const ResampleTaps& taps, const T* g, T* grad_box) {
  const std::int64_t outputs = taps.outputs(), inner = taps.inner;
  for (std::int64_t e = 0; e < taps.outer * taps.sources * inner; ++e) grad_box[e] = T(0);
  for (std::int64_t a = 0; a < taps.outer; ++a)
    for (std::int64_t o = 0; o < outputs; ++o) {
      const T* src = g + (a * outputs + o) * inner;
      for (int k = 0; k < 2; ++k) {
        const std::int64_t i = taps.index[2 * o + k];
        if (i < 0) continue;
        T* dst = grad_box + (a * taps.sources + i) * inner;
        const T w = static_cast<T>(taps.weight[2 * o + k]);
        for (std::int64_t b = 0; b < inner; ++b) dst[b] += w * src[b];
      }
    }
}

}  // namespace meshtensor::kernels::reference
