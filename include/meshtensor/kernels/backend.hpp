#pragma once
// The one seam between the ops and the kernels. Every kernel family (kernels/copy.hpp,
// elementwise.hpp, sum.hpp, norm.hpp, optimizer.hpp, conv.hpp, pool.hpp, resample.hpp) runs a call
// on the backend of the calling processor's device (device/processor.hpp): the CPU's kernels
// (kernels/cpu/), the GPU's (kernels/cuda/, with MESHTENSOR_WITH_CUDA) or a plan's, which count
// the work and touch no data (kernels/plan/). Ops name no backend; a family says, in one place,
// what each backend does with a call.

#include <cxxabi.h>

#include <cstdlib>
#include <memory>
#include <string>
#include <type_traits>
#include <typeinfo>

#include "meshtensor/core/error.hpp"
#include "meshtensor/device/activity.hpp"
#include "meshtensor/device/host_access.hpp"
#include "meshtensor/device/processor.hpp"
#include "meshtensor/kernels/host_operands.hpp"
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

/// Whether this processor's kernels take a GPU's roads where those differ from the CPU's (which
/// fused kernels run, what a call allocates): a GPU's, and a plan's that stands for a run on
/// GPUs, so that the plan allocates what that run will.
inline bool takes_gpu_roads() {
  const Device& device = current_processor().device();
  return device.is_cuda() || (device.is_plan() && device.for_gpus);
}

namespace detail {
// The name of a kernel family's call, from the type of its CPU loop (a lambda in the call).
inline std::string call_name(const std::type_info& loop) {
  int status = 0;
  std::unique_ptr<char, void (*)(void*)> name(
      abi::__cxa_demangle(loop.name(), nullptr, nullptr, &status), std::free);
  std::string text = status == 0 ? name.get() : loop.name();
  const auto lambda = text.find("::{lambda");
  return lambda == std::string::npos ? text : text.substr(0, lambda);
}

// Runs a CPU loop that takes its operands from a HostOperands (copies where `copied`), or none.
template <class Cpu>
void run_loop(Cpu& on_cpu, bool copied) {
  if constexpr (std::is_invocable_v<Cpu&, HostOperands&>) {
    HostOperands operands(copied);
    on_cpu(operands);
    operands.send_back();
  } else {
    if (copied)
      throw DeviceError(call_name(typeid(Cpu)) +
                        " has no GPU kernel for this call (its element type or shape), and its "
                        "CPU loop cannot reach GPU memory; run it on a CPU processor (threads or "
                        "mpi transport)");
    on_cpu();
  }
}
}  // namespace detail

/**
 * One kernel call on the current backend: a plan counts it (`plan`), a GPU runs `on_gpu` (which
 * returns false for what its kernels cannot run: an operand type, a function the user wrote), and
 * the CPU runs `on_cpu` — on a GPU processor, after the work queued there (messages in flight
 * included), on copies of its operands (a loop taking a HostOperands&), and timed where kernel
 * timing is on (kernels/timing.hpp). What a kernel allocates counts as workspace.
 */
template <class Plan, class Gpu, class Cpu>
void dispatch(Plan&& plan, [[maybe_unused]] Gpu&& on_gpu, Cpu&& on_cpu) {
  const MemoryUseScope scratch(MemoryUse::workspace);  // what a kernel allocates, it frees
  bool copied = false;
  switch (current_backend()) {
    case Backend::plan:
      plan();
      return;
    case Backend::cuda:
      if (run_on_gpu(plan, on_gpu)) return;
      ++device_activity().host_fallbacks;
      wait_for_all_device_work();
      copied = true;
      break;
    case Backend::cpu:
      break;
  }
  run_on_cpu(plan, [&] { detail::run_loop(on_cpu, copied); });
}

}  // namespace meshtensor::kernels

/// The GPU arm of dispatch(): the call, where the GPU backend is compiled in; else nothing runs.
#if defined(MESHTENSOR_WITH_CUDA)
#define MESHTENSOR_ON_GPU(...) [&] { return static_cast<bool>(__VA_ARGS__); }
#else
#define MESHTENSOR_ON_GPU(...) [] { return false; }
#endif
