#pragma once
// Array<T> and Buffer<T>: the memory a processor keeps its blocks and buffers in, from its pool,
// each knowing where it lives (the host's memory, a GPU's, or none for a plan). Kernels get their
// addresses; the host reads or writes a block only through device/host_access.hpp, which waits for
// the device first, and values cross over through kernels/transfer.hpp. Neither is copied
// implicitly: a copy is a kernel (kernels::copy_of).

#include <algorithm>
#include <cstddef>
#include <initializer_list>
#include <iterator>
#include <string>
#include <utility>
#include <vector>

#include "meshtensor/core/error.hpp"
#include "meshtensor/memory/block_limit.hpp"
#include "meshtensor/memory/pool.hpp"
#include "meshtensor/memory/processor_memory.hpp"

namespace meshtensor {
namespace detail {

// `n` elements of T from the calling processor's pool, freed when the block goes; its memory space
// is the pool's. Uninitialised: every user overwrites it, and zeroing would fault in every page.
template <class T>
class PoolBlock {
 public:
  PoolBlock() : space_(memory_pool().source().space) {}
  explicit PoolBlock(std::size_t n) {
    ProcessorMemory& memory = current_memory();
    MemoryPool& pool = memory.pool();
    space_ = pool.source().space;
    if (n == 0) return;
    // A plan's blocks hold no memory: only real ones are held to the machine's.
    const std::size_t bytes = checked_block_bytes(
        n, sizeof(T),
        [&memory] { return memory.label().empty() ? std::string("this process") : memory.label(); },
        space_ != MemorySpace::none ? &memory.block_limit() : nullptr);
    data_ = static_cast<T*>(pool.allocate(bytes));
    size_ = n;
  }
  PoolBlock(PoolBlock&& other) noexcept
      : data_(std::exchange(other.data_, nullptr)),
        size_(std::exchange(other.size_, 0)),
        space_(other.space_) {}
  PoolBlock& operator=(PoolBlock&& other) noexcept {
    if (this != &other) {
      MemoryPool::deallocate(data_);
      data_ = std::exchange(other.data_, nullptr);
      size_ = std::exchange(other.size_, 0);
      space_ = other.space_;
    }
    return *this;
  }
  PoolBlock(const PoolBlock&) = delete;
  PoolBlock& operator=(const PoolBlock&) = delete;
  ~PoolBlock() { MemoryPool::deallocate(data_); }

  T* data() const { return data_; }
  std::size_t size() const { return size_; }
  /// Keeps the first `n` elements (n <= size()); the memory stays the block's until it goes.
  void shrink(std::size_t n) { size_ = std::min(n, size_); }
  MemorySpace space() const { return space_; }

 private:
  T* data_ = nullptr;
  std::size_t size_ = 0;
  MemorySpace space_ = MemorySpace::host;
};

/// The elements of an array of `sizes`; a ShapeError when they pass 64 bits.
inline std::size_t product(const std::vector<std::size_t>& sizes) {
  std::size_t n = 1;
  for (const std::size_t size : sizes) {
    const auto next = checked_product(n, size);
    if (!next) {
      std::string text;
      for (const std::size_t s : sizes) text += (text.empty() ? "" : " x ") + std::to_string(s);
      throw ShapeError("an array of " + text + " elements: more than 64 bits count");
    }
    n = *next;
  }
  return n;
}

}  // namespace detail

/**
 * A processor's n-dimensional block: row-major over `shape()`, its memory from the processor's
 * pool, in the processor's memory space. Move-only.
 *
 * ```cpp
 * auto a = Array<float>::from_shape({4, 8});   // 32 uninitialised floats
 * kernels::fill_values(a.data(), 32, 0.0f);    // where the processor computes
 * on_host(a)(3, 7);                            // the host's view, after the device's work
 * ```
 */
template <class T>
class Array {
 public:
  using value_type = T;
  using shape_type = std::vector<std::size_t>;

  /// No elements (shape {0}).
  Array() : shape_{0} {}

  /// Uninitialised elements of `shape` from the calling processor's pool (a 0-d shape holds one).
  static Array from_shape(shape_type shape) {
    Array a;
    try {
      a.block_ = detail::PoolBlock<T>(detail::product(shape));
    } catch (const OutOfMemoryError& e) {
      std::string sizes;
      for (const std::size_t size : shape)
        sizes += (sizes.empty() ? "" : " x ") + std::to_string(size);
      throw OutOfMemoryError("an array of " + sizes + " elements of " + std::to_string(sizeof(T)) +
                             " bytes: " + e.what());
    }
    a.shape_ = std::move(shape);
    return a;
  }
  static Array from_shape(std::initializer_list<std::size_t> shape) {
    return from_shape(shape_type(shape));
  }

  Array(Array&&) noexcept = default;
  Array& operator=(Array&&) noexcept = default;
  Array(const Array&) = delete;
  Array& operator=(const Array&) = delete;

  const shape_type& shape() const { return shape_; }
  std::size_t dimension() const { return shape_.size(); }
  std::size_t size() const { return block_.size(); }
  /// Where the elements are, for kernels (in space(): not for the host when that is a device).
  T* data() { return block_.data(); }
  const T* data() const { return block_.data(); }
  MemorySpace space() const { return block_.space(); }

  /// The same elements under another shape of the same size.
  void reshape(shape_type shape) {
    if (detail::product(shape) != detail::product(shape_))
      throw ShapeError("internal: an array of " + std::to_string(detail::product(shape_)) +
                       " elements cannot take a shape of " +
                       std::to_string(detail::product(shape)));
    shape_ = std::move(shape);
  }

  /// The first elements under a smaller shape (as kernels::compact_box leaves them); the memory
  /// stays allocated, all of it, until the array goes.
  void shrink_to(shape_type shape) {
    if (detail::product(shape) > size())
      throw ShapeError("internal: an array of " + std::to_string(size()) +
                       " elements cannot shrink to " + std::to_string(detail::product(shape)));
    block_.shrink(detail::product(shape));
    shape_ = std::move(shape);
  }

 private:
  shape_type shape_;
  detail::PoolBlock<T> block_;
};

/// An array without elements, for a variable filled later.
template <class T>
Array<T> empty_array() {
  return Array<T>();
}

/**
 * A flat buffer from the processor's pool, in its memory space (messages, kernel scratch).
 * Element access and the filling constructors are the host's, for host memory only (the CPU
 * kernels' scratch; a plan's buffers are left as they are); kernels/transfer.hpp's
 * buffer_from_host() fills one in any memory.
 */
template <class T>
class Buffer {
 public:
  using value_type = T;

  Buffer() = default;
  /// `n` uninitialised elements.
  explicit Buffer(std::size_t n) : block_(n) {}
  /// `n` elements set to `value`.
  Buffer(std::size_t n, const T& value) : block_(n) {
    if (filled_by_host()) std::fill(begin(), end(), value);
  }
  /// A copy of [first, last).
  template <class It, class = typename std::iterator_traits<It>::iterator_category>
  Buffer(It first, It last) : block_(static_cast<std::size_t>(std::distance(first, last))) {
    if (filled_by_host()) std::copy(first, last, begin());
  }

  /// Room for `n` elements; the old ones are not kept.
  void resize(std::size_t n) {
    if (n != size()) block_ = detail::PoolBlock<T>(n);
  }

  T* data() { return block_.data(); }
  const T* data() const { return block_.data(); }
  std::size_t size() const { return block_.size(); }
  bool empty() const { return size() == 0; }
  MemorySpace space() const { return block_.space(); }

  T& operator[](std::size_t i) { return data()[i]; }
  const T& operator[](std::size_t i) const { return data()[i]; }
  T* begin() { return data(); }
  T* end() { return data() + size(); }
  const T* begin() const { return data(); }
  const T* end() const { return data() + size(); }

 private:
  bool filled_by_host() const {
    if (space() == MemorySpace::device)
      throw DeviceError(
          "internal: a Buffer filled by the host in a device's memory; fill it with "
          "buffer_from_host() (kernels/transfer.hpp)");
    return space() == MemorySpace::host;
  }

  detail::PoolBlock<T> block_;
};

}  // namespace meshtensor
