#pragma once
// Up-sampling by tiling windows (kernels/common/tile_up_sampling.hpp) on the CPU: positions in
// groups of four, each its own float sums over the input channels in order, so that the
// multiply-adds of one group do not wait on each other.

#include <algorithm>
#include <array>
#include <cstdint>
#include <vector>

#include "meshtensor/kernels/common/tile_up_sampling.hpp"

namespace meshtensor::kernels::cpu {

namespace detail {

constexpr int up_sampling_group = 4;

// A group's sums from their input channels through each one's tap weights.
template <class T>
void up_sample_group(const TileUpSampling& u, const std::array<const T*, up_sampling_group>& in,
                     const std::array<const float*, up_sampling_group>& w, float* __restrict sums) {
  const std::int64_t c_out = u.c_out, stride = u.in_channel_stride;
  std::fill(sums, sums + up_sampling_group * c_out, 0.0f);
  float* __restrict s0 = sums;
  float* __restrict s1 = sums + c_out;
  float* __restrict s2 = sums + 2 * c_out;
  float* __restrict s3 = sums + 3 * c_out;
  for (std::int64_t ci = 0; ci < u.c_in; ++ci) {
    const float v0 = float(in[0][ci * stride]), v1 = float(in[1][ci * stride]),
                v2 = float(in[2][ci * stride]), v3 = float(in[3][ci * stride]);
    const float* __restrict w0 = w[0] + ci * c_out;
    const float* __restrict w1 = w[1] + ci * c_out;
    const float* __restrict w2 = w[2] + ci * c_out;
    const float* __restrict w3 = w[3] + ci * c_out;
    for (std::int64_t c = 0; c < c_out; ++c) {
      s0[c] += v0 * w0[c];
      s1[c] += v1 * w1[c];
      s2[c] += v2 * w2[c];
      s3[c] += v3 * w3[c];
    }
  }
}

}  // namespace detail

/// out at each position's output channels = its sums, rounded to T, then `bias` (rounded to T;
/// null: none) added and rounded again, as a transposed convolution and an addition round.
template <class T, class B>
void up_sample_tiles(const TileUpSampling& u, const T* input, const T* weight, const B* bias,
                     T* out) {
  constexpr int group = detail::up_sampling_group;
  const std::int64_t c_out = u.c_out, positions = u.positions();
  if (positions == 0) return;
  const std::vector<float> w(
      weight, weight + (*std::max_element(u.tap.begin(), u.tap.end()) + 1) * u.c_in * c_out);
  std::vector<float> sums(std::size_t(group * c_out));
  std::array<const T*, group> ins{};
  std::array<const float*, group> taps{};
  for (std::int64_t p = 0; p < positions; p += group) {
    for (int g = 0; g < group; ++g) {  // a short last group repeats its last position
      const std::size_t at = std::size_t(std::min(p + g, positions - 1));
      ins[std::size_t(g)] = input + u.input[at];
      taps[std::size_t(g)] = w.data() + u.tap[at] * u.c_in * c_out;
    }
    detail::up_sample_group(u, ins, taps, sums.data());
    for (int g = 0; g < group && p + g < positions; ++g) {
      T* o = out + u.output[std::size_t(p + g)];
      const float* s = sums.data() + g * c_out;
      for (std::int64_t c = 0; c < c_out; ++c)
        o[c * u.out_channel_stride] = bias ? T(float(T(s[c])) + float(T(bias[c]))) : T(s[c]);
    }
  }
}

}  // namespace meshtensor::kernels::cpu
