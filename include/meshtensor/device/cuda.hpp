#pragma once
// A processor's GPU as the backends use it: the processor's compute stream, on which its kernels,
// library calls and copies run in order; the wait before the host touches what they use; the
// library handles kept per processor. The processor is the calling thread's (device/processor.hpp).

#include <cuda_runtime_api.h>

#include <functional>
#include <memory>
#include <string>
#include <vector>

#include "meshtensor/device/activity.hpp"
#include "meshtensor/device/cuda_runtime.hpp"
#include "meshtensor/device/processor.hpp"

namespace meshtensor::cuda {

/// Whether the calling thread's processor computes on a GPU.
inline bool computes_on_gpu() { return current_processor().device().is_cuda(); }

namespace detail {
struct ComputeStream {
  cudaStream_t stream = nullptr;
  ~ComputeStream() {
    if (stream) (void)cudaStreamDestroy(stream);
  }
};
}  // namespace detail

/// The calling processor's stream on its GPU, on which its kernels (cuDNN's and meshtensor's own)
/// run in order; made on first use, kept for the processor's life.
inline cudaStream_t compute_stream() {
  auto& s = current_processor().state<detail::ComputeStream>();
  if (!s.stream)
    check(cudaStreamCreateWithFlags(&s.stream, cudaStreamNonBlocking), "cudaStreamCreate");
  return s.stream;
}

/// While the calling processor's work is captured into a CUDA graph (device/step_graph.hpp): the
/// page-locked copies of host values that the graph's copies read at every launch, kept as long as
/// the graph. Null when no capture is under way.
struct GraphCapture {
  std::vector<std::shared_ptr<void>>* staged = nullptr;
};
inline GraphCapture& graph_capture() { return current_processor().state<GraphCapture>(); }

/// Throws where the host would wait for its GPU (`what`) while a step is captured: the captured
/// work has not run, and never will until the graph is launched.
inline void refuse_in_capture(const char* what) {
  if (!current_processor().capturing()) return;
  throw Error(std::string("a step captured as a CUDA graph (StepGraph) waited for its GPU: ") +
              what +
              "; a captured step may not wait for its own work: read its results after "
              "StepGraph::run returns");
}

/// How the host waits for its GPU: CUDA's blocking calls, unless a transport that queues its
/// messages on the GPU installs `poll`, a wait that polls `done` (a stream's or an event's query),
/// checks the transport for errors, gives up at its deadline and counts itself in
/// device_activity(): a GPU may wait for a processor that stopped, and no wait of the host's may
/// last for ever.
struct GpuWait {
  std::function<void(const std::function<cudaError_t()>& done, const char* what)> poll;
};
inline GpuWait& gpu_wait() { return current_processor().state<GpuWait>(); }

/// Waits until `stream` has run everything queued on it.
inline void wait_for_stream(cudaStream_t stream, const char* what) {
  refuse_in_capture(what);
  if (const auto& poll = gpu_wait().poll)
    return poll([stream] { return cudaStreamQuery(stream); }, what);  // counts it
  ++device_activity().waits;
  check(cudaStreamSynchronize(stream), "cudaStreamSynchronize");
}

/// Waits until `event` has been reached.
inline void wait_for_event(cudaEvent_t event, const char* what) {
  refuse_in_capture(what);
  if (const auto& poll = gpu_wait().poll)
    return poll([event] { return cudaEventQuery(event); }, what);  // counts it
  ++device_activity().waits;
  check(cudaEventSynchronize(event), "cudaEventSynchronize");
}

/// An event that records times on a stream, destroyed with the object (timing kernels' candidates).
class TimingEvent {
 public:
  TimingEvent() { check(cudaEventCreateWithFlags(&event_, cudaEventDefault), "cudaEventCreate"); }
  ~TimingEvent() { (void)cudaEventDestroy(event_); }
  TimingEvent(const TimingEvent&) = delete;
  TimingEvent& operator=(const TimingEvent&) = delete;

  void record(cudaStream_t stream) { check(cudaEventRecord(event_, stream), "cudaEventRecord"); }
  /// Waits until the stream reached this event, then gives the milliseconds since `start`.
  float ms_since(const TimingEvent& start, const char* what) const {
    wait_for_event(event_, what);
    float ms = 0;
    check(cudaEventElapsedTime(&ms, start.event_, event_), "cudaEventElapsedTime");
    return ms;
  }

 private:
  cudaEvent_t event_ = nullptr;
};

/// Waits until the GPU has run everything queued on the calling processor's compute stream;
/// nothing to wait for when it computes on the CPU. GPU calls return once queued (the host goes on
/// preparing the next while they run); the host waits before it touches memory that queued work
/// may read or write: a CPU loop over a block in GPU memory, a result it reads.
inline void finish_queued_work() {
  if (!computes_on_gpu()) return;
  wait_for_stream(compute_stream(), "the GPU's queued work");
}

/// Waits for everything queued on the GPU, the communicators' streams included (halo messages in
/// flight while the processor computes): a CPU loop run in a GPU kernel's place may touch pages
/// that a transfer still reads or writes.
inline void finish_all_work() {
  if (!computes_on_gpu()) return;
  refuse_in_capture("all the GPU's queued work");
  ++device_activity().waits;
  check(cudaDeviceSynchronize(), "cudaDeviceSynchronize");
}

}  // namespace meshtensor::cuda
