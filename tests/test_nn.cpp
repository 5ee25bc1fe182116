// Layers and optimisers: the update rules against their formulas, the same trajectories on split
// and replicated parameters, and a small network trained 20 steps on 1 and on 8 processors.
#include <catch2/catch.hpp>

#include <cmath>
#include <limits>
#include <vector>

#include <xtensor/xmath.hpp>

#include <meshtensor/autodiff/backward.hpp>

#include "support/op_check.hpp"
#include "support/spatial_cases.hpp"

using namespace meshtensor;
using namespace meshtensor::testing;

// In a namespace of its own: test files share a program (tests/CMakeLists.txt).
namespace test_nn {

TEST_CASE("SGD with momentum, Adam and AdamW follow their update formulas") {
  // One parameter p with loss p^2 / 2 + 3p: gradient p + 3.
  auto run = [](auto make_optimizer, int steps) {
    return on_one_processor([&](Mesh& m) {
      auto p = full<double>(m, "x:1", "", 2.0).set_requires_grad();
      auto opt = make_optimizer(std::vector<Tensor<double>>{p});
      for (int s = 0; s < steps; ++s) {
        backward(reduce_sum(square(p) * 0.5 + p * 3.0));
        opt.step();
        opt.zero_grad();
      }
      return p.local()(0);
    });
  };
  // Hand-computed trajectories of the same rules.
  double p = 2, v = 0;
  for (int s = 0; s < 3; ++s) {
    const double g = p + 3 + 0.1 * p;
    v = 0.9 * v + g;
    p -= 0.05 * v;
  }
  CHECK(run([](auto ps) { return nn::Sgd<double>(ps, 0.05, 0.9, 0.1); }, 3) ==
        Approx(p).epsilon(1e-12));
  for (bool decoupled : {false, true}) {
    double q = 2, m1 = 0, m2 = 0;
    for (int s = 1; s <= 4; ++s) {
      double g = q + 3;
      if (!decoupled) g += 0.01 * q;
      m1 = 0.9 * m1 + 0.1 * g;
      m2 = 0.999 * m2 + 0.001 * g * g;
      if (decoupled) q -= 0.1 * 0.01 * q;
      q -= 0.1 * (m1 / (1 - std::pow(0.9, s))) / (std::sqrt(m2 / (1 - std::pow(0.999, s))) + 1e-8);
    }
    CHECK(run([decoupled](
                  auto ps) { return nn::Adam<double>(ps, 0.1, 0.9, 0.999, 1e-8, 0.01, decoupled); },
              4) == Approx(q).epsilon(1e-12));
  }
}

TEST_CASE("Adam counts its steps where its parameters are, and not a step its guard skips") {
  const auto seen = on_one_processor([](Mesh& m) {
    auto p = full<double>(m, "x:1", "", 2.0).set_requires_grad();
    nn::Adam<double> adam({p}, 0.1);
    std::vector<double> out;
    backward(reduce_sum(square(p)));
    const auto fine = reduce_sum(p) * 0.0;
    const auto bad = fine + std::numeric_limits<double>::infinity();
    adam.step(&fine);
    out.push_back(double(adam.steps()));
    const double moved = p.local()(0);
    adam.step(&bad);  // skipped: neither the parameter nor the count moves
    out.push_back(double(adam.steps()));
    out.push_back(p.local()(0) - moved);
    adam.set_steps(5);
    adam.set_learning_rate(0.0);
    adam.step(&fine);  // counted, with no effect at a learning rate of 0
    out.push_back(double(adam.steps()));
    out.push_back(p.local()(0) - moved);
    return out;
  });
  CHECK(seen == std::vector<double>{1, 1, 0, 6, 0});
}

TEST_CASE("optimisers give the same parameters whether they are split or replicated") {
  CHECK(compare_with_one_processor(
            [](Mesh& m, const Layout& l) {
              auto w = test_input(m, "c:3, k:2", l, 1).set_requires_grad();
              auto v = test_input(m, "x:6, y:5", l, 2).set_requires_grad();
              auto x = test_input(m, "batch:2, x:6, y:5, c:3", l, 3);
              auto adam = nn::adamw<float>({w, v}, 0.05);
              auto sgd = nn::Sgd<float>({w}, 0.01, 0.9);
              for (int s = 0; s < 3; ++s) {
                backward(reduce_mean(square(einsum({x, w}, "batch, x, y, k") * v)));
                adam.step();
                sgd.step();
                adam.zero_grad();
              }
              return std::vector<Tensor<float>>{w, v};
            },
            1e-4) == "");
}

TEST_CASE("a convolution layer maps channels to channels and its bias broadcasts") {
  auto dims = on_one_processor([](Mesh& m) {
    nn::Parameters<float> params;
    nn::Conv<float> conv(m, params, "c1", Dim("channels", 3), Dim("channels", 5),
                         Window("x, y, z").kernel(3).padding("same"), 1);
    nn::Conv<float> up(m, params, "up", Dim("channels", 5), Dim("channels", 2),
                       Window("x, y, z").kernel(2).stride(2), 1, /*transposed=*/true);
    auto y = up(conv(test_input(m, volume_shape, "", 1)));
    return std::pair(y.shape().to_string(), params.count());
  });
  CHECK(dims.first == "[batch=2, x=18, y=12, z=10, channels=2]");
  CHECK(dims.second == 27 * 3 * 5 + 5 + 8 * 5 * 2 + 2);
}

TEST_CASE("batch norm running statistics and inference mode match one processor") {
  CHECK(compare_with_one_processor(
            [](Mesh& m, const Layout& l) {
              nn::Parameters<float> params;
              nn::Norm<float> norm(m, params, "bn", nn::NormKind::batch, Dim("channels", 3),
                                   "x, y, z");
              for (int s = 0; s < 3; ++s)
                norm(test_input(m, volume_shape, l, s) * float(s + 1), true);
              auto inference = norm(test_input(m, volume_shape, l, 7), false);
              return std::vector<Tensor<float>>{params["bn/running_mean"], params["bn/running_var"],
                                                inference};
            },
            1e-5, spatial_cases()) == "");
}

namespace {

// A small segmentation network: conv, norm, relu, pool, conv, relu, transposed conv, 1x1 head.
struct TinyNet {
  nn::Parameters<float> params;
  nn::Conv<float> c1, c2, up, head;
  nn::Norm<float> n1;
  TinyNet(Mesh& m, std::uint64_t seed)
      : c1(m, params, "c1", Dim("channels", 1), Dim("channels", 4),
           Window("x, y, z").kernel(3).padding("same"), seed),
        c2(m, params, "c2", Dim("channels", 4), Dim("channels", 4),
           Window("x, y, z").kernel(3).padding("same"), seed),
        up(m, params, "up", Dim("channels", 4), Dim("channels", 4),
           Window("x, y, z").kernel(2).stride(2), seed, true),
        head(m, params, "head", Dim("channels", 4), Dim("channels", 2), Window("x, y, z").kernel(1),
             seed),
        n1(m, params, "n1", nn::NormKind::batch, Dim("channels", 4), "x, y, z") {}
  Tensor<float> operator()(const Tensor<float>& x) {
    auto h = relu(n1(c1(x), true));
    h = relu(c2(max_pool(h, Window("x, y, z").kernel(2))));
    return rename(head(relu(up(h))), "channels", "classes");
  }
};

std::vector<float> train(Mesh& m, const Layout& layout, int steps) {
  TinyNet net(m, 5);
  auto adam = nn::Adam<float>(net.params.trainable(), 0.01);
  std::vector<float> losses;
  for (int s = 0; s < steps; ++s) {
    // A fresh volume each step: a ball of varying radius in noise, labelled inside/outside.
    auto x = generate<float>(m, "batch:2, x:8, y:8, z:8, channels:1", layout, [s](const Index& i) {
      const double r2 =
          std::pow(i["x"] - 3.5, 2) + std::pow(i["y"] - 4.0, 2) + std::pow(i["z"] - 3.0, 2);
      return float((r2 < 6 + s % 5 + i["batch"] ? 1.0 : 0.0) + 0.3 * test_value(i, s));
    });
    auto labels =
        generate<float>(m, "batch:2, x:8, y:8, z:8, classes:2", layout, [s](const Index& i) {
          const double r2 =
              std::pow(i["x"] - 3.5, 2) + std::pow(i["y"] - 4.0, 2) + std::pow(i["z"] - 3.0, 2);
          return float((r2 < 6 + s % 5 + i["batch"]) == (i["classes"] == 1));
        });
    auto logits = net(x);
    auto loss = softmax_cross_entropy(logits, labels, "classes") +
                (1.0f - reduce_mean(soft_dice(softmax(logits, "classes"), labels, "classes")));
    backward(loss);
    adam.step();
    adam.zero_grad();
    losses.push_back(loss.item());
  }
  return losses;
}

}  // namespace

TEST_CASE("a small network trained 20 steps gives the same losses on 1 and on several processors") {
  const auto reference = on_one_processor([](Mesh& m) { return train(m, "", 20); });
  REQUIRE(reference.size() == 20);
  CHECK(reference.back() < reference.front());  // it learns
  // Tolerance for a whole run: float rounding differs between splits and compounds over steps.
  const double tolerance = 1e-3;
  for (const auto& c :
       std::vector<LayoutCase>{{"x, y and z on 2x2x2", "a:2; b:2; c:2", "x:a; y:b; z:c"},
                               {"x and y on 2x2", "rows:2; cols:2", "x:rows; y:cols"},
                               {"batch and x hybrid", "rows:2; cols:2", "batch:rows; x:cols"}}) {
    if (!can_run(c.mesh)) continue;
    auto runs = on_mesh(c.mesh, [&](Mesh& m) { return train(m, c.layout, 20); });
    for (const auto& losses : runs) {
      double largest = 0;
      for (std::size_t s = 0; s < losses.size(); ++s)
        largest =
            std::max(largest, std::abs(double(losses[s]) - reference[s]) / std::abs(reference[s]));
      INFO(transport_under_test() << " transport, " << c.name
                                  << ": largest relative loss difference " << largest);
      CHECK(largest < tolerance);
      if (&losses == &runs.front())
        WARN(transport_under_test()
             << " transport, " << c.name << ": largest relative loss difference over 20 steps "
             << largest);
    }
  }
}

namespace {

// conv, batch norm, relu, conv: its output, and the gradients of the input and every parameter
// and the running statistics after one step, with the block's activations kept or recomputed.
std::vector<Tensor<float>> block_step(Mesh& m, const Layout& l, bool recompute) {
  nn::Parameters<float> params;
  const Window same = Window("x, y, z").kernel(3).padding("same");
  nn::Conv<float> c1(m, params, "c1", Dim("channels", 3), Dim("channels", 4), same, 3);
  nn::Norm<float> n1(m, params, "n1", nn::NormKind::batch, Dim("channels", 4), "x, y, z");
  nn::Conv<float> c2(m, params, "c2", Dim("channels", 4), Dim("channels", 2), same, 4);
  auto block = [&](const std::vector<Tensor<float>>& in) { return c2(relu(n1(c1(in[0]), true))); };
  auto x = test_input(m, volume_shape, l, 1).set_requires_grad();
  auto out = recompute ? autodiff::recompute<float>(block, {x}) : block({x});
  backward(reduce_sum(out * test_input(m, out.shape(), l, 2)));
  std::vector<Tensor<float>> results{out, x.grad(), params["n1/running_mean"],
                                     params["n1/running_var"]};
  for (const auto& p : params.trainable()) results.push_back(p.grad());
  return results;
}

}  // namespace

TEST_CASE("recomputed activations give the gradients and statistics of kept ones") {
  const auto differences = on_one_processor([](Mesh& m) {
    const auto kept = block_step(m, "", false);
    const auto recomputed = block_step(m, "", true);
    std::vector<double> largest;
    for (std::size_t i = 0; i < kept.size(); ++i)
      largest.push_back(xt::amax(xt::abs(kept[i].local() - recomputed[i].local()))());
    return largest;
  });
  for (double d : differences) CHECK(d == 0.0);  // the same ops in the same order
  CHECK(compare_with_one_processor([](Mesh& m, const Layout& l) { return block_step(m, l, true); },
                                   1e-5, spatial_cases()) == "");
}

}  // namespace test_nn
