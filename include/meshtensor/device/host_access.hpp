#pragma once
// The host's way to a processor's memory. A processor that computes on a GPU queues its kernels,
// library calls and copies and returns without waiting for them, so the host prepares the next
// call while the GPU runs this one; before the host itself reads or writes a block (a file, a
// value, a test), it waits for that work. on_host() is that wait and the view after it: the block
// itself on the CPU; on a GPU, whose memory the host cannot touch, a copy on the host, whose
// writes go back to the block when the view goes or before an op next reads the block. A plan's
// blocks have no data and are refused.

#include <atomic>
#include <cstddef>
#include <cstring>
#include <memory>
#include <mutex>
#include <string>
#include <unordered_map>
#include <utility>
#include <vector>

#include <xtensor/xadapt.hpp>

#include "meshtensor/core/error.hpp"
#include "meshtensor/memory/array.hpp"
#if defined(MESHTENSOR_WITH_CUDA)
#include "meshtensor/device/cuda.hpp"
#include "meshtensor/device/memory.hpp"
#endif

namespace meshtensor {

/// Waits until the calling processor's device has run the work queued on it; returns at once on a
/// processor that computes on the CPU.
inline void wait_for_device() {
#if defined(MESHTENSOR_WITH_CUDA)
  cuda::finish_queued_work();
#endif
}

/// wait_for_device(), and the transfers the processor's communicators queued on their own streams:
/// before a CPU loop runs in place of a GPU kernel, while messages may be in flight.
inline void wait_for_all_device_work() {
#if defined(MESHTENSOR_WITH_CUDA)
  cuda::finish_all_work();
#endif
}

/// A block as the host sees it: an xtensor array over the block's memory (a GPU's: over a copy),
/// row-major in its shape.
/// It keeps alive what its keeper holds (a tensor's block), so it may outlive the tensor.
template <class T>
using HostView =
    decltype(xt::adapt_smart_ptr(std::declval<T*>(), std::declval<std::vector<std::size_t>>(),
                                 std::declval<std::shared_ptr<const void>>()));

namespace detail {
inline void require_data(MemorySpace space) {
  if (space == MemorySpace::none)
    throw Error("a block of a plan has a shape but no data; the host cannot read or write it");
}

// A GPU block's values on the host, for a view of it; for a view that writes, sent back to the
// block when the last view goes, or earlier by send_back_host_writes().
class HostCopy {
 public:
  HostCopy(std::size_t bytes, void* block, bool writes, std::shared_ptr<const void> keeper)
      : values_(bytes), block_(block), writes_(writes), keeper_(std::move(keeper)) {
#if defined(MESHTENSOR_WITH_CUDA)
    cuda::copy_to_host(values_.data(), block, bytes);
#else
    std::memcpy(values_.data(), block, bytes);
#endif
  }
  ~HostCopy() { send_back(); }
  HostCopy(const HostCopy&) = delete;
  HostCopy& operator=(const HostCopy&) = delete;

  char* values() { return values_.data(); }

  /// The host's writes into the block, now; later ones stay on the host (the block may have
  /// been written by the GPU since).
  void send_back() noexcept {
    std::lock_guard<std::mutex> lock(mutex_);
    if (!writes_) return;
    writes_ = false;
#if defined(MESHTENSOR_WITH_CUDA)
    // Done before the next op is queued, whatever the thread: cudaMemcpy from pageable memory may
    // return before its transfer (on the legacy stream, which the compute stream does not follow).
    (void)cudaMemcpy(block_, values_.data(), values_.size(), cudaMemcpyHostToDevice);
    (void)cudaStreamSynchronize(cudaStreamLegacy);
#endif
  }

 private:
  std::vector<char> values_;
  void* block_;
  bool writes_;
  std::shared_ptr<const void> keeper_;
  std::mutex mutex_;
};

// The host copies that may still write their blocks, by block.
struct OpenHostCopies {
  std::mutex mutex;
  std::unordered_multimap<const void*, std::weak_ptr<HostCopy>> copies;
  std::atomic<bool> any{false};
};
inline OpenHostCopies& open_host_copies() {
  static auto* open = new OpenHostCopies();  // never destroyed: views may outlive statics
  return *open;
}

template <class T>
std::shared_ptr<HostCopy> host_copy(const Array<T>& a, bool writes,
                                    std::shared_ptr<const void> keeper) {
  auto copy = std::make_shared<HostCopy>(a.size() * sizeof(T), const_cast<T*>(a.data()), writes,
                                         std::move(keeper));
  if (writes) {
    OpenHostCopies& open = open_host_copies();
    std::lock_guard<std::mutex> lock(open.mutex);
    for (auto it = open.copies.begin(); it != open.copies.end();)
      it = it->second.expired() ? open.copies.erase(it) : std::next(it);
    open.copies.emplace(a.data(), copy);
    open.any.store(true, std::memory_order_release);
  }
  return copy;
}
}  // namespace detail

/// Before an op reads or writes the block at `data`: the writes of host views of it, sent back
/// (nothing to do unless the block is a GPU's and a view for writing is open).
inline void send_back_host_writes(const void* data) {
  detail::OpenHostCopies& open = detail::open_host_copies();
  if (!open.any.load(std::memory_order_acquire)) return;
  std::vector<std::shared_ptr<detail::HostCopy>> found;
  {
    std::lock_guard<std::mutex> lock(open.mutex);
    const auto [first, last] = open.copies.equal_range(data);
    for (auto it = first; it != last; ++it)
      if (auto copy = it->second.lock()) found.push_back(std::move(copy));
    open.copies.erase(data);
    open.any.store(!open.copies.empty(), std::memory_order_release);
  }
  for (const auto& copy : found) copy->send_back();
}

/// The host's view of `a`, once the processor's device has finished the work queued on it;
/// `keeper` (if any) owns `a` and lives as long as the view. On a GPU, the view is a copy (see
/// the top of this file).
template <class T>
HostView<T> on_host(Array<T>& a, std::shared_ptr<const void> keeper = nullptr) {
  detail::require_data(a.space());
  if (a.space() == MemorySpace::device) {
    auto copy = detail::host_copy(a, /*writes=*/true, std::move(keeper));
    T* values = reinterpret_cast<T*>(copy->values());
    return xt::adapt_smart_ptr(std::move(values), a.shape(),
                               std::shared_ptr<const void>(std::move(copy)));
  }
  return xt::adapt_smart_ptr(a.data(), a.shape(), std::move(keeper));
}
template <class T>
HostView<const T> on_host(const Array<T>& a, std::shared_ptr<const void> keeper = nullptr) {
  detail::require_data(a.space());
  if (a.space() == MemorySpace::device) {
    auto copy = detail::host_copy(a, /*writes=*/false, std::move(keeper));
    const T* values = reinterpret_cast<const T*>(copy->values());
    return xt::adapt_smart_ptr(std::move(values), a.shape(),
                               std::shared_ptr<const void>(std::move(copy)));
  }
  return xt::adapt_smart_ptr(a.data(), a.shape(), std::move(keeper));
}

}  // namespace meshtensor
