// Activations, dropout and losses on every layout class equal the single-processor run; random
// tensors and dropout masks do not depend on the layout.
#include <catch2/catch.hpp>

#include <meshtensor/autodiff/backward.hpp>

#include "support/op_check.hpp"
#include "support/spatial_cases.hpp"

using namespace meshtensor;
using namespace meshtensor::testing;

namespace {
const Shape logits_shape("batch:2, x:9, y:6, classes:3");

Tensor<float> one_hot(Mesh& m, const Layout& l) {
  return generate<float>(m, logits_shape, l, [](const Index& i) {
    return float((i["x"] / 3 + i["y"] / 2 + i["batch"]) % 3 == i["classes"]);
  });
}
}  // namespace

TEST_CASE("activations and softmax over a split or unsplit dim match one processor") {
  CHECK(compare_with_one_processor(
            [](Mesh& m, const Layout& l) {
              auto x = test_input(m, volume_shape, l, 1).set_requires_grad();
              auto out = relu(x) + leaky_relu(x, 0.2f) + sigmoid(x) + softmax(x * 4.0f, "x") +
                         log_softmax(x, "channels") + dropout(x, 0.25, 11, "layer");
              backward(reduce_sum(out * test_input(m, out.shape(), l, 5)));
              return std::vector<Tensor<float>>{out, x.grad()};
            },
            1e-5, spatial_cases()) == "");
}

TEST_CASE("cross-entropy and Dice are the same scalars, with the same gradients, on every layout") {
  const std::vector<LayoutCase> cases = {
      {"one processor", "p:1", ""},
      {"x split 4 ways (uneven)", "p:4", "x:p"},
      {"x and y on 2x2", "rows:2; cols:2", "x:rows; y:cols"},
      {"classes split 3 ways", "p:3", "classes:p"},
      {"batch and y on 2x4", "rows:2; cols:4", "batch:rows; y:cols"},
  };
  CHECK(compare_with_one_processor(
            [](Mesh& m, const Layout& l) {
              auto logits = test_input(m, logits_shape, l, 1).set_requires_grad();
              auto weights =
                  full<float>(m, "classes:3", l, 1.0f) + test_input(m, "classes:3", l, 2) * 0.5f;
              auto labels = one_hot(m, l);
              auto ce = softmax_cross_entropy(logits, labels, "classes", weights);
              auto dice = soft_dice(softmax(logits, "classes"), labels, "classes");
              backward(ce + reduce_sum(dice));
              return std::vector<Tensor<float>>{ce, dice, logits.grad()};
            },
            1e-5, cases) == "");
}

TEST_CASE("the same seed gives the same random tensor and dropout mask on any layout") {
  CHECK(compare_with_one_processor(
            [](Mesh& m, const Layout& l) {
              auto u = random_uniform<float>(m, volume_shape, l, 42, "init/u", -2, 3);
              auto n = random_normal<float>(m, volume_shape, l, 42, "init/n", 1, 0.5);
              auto d = dropout(full<float>(m, volume_shape, l, 1.0f), 0.5, 42, "drop");
              return std::vector<Tensor<float>>{u, n, d};
            },
            0.0, spatial_cases()) == "");
  auto stats = on_one_processor([](Mesh& m) {
    auto n = random_normal<double>(m, "x:20000", "", 3, "n");
    auto u = random_uniform<double>(m, "x:20000", "", 3, "u");
    auto other = random_uniform<double>(m, "x:20000", "", 4, "u");
    const double mean = reduce_mean(n).item();
    const double var = reduce_mean(square(n - mean)).item();
    return std::vector<double>{mean,
                               var,
                               reduce_mean(u).item(),
                               reduce_max(u).item(),
                               reduce_min(u).item(),
                               reduce_mean(abs(u - other)).item()};
  });
  CHECK(std::abs(stats[0]) < 0.03);
  CHECK(stats[1] == Approx(1.0).epsilon(0.05));
  CHECK(stats[2] == Approx(0.5).epsilon(0.02));
  CHECK(stats[3] < 1.0);
  CHECK(stats[4] >= 0.0);
  CHECK(stats[5] == Approx(1.0 / 3).epsilon(0.05));  // another seed, an independent stream
}
