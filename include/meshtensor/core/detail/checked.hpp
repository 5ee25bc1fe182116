#pragma once
// Products of sizes that must not wrap around: a crafted file or a huge flag gets an error naming
// what overflowed, not a small number that under-allocates.

#include <optional>

namespace meshtensor::detail {

/// a * b, or nothing where the product does not fit `Int`.
template <class Int>
std::optional<Int> checked_product(Int a, Int b) {
  Int out;
  if (__builtin_mul_overflow(a, b, &out)) return std::nullopt;
  return out;
}

}  // namespace meshtensor::detail
