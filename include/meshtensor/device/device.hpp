#pragma once
// Where a processor computes: the host's cores, one GPU, or nowhere (a plan: shapes without data).
// A value type; chosen apart from the transport that carries the processor's messages.

#include <string>

#include "meshtensor/core/error.hpp"

namespace meshtensor {

/// The kinds of device a processor can compute on.
enum class DeviceKind { cpu, cuda, plan };

/**
 * A processor's device.
 * ```cpp
 * Device::cpu().to_string()     // "cpu"
 * Device::cuda(1).to_string()   // "cuda:1"
 * ```
 */
struct Device {
  DeviceKind kind = DeviceKind::cpu;
  int gpu = -1;  // the GPU's ordinal in this process, for cuda
  // A plan's: it stands for a run on GPUs, so its kernels take (and allocate as) a GPU's roads.
  bool for_gpus = false;

  static Device cpu() { return {DeviceKind::cpu, -1, false}; }
  static Device cuda(int gpu) { return {DeviceKind::cuda, gpu, false}; }
  static Device plan(bool for_gpus = false) { return {DeviceKind::plan, -1, for_gpus}; }

  bool is_cpu() const { return kind == DeviceKind::cpu; }
  bool is_cuda() const { return kind == DeviceKind::cuda; }
  bool is_plan() const { return kind == DeviceKind::plan; }

  std::string to_string() const {
    switch (kind) {
      case DeviceKind::cuda:
        return "cuda:" + std::to_string(gpu);
      case DeviceKind::plan:
        return for_gpus ? "plan of cuda" : "plan";
      case DeviceKind::cpu:
        break;
    }
    return "cpu";
  }
  friend bool operator==(const Device& a, const Device& b) {
    return a.kind == b.kind && a.gpu == b.gpu && a.for_gpus == b.for_gpus;
  }
  friend bool operator!=(const Device& a, const Device& b) { return !(a == b); }
};

/// The kind a flag or variable names ("cpu", "cuda" or "plan"); throws naming `source`.
inline DeviceKind parse_device_kind(const std::string& name, const std::string& source) {
  if (name == "cpu") return DeviceKind::cpu;
  if (name == "cuda") return DeviceKind::cuda;
  if (name == "plan") return DeviceKind::plan;
  throw Error(source + " is \"" + name + "\"; valid devices are \"cpu\", \"cuda\" and \"plan\"");
}

inline std::string device_kind_name(DeviceKind kind) {
  return kind == DeviceKind::cuda ? "cuda" : kind == DeviceKind::plan ? "plan" : "cpu";
}

}  // namespace meshtensor
