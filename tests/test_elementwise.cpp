// Elementwise ops, aligned by dim name with broadcasting, equal their single-processor result on
// every layout class — including operands split differently from each other.
#include <catch2/catch.hpp>

#include <cmath>

#include "support/op_check.hpp"

using namespace meshtensor;
using namespace meshtensor::testing;

// In a namespace of its own: test files share a program (tests/CMakeLists.txt).
namespace test_elementwise {
using Catch::Matchers::Contains;

namespace {
const std::vector<std::string> dims{"batch", "x", "y", "c"};
}  // namespace

TEST_CASE("unary ops and scalar arithmetic keep the layout and match one processor") {
  CHECK(compare_with_one_processor([](Mesh& m, const Layout& l) {
          auto t = test_input(m, "batch:2, x:6, y:5, c:3", l, 1);
          return exp(t) + abs(t) * 2.0f - square(t) / 3.0f + (-t) + sqrt(abs(t)) + tanh(t) +
                 pow(abs(t), 1.5f) + log(abs(t) + 1.0f) + (1.0f - t);
        }) == "");
  auto same_layout = on_mesh("rows:2; cols:2", [](Mesh& m) {
    auto t = test_input(m, "batch:2, x:6, y:5, c:3", "x:rows; y:cols", 1);
    return (t * 2.0f).layout() == t.layout();
  });
  for (bool same : same_layout) CHECK(same);
}

TEST_CASE("binary ops on operands with the same dims match one processor") {
  CHECK(compare_with_one_processor([](Mesh& m, const Layout& l) {
          auto a = test_input(m, "batch:2, x:6, y:5, c:3", l, 1);
          auto b = test_input(m, "batch:2, x:6, y:5, c:3", l, 2);
          return (a + b) * (a - b) / (abs(b) + 1.0f) + maximum(a, b) - minimum(a, b);
        }) == "");
}

TEST_CASE("map and zip over functions of your own match one processor, with gradients") {
  // Their CPU loops run on the blocks where they are: on a GPU, once its queued work is done.
  CHECK(compare_with_one_processor([](Mesh& m, const Layout& l) {
          auto a = test_input(m, "batch:2, x:6, y:5, c:3", l, 1).set_requires_grad();
          auto b = test_input(m, "batch:2, x:6, y:5, c:3", l, 2);
          auto wave = map(
              a * 2.0f, [](float v) { return std::sin(v); }, [](float v) { return std::cos(v); });
          auto mixed =
              zip(wave.detach() + 1.0f, b, [](float u, float v) { return u * v - std::abs(v); });
          backward(reduce_sum(wave * b));
          return std::vector<Tensor<float>>{wave, mixed * 3.0f, a.grad()};
        }) == "");
}

TEST_CASE("equal marks where two operands agree, broadcasting, and passes no gradient") {
  CHECK(compare_with_one_processor([](Mesh& m, const Layout& l) {
          auto a = test_input(m, "batch:2, x:6, y:5, c:3", l, 1);
          auto b = test_input(m, "batch:2, x:6, y:5, c:3", l, 2);
          return equal(a, maximum(a, b)) + equal(a, reduce_max(a, "c"));
        }) == "");
  auto checks = on_mesh("p:2", [](Mesh& m) {
    auto a = test_input(m, "x:6, c:3", "x:p", 1).set_requires_grad();
    auto b = test_input(m, "x:6, c:3", "x:p", 2);
    const float marked_by_max =
        reduce_sum(equal(a, maximum(a, b))).item() + reduce_sum(equal(b, maximum(a, b))).item();
    const float with_itself = reduce_sum(equal(a, a)).item();
    return std::tuple(marked_by_max, with_itself, equal(a, b).requires_grad());
  });
  for (const auto& [marked_by_max, with_itself, needs_gradient] : checks) {
    CHECK(marked_by_max == 18.0f);  // every element is the larger of the two exactly once
    CHECK(with_itself == 18.0f);
    CHECK_FALSE(needs_gradient);
  }
}

TEST_CASE("binary ops broadcast over the dims one operand lacks") {
  // Per-channel scale: [batch, x, y, c] * [c].
  CHECK(compare_with_one_processor([](Mesh& m, const Layout& l) {
          return test_input(m, "batch:2, x:6, y:5, c:3", l, 1) * test_input(m, "c:3", l, 2);
        }) == "");
  // A spatial map added to every batch and channel: [batch, x, y, c] + [y, x].
  CHECK(compare_with_one_processor([](Mesh& m, const Layout& l) {
          return test_input(m, "batch:2, x:6, y:5, c:3", l, 1) + test_input(m, "y:5, x:6", l, 2);
        }) == "");
  // An outer product: [x] * [y] gives [x, y].
  CHECK(compare_with_one_processor([](Mesh& m, const Layout& l) {
          return test_input(m, "x:6", l, 1) * test_input(m, "y:5", l, 2);
        }) == "");
}

TEST_CASE("binary ops on operands split differently relayout one of them") {
  CHECK(compare_with_one_processor([](Mesh& m, const Layout& l) {
          auto a = test_input(m, "batch:2, x:6, y:5, c:3", l, 1);
          auto b = test_input(m, "batch:2, x:6, y:5, c:3", shifted(l, dims), 2);
          return a * b + b;
        }) == "");
  CHECK(compare_with_one_processor([](Mesh& m, const Layout& l) {
          auto a = test_input(m, "x:6, y:5", l, 1);
          auto b = test_input(m, "c:3, y:5", shifted(l, dims), 2);
          return b - a;
        }) == "");
}

TEST_CASE("the result prefers splits to replication, so a replicated operand is sliced") {
  auto layouts = on_mesh("rows:2; cols:2", [](Mesh& m) {
    auto split = test_input(m, "x:6, y:5", "x:rows; y:cols", 1);
    auto replicated = test_input(m, "x:6, y:5", "", 2);
    return std::pair((replicated + split).layout().to_string(),
                     (split + replicated).layout().to_string());
  });
  for (const auto& [a, b] : layouts) {
    CHECK(a == "[x=6@rows, y=5@cols]");
    CHECK(b == "[x=6@rows, y=5@cols]");
  }
}

TEST_CASE("operands whose same-named dims differ in size are rejected, naming the dim") {
  auto errors = on_mesh("p:2", [](Mesh& m) {
    try {
      auto sum = test_input(m, "x:6, y:5", "x:p", 1) + test_input(m, "x:4", "", 2);
      return std::string("no error");
    } catch (const ShapeError& e) {
      return std::string(e.what());
    }
  });
  for (const auto& what : errors)
    CHECK_THAT(what, Contains("add") && Contains("dim \"x\"") && Contains("6") && Contains("4"));
}

TEST_CASE("an rvalue's block holds a sum or a renamed tensor only when nothing else holds it") {
  on_one_processor([](Mesh& m) {
    const auto bias = test_input(m, "c:3", "", 2);
    auto a = test_input(m, "batch:2, x:6, c:3", "", 1);
    const auto expected = gather(a + bias);

    auto shared = a;  // a second handle: the block must not change under it
    const auto before = gather(shared);
    const bool kept_shared = gather(std::move(a) + bias) == expected && gather(shared) == before;
    CHECK(kept_shared);

    auto sole = shared.clone();
    const float* block = sole.local().data();
    auto sum = std::move(sole) + bias;
    CHECK(sum.local().data() == block);  // written in place
    const bool sum_right = gather(sum) == expected;
    CHECK(sum_right);
    auto renamed = rename(std::move(sum), "c", "features");
    CHECK(renamed.local().data() == block);  // handed over, not copied
    CHECK(renamed.shape().to_string() == "[batch=2, x=6, features=3]");
    return 0;
  });
}

TEST_CASE("maximum and minimum with a scalar, clamp and not_equal match one processor") {
  CHECK(compare_with_one_processor([](Mesh& m, const Layout& l) {
          auto a = test_input(m, "batch:2, x:6, y:5, c:3", l, 1).set_requires_grad();
          auto held = clamp(a, -0.5f, 0.5f) + maximum(a, 0.25f) * 2.0f - minimum(a, -0.25f) +
                      not_equal(a, 0.5f);
          backward(reduce_sum(held * held));
          return std::vector<Tensor<float>>{held, a.grad()};
        }) == "");
  // The values and gradients themselves: bounds, ties (the gradient passes), NaN kept.
  const std::vector<float> values{-1.0f, -0.5f, 0.0f, 0.5f, 1.0f, std::nanf("")};
  const auto [held, grad, unequal] = on_one_processor([&](Mesh& m) {
    auto a = generate<float>(m, Shape("x:6"), Layout(), [&](const Index& i) {
               return values[std::size_t(i["x"])];
             }).set_requires_grad();
    auto c = clamp(a, -0.5f, 0.5f);
    backward(reduce_sum(c));
    return std::tuple(gather(c), gather(a.grad()), gather(not_equal(a, 0.5f)));
  });
  const std::vector<float> want_held{-0.5f, -0.5f, 0.0f, 0.5f, 0.5f},
      want_grad{0.0f, 1.0f, 1.0f, 1.0f, 0.0f}, want_unequal{1.0f, 1.0f, 1.0f, 0.0f, 1.0f, 1.0f};
  for (std::size_t i = 0; i < want_held.size(); ++i) {
    INFO("element " << i);
    CHECK(held(i) == want_held[i]);
    CHECK(grad(i) == want_grad[i]);
  }
  CHECK(std::isnan(held(5)));
  for (std::size_t i = 0; i < want_unequal.size(); ++i) CHECK(unequal(i) == want_unequal[i]);
}

}  // namespace test_elementwise
