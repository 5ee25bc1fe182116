#pragma once
// The host's way to a processor's memory. A processor that computes on a GPU queues its kernels,
// library calls and copies and returns without waiting for them, so the host prepares the next
// call while the GPU runs this one; before the host itself reads or writes a block (a file, a
// value, a test), it waits for that work. on_host() is that wait and the view after it; a plan's
// blocks have no data and are refused. On the CPU there is nothing to wait for.

#include <cstddef>
#include <memory>
#include <string>
#include <utility>
#include <vector>

#include <xtensor/xadapt.hpp>

#include "meshtensor/core/error.hpp"
#include "meshtensor/device/array.hpp"
#if defined(MESHTENSOR_WITH_CUDA)
#include "meshtensor/device/cuda.hpp"
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

/// A block as the host sees it: an xtensor array over the block's memory, row-major in its shape.
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
}  // namespace detail

/// The host's view of `a`, once the processor's device has finished the work queued on it;
/// `keeper` (if any) owns `a` and lives as long as the view.
template <class T>
HostView<T> on_host(Array<T>& a, std::shared_ptr<const void> keeper = nullptr) {
  detail::require_data(a.space());
  if (a.space() == MemorySpace::device) wait_for_device();
  return xt::adapt_smart_ptr(a.data(), a.shape(), std::move(keeper));
}
template <class T>
HostView<const T> on_host(const Array<T>& a, std::shared_ptr<const void> keeper = nullptr) {
  detail::require_data(a.space());
  if (a.space() == MemorySpace::device) wait_for_device();
  return xt::adapt_smart_ptr(a.data(), a.shape(), std::move(keeper));
}

}  // namespace meshtensor
