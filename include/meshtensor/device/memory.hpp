#pragma once
// Moving a GPU processor's memory: its blocks are CUDA managed memory (device/cuda_runtime.hpp),
// which the host can still reach page by page (the driver moves each page to whoever touches it).
// Kernels ask for their operands on the GPU before they start (prefetch_to_gpu), so a block that
// only GPU kernels touch stays there; values the host needs travel by the copy engine.

#include <cuda_runtime_api.h>

#include <cstddef>
#include <utility>

#include "meshtensor/device/cuda.hpp"

namespace meshtensor::cuda {

/// Queues, on `stream`, the move of `bytes` bytes of managed memory at `data` to the current GPU;
/// does nothing for other memory.
inline void prefetch_to_gpu(const void* data, std::size_t bytes, cudaStream_t stream) {
  if (bytes == 0 || memory_type(data) != cudaMemoryTypeManaged) return;
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

/// Copies `bytes` from `from` to `to`, one of them host memory, by the copy engine of the calling
/// thread's GPU, in the order of its compute stream: the host reads or writes the values without
/// touching the GPU's pages (which would move each page it touches to the host, and the next
/// kernel moves it back). Into host memory, it waits for the copy, which the host reads next. Out
/// of pageable host memory it does not: such a copy has read its source when cudaMemcpyAsync
/// returns (CUDA documents), and the GPU's later work on the values follows in stream order. (A
/// copy out of pinned memory reads it later, so the caller's buffer must wait for it.)
inline void copy_through_gpu(void* to, const void* from, std::size_t bytes) {
  if (bytes == 0) return;
  const cudaStream_t stream = compute_stream();
  check(cudaMemcpyAsync(to, from, bytes, cudaMemcpyDefault, stream), "cudaMemcpyAsync");
  const bool from_pinned = memory_type(from) == cudaMemoryTypeHost;
  if (!device_accessible(to) || from_pinned)
    check(cudaStreamSynchronize(stream), "cudaStreamSynchronize");
}

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
