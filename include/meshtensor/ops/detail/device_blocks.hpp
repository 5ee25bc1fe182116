#pragma once
// Whether an op's blocks are a device's: the fused ops that compute received pieces on the host
// (ops/norm_pool_conv.hpp, ops/norm_up_conv.hpp) run as the ops they stand for there. A plan's
// blocks (no memory) count as the device's where the plan stands for a run on devices, so that
// the plan takes the road its run takes.

#include "meshtensor/comm/transport_choice.hpp"
#include "meshtensor/memory/pool.hpp"

namespace meshtensor::detail {

inline bool blocks_on_device(MemorySpace space) {
  return space == MemorySpace::device || (space == MemorySpace::none && plans_stand_for_devices());
}

}  // namespace meshtensor::detail
