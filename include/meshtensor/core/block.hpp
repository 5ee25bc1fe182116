#pragma once
// Balanced block decomposition of one dim: `n` indices over `parts` processors, the first `n %
// parts` blocks one index larger (as PETSc DMDA and JAX do). Blocks may be empty when n < parts.

#include <algorithm>
#include <cstdint>
#include <ostream>

namespace meshtensor {

/// A half-open index range [begin, end).
struct Range {
  std::int64_t begin = 0;
  std::int64_t end = 0;

  std::int64_t size() const { return end - begin; }
  bool empty() const { return end <= begin; }
  bool contains(std::int64_t i) const { return begin <= i && i < end; }

  friend bool operator==(const Range& a, const Range& b) {
    return a.begin == b.begin && a.end == b.end;
  }
  friend bool operator!=(const Range& a, const Range& b) { return !(a == b); }
  friend std::ostream& operator<<(std::ostream& out, const Range& r) {
    return out << '[' << r.begin << ',' << r.end << ')';
  }
};

/// The common part of two ranges (empty if they do not overlap).
inline Range intersect(const Range& a, const Range& b) {
  Range r{std::max(a.begin, b.begin), std::min(a.end, b.end)};
  if (r.end < r.begin) r.end = r.begin;
  return r;
}

/// Block `index` of `n` split into `parts` balanced blocks.
/// @post the blocks for index = 0..parts-1 are disjoint, in order, and cover [0, n)
/// @post sizes differ by at most one, larger blocks first
inline Range block_range(std::int64_t n, std::int64_t parts, std::int64_t index) {
  const std::int64_t base = n / parts, extra = n % parts;
  const std::int64_t begin = index * base + std::min(index, extra);
  return {begin, begin + base + (index < extra ? 1 : 0)};
}

/// The block that holds global index `i`: the inverse of block_range.
/// @pre 0 <= i < n
/// @post block_range(n, parts, block_owner(n, parts, i)).contains(i)
inline std::int64_t block_owner(std::int64_t n, std::int64_t parts, std::int64_t i) {
  const std::int64_t base = n / parts, extra = n % parts;
  const std::int64_t big = extra * (base + 1);  // indices held by the larger blocks
  if (i < big) return i / (base + 1);
  return extra + (i - big) / base;
}

}  // namespace meshtensor
