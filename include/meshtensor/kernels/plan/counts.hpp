#pragma once
// What a plan's kernels do instead of computing: count the floating-point operations each family
// would run on this processor (a multiply-add is two), per family, from the shapes alone. A
// processor's counts live with it (device/processor.hpp), so a plan of P processors in one
// process keeps P sets.

#include <array>
#include <cstddef>
#include <cstdint>
#include <string>

#include "meshtensor/device/processor.hpp"

namespace meshtensor::kernels::plan {

enum class Family { copy, elementwise, sum, norm, optimizer, conv, pool, resample, count };

inline const char* family_name(Family f) {
  static const char* const names[] = {"copy",      "elementwise", "sum",  "norm",
                                      "optimizer", "conv",        "pool", "resample"};
  return names[static_cast<std::size_t>(f)];
}

/// One processor's kernel work so far: FLOPs, calls and elements touched, per family.
struct Counts {
  static constexpr std::size_t families = static_cast<std::size_t>(Family::count);
  std::array<double, families> flops{};
  std::array<std::uint64_t, families> calls{};

  double total_flops() const {
    double sum = 0;
    for (double f : flops) sum += f;
    return sum;
  }
  double flops_of(Family f) const { return flops[static_cast<std::size_t>(f)]; }
  std::uint64_t calls_of(Family f) const { return calls[static_cast<std::size_t>(f)]; }
};

/// The calling processor's counts.
inline Counts& counts() { return current_processor().state<Counts>(); }

/// Counts one kernel call of `family` that would run `flops` operations.
inline void count(Family family, double flops) {
  Counts& c = counts();
  c.flops[static_cast<std::size_t>(family)] += flops;
  ++c.calls[static_cast<std::size_t>(family)];
}

}  // namespace meshtensor::kernels::plan
