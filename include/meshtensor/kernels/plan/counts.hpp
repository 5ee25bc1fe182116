#pragma once
// What a plan's kernels do instead of computing: count the floating-point operations each family
// would run on this processor (a multiply-add is two), per family, from the shapes alone. A
// processor's counts live with it (device/processor.hpp), so a plan of P processors in one
// process keeps P sets.

#include <array>
#include <cstddef>
#include <cstdint>

#include "meshtensor/device/processor.hpp"

namespace meshtensor::kernels::plan {

enum class Family { copy, elementwise, sum, norm, optimizer, conv, pool, resample, count };

/// One processor's kernel work so far: FLOPs and calls, per family.
struct Counts {
  static constexpr std::size_t families = static_cast<std::size_t>(Family::count);
  std::array<double, families> flops{};
  std::array<std::uint64_t, families> calls{};
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
