#pragma once
// Resampling one dim of a block: each output position along it is the weighted sum of up to two
// positions of the source box (nearest and linear upsampling, padding, cropping). Blocks are
// row-major [outer][dim][inner]; the other dims' extents are the same on both sides.

#include <array>
#include <cstdint>
#include <vector>

namespace meshtensor::kernels {

/// Which source positions each output position reads, and their weights: taps[2 o + k] for
/// k < 2, a tap's index -1 where output o reads fewer than two.
struct ResampleTaps {
  std::int64_t outer = 1, inner = 1;  // the extents before and after the dim
  std::int64_t sources = 0;           // positions along the dim in the source box
  std::vector<std::int64_t> index;
  std::vector<double> weight;
  std::int64_t outputs() const { return std::int64_t(index.size()) / 2; }
};

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

/// For each source position i, the taps that read it, in the adjoint's order: reader[j] (an
/// output) and weight[j] for start[i] <= j < start[i + 1].
struct ResampleReaders {
  std::vector<std::int64_t> start, reader;
  std::vector<double> weight;
};

inline ResampleReaders readers_of(const ResampleTaps& taps) {
  ResampleReaders r;
  r.start.assign(std::size_t(taps.sources + 1), 0);
  for (const std::int64_t i : taps.index)
    if (i >= 0) ++r.start[std::size_t(i + 1)];
  for (std::size_t i = 1; i < r.start.size(); ++i) r.start[i] += r.start[i - 1];
  r.reader.resize(std::size_t(r.start.back()));
  r.weight.resize(r.reader.size());
  std::vector<std::int64_t> next(r.start.begin(), r.start.end() - 1);
  for (std::int64_t o = 0; o < taps.outputs(); ++o)
    for (int k = 0; k < 2; ++k) {
      const std::int64_t i = taps.index[2 * o + k];
      if (i < 0) continue;
      const std::int64_t j = next[std::size_t(i)]++;
      r.reader[std::size_t(j)] = o;
      r.weight[std::size_t(j)] = taps.weight[2 * o + k];
    }
  return r;
}

}  // namespace meshtensor::kernels
