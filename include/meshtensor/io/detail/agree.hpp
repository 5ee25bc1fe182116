#pragma once
// Collective failure: a file problem seen by one processor is thrown on all of them, so that no
// processor waits for a partner that has given up.

#include <cstdint>
#include <string>
#include <vector>

#include "meshtensor/comm/collectives.hpp"
#include "meshtensor/comm/mesh.hpp"
#include "meshtensor/core/error.hpp"

namespace meshtensor::detail {

/// Every processor learns of any processor's failure (empty = none) and throws the first one, in
/// processor order, as an IoError.
inline void agree_on(Mesh& mesh, const std::string& local_failure) {
  std::vector<char> text(local_failure.begin(), local_failure.end());
  const auto all = all_gather(mesh.world(), text);
  std::vector<std::int64_t> lengths{static_cast<std::int64_t>(text.size())};
  const auto sizes = all_gather(mesh.world(), lengths);
  std::size_t offset = 0;
  for (auto n : sizes) {
    if (n > 0) throw IoError(std::string(all.begin() + offset, all.begin() + offset + n));
    offset += static_cast<std::size_t>(n);
  }
}

/// Runs `f` and returns what it threw (empty when nothing), to hand to agree_on.
template <class F>
std::string failure_of(F&& f) {
  try {
    f();
  } catch (const std::exception& e) {
    return e.what();
  }
  return {};
}

}  // namespace meshtensor::detail
