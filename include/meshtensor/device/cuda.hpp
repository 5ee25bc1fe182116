#pragma once
// A processor's GPU as the backends use it: the processor's compute stream, on which its kernels,
// library calls and copies run in order; the wait before the host touches what they use; the
// library handles kept per processor. The processor is the calling thread's (device/processor.hpp).

#include <cuda_runtime_api.h>

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

/// Waits until the GPU has run everything queued on the calling processor's compute stream;
/// nothing to wait for when it computes on the CPU. GPU calls return once queued (the host goes on
/// preparing the next while they run); the host waits before it touches memory that queued work
/// may read or write: a CPU loop over a block in GPU memory, a result it reads.
inline void finish_queued_work() {
  if (!computes_on_gpu()) return;
  ++device_activity().waits;
  check(cudaStreamSynchronize(compute_stream()), "cudaStreamSynchronize");
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
