#pragma once
// Message tags of the library's point-to-point messages. Ops run in the same order on every
// processor and each finishes its messages before returning, so one tag per kind is enough; the
// tags keep different kinds apart, and tell a plan's report which kind a message was.

namespace meshtensor::tags {
constexpr int relayout = 100;
constexpr int halo = 101;
constexpr int volume_io = 102;
// The checking mode's messages: each collective's call, sent to every peer (collective_call.hpp).
constexpr int collective_check = 103;
// Flips, transposes and rotations (ops/reorient.hpp): like a relayout, parts of blocks moving.
constexpr int reorient = 104;
// A second halo exchange in flight beside another, whose steps may start in another order on
// each processor: a fused op's rows of two inputs (ops/norm_up_conv.hpp).
constexpr int halo_beside = 105;
}  // namespace meshtensor::tags
