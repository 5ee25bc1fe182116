// einsum over named dims equals its single-processor result on every layout class, including
// contractions over split dims (partial sums completed by an all-reduce).
#include <catch2/catch.hpp>

#include "support/op_check.hpp"

using namespace meshtensor;
using namespace meshtensor::testing;

// In a namespace of its own: test files share a program (tests/CMakeLists.txt).
namespace test_einsum {
using Catch::Matchers::Contains;

namespace {
const std::vector<std::string> dims{"batch", "x", "y", "c"};
}  // namespace

TEST_CASE("channel mixing contracts c, split or not") {
  CHECK(compare_with_one_processor([](Mesh& m, const Layout& l) {
          auto t = test_input(m, "batch:2, x:6, y:5, c:3", l, 1);
          auto w = test_input(m, "c:3, k:4", l, 2);
          return einsum({t, w}, "batch, x, y, k");
        }) == "");
}

TEST_CASE("a weight-gradient-like contraction sums over split batch and spatial dims") {
  CHECK(compare_with_one_processor([](Mesh& m, const Layout& l) {
          auto a = test_input(m, "batch:2, x:6, y:5, c:3", l, 1);
          auto b = test_input(m, "batch:2, x:6, y:5, k:2", l, 2);
          return einsum({a, b}, "c, k");
        }) == "");
}

TEST_CASE("einsum without contraction: outer products and transposes") {
  CHECK(compare_with_one_processor([](Mesh& m, const Layout& l) {
          return einsum({test_input(m, "x:6", l, 1), test_input(m, "y:5", l, 2)}, "y, x");
        }) == "");
  CHECK(compare_with_one_processor([](Mesh& m, const Layout& l) {
          return einsum({test_input(m, "batch:2, x:6, y:5, c:3", l, 1)}, "c, y, x, batch");
        }) == "");
}

TEST_CASE("einsum of one operand sums the dims the output omits") {
  CHECK(compare_with_one_processor([](Mesh& m, const Layout& l) {
          return einsum({test_input(m, "batch:2, x:6, y:5, c:3", l, 1)}, "y");
        }) == "");
  CHECK(compare_with_one_processor([](Mesh& m, const Layout& l) {
          return einsum({test_input(m, "batch:2, x:6, y:5, c:3", l, 1)}, "");
        }) == "");
}

TEST_CASE("einsum of three operands, split differently") {
  CHECK(compare_with_one_processor([](Mesh& m, const Layout& l) {
          auto a = test_input(m, "batch:2, x:6", l, 1);
          auto b = test_input(m, "x:6, y:5", shifted(l, dims), 2);
          auto c = test_input(m, "y:5, c:3", l, 3);
          return einsum({a, b, c}, "batch, c");
        }) == "");
  CHECK(compare_with_one_processor([](Mesh& m, const Layout& l) {
          auto a = test_input(m, "batch:2, x:6, y:5", l, 1);
          auto b = test_input(m, "x:6, y:5, c:3", shifted(l, dims), 2);
          auto c = test_input(m, "c:3, batch:2", l, 3);
          return einsum({a, b, c}, "x, c");
        }) == "");
}

// Attention's two products: heads sit between the rows in both operands, so each runs packed (on
// oneDNN) or folded; split over batch, heads (c), queries (x) or keys (y, a split sum).
TEST_CASE("attention's scores and weighted values, forward and backward, split or not") {
  CHECK(compare_with_one_processor([](Mesh& m, const Layout& l) {
          auto q = test_input(m, "batch:2, x:5, c:3, d:4", l, 1).set_requires_grad();
          auto k = test_input(m, "batch:2, y:6, c:3, d:4", l, 2).set_requires_grad();
          auto v = test_input(m, "batch:2, y:6, c:3, d:4", l, 3).set_requires_grad();
          auto scores = einsum({q, k}, "batch, c, x, y");
          auto out = einsum({scores, v}, "batch, x, c, d");
          backward(reduce_sum(square(out)));
          return std::vector<Tensor<float>>{out, q.grad(), k.grad(), v.grad()};
        }) == "");
}

namespace {
struct Noted {
  bool none_before = false;
  std::string layout;
  std::vector<std::string> notes;
};
// x [x@p] and w [z@p]: the product [x, z] cannot split both over p.
Tensor<float> two_dims_on_one_axis(Mesh& m) {
  return einsum({test_input(m, "x:6, y:5", "x:p", 1), test_input(m, "y:5, z:4", "z:p", 2)}, "x, z");
}
}  // namespace

TEST_CASE("two dims split over one mesh axis: the earlier operand's keeps it, and it is noted") {
  const auto seen = on_mesh("p:2", [](Mesh& m) {
    Noted n;
    einsum({test_input(m, "x:6, y:5", "x:p", 1), test_input(m, "y:5, z:4", "", 2)}, "x, z");
    n.none_before = layout_notes(m).empty();  // one dim per axis: nothing to note
    n.layout = two_dims_on_one_axis(m).layout().to_string();
    two_dims_on_one_axis(m);  // noted once
    n.notes = layout_notes(m);
    return n;
  });
  for (const auto& n : seen) {
    CHECK(n.none_before);
    CHECK(n.layout == "[x=6@p, z=4]");
    REQUIRE(n.notes.size() == 1);
    CHECK_THAT(n.notes[0], Contains("einsum: dims \"x\" and \"z\"") &&
                               Contains("mesh axis \"p\"") && Contains("\"z\" is left whole"));
  }
  const auto report = plan("p:2", "x:p", [](Mesh& m) { two_dims_on_one_axis(m); });
  CHECK_THAT(report.table(), Contains("layout rule: einsum: dims \"x\" and \"z\""));
  CHECK_THAT(report.json(), Contains("\"layout_notes\":[\"einsum: dims \\\"x\\\""));
  const auto quiet = plan("p:2", "x:p", [](Mesh& m) {
    einsum({test_input(m, "x:6, y:5", "x:p", 1), test_input(m, "y:5, z:4", "", 2)}, "x, z");
  });
  CHECK_THAT(quiet.json(), Contains("\"layout_notes\":[]"));
}

TEST_CASE("einsum errors name the dim") {
  auto errors = on_mesh("p:2", [](Mesh& m) {
    std::vector<std::string> what;
    for (auto f : {+[](Mesh& m) { einsum({test_input(m, "x:6", "x:p", 1)}, "z"); },
                   +[](Mesh& m) {
                     einsum({test_input(m, "x:6", "x:p", 1), test_input(m, "x:5", "", 1)}, "x");
                   }}) {
      try {
        f(m);
        what.push_back("no error");
      } catch (const ShapeError& e) {
        what.push_back(e.what());
      }
    }
    return what;
  });
  for (const auto& what : errors) {
    CHECK_THAT(what[0], Contains("output dim \"z\"") && Contains("\"x\""));
    CHECK_THAT(what[1],
               Contains("einsum") && Contains("dim \"x\"") && Contains("6") && Contains("5"));
  }
}

}  // namespace test_einsum
