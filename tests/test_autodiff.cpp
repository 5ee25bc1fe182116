// Autodiff: gradients of the foundation ops checked against finite differences on one processor,
// and distributed gradients equal to single-processor gradients on every layout class.
#include <catch2/catch.hpp>

#include <meshtensor/autodiff/backward.hpp>

#include "support/errors.hpp"
#include "support/gradcheck.hpp"
#include "support/op_check.hpp"

using namespace meshtensor;
using namespace meshtensor::testing;

// In a namespace of its own: test files share a program (tests/CMakeLists.txt).
namespace test_autodiff {
using Catch::Matchers::Contains;

using Inputs = std::vector<Tensor<double>>;

TEST_CASE("unary and scalar ops have the gradients finite differences give") {
  CHECK(gradcheck({"x:4, y:3"}, [](Mesh&, const Inputs& in) {
          auto t = in[0];
          auto pos = abs(t) + 0.5;
          return reduce_sum(exp(t) * 0.5 + square(t) - t / 3.0 + 2.0 - (1.0 - t) * 1.5 + sqrt(pos) +
                            tanh(t) + pow(pos, 1.7) + log(pos) + 1.0 / pos + (-t));
        }) == "");
  CHECK(gradcheck({"x:5"}, [](Mesh&, const Inputs& in) {
          return reduce_sum(map(
              in[0], [](double x) { return std::sin(x); }, [](double x) { return std::cos(x); }));
        }) == "");
}

TEST_CASE("binary ops with broadcasting have the gradients finite differences give") {
  CHECK(gradcheck({"x:4, y:3", "y:3", "x:4, y:3"}, [](Mesh&, const Inputs& in) {
          auto [a, b, c] = std::tuple(in[0], in[1], in[2]);
          auto d = abs(b) + 1.0;
          return reduce_sum((a + b) * (a - b) * c / d + maximum(a, c) - minimum(b, c) * a);
        }) == "");
  CHECK(gradcheck({"x:3", "y:2"}, [](Mesh&, const Inputs& in) {
          return reduce_sum(square(in[0] * in[1] + in[1]));
        }) == "");
}

TEST_CASE("einsum has the gradients finite differences give") {
  CHECK(gradcheck({"b:2, x:3, c:2", "c:2, k:3"}, [](Mesh&, const Inputs& in) {
          return reduce_sum(square(einsum({in[0], in[1]}, "b, x, k")));
        }) == "");
  // Dims only one operand has (summed away), an outer product, and three operands.
  CHECK(gradcheck({"x:3, y:2", "z:2"}, [](Mesh&, const Inputs& in) {
          return einsum({square(einsum({in[0], in[1]}, "x, z")), in[1]}, "");
        }) == "");
  CHECK(gradcheck({"a:2, x:3", "x:3, y:2", "y:2, c:2"}, [](Mesh&, const Inputs& in) {
          return reduce_sum(square(einsum({in[0], in[1], in[2]}, "c, a")));
        }) == "");
}

TEST_CASE("reductions have the gradients finite differences give") {
  CHECK(gradcheck({"b:2, x:4, y:3"}, [](Mesh&, const Inputs& in) {
          auto t = in[0];
          return reduce_sum(square(reduce_sum(t, "x")) + reduce_mean(t, "x") * 2.0) +
                 reduce_mean(square(t)) + reduce_sum(reduce_max(t, "x, y") * 3.0) -
                 reduce_sum(reduce_min(t, "b") * reduce_max(t, "b"));
        }) == "");
}

TEST_CASE("a tensor used several times accumulates its gradient") {
  CHECK(gradcheck({"x:3"}, [](Mesh&, const Inputs& in) {
          auto a = in[0];
          return reduce_sum(a * a + a * 3.0 + exp(a) * a);
        }) == "");
  auto grads = on_one_processor([](Mesh& m) {
    auto a = full<double>(m, "x:2", "", 3.0).set_requires_grad();
    backward(reduce_sum(a + a + a));
    return a.grad().local();
  });
  CHECK(grads(0) == 3.0);
  CHECK(grads(1) == 3.0);
}

TEST_CASE("distributed gradients equal single-processor gradients on every layout class") {
  const std::vector<std::string> dims{"batch", "x", "y", "c"};
  CHECK(compare_with_one_processor([&](Mesh& m, const Layout& l) {
          auto a = test_input(m, "batch:2, x:6, y:5, c:3", l, 1).set_requires_grad();
          auto w = test_input(m, "c:3, k:2", l, 2).set_requires_grad();
          auto s = test_input(m, "x:6, y:5", shifted(l, dims), 3).set_requires_grad();
          auto h = einsum({a, w}, "batch, x, y, k") * s + a.detach() * 0.0f;
          auto loss = reduce_mean(square(h)) + reduce_sum(reduce_max(a, "x") * reduce_min(s, "y")) +
                      reduce_sum(relayout(s, shifted(l, dims)) * 0.5f);
          backward(loss);
          return std::vector<Tensor<float>>{loss, a.grad(), w.grad(), s.grad()};
        }) == "");
}

TEST_CASE("backward from a tensor with its gradient equals backward from sum(output * gradient)") {
  CHECK(compare_with_one_processor([&](Mesh& m, const Layout& l) {
          auto a = test_input(m, "batch:2, x:6, y:5, c:3", l, 1).set_requires_grad();
          auto g = test_input(m, "batch:2, x:6, y:5, c:3", l, 2);
          auto y = square(a) * 0.5f + a;
          backward(y, g);
          const auto given = a.grad().clone();
          a.zero_grad();
          backward(reduce_sum(square(a) * 0.5f * g + a * g));
          return std::vector<Tensor<float>>{given, a.grad()};
        }) == "");
  auto message = on_one_processor([](Mesh& m) {
    ErrorLog record;
    auto a = full<double>(m, "x:3", "", 2.0).set_requires_grad();
    record([&] { backward(a * 2.0, full<double>(m, "x:4", "", 1.0)); });
    return record.messages();
  });
  CHECK_THAT(message[0], Contains("must have the output's layout") && Contains("[x=3]"));
}

TEST_CASE("retain_grad keeps an intermediate gradient; detach and NoGrad record nothing") {
  auto observed = on_one_processor([](Mesh& m) {
    auto a = full<double>(m, "x:3", "", 2.0).set_requires_grad();
    auto h = (a * a).retain_grad();
    auto cut = a.detach() * 5.0;
    std::size_t recorded_without_grad;
    {
      autodiff::NoGrad no_grad(m);
      auto unused = a * a;
      recorded_without_grad = autodiff::tape(m).size();
    }
    backward(reduce_sum(h * 3.0 + cut));
    return std::tuple(h.grad().local()(0), a.grad().local()(0), cut.requires_grad(),
                      recorded_without_grad, autodiff::tape(m).size());
  });
  CHECK(std::get<0>(observed) == 3.0);
  CHECK(std::get<1>(observed) == 12.0);
  CHECK_FALSE(std::get<2>(observed));
  CHECK(std::get<3>(observed) == 1);  // only a*a: detached operands and NoGrad record nothing
  CHECK(std::get<4>(observed) == 0);  // backward clears the tape
}

TEST_CASE("autodiff misuse gives clear errors") {
  auto errors = on_one_processor([](Mesh& m) {
    ErrorLog record;
    auto a = full<double>(m, "x:3", "", 2.0).set_requires_grad();
    record([&] { backward(a * 2.0); });
    record([&] { backward(reduce_sum(full<double>(m, "x:3", "", 1.0))); });
    record([&] { map(a, [](double x) { return x; }); });
    record([&] { full<double>(m, "x:3", "", 1.0).retain_grad(); });
    return record.messages();
  });
  CHECK_THAT(errors[0], Contains("loss without dims") && Contains("[x=3]"));
  CHECK_THAT(errors[1], Contains("does not depend on any tensor that requires a gradient"));
  CHECK_THAT(errors[2], Contains("map(t, f, df)"));
  CHECK_THAT(errors[3], Contains("retain_grad"));
}

}  // namespace test_autodiff
