#pragma once
// What a processor asked of its device, counted: the figures a GPU's step is judged by besides its
// time (bench_unet reports them per step). On a CPU processor they stay 0.

#include <cstdint>

#include "meshtensor/device/processor.hpp"

namespace meshtensor {

struct DeviceActivity {
  std::uint64_t kernels = 0;          // meshtensor's own kernels launched
  std::uint64_t library_calls = 0;    // cuDNN and cuBLAS calls that queue work
  std::uint64_t library_queries = 0;  // cuDNN's heuristics asked for a shape's algorithm
  std::uint64_t waits = 0;            // times the host blocked until queued device work had run
  std::uint64_t host_fallbacks = 0;   // CPU loops run on the device's blocks in a kernel's place
  std::uint64_t graph_launches = 0;   // captured steps launched as CUDA graphs (StepGraph)
};

/// The calling thread's processor's counts, since it began.
inline DeviceActivity& device_activity() { return current_processor().state<DeviceActivity>(); }

}  // namespace meshtensor
