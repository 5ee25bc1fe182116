#pragma once
// The device a plan stands for. A plan's processors compute on the plan device (blocks without
// memory), but the run it predicts computes on the host or on GPUs; the ops whose road depends on
// where the blocks live must take that run's road in the plan, or the plan counts messages the
// run never sends. The run is the one this process was started for: MESHTENSOR_DEVICE, else the
// transport's default (MESHTENSOR_TRANSPORT: nccl computes on GPUs), as run() chooses.

#include <cstdlib>
#include <string>

namespace meshtensor {

/// Whether plans made in this process stand for a run on devices (GPUs).
inline bool plans_stand_for_devices() {
  if (const char* device = std::getenv("MESHTENSOR_DEVICE")) return std::string(device) == "cuda";
  const char* transport = std::getenv("MESHTENSOR_TRANSPORT");
  return transport != nullptr && std::string(transport) == "nccl";
}

}  // namespace meshtensor
