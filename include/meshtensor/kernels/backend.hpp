#pragma once
// The one seam between the ops and the kernels. Every kernel family (kernels/copy.hpp,
// elementwise.hpp, sum.hpp, norm.hpp, optimizer.hpp, conv.hpp, pool.hpp, resample.hpp) runs a call
// on the backend of the calling processor's device (device/processor.hpp): the CPU's kernels
// (kernels/cpu/), the GPU's (kernels/cuda/, with MESHTENSOR_WITH_CUDA) or a plan's, which count
// the work and touch no data (kernels/plan/). Ops name no backend; a family says, in one place,
// what each backend does with a call.

#include "meshtensor/device/activity.hpp"
#include "meshtensor/device/host_access.hpp"
#include "meshtensor/device/processor.hpp"
#include "meshtensor/kernels/plan/counts.hpp"
#include "meshtensor/kernels/timing.hpp"

namespace meshtensor::kernels {

enum class Backend { cpu, cuda, plan };

/// The backend of the calling thread's processor.
inline Backend current_backend() {
  switch (current_processor().device().kind) {
    case DeviceKind::cuda:
      return Backend::cuda;
    case DeviceKind::plan:
      return Backend::plan;
    default:
      return Backend::cpu;
  }
}

/**
 * One kernel call on the current backend: a plan counts it (`plan`), a GPU runs `on_gpu` (which
 * returns false for what its kernels cannot run: an operand type, a function the user wrote), and
 * the CPU runs `on_cpu` — on a GPU processor, after the work queued there (messages in flight
 * included), whose memory the CPU
 * loop then reads and writes (managed memory), and timed where kernel timing is on
 * (kernels/timing.hpp). What a kernel allocates counts as workspace.
 */
template <class Plan, class Gpu, class Cpu>
void dispatch(Plan&& plan, [[maybe_unused]] Gpu&& on_gpu, Cpu&& on_cpu) {
  const MemoryUseScope scratch(MemoryUse::workspace);  // what a kernel allocates, it frees
  switch (current_backend()) {
    case Backend::plan:
      plan();
      return;
    case Backend::cuda:
      if (run_on_gpu(plan, on_gpu)) return;
      ++device_activity().host_fallbacks;
      wait_for_all_device_work();
      break;
    case Backend::cpu:
      break;
  }
  run_on_cpu(plan, on_cpu);
}

}  // namespace meshtensor::kernels

/// The GPU arm of dispatch(): the call, where the GPU backend is compiled in; else nothing runs.
#if defined(MESHTENSOR_WITH_CUDA)
#define MESHTENSOR_ON_GPU(...) [&] { return static_cast<bool>(__VA_ARGS__); }
#else
#define MESHTENSOR_ON_GPU(...) [] { return false; }
#endif
