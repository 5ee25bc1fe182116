#pragma once
// Enumerates every layout of a shape on a mesh, for tests that check a law over all of them.

#include <functional>
#include <vector>

#include <meshtensor/core/layout.hpp>
#include <meshtensor/core/mesh_shape.hpp>
#include <meshtensor/core/shape.hpp>

namespace meshtensor::testing {

/// Every layout of `shape` on `mesh`: each mesh axis splits one dim or none, no dim twice.
inline std::vector<Layout> all_layouts(const Shape& shape, const MeshShape& mesh) {
  std::vector<Layout> out;
  std::vector<LayoutRule> rules;
  std::function<void(std::size_t)> choose = [&](std::size_t axis) {
    if (axis == mesh.rank()) return void(out.emplace_back(rules));
    choose(axis + 1);  // this axis splits nothing
    for (const auto& dim : shape) {
      bool taken = false;
      for (const auto& rule : rules) taken |= rule.dim == dim.name;
      if (taken) continue;
      rules.push_back({dim.name, mesh[axis].name});
      choose(axis + 1);
      rules.pop_back();
    }
  };
  choose(0);
  return out;
}

}  // namespace meshtensor::testing
