#pragma once
// Moving values between the host and a GPU processor's memory (device/cuda_runtime.hpp's
// device_memory(), which the host cannot touch): by the GPU's copy engine, in the order of the
// processor's compute stream; and device memory for the length of one call.

#include <cuda_runtime_api.h>

#include <cstddef>
#include <cstring>
#include <exception>
#include <utility>

#include "meshtensor/device/cuda.hpp"

namespace meshtensor::cuda {

/// Copies `bytes` from the GPU's memory at `from` into the host's at `to` by the copy engine of
/// the calling processor's GPU, after the work queued before on its compute stream, and waits for
/// it: the host reads the values next.
inline void copy_to_host(void* to, const void* from, std::size_t bytes) {
  if (bytes == 0) return;
  refuse_in_capture("a copy to the host");
  const cudaStream_t stream = compute_stream();
  check(cudaMemcpyAsync(to, from, bytes, cudaMemcpyDefault, stream), "cudaMemcpyAsync");
  wait_for_stream(stream, "a copy to the host");
}

/// Copies `bytes` from the host's pageable memory at `from` into the GPU's at `to`, in the order
/// of `stream`. It does not wait: such a copy has read its source when cudaMemcpyAsync returns
/// (CUDA documents), and the GPU's later work follows in stream order. While a step is captured,
/// the values go through page-locked memory kept for the graph, whose copy reads them at every
/// launch (a graph cannot copy from pageable memory).
inline void copy_from_host(void* to, const void* from, std::size_t bytes,
                           cudaStream_t stream = compute_stream()) {
  if (bytes == 0) return;
  if (current_processor().capturing()) {
    auto* staged = graph_capture().staged;
    void* pinned = nullptr;
    check(cudaMallocHost(&pinned, bytes), "cudaMallocHost");
    staged->emplace_back(pinned, [](void* p) { (void)cudaFreeHost(p); });
    std::memcpy(pinned, from, bytes);
    from = pinned;
  }
  check(cudaMemcpyAsync(to, from, bytes, cudaMemcpyDefault, stream), "cudaMemcpyAsync");
}

/// `bytes` copied from the GPU's memory into page-locked host memory behind the work queued on
/// the calling processor's compute stream: the host goes on at once, and waits, in wait(), only
/// for what the copy still waits for (a copy into pageable memory would make it wait now).
class HostLanding {
 public:
  HostLanding(const void* from, std::size_t bytes) {
    refuse_in_capture("a copy to the host");
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
/// copies and workspace), from the calling processor's pool, where the next call may reuse it: its
/// work follows on the same compute stream. None for 0 bytes.
class StreamBuffer {
 public:
  explicit StreamBuffer(std::size_t bytes) {
    if (bytes) data_ = memory_pool().allocate(bytes);
  }
  ~StreamBuffer() { MemoryPool::deallocate(data_); }
  StreamBuffer(StreamBuffer&& other) noexcept : data_(std::exchange(other.data_, nullptr)) {}
  StreamBuffer(const StreamBuffer&) = delete;
  StreamBuffer& operator=(const StreamBuffer&) = delete;
  StreamBuffer& operator=(StreamBuffer&&) = delete;

  template <class T>
  T* as() const {
    return static_cast<T*>(data_);
  }

 private:
  void* data_ = nullptr;
};

}  // namespace meshtensor::cuda
