#pragma once
// Collective failure: a problem one processor finds in its part of a file or of the data is thrown
// on all of them, so that no processor waits for a partner that has given up.

#include <cstdint>
#include <string>
#include <utility>
#include <vector>

#include "meshtensor/comm/collectives.hpp"
#include "meshtensor/comm/mesh.hpp"
#include "meshtensor/core/error.hpp"

namespace meshtensor {

/// Every processor learns of any processor's failure (empty = none) and throws the first one, in
/// processor order, as an AgreedError (an IoError), which run() reports once.
inline void agree_on(Mesh& mesh, const std::string& local_failure) {
  std::vector<char> text(local_failure.begin(), local_failure.end());
  const auto all = all_gather(mesh.world(), text);
  std::vector<std::int64_t> lengths{static_cast<std::int64_t>(text.size())};
  const auto sizes = all_gather(mesh.world(), lengths);
  std::size_t offset = 0;
  for (auto n : sizes) {
    if (n > 0) throw AgreedError(std::string(all.begin() + offset, all.begin() + offset + n));
    offset += static_cast<std::size_t>(n);
  }
}

/// Runs `f` and returns what it threw (empty when nothing), to hand to agree_on.
/// ```cpp
/// agree_on(mesh, failure_of([&] { check_my_block(); }));   // all throw if any block is bad
/// ```
template <class F>
std::string failure_of(F&& f) {
  try {
    f();
  } catch (const std::exception& e) {
    return e.what();
  }
  return {};
}

}  // namespace meshtensor

namespace meshtensor {
/// Runs `f` on this processor; if it threw here or on any other, every processor throws the first
/// failure in processor order (an AgreedError with its message). Collective: every processor calls
/// it.
template <class F>
void agree(Mesh& mesh, F&& f) {
  agree_on(mesh, failure_of(std::forward<F>(f)));
}
}  // namespace meshtensor
