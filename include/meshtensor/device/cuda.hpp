#pragma once
// A processor's GPU as the backends use it: the processor's compute stream, on which its kernels,
// library calls and copies run in order; the wait before the host touches what they use; the
// library handles kept per processor. The processor is the calling thread's (device/processor.hpp).

#include <cuda_runtime_api.h>

#include <functional>

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
  if (const auto& poll = gpu_wait().poll)
    return poll([stream] { return cudaStreamQuery(stream); }, what);  // counts it
  ++device_activity().waits;
  check(cudaStreamSynchronize(stream), "cudaStreamSynchronize");
}

/// Waits until `event` has been reached.
inline void wait_for_event(cudaEvent_t event, const char* what) {
  if (const auto& poll = gpu_wait().poll)
    return poll([event] { return cudaEventQuery(event); }, what);  // counts it
  ++device_activity().waits;
  check(cudaEventSynchronize(event), "cudaEventSynchronize");
}

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
  ++device_activity().waits;
  check(cudaDeviceSynchronize(), "cudaDeviceSynchronize");
}

}  // namespace meshtensor::cuda
