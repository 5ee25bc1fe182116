#pragma once
// Buffers in the calling processor's memory for kernel tests that run on a GPU (or the emulated
// one), whose memory the host reaches only by copies.

#include <cstddef>
#include <cstdint>
#include <vector>

#include <meshtensor/kernels/transfer.hpp>
#include <meshtensor/memory/array.hpp>

namespace meshtensor::testing {

/// A copy of `values` in the processor's memory.
template <class T>
Buffer<T> on_gpu(const std::vector<T>& values) {
  return buffer_from_host(values);
}

/// `n` copies of `value` in the processor's memory.
template <class T>
Buffer<T> filled(std::size_t n, T value) {
  return on_gpu(std::vector<T>(n, value));
}

/// The values of `b`, copied to the host after the work queued before.
template <class T>
std::vector<T> to_host(const Buffer<T>& b) {
  std::vector<T> values(b.size());
  copy_to_host(b.data(), b.space(), std::int64_t(b.size()), values.data());
  return values;
}

}  // namespace meshtensor::testing
