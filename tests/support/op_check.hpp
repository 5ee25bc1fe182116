#pragma once
// The check every op test makes: an op computed on each layout class equals, block by block, the
// same op computed on one processor.

#include <cstdio>
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

namespace lists {
template <class T>
std::vector<Tensor<T>> as_list(const Tensor<T>& t) {
  return {t};
}
template <class T>
std::vector<Tensor<T>> as_list(const std::vector<Tensor<T>>& ts) {
  return ts;
}
}  // namespace lists

// Counts the op x layout cases compared in this test executable and reports them at exit (with
// the transport they ran on, noted while it runs: the nccl one is gone by the exit).
struct CaseCounter {
  int compared = 0;
  std::string transport;
  void count() {
    ++compared;
    transport = transport_under_test();
  }
  ~CaseCounter() {
    if (compared)
      std::fprintf(stderr, "%s transport: %d op x layout cases compared with one processor\n",
                   transport.c_str(), compared);
  }
};
inline CaseCounter& case_counter() {
  static CaseCounter counter;
  return counter;
}

/**
 * Returns "" when `op(mesh, layout)` — a tensor, or a list of tensors such as an output and
 * gradients — matches the single-processor `op(mesh, "")` block by block, on every processor of
 * every case (the layout classes by default), else the first mismatch with the case named.
 */
template <class Op>
std::string compare_with_one_processor(Op&& op, double rtol = 1e-5,
                                       const std::vector<LayoutCase>& cases = layout_cases()) {
  using List = decltype(lists::as_list(op(std::declval<Mesh&>(), Layout{})));
  using T = typename List::value_type::value_type;
  const auto reference = on_one_processor([&](Mesh& m) {
    std::vector<xt::xarray<T>> arrays;
    for (const auto& t : lists::as_list(op(m, Layout{}))) arrays.push_back(local_block(t).data);
    return arrays;
  });
  for (const auto& c : cases) {
    if (!can_run(c.mesh)) continue;
    case_counter().count();
    auto results = on_mesh(c.mesh, [&](Mesh& m) {
      std::vector<LocalBlock<T>> blocks;
      for (const auto& t : lists::as_list(op(m, c.layout))) blocks.push_back(local_block(t));
      return blocks;
    });
    for (const auto& blocks : results)
      for (std::size_t k = 0; k < blocks.size(); ++k)
        if (auto why = mismatch(blocks[k], reference.at(k), rtol); !why.empty())
          return transport_under_test() + " transport, case \"" + c.name + "\", result " +
                 std::to_string(k) + ": " + why;
  }
  return "";
}

}  // namespace meshtensor::testing
