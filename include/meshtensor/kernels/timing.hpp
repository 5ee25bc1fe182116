#pragma once
// Kernel timing: while it is on for a processor, each CPU kernel call is counted as a plan would
// count it (kernels/plan/counts.hpp) and timed, so that the seconds of a family or convolution
// class stand beside the FLOPs or elements a plan counts for the same calls. This is how a
// machine's throughput is calibrated (plan/calibrate.hpp); off, a call pays one flag test.

#include <array>
#include <chrono>
#include <cstddef>

#include "meshtensor/device/processor.hpp"
#include "meshtensor/kernels/plan/counts.hpp"

namespace meshtensor::kernels {

/// One processor's kernel time while timing is on, by family and by convolution class. A call
/// made inside another's CPU kernel counts for its own family only.
struct KernelTimes {
  bool on = false;
  std::array<double, plan::Counts::families> seconds{};
  std::array<double, plan::ConvClass::count> conv_seconds{};
  double total = 0;
  std::chrono::steady_clock::time_point from = std::chrono::steady_clock::now();

  /// Starts again from nothing, now (the part of a run to measure begins).
  void restart() {
    seconds = {};
    conv_seconds = {};
    total = 0;
    from = std::chrono::steady_clock::now();
  }
  double wall_seconds() const {
    return std::chrono::duration<double>(std::chrono::steady_clock::now() - from).count();
  }

  void add(const plan::Counts::Call& call, double s) {
    seconds[static_cast<std::size_t>(call.family)] += s;
    if (call.family == plan::Family::conv) conv_seconds[call.conv_class] += s;
    total += s;
  }
};

/// The calling processor's kernel times.
inline KernelTimes& kernel_times() { return current_processor().state<KernelTimes>(); }

/// Runs a CPU kernel: timed, beside the plan's count of it (`count`), while timing is on.
template <class Count, class Cpu>
void run_on_cpu(Count&& count, Cpu&& on_cpu) {
  KernelTimes& times = kernel_times();
  if (!times.on) return on_cpu();
  count();
  const plan::Counts::Call call = plan::counts().last;
  const double inner_before = times.total;
  const auto start = std::chrono::steady_clock::now();
  on_cpu();
  const double took =
      std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
  times.add(call, took - (times.total - inner_before));
}

}  // namespace meshtensor::kernels
