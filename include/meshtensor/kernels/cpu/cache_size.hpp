#pragma once
// The CPU's caches: the last level, for kernels that write outputs too large to stay in it (those
// skip the cache rather than evict everything else from it), and the first level's data cache,
// for kernels that size their blocks to it.

#include <unistd.h>

#include <algorithm>
#include <cstdint>
#include <fstream>
#include <string>

namespace meshtensor::kernels {
namespace detail {

// "32768K" (Linux's sysfs) as bytes; 0 where unreadable.
inline std::int64_t cache_size_in(const std::string& file) {
  std::ifstream in(file);
  std::int64_t size = 0;
  std::string unit;
  if (!(in >> size)) return 0;
  in >> unit;
  if (unit == "K") return size << 10;
  if (unit == "M") return size << 20;
  return unit.empty() ? size : 0;
}

}  // namespace detail

/// Bytes of the first processor's highest cache level as Linux lists it, else as the C library
/// reports it (which on some virtual machines counts every cache of the host), else 32 MiB.
inline std::int64_t last_level_cache_bytes() {
  static const std::int64_t bytes = [] {
    std::int64_t size = 0;
    for (int index = 0; index < 8; ++index) {
      const std::string cache = "/sys/devices/system/cpu/cpu0/cache/index" + std::to_string(index);
      if (const std::int64_t here = detail::cache_size_in(cache + "/size")) size = here;
    }
#ifdef _SC_LEVEL3_CACHE_SIZE
    if (size == 0) size = std::max<long>(sysconf(_SC_LEVEL3_CACHE_SIZE), 0);
#endif
    return size > 0 ? size : std::int64_t{32} << 20;
  }();
  return bytes;
}

/// Bytes of the first processor's first-level data cache as Linux lists it, else as the C library
/// reports it, else 32 KiB.
inline std::int64_t first_level_data_cache_bytes() {
  static const std::int64_t bytes = [] {
    std::int64_t size = 0;
    for (int index = 0; index < 8 && size == 0; ++index) {
      const std::string cache = "/sys/devices/system/cpu/cpu0/cache/index" + std::to_string(index);
      std::ifstream level(cache + "/level"), type(cache + "/type");
      int number = 0;
      std::string kind;
      if (level >> number && type >> kind && number == 1 && kind == "Data")
        size = detail::cache_size_in(cache + "/size");
    }
#ifdef _SC_LEVEL1_DCACHE_SIZE
    if (size == 0) size = std::max<long>(sysconf(_SC_LEVEL1_DCACHE_SIZE), 0);
#endif
    return size > 0 ? size : std::int64_t{32} << 10;
  }();
  return bytes;
}

}  // namespace meshtensor::kernels
