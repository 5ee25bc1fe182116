#pragma once
// Moving a GPU processor's memory: its blocks are CUDA managed memory (device/cuda_runtime.hpp),
// which the host can still reach page by page (the driver moves each page to whoever touches it).
// Kernels ask for their operands on the GPU before they start (prefetch_to_gpu), so a block that
// only GPU kernels touch stays there; values the host needs travel by the copy engine.

#include <cuda_runtime_api.h>

#include <cstddef>
#include <exception>
#include <utility>

#include "meshtensor/device/cuda.hpp"

namespace meshtensor::cuda {

/// Queues, on `stream`, the move of `bytes` bytes at `data` (a block or buffer of the processor:
/// managed memory) to the current GPU.
inline void prefetch_to_gpu(const void* data, std::size_t bytes, cudaStream_t stream) {
  if (bytes == 0) return;
  int device = 0;
  check(cudaGetDevice(&device), "cudaGetDevice");
#if CUDART_VERSION >= 13000
  cudaMemLocation location{};
  location.type = cudaMemLocationTypeDevice;
  location.id = device;
  check(cudaMemPrefetchAsync(data, bytes, location, 0, stream), "cudaMemPrefetchAsync");
#else
  check(cudaMemPrefetchAsync(data, bytes, device, stream), "cudaMemPrefetchAsync");
#endif
}

/// Copies `bytes` from the GPU's memory at `from` into the host's at `to` by the copy engine of
/// the calling processor's GPU, after the work queued before on its compute stream, and waits for
/// it: the host reads the values next, without touching the GPU's pages (which would move each page
/// it touches to the host, and the next kernel would move it back).
inline void copy_to_host(void* to, const void* from, std::size_t bytes) {
  if (bytes == 0) return;
  const cudaStream_t stream = compute_stream();
  check(cudaMemcpyAsync(to, from, bytes, cudaMemcpyDefault, stream), "cudaMemcpyAsync");
  wait_for_stream(stream, "a copy to the host");
}

/// Copies `bytes` from the host's pageable memory at `from` into the GPU's at `to`, in the order
/// of the processor's compute stream. It does not wait: such a copy has read its source when
/// cudaMemcpyAsync returns (CUDA documents), and the GPU's later work follows in stream order.
inline void copy_from_host(void* to, const void* from, std::size_t bytes) {
  if (bytes == 0) return;
  check(cudaMemcpyAsync(to, from, bytes, cudaMemcpyDefault, compute_stream()), "cudaMemcpyAsync");
}

/// `bytes` copied from the GPU's memory into page-locked host memory behind the work queued on
/// the calling processor's compute stream: the host goes on at once, and waits, in wait(), only
/// for what the copy still waits for (a copy into pageable memory would make it wait now).
class HostLanding {
 public:
  HostLanding(const void* from, std::size_t bytes) {
    if (bytes == 0) return;
    const cudaStream_t stream = compute_stream();
    check(cudaMallocHost(&host_, bytes), "cudaMallocHost");
    check(cudaEventCreateWithFlags(&done_, cudaEventDisableTiming), "cudaEventCreate");
    check(cudaMemcpyAsync(host_, from, bytes, cudaMemcpyDeviceToHost, stream), "cudaMemcpyAsync");
    check(cudaEventRecord(done_, stream), "cudaEventRecord");
  }
  ~HostLanding() {
    // The copy may still write host_: free it once done, or (unwinding from a failure, when the
    // GPU may wait for ever for a processor that stopped) never.
    if (done_ && cudaEventQuery(done_) != cudaSuccess) {
      if (std::uncaught_exceptions() > 0)
        host_ = nullptr;
      else
        (void)cudaEventSynchronize(done_);
    }
    if (done_) (void)cudaEventDestroy(done_);
    if (host_) (void)cudaFreeHost(host_);
  }
  HostLanding(const HostLanding&) = delete;
  HostLanding& operator=(const HostLanding&) = delete;

  /// The bytes on the host, once the copy has run.
  const void* wait() {
    if (done_ && cudaEventQuery(done_) != cudaSuccess) wait_for_event(done_, "a copy to the host");
    return host_;
  }

 private:
  void* host_ = nullptr;
  cudaEvent_t done_ = nullptr;
};

/// Device memory for the length of one call (a kernel's tables and partial sums, a library's
/// copies and workspace), allocated and freed in the order of `stream`; none for 0 bytes.
class StreamBuffer {
 public:
  StreamBuffer(std::size_t bytes, cudaStream_t stream) : stream_(stream) {
    if (bytes) check(cudaMallocAsync(&data_, bytes, stream), "cudaMallocAsync");
  }
  ~StreamBuffer() {
    if (data_) (void)cudaFreeAsync(data_, stream_);
  }
  StreamBuffer(StreamBuffer&& other) noexcept
      : stream_(other.stream_), data_(std::exchange(other.data_, nullptr)) {}
  StreamBuffer(const StreamBuffer&) = delete;
  StreamBuffer& operator=(const StreamBuffer&) = delete;
  StreamBuffer& operator=(StreamBuffer&&) = delete;

  template <class T>
  T* as() const {
    return static_cast<T*>(data_);
  }

 private:
  cudaStream_t stream_;
  void* data_ = nullptr;
};

}  // namespace meshtensor::cuda
