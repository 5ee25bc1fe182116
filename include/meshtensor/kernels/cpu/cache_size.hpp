#pragma once
// The CPU's caches: the last level, for kernels that write outputs too large to stay in it (those
// skip the cache rather than evict everything else from it), and the first and second levels'
// data caches, for kernels that size their blocks to them.

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

namespace detail {
// Bytes of the first processor's cache at `level` holding data (of type "Data" or "Unified") as
// Linux lists it, else as the C library reports it (`name`, 0 for none), else `otherwise`.
inline std::int64_t data_cache_bytes(int level, [[maybe_unused]] int name, std::int64_t otherwise) {
  std::int64_t size = 0;
  for (int index = 0; index < 8 && size == 0; ++index) {
    const std::string cache = "/sys/devices/system/cpu/cpu0/cache/index" + std::to_string(index);
    std::ifstream level_file(cache + "/level"), type(cache + "/type");
    int number = 0;
    std::string kind;
    if (level_file >> number && type >> kind && number == level &&
        (kind == "Data" || kind == "Unified"))
      size = cache_size_in(cache + "/size");
  }
  if (size == 0 && name != 0) size = std::max<long>(sysconf(name), 0);
  return size > 0 ? size : otherwise;
}
}  // namespace detail

/// Bytes of the first processor's first-level data cache as Linux lists it, else as the C library
/// reports it, else 32 KiB.
inline std::int64_t first_level_data_cache_bytes() {
#ifdef _SC_LEVEL1_DCACHE_SIZE
  static const std::int64_t bytes = detail::data_cache_bytes(1, _SC_LEVEL1_DCACHE_SIZE, 32 << 10);
#else
  static const std::int64_t bytes = detail::data_cache_bytes(1, 0, 32 << 10);
#endif
  return bytes;
}

/// Bytes of the first processor's second-level cache (one core's, on the machines measured here)
/// as Linux lists it, else as the C library reports it, else 1 MiB.
inline std::int64_t second_level_cache_bytes() {
#ifdef _SC_LEVEL2_CACHE_SIZE
  static const std::int64_t bytes = detail::data_cache_bytes(2, _SC_LEVEL2_CACHE_SIZE, 1 << 20);
#else
  static const std::int64_t bytes = detail::data_cache_bytes(2, 0, 1 << 20);
#endif
  return bytes;
}

}  // namespace meshtensor::kernels
