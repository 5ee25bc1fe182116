#pragma once
// The geometry of a convolution on one block, channels last, for every backend: input
// [P][I0][I1][I2][Ci] (the read box), weight [K0][K1][K2][Ci][Co], output [P][O0][O1][O2][Co]; a
// `Taps` per spatial dim says which box position output o reads through tap k. Slabs of rows let a
// kernel run a block in parts (threads, or rows whose halo has not yet arrived).

#include <algorithm>
#include <array>
#include <cstdint>

namespace meshtensor::kernels {

struct Taps {
  bool transposed = false;
  std::int64_t origin = 0;  // conv: box index read by output 0, tap 0; transposed: see reads()
  std::int64_t stride = 1, dilation = 1;

  /// The box index output o reads through tap k, or -1 if it reads none.
  std::int64_t reads(std::int64_t o, std::int64_t k) const {
    if (!transposed) return origin + o * stride + k * dilation;
    const std::int64_t t = origin + o - k * dilation;
    return t % stride == 0 ? t / stride : -1;
  }
};

struct ConvGeometry {
  std::int64_t batch = 1, c_in = 1, c_out = 1;
  std::array<std::int64_t, 3> in{1, 1, 1}, out{1, 1, 1}, kernel{1, 1, 1};
  std::array<Taps, 3> taps{};
};

inline std::int64_t conv_output_size(const ConvGeometry& g) {
  return g.batch * g.out[0] * g.out[1] * g.out[2] * g.c_out;
}
inline std::int64_t conv_input_size(const ConvGeometry& g) {
  return g.batch * g.in[0] * g.in[1] * g.in[2] * g.c_in;
}
inline std::int64_t conv_weight_size(const ConvGeometry& g) {
  return g.kernel[0] * g.kernel[1] * g.kernel[2] * g.c_in * g.c_out;
}

/// Whether a block has nothing to sum: no channels on one side (an uneven channel split leaves
/// some processors none) or no positions. oneDNN and cuDNN refuse such shapes.
inline bool conv_is_empty(const ConvGeometry& g) {
  std::int64_t product = g.batch * g.c_in * g.c_out;
  for (int d = 0; d < 3; ++d) product *= g.in[d] * g.out[d];
  return product == 0;
}

/// Integer division rounded down and up (for negative numerators too: taps reaching before row 0).
inline std::int64_t floor_div(std::int64_t p, std::int64_t q) {
  return p >= 0 ? p / q : -((-p + q - 1) / q);
}
inline std::int64_t ceil_div(std::int64_t p, std::int64_t q) { return -floor_div(-p, q); }

/// Elements of one row along the first dim of the input box and of the output (batch 1).
inline std::int64_t input_row_size(const ConvGeometry& g) { return g.in[1] * g.in[2] * g.c_in; }
inline std::int64_t output_row_size(const ConvGeometry& g) { return g.out[1] * g.out[2] * g.c_out; }

/// Output rows [a, b) along the first dim of a convolution (transposed or not) with one
/// pass-through index, as a convolution of their own: rows are contiguous, so that is the box rows
/// [r0, r1) they read with the padding outside the box kept.
struct RowSlab {
  std::int64_t r0 = 0, r1 = 0;
  ConvGeometry geometry;
};

inline RowSlab output_rows(const ConvGeometry& g, std::int64_t a, std::int64_t b) {
  const Taps& t = g.taps[0];
  if (t.transposed) {
    // Output o reads box row (origin + o - k dilation) / stride where that divides: rows from
    // the smallest such value over [a, b) and every tap to the largest.
    const std::int64_t lowest = t.origin + a - (g.kernel[0] - 1) * t.dilation;
    const std::int64_t highest = t.origin + b - 1;
    RowSlab slab;
    slab.r0 = std::max<std::int64_t>(0, ceil_div(lowest, t.stride));
    slab.r1 = std::max(slab.r0, std::min<std::int64_t>(g.in[0], floor_div(highest, t.stride) + 1));
    slab.geometry = g;
    slab.geometry.out[0] = b - a;
    slab.geometry.in[0] = slab.r1 - slab.r0;
    slab.geometry.taps[0].origin = t.origin + a - slab.r0 * t.stride;
    return slab;
  }
  const std::int64_t first = t.origin + a * t.stride;
  const std::int64_t last = t.origin + (b - 1) * t.stride + (g.kernel[0] - 1) * t.dilation;
  RowSlab slab;
  slab.r0 = std::max<std::int64_t>(0, first);
  slab.r1 = std::max(slab.r0, std::min<std::int64_t>(g.in[0], last + 1));
  slab.geometry = g;
  slab.geometry.out[0] = b - a;
  slab.geometry.in[0] = slab.r1 - slab.r0;
  slab.geometry.taps[0].origin = first - slab.r0;
  return slab;
}

/// Box rows [r0, r1) of a convolution (transposed or not) with one pass-through index, as a box of
/// their own for the input gradient: read by output rows [o0, o1) (empty if none reads them).
struct InputSlab {
  std::int64_t o0 = 0, o1 = 0;
  ConvGeometry geometry;
};

inline InputSlab input_rows(const ConvGeometry& g, std::int64_t r0, std::int64_t r1) {
  const Taps& t = g.taps[0];
  const std::int64_t reach = (g.kernel[0] - 1) * t.dilation;
  // Output o reads rows origin + o*stride + [0, reach]: the first output whose reads reach r0 and
  // the last whose reads start before r1.
  InputSlab slab;
  if (t.transposed) {
    // Row r is read by outputs r*stride - origin + k*dilation: from k = 0 for r0 to the last tap
    // for r1 - 1.
    slab.o0 = std::clamp<std::int64_t>(r0 * t.stride - t.origin, 0, g.out[0]);
    slab.o1 =
        std::clamp<std::int64_t>((r1 - 1) * t.stride - t.origin + reach + 1, slab.o0, g.out[0]);
    slab.geometry = g;
    slab.geometry.in[0] = r1 - r0;
    slab.geometry.out[0] = slab.o1 - slab.o0;
    slab.geometry.taps[0].origin = t.origin + slab.o0 - r0 * t.stride;
    return slab;
  }
  slab.o0 = std::max<std::int64_t>(0, ceil_div(r0 - t.origin - reach, t.stride));
  slab.o1 = std::max(slab.o0,
                     std::min<std::int64_t>(g.out[0], floor_div(r1 - 1 - t.origin, t.stride) + 1));
  slab.geometry = g;
  slab.geometry.in[0] = r1 - r0;
  slab.geometry.out[0] = slab.o1 - slab.o0;
  slab.geometry.taps[0].origin = t.origin + slab.o0 * t.stride - r0;
  return slab;
}

}  // namespace meshtensor::kernels
