#pragma once
// Resampling one dim of a block, for every backend: each output position along it is the weighted
// sum of up to two positions of the source box. Blocks are row-major [outer][dim][inner].

#include <cstddef>
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
