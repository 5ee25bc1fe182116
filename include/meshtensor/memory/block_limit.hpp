#pragma once
// The most bytes one block may take. A block bigger than the machine's memory comes from a size
// flag too large or a crafted file; it is reported by name before anything is allocated, instead
// of wrapping around to a small allocation or waking the system's out-of-memory killer.

#include <unistd.h>

#include <cstddef>
#include <limits>
#include <string>

#include "meshtensor/core/byte_size.hpp"
#include "meshtensor/core/detail/checked.hpp"
#include "meshtensor/core/error.hpp"

namespace meshtensor {

/// The limit on one block's bytes, and what set it (named in errors).
struct BlockLimit {
  double bytes = 0;
  std::string source;
};

/// The limit `bytes` where a run sets one (Settings::max_block_bytes, MESHTENSOR_MAX_BLOCK_BYTES),
/// else this machine's memory.
inline BlockLimit block_limit(double bytes) {
  if (bytes > 0) return {bytes, "MESHTENSOR_MAX_BLOCK_BYTES"};
  static const double memory = [] {
    const long pages = sysconf(_SC_PHYS_PAGES), page = sysconf(_SC_PAGE_SIZE);
    return pages > 0 && page > 0 ? double(pages) * double(page)
                                 : std::numeric_limits<double>::infinity();
  }();
  return {memory, "this machine's memory"};
}

/// The bytes of `elements` elements of `element_bytes` each; a ShapeError naming `subject()` when
/// they overflow or, where `limit` is given (a block that holds memory, not a plan's), exceed it.
template <class Subject>
std::size_t checked_block_bytes(std::size_t elements, std::size_t element_bytes,
                                const Subject& subject, const BlockLimit* limit) {
  const auto bytes = detail::checked_product(elements, element_bytes);
  if (bytes && (!limit || double(*bytes) <= limit->bytes)) return *bytes;
  const std::string asked =
      bytes ? std::to_string(*bytes) + " bytes (" + format_bytes(double(*bytes)) + ")"
            : "more bytes than 64 bits count";
  const std::string over =
      limit ? ", more than " + limit->source + " (" + format_bytes(limit->bytes) + ")" : "";
  throw ShapeError(subject() + " needs a block of " + std::to_string(elements) + " elements of " +
                   std::to_string(element_bytes) + " bytes, " + asked + over +
                   "; split it over more processors, make it smaller, or raise "
                   "MESHTENSOR_MAX_BLOCK_BYTES");
}

}  // namespace meshtensor
