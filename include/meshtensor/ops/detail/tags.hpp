#pragma once
// Message tags of the ops that use point-to-point messages. Ops run in the same order on every
// processor and each finishes its messages before returning, so one tag per op kind is enough; the
// tags only keep different kinds apart.

namespace meshtensor::detail::tags {
constexpr int relayout = 100;
constexpr int halo = 101;
constexpr int volume_io = 102;
}  // namespace meshtensor::detail::tags
