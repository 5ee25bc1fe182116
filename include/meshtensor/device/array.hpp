#pragma once
// Array<T>: the n-dimensional array a processor keeps its blocks in — an xtensor array whose
// memory comes from the processor's pool (memory/pool.hpp).

#include <cstddef>
#include <type_traits>
#include <utility>
#include <vector>

#include <xtensor/xarray.hpp>

#include "meshtensor/device/processor.hpp"

namespace meshtensor {

/// A standard allocator over the calling processor's MemoryPool.
template <class T>
struct PoolAllocator {
  using value_type = T;
  using is_always_equal = std::true_type;  // any instance frees any block: blocks name their pool

  PoolAllocator() noexcept = default;
  template <class U>
  PoolAllocator(const PoolAllocator<U>&) noexcept {}

  T* allocate(std::size_t n) { return static_cast<T*>(memory_pool().allocate(n * sizeof(T))); }
  void deallocate(T* p, std::size_t) noexcept { MemoryPool::deallocate(p); }

  // Default-initialisation, not value-initialisation: a buffer of n floats is not zeroed, since
  // every user overwrites it (zeroing also faults in every page before the kernel does).
  template <class U>
  void construct(U* p) noexcept(std::is_nothrow_default_constructible_v<U>) {
    ::new (static_cast<void*>(p)) U;
  }
  template <class U, class... Args>
  void construct(U* p, Args&&... args) {
    ::new (static_cast<void*>(p)) U(std::forward<Args>(args)...);
  }

  template <class U>
  bool operator==(const PoolAllocator<U>&) const noexcept {
    return true;
  }
  template <class U>
  bool operator!=(const PoolAllocator<U>&) const noexcept {
    return false;
  }
};

/// A processor's block or buffer: row-major, memory from its pool.
template <class T>
using Array = xt::xarray<T, xt::layout_type::row_major, PoolAllocator<T>>;

/// An array without elements, for a variable filled later. (A default-constructed Array is a
/// 0-d array of one element, allocated and zeroed by the host: on a processor that computes on a
/// GPU that writes to the GPU's memory from the host.)
template <class T>
Array<T> empty_array() {
  return Array<T>::from_shape({0});
}

/// A flat buffer from the processor's pool (messages, kernel scratch); `Buffer<T>(n)` leaves its
/// elements uninitialised, `Buffer<T>(n, value)` fills them.
template <class T>
using Buffer = std::vector<T, PoolAllocator<T>>;

}  // namespace meshtensor
