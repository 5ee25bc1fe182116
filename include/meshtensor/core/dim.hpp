#pragma once
// A named dimension: the unit in which meshtensor talks about tensors. Ops refer to dims by name,
// never by position.

#include <cstdint>
#include <ostream>
#include <string>
#include <utility>

#include "meshtensor/core/detail/parse.hpp"
#include "meshtensor/core/detail/quote.hpp"
#include "meshtensor/core/error.hpp"

namespace meshtensor {

/**
 * A dimension with a name and a positive size.
 *
 * ```cpp
 * Dim x{"x", 256};   // prints as x=256
 * ```
 */
struct Dim {
  std::string name;
  std::int64_t size = 0;

  Dim() = default;
  Dim(std::string dim_name, std::int64_t dim_size) : name(std::move(dim_name)), size(dim_size) {
    if (!detail::is_valid_name(name))
      throw ShapeError("dim name " + detail::quote(name) +
                       " is not a name: use a letter or '_', then letters, digits or '_'");
    if (size <= 0)
      throw ShapeError("dim " + detail::quote(name) + " has size " + std::to_string(size) +
                       "; a dim's size must be positive");
  }

  /// The same name with another size (a block of this dim, an op's output).
  Dim resized(std::int64_t new_size) const { return Dim(name, new_size); }

  friend bool operator==(const Dim& a, const Dim& b) {
    return a.name == b.name && a.size == b.size;
  }
  friend bool operator!=(const Dim& a, const Dim& b) { return !(a == b); }
  friend bool operator<(const Dim& a, const Dim& b) {
    return a.name != b.name ? a.name < b.name : a.size < b.size;
  }
  friend std::ostream& operator<<(std::ostream& out, const Dim& dim) {
    return out << dim.name << '=' << dim.size;
  }
};

}  // namespace meshtensor
