#pragma once
// A block whose innermost dim holds a normalisation's statistics ("keys": batch norm's channels on
// a channels-last block) seen as lanes. The values go in groups of consecutive elements, lane j of
// a group belonging to key j % keys. Where the keys divide 64 a group is 64 values — a width the
// compiler knows, so a loop over one group vectorises fully whatever the channel count (8 channels:
// 8 rows at once instead of a loop of 8 per row); otherwise a group is one row. Per-key parameters
// are repeated across the lanes once, so the loops never compute a key.

#include <algorithm>
#include <array>
#include <cstdint>
#include <type_traits>
#include <vector>

namespace meshtensor::kernels::cpu {

class KeyLanes {
 public:
  static constexpr std::int64_t wide = 64;
  using Wide = std::integral_constant<std::int64_t, wide>;

  explicit KeyLanes(std::int64_t keys) : keys_(keys), width_(wide % keys == 0 ? wide : keys) {}

  std::int64_t keys() const { return keys_; }
  /// Lanes in a group: 64, or the keys.
  std::int64_t width() const { return width_; }

  /// A per-key value repeated across the lanes (as type T).
  template <class T, class U>
  std::vector<T> per_lane(const std::vector<U>& per_key) const {
    std::vector<T> lanes(static_cast<std::size_t>(width_));
    for (std::int64_t j = 0; j < width_; ++j) lanes[j] = static_cast<T>(per_key[j % keys_]);
    return lanes;
  }

  /// Adds per-lane sums to their keys' totals.
  template <class T>
  void add_to_keys(const T* lanes, double* per_key) const {
    for (std::int64_t j = 0; j < width_; ++j) per_key[j % keys_] += double(lanes[j]);
  }

  /// body(offset, n) for each group of n values covering rows [first_row, end_row): n is `Wide`
  /// (a compile-time 64) for whole groups of 64, else the keys, one row at a time.
  template <class Body>
  void for_groups(std::int64_t first_row, std::int64_t end_row, Body&& body) const {
    std::int64_t at = first_row * keys_;
    const std::int64_t end = end_row * keys_;
    if (width_ == wide)
      for (; at + wide <= end; at += wide) body(at, Wide{});
    for (; at < end; at += keys_) body(at, keys_);
  }

  /// Rows per chunk: about 4096 values (16 KiB of floats, in L1 while a chunk is walked twice),
  /// whole groups. Sums within a chunk run in the value type; chunks add up in double.
  std::int64_t chunk_rows() const { return std::max<std::int64_t>(1, 4096 / keys_); }

 private:
  std::int64_t keys_, width_;
};

}  // namespace meshtensor::kernels::cpu
