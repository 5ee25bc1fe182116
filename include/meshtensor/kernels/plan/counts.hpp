#pragma once
// What a plan's kernels do instead of computing: count the floating-point operations each family
// would run on this processor (a multiply-add is two), per family, from the shapes alone, and the
// elements a copy moves (copies compute nothing, but take time). Convolutions are counted apart by
// class too — pass, taps and channel width — because their speed per FLOP differs by several
// times between classes (plan/throughput.hpp prices each class on its own). A processor's counts
// live with it (device/processor.hpp), so a plan of P processors in one process keeps P sets.

#include <array>
#include <cstddef>
#include <cstdint>

#include "meshtensor/device/processor.hpp"

namespace meshtensor::kernels::plan {

enum class Family { copy, elementwise, sum, norm, optimizer, conv, pool, resample, count };

inline const char* family_name(Family f) {
  constexpr const char* names[] = {"copy",      "elementwise", "sum",  "norm",
                                   "optimizer", "conv",        "pool", "resample"};
  return names[static_cast<std::size_t>(f)];
}

/// A convolution's class: its pass, whether it has one tap (a transposed 2x2x2 stride-2
/// convolution or a 1x1x1 head) or many, and its width, the fewer of its input and output channels
/// by powers of two (1, 2-3, 4-7, ..., 128 and more).
struct ConvClass {
  enum Pass { forward, backward_input, backward_weight, passes };
  static constexpr int widths = 8;
  static constexpr std::size_t count = std::size_t(passes) * 2 * widths;

  static std::size_t of(Pass pass, bool one_tap, std::int64_t c_in, std::int64_t c_out) {
    std::int64_t narrow = c_in < c_out ? c_in : c_out;
    int width = 0;
    while (narrow > 1 && width + 1 < widths) narrow >>= 1, ++width;
    return (std::size_t(pass) * 2 + (one_tap ? 1 : 0)) * widths + std::size_t(width);
  }
  static Pass pass_of(std::size_t c) { return Pass(c / (2 * widths)); }
  static bool one_tap_of(std::size_t c) { return (c / widths) % 2 == 1; }
  static int width_of(std::size_t c) { return int(c % widths); }
};

/// One processor's kernel work so far: FLOPs and calls per family, elements moved by copies, and
/// convolution FLOPs by class. `last` says what the latest call was (for kernel timing).
struct Counts {
  static constexpr std::size_t families = static_cast<std::size_t>(Family::count);
  std::array<double, families> flops{};
  std::array<std::uint64_t, families> calls{};
  double copied_elements = 0;
  std::array<double, ConvClass::count> conv_flops{};
  struct Call {
    Family family = Family::copy;
    std::size_t conv_class = 0;
  } last;
};

/// The calling processor's counts.
inline Counts& counts() { return current_processor().state<Counts>(); }

/// Counts one kernel call of `family` that would run `flops` operations.
inline void count(Family family, double flops) {
  Counts& c = counts();
  c.flops[static_cast<std::size_t>(family)] += flops;
  ++c.calls[static_cast<std::size_t>(family)];
  c.last.family = family;
}

/// Counts one copy of `elements` elements.
inline void count_copy(double elements) {
  count(Family::copy, 0);
  counts().copied_elements += elements;
}

/// Counts one convolution pass of class `conv_class` (ConvClass::of) and `flops` operations.
inline void count_conv(std::size_t conv_class, double flops) {
  count(Family::conv, flops);
  Counts& c = counts();
  c.conv_flops[conv_class] += flops;
  c.last.conv_class = conv_class;
}

}  // namespace meshtensor::kernels::plan
