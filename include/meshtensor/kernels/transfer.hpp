#pragma once
// Values cross between the host's memory and a processor's in one transfer, whichever memory the
// processor's is: by the GPU's copy engine for a GPU's (which the host cannot touch), a plain copy
// for the host's, not at all for a plan's blocks, which have no values (the host sees zeros). The
// host computes with or stores such values: a normalisation's parameters and statistics, a loss,
// generated data, files.

#include <algorithm>
#include <cstddef>
#include <cstdint>
#include <memory>
#include <utility>
#include <vector>

#include "meshtensor/memory/array.hpp"
#include "meshtensor/memory/pool.hpp"
#if defined(MESHTENSOR_WITH_CUDA)
#include "meshtensor/device/memory.hpp"
#endif

namespace meshtensor {

/// to[i] = from[i] for i < n: `from` in the processor's memory (in `space`), `to` the host's.
template <class T>
void copy_to_host(const T* from, MemorySpace space, std::int64_t n, T* to) {
  if (n <= 0) return;
  if (space == MemorySpace::none) return std::fill(to, to + n, T{});
#if defined(MESHTENSOR_WITH_CUDA)
  if (space == MemorySpace::device) return cuda::copy_to_host(to, from, std::size_t(n) * sizeof(T));
#endif
  std::copy(from, from + n, to);
}

/// to[i] = from[i] for i < n: `from` in the host's memory, `to` the processor's (in `space`).
template <class T>
void copy_from_host(const T* from, std::int64_t n, T* to, MemorySpace space) {
  if (n <= 0 || space == MemorySpace::none) return;
#if defined(MESHTENSOR_WITH_CUDA)
  if (space == MemorySpace::device)
    return cuda::copy_from_host(to, from, std::size_t(n) * sizeof(T));
#endif
  std::copy(from, from + n, to);
}

/// The values of `a`, in the host's memory.
template <class T>
std::vector<T> to_host_vector(const Array<T>& a) {
  std::vector<T> values(a.size());
  copy_to_host(a.data(), a.space(), std::int64_t(a.size()), values.data());
  return values;
}

/// An array of `shape` in the processor's memory holding `values` (one per element).
template <class T>
Array<T> array_from_host(const std::vector<T>& values, typename Array<T>::shape_type shape) {
  Array<T> out = Array<T>::from_shape(std::move(shape));
  copy_from_host(values.data(), std::int64_t(out.size()), out.data(), out.space());
  return out;
}

/// A buffer in the processor's memory holding `values`.
template <class T>
Buffer<T> buffer_from_host(const std::vector<T>& values) {
  Buffer<T> out(values.size());
  copy_from_host(values.data(), std::int64_t(values.size()), out.data(), out.space());
  return out;
}

/// `n` values of the processor's memory on their way to the host: a GPU queues their copy behind
/// its work and values() waits for it then, when the work has likely run (a step later: the GPU
/// never idles for it); elsewhere they are copied at once.
template <class T>
class ValuesOnTheWay {
 public:
  ValuesOnTheWay(const T* from, MemorySpace space, std::int64_t n) : values_(std::size_t(n)) {
#if defined(MESHTENSOR_WITH_CUDA)
    if (space == MemorySpace::device) {
      landing_ = std::make_unique<cuda::HostLanding>(from, values_.size() * sizeof(T));
      return;
    }
#endif
    copy_to_host(from, space, n, values_.data());
  }

  /// Whether the copy is still queued (a GPU's, not yet read).
  bool on_the_way() const {
#if defined(MESHTENSOR_WITH_CUDA)
    return landing_ != nullptr;
#else
    return false;
#endif
  }

  /// The values (waiting, on a GPU, for their copy if it has not run yet).
  const std::vector<T>& values() {
#if defined(MESHTENSOR_WITH_CUDA)
    if (landing_) {
      const auto* landed = static_cast<const T*>(landing_->wait());
      std::copy(landed, landed + values_.size(), values_.begin());
      landing_.reset();
    }
#endif
    return values_;
  }

 private:
  std::vector<T> values_;
#if defined(MESHTENSOR_WITH_CUDA)
  std::unique_ptr<cuda::HostLanding> landing_;
#endif
};

/// What the host reads of `a`'s values: `a`'s memory itself where it is the host's, else a copy
/// in `staging`, carried over in one transfer (files written from a block, say).
template <class T>
const T* readable_on_host(const Array<T>& a, std::vector<T>& staging) {
  if (a.space() == MemorySpace::host) return a.data();
  staging.resize(a.size());
  copy_to_host(a.data(), a.space(), std::int64_t(a.size()), staging.data());
  return staging.data();
}

/// Where the host writes the values meant for `a` (generated data, a block read from a file):
/// `a`'s memory itself where it is the host's, else `staging`, which written_on_host() then sends
/// over in one transfer.
template <class T>
T* writable_on_host(Array<T>& a, std::vector<T>& staging) {
  if (a.space() == MemorySpace::host) return a.data();
  if (a.space() == MemorySpace::none) return nullptr;  // a plan's block: no values to write
  staging.resize(a.size());
  return staging.data();
}
template <class T>
void written_on_host(const std::vector<T>& staging, Array<T>& a) {
  if (a.space() != MemorySpace::host && a.space() != MemorySpace::none)
    copy_from_host(staging.data(), std::int64_t(a.size()), a.data(), a.space());
}

}  // namespace meshtensor
