#pragma once
// Copies between the host's memory and a processor's, whichever it is: the GPU's copy engine for
// a GPU's memory (which the host cannot touch), a plain copy for the host's, nothing for a plan's.

#include <algorithm>
#include <cstdint>

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

}  // namespace meshtensor
