#pragma once
// An operand given as the per-channel affine map of another, floored: batch norm's output
// (with its ReLU) described by what it is computed from, so that a kernel can compute it as it
// reads it rather than read a copy written out first. The values are exactly norm_affine's
// (kernels/norm.hpp): the coefficients rounded to the data's compute type, one affine_floor each.

#include <cstdint>
#include <limits>
#include <vector>

#include "meshtensor/core/bfloat16.hpp"
#include "meshtensor/kernels/common/norm_formulas.hpp"

namespace meshtensor::kernels {

/// max(floor, scale[c] x + shift[c]) for channel c of channels-last data (channels innermost).
struct ChannelAffine {
  std::vector<double> scale, shift;
  double floor = -std::numeric_limits<double>::infinity();
  // The data are bfloat16 channels read in pairs as floats' bits (the row kernels' dot products):
  // a value's low half is channel 2c, its high half 2c + 1, each mapped with its own coefficients.
  bool bf16_pairs = false;

  std::int64_t channels() const { return std::int64_t(scale.size()); }
};

/// The coefficients in compute type C, as the kernels apply them.
template <class C>
struct ChannelAffineIn {
  std::vector<C> scale, shift;
  C floor;

  explicit ChannelAffineIn(const ChannelAffine& f)
      : scale(f.scale.begin(), f.scale.end()),
        shift(f.shift.begin(), f.shift.end()),
        floor(C(f.floor)) {}

  /// Channel c's value for x, in x's type T (rounded there as norm_affine rounds it).
  template <class T>
  T operator()(std::int64_t c, T x) const {
    return T(shared::affine_floor(scale[c], C(x), shift[c], floor));
  }
};

}  // namespace meshtensor::kernels
