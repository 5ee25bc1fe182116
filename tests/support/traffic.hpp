#pragma once
// What the processors of a mesh send while a function runs: the fused ops' tests count their
// messages against the ops they stand for.

#include <cstdint>
#include <string>
#include <utility>
#include <vector>

#include <meshtensor/tensor/tensor.hpp>

#include "support/op_check.hpp"
#include "support/spmd.hpp"

namespace meshtensor::testing {

/// {messages, bytes} each processor of `mesh` sends while fn(m) runs on it.
template <class Fn>
std::vector<std::pair<std::uint64_t, std::uint64_t>> sent_while(const MeshShape& mesh, Fn&& fn) {
  return on_mesh(mesh, [&](Mesh& m) {
    const auto before = m.traffic();
    fn(m);
    const auto after = m.traffic();
    return std::pair(after.messages - before.messages, after.bytes - before.bytes);
  });
}

/// One processor's sends under a fused op and under the ops it stands for.
struct SentBoth {
  std::string layout;
  std::uint64_t fused_messages, fused_bytes, ops_messages, ops_bytes;
};

/// SentBoth for every processor, on x split 2 ways and on x, y and z split 2x2x2 (those this run
/// can hold), of run(m, layout, fused) with fused true and false.
template <class Run>
std::vector<SentBoth> sent_by_both(Run&& run) {
  std::vector<SentBoth> all;
  for (const auto& [mesh, layout] : std::vector<std::pair<std::string, std::string>>{
           {"p:2", "x:p"}, {"a:2; b:2; c:2", "x:a; y:b; z:c"}}) {
    const MeshShape shape(mesh);
    if (!can_run(shape)) continue;
    const auto fused = sent_while(shape, [&](Mesh& m) { run(m, Layout(layout), true); });
    const auto ops = sent_while(shape, [&](Mesh& m) { run(m, Layout(layout), false); });
    for (std::size_t p = 0; p < fused.size(); ++p)
      all.push_back({layout, fused[p].first, fused[p].second, ops[p].first, ops[p].second});
  }
  return all;
}

}  // namespace meshtensor::testing
