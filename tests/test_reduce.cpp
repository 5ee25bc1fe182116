// Reductions over named dims equal their single-processor result on every layout class; global
// scalars are bitwise equal on every processor.
#include <catch2/catch.hpp>

#include "support/op_check.hpp"

using namespace meshtensor;
using namespace meshtensor::testing;

// In a namespace of its own: test files share a program (tests/CMakeLists.txt).
namespace test_reduce {
using Catch::Matchers::Contains;

namespace {
Tensor<float> input(Mesh& m, const Layout& layout) {
  return generate<float>(m, "batch:2, x:6, y:5, c:3", layout,
                         [](const Index& i) { return test_value(i); });
}
}  // namespace

TEST_CASE("sum, mean, max and min over each set of dims match one processor") {
  for (const DimNames& reduced : {DimNames("x"), DimNames("x, y"), DimNames("batch, c"),
                                  DimNames("y, batch, x"), DimNames("batch, x, y, c")}) {
    INFO("reduced over " << detail::quote_list(reduced.names()));
    CHECK(compare_with_one_processor(
              [&](Mesh& m, const Layout& l) { return reduce_sum(input(m, l), reduced); }) == "");
    CHECK(compare_with_one_processor(
              [&](Mesh& m, const Layout& l) { return reduce_mean(input(m, l), reduced); }) == "");
    CHECK(compare_with_one_processor(
              [&](Mesh& m, const Layout& l) { return reduce_max(input(m, l), reduced); }) == "");
    CHECK(compare_with_one_processor(
              [&](Mesh& m, const Layout& l) { return reduce_min(input(m, l), reduced); }) == "");
  }
}

TEST_CASE("reductions work on integers too") {
  CHECK(compare_with_one_processor([](Mesh& m, const Layout& l) {
          auto t = generate<std::int64_t>(m, "batch:2, x:6, y:5, c:3", l, [](const Index& i) {
            return std::int64_t(1000 * i["x"] - 7 * i["y"] + i["c"] * i["batch"]);
          });
          return reduce_sum(t, "x, c") + reduce_max(t, "x, c") - reduce_min(t, "x, c");
        }) == "");
}

TEST_CASE("a reduction to a scalar gives the same value on every processor") {
  const float expected = on_one_processor([](Mesh& m) { return reduce_sum(input(m, "")).item(); });
  for (const auto& c : layout_cases()) {
    if (!can_run(c.mesh)) continue;
    INFO(transport_under_test() << " transport, case " << c.name);
    auto values = on_mesh(c.mesh, [&](Mesh& m) {
      auto t = input(m, c.layout);
      std::vector<float> mine{reduce_sum(t).item(), reduce_mean(t).item(), reduce_max(t).item(),
                              reduce_min(t).item()};
      // Every processor's values, to compare bitwise across processes too.
      return std::pair(mine, all_gather(m.world(), mine));
    });
    for (const auto& [mine, everyone] : values) {
      for (std::size_t i = 0; i < everyone.size(); ++i) CHECK(everyone[i] == mine[i % 4]);
      CHECK(mine[0] == Approx(expected).epsilon(1e-5));
    }
  }
}

TEST_CASE("reducing a dim the tensor lacks is an error naming the dim") {
  auto errors = on_mesh("p:2", [](Mesh& m) {
    try {
      reduce_sum(input(m, "x:p"), "x, z");
      return std::string("no error");
    } catch (const ShapeError& e) {
      return std::string(e.what());
    }
  });
  for (const auto& what : errors)
    CHECK_THAT(what, Contains("reduce_sum") && Contains("no dim \"z\"") && Contains("\"batch\""));
}

TEST_CASE("read_later brings results to the host after the work that computes them") {
  // A scalar and a split tensor in one copy: every processor reads the same values, those a
  // gather reads, once the work before them has run (on a GPU: read after more work is queued).
  const auto checks = on_mesh("rows:2; cols:2", [](Mesh& m) {
    const auto t = input(m, Layout("x:rows; y:cols"));
    const auto sum = reduce_sum(t);
    auto later = read_later<float>({sum, t * 2.0f});
    const auto queued_after = exp(t);  // more work, queued before the values are read
    const std::vector<float>& v = later.values();
    const auto whole = gather(t);
    bool same = v.size() == 1 + whole.size() && v[0] == sum.item();
    for (std::size_t i = 0; same && i < whole.size(); ++i)
      same = v[1 + i] == 2.0f * whole.data()[i];
    return same && queued_after.defined();
  });
  for (bool same : checks) CHECK(same);
}

TEST_CASE("an optimiser step guarded by a value that is not finite changes nothing") {
  const auto results = on_mesh("p:2", [](Mesh& m) {
    auto w = generate<float>(m, "x:6", "x:p", [](const Index& i) { return float(i["x"]); });
    w.set_requires_grad();
    nn::Adam<float> adam({w}, 0.1);
    nn::Sgd<float> sgd({w}, 0.1);
    backward(reduce_sum(w * w));
    const auto before = gather(w);
    const auto bad = reduce_sum(w.grad() * 0.0f) / 0.0f;  // NaN
    adam.step(&bad);
    sgd.step(&bad);
    const bool unchanged = gather(w) == before;
    const auto fine = reduce_sum(w.grad() * 0.0f);  // 0
    adam.step(&fine);
    return unchanged && !(gather(w) == before);
  });
  for (bool ok : results) CHECK(ok);
}

}  // namespace test_reduce
