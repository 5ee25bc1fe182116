#pragma once
// The check every op test makes: an op computed on each layout class equals, block by block, the
// same op computed on one processor.

#include <string>

#include "support/blocks.hpp"
#include "support/layout_cases.hpp"
#include "support/spmd.hpp"

namespace meshtensor::testing {

/// The layout that moves each split of `layout` to the next of `dims`: operands laid out by it are
/// split differently from operands laid out by `layout`, so an op must relayout one of them.
inline Layout shifted(const Layout& layout, const std::vector<std::string>& dims) {
  std::vector<LayoutRule> rules;
  for (const auto& rule : layout.rules()) {
    auto it = std::find(dims.begin(), dims.end(), rule.dim);
    const std::string next =
        it == dims.end() ? rule.dim : dims[(it - dims.begin() + 1) % dims.size()];
    rules.push_back({next, rule.mesh_axis});
  }
  return Layout(rules);
}

/// A test input: deterministic values of the global index, different for each seed.
template <class T = float>
Tensor<T> test_input(Mesh& mesh, const Shape& shape, const Layout& layout, int seed) {
  return generate<T>(mesh, shape, layout,
                     [seed](const Index& i) { return T(test_value(i, seed)); });
}

/// Returns "" when `op(mesh, layout)` matches the single-processor `op(mesh, "")` on every
/// processor of every layout case, else the first mismatch with the case named.
template <class Op>
std::string compare_with_one_processor(Op&& op, double rtol = 1e-5) {
  const auto reference = on_one_processor([&](Mesh& m) { return op(m, Layout{}).local(); });
  for (const auto& c : layout_cases()) {
    if (!can_run(c.mesh)) continue;
    auto blocks = on_mesh(c.mesh, [&](Mesh& m) { return local_block(op(m, c.layout)); });
    for (const auto& block : blocks)
      if (auto why = mismatch(block, reference, rtol); !why.empty())
        return transport_under_test() + " transport, case \"" + c.name + "\": " + why;
  }
  return "";
}

}  // namespace meshtensor::testing
