#pragma once
// A channels-last operand held as parts side by side along its channels — a concatenation that is
// never written out (the U-Net decoder's skip and up-sampled channels): part i has `channels[i]`
// channels at `data[i]`, every part the same positions. The convolution kernels read their input,
// or write their input's gradient, in parts (kernels/conv.hpp).

#include <cstdint>
#include <numeric>
#include <vector>

#include "meshtensor/kernels/common/channel_affine.hpp"

namespace meshtensor::kernels {

template <class T>
struct ChannelParts {
  std::vector<T*> data;
  std::vector<std::int64_t> channels;
  std::vector<const ChannelAffine*> affine;  // per part (null: the part is its data)

  ChannelParts() = default;
  /// One part: an operand held whole.
  ChannelParts(T* whole, std::int64_t c) : data{whole}, channels{c}, affine{nullptr} {}

  /// A part: its data, or `f` of its data.
  void add(T* part, std::int64_t c, const ChannelAffine* f = nullptr) {
    data.push_back(part);
    channels.push_back(c);
    affine.push_back(f);
  }
  const ChannelAffine* affine_of(std::size_t i) const { return affine[i]; }
  bool has_affine() const {
    for (const ChannelAffine* f : affine)
      if (f) return true;
    return false;
  }
  std::size_t size() const { return data.size(); }
  std::int64_t total() const {
    return std::accumulate(channels.begin(), channels.end(), std::int64_t{0});
  }
  /// Whether every part's channels are a multiple of `n`.
  bool parts_of(std::int64_t n) const {
    for (std::int64_t c : channels)
      if (c % n != 0) return false;
    return true;
  }
};

}  // namespace meshtensor::kernels
