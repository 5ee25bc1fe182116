#pragma once
// Where a kernel family's CPU loop finds its operands. On a CPU processor: in their own memory. On
// a GPU processor whose kernels cannot run a call (a function the user wrote, an integer type), in
// copies on the host, since the host cannot touch GPU memory: each operand brought over before the
// loop, and those it writes sent back after it.

#include <cstddef>
#include <cstdint>
#include <cstdlib>
#include <memory>
#include <vector>

#include "meshtensor/kernels/common/strided.hpp"
#include "meshtensor/kernels/transfer.hpp"

namespace meshtensor::kernels {

/// The elements a strided operand spans from its first, over a box of `sizes` (strides >= 0).
inline std::int64_t span_of(const Sizes& sizes, const Strides& strides) {
  std::int64_t span = 1;
  for (std::size_t d = 0; d < sizes.size(); ++d) {
    if (sizes[d] == 0) return 0;
    span += (sizes[d] - 1) * strides[d];
  }
  return span;
}

/**
 * The operands of one CPU loop, as the loop reads and writes them.
 *
 * ```cpp
 * [&](HostOperands& h) { cpu::map(f, h.in(x, n), h.out(out, n), n); }
 * ```
 */
class HostOperands {
 public:
  /// `copied`: the operands are in GPU memory, so the loop works on copies.
  explicit HostOperands(bool copied) : copied_(copied) {}
  HostOperands(const HostOperands&) = delete;
  HostOperands& operator=(const HostOperands&) = delete;

  /// Where the loop reads `n` elements from `data`.
  template <class T>
  const T* in(const T* data, std::int64_t n) {
    return copied_ ? static_cast<const T*>(copy(data, n * std::int64_t(sizeof(T)), false)) : data;
  }
  /// Where the loop reads and writes `n` elements at `data` (all of them brought over: a loop
  /// may write some only).
  template <class T>
  T* out(T* data, std::int64_t n) {
    return copied_ ? static_cast<T*>(copy(data, n * std::int64_t(sizeof(T)), true)) : data;
  }

  /// The copies the loop wrote, sent to their operands.
  void send_back() {
    for (const Copy& c : copies_)
      if (c.written)
        copy_from_host(c.values.get(), c.bytes, static_cast<char*>(c.operand), MemorySpace::device);
  }

 private:
  struct Free {
    void operator()(char* p) const { std::free(p); }
  };
  struct Copy {
    void* operand;
    std::int64_t bytes;
    std::unique_ptr<char, Free> values;
    bool written;
  };

  // The host's copy of `bytes` at `operand`; operands given twice (in place) share one.
  void* copy(const void* operand, std::int64_t bytes, bool written) {
    if (!operand || bytes <= 0) return const_cast<void*>(operand);
    for (Copy& c : copies_)
      if (c.operand == operand && c.bytes >= bytes) {
        c.written = c.written || written;
        return c.values.get();
      }
    const auto rounded = std::size_t((bytes + 63) / 64 * 64);  // as the pool aligns blocks
    Copy& c = copies_.emplace_back(Copy{
        const_cast<void*>(operand), bytes,
        std::unique_ptr<char, Free>(static_cast<char*>(std::aligned_alloc(64, rounded))), written});
    if (!c.values) throw std::bad_alloc();
    copy_to_host(static_cast<const char*>(operand), MemorySpace::device, bytes, c.values.get());
    return c.values.get();
  }

  bool copied_;
  std::vector<Copy> copies_;
};

}  // namespace meshtensor::kernels
