#pragma once
// Two ways of computing the same results (a fused op and the ops it stands for), compared block
// by block on every layout class: by how much they differ, where equality is exact.

#include <algorithm>
#include <cstddef>
#include <vector>

#include <xtensor/xarray.hpp>

#include "support/blocks.hpp"
#include "support/layout_cases.hpp"
#include "support/spmd.hpp"

namespace meshtensor::testing {

/// The largest difference between `one(m, layout)` and `other(m, layout)`, lists of tensors, on
/// any processor of any of `cases` this run can hold.
template <class One, class Other>
double largest_difference(const std::vector<LayoutCase>& cases, One&& one, Other&& other) {
  double largest = 0;
  for (const auto& c : cases) {
    if (!can_run(c.mesh)) continue;
    const auto differences = on_mesh(c.mesh, [&](Mesh& m) {
      const auto a = one(m, c.layout), b = other(m, c.layout);
      double d = 0;
      for (std::size_t k = 0; k < a.size(); ++k)
        d = std::max(d,
                     double(xt::amax(xt::abs(local_block(a[k]).data - local_block(b[k]).data))()));
      return d;
    });
    for (double d : differences) largest = std::max(largest, d);
  }
  return largest;
}

/// Results [first, last) of op(m, layout), a list of tensors: parts of one computation compared
/// within tolerances of their own.
template <class Op>
auto results_between(Op op, std::size_t first, std::size_t last) {
  return [op, first, last](Mesh& m, const Layout& layout) {
    auto all = op(m, layout);
    const std::size_t end = std::min(last, all.size());
    return decltype(all)(all.begin() + std::ptrdiff_t(first), all.begin() + std::ptrdiff_t(end));
  };
}

}  // namespace meshtensor::testing
