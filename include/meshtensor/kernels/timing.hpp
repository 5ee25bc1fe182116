#pragma once
// Kernel timing: while it is on for a processor, each kernel call is counted as a plan would
// count it (kernels/plan/counts.hpp) and timed, so that the seconds of a family or convolution
// class stand beside the FLOPs or elements a plan counts for the same calls. This is how a
// machine's throughput is calibrated (plan/calibrate.hpp); off, a call pays one flag test. A
// GPU's calls are timed on the GPU, by events around them on the compute stream, and added up
// when settled (which waits for the GPU).

#include <array>
#include <chrono>
#include <cstddef>
#include <vector>

#include "meshtensor/device/processor.hpp"
#include "meshtensor/kernels/plan/counts.hpp"
#if defined(MESHTENSOR_WITH_CUDA)
#include "meshtensor/device/cuda.hpp"
#endif

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
    settle();
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

#if defined(MESHTENSOR_WITH_CUDA)
  // A GPU call between two events, not yet added; calls made inside it count as its own.
  struct GpuCall {
    plan::Counts::Call call;
    cudaEvent_t start, end;
  };
  std::vector<GpuCall> queued;
  int gpu_depth = 0;

  /// Adds the GPU calls' times, once the GPU has run them.
  void settle() {
    for (GpuCall& c : queued) {
      float ms = 0;
      cuda::check(cudaEventSynchronize(c.end), "cudaEventSynchronize");
      cuda::check(cudaEventElapsedTime(&ms, c.start, c.end), "cudaEventElapsedTime");
      add(c.call, ms / 1000.0);
      (void)cudaEventDestroy(c.start), (void)cudaEventDestroy(c.end);
    }
    queued.clear();
  }
#else
  void settle() {}
#endif
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

/// Runs a GPU kernel call, which returns false where the GPU cannot run it: timed on the GPU,
/// beside the plan's count of it, while timing is on.
template <class Count, class Gpu>
bool run_on_gpu([[maybe_unused]] Count&& count, Gpu&& on_gpu) {
#if defined(MESHTENSOR_WITH_CUDA)
  KernelTimes& times = kernel_times();
  if (!times.on || times.gpu_depth > 0) return on_gpu();
  count();
  KernelTimes::GpuCall timed{plan::counts().last, nullptr, nullptr};
  const cudaStream_t stream = cuda::compute_stream();
  cuda::check(cudaEventCreateWithFlags(&timed.start, cudaEventDefault), "cudaEventCreate");
  cuda::check(cudaEventCreateWithFlags(&timed.end, cudaEventDefault), "cudaEventCreate");
  cuda::check(cudaEventRecord(timed.start, stream), "cudaEventRecord");
  ++times.gpu_depth;
  bool ran = false;
  try {
    ran = on_gpu();
  } catch (...) {
    --times.gpu_depth;
    (void)cudaEventDestroy(timed.start), (void)cudaEventDestroy(timed.end);
    throw;
  }
  --times.gpu_depth;
  if (!ran) {
    (void)cudaEventDestroy(timed.start), (void)cudaEventDestroy(timed.end);
    return false;
  }
  cuda::check(cudaEventRecord(timed.end, stream), "cudaEventRecord");
  times.queued.push_back(timed);
  return true;
#else
  return on_gpu();
#endif
}

}  // namespace meshtensor::kernels
