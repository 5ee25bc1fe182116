// Activations, dropout and losses on every layout class equal the single-processor run; random
// tensors and dropout masks do not depend on the layout.
#include <catch2/catch.hpp>

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <functional>
#include <random>
#include <type_traits>
#include <vector>

#include <meshtensor/autodiff/backward.hpp>
#include <meshtensor/kernels/cpu/activation.hpp>
#include <meshtensor/kernels/cpu/dice_cross_entropy.hpp>
#include <meshtensor/kernels/cpu/vector_math.hpp>

#include "support/op_check.hpp"
#include "support/spatial_cases.hpp"

using namespace meshtensor;
using namespace meshtensor::testing;

// In a namespace of its own: test files share a program (tests/CMakeLists.txt).
namespace test_activation_loss {

namespace {
const Shape logits_shape("batch:2, x:9, y:6, classes:3");

Tensor<float> one_hot(Mesh& m, const Layout& l, const Shape& shape = logits_shape) {
  return generate<float>(m, shape, l, [](const Index& i) {
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

namespace {
const std::vector<LayoutCase> loss_cases = {
    {"one processor", "p:1", ""},
    {"x split 4 ways (uneven)", "p:4", "x:p"},
    {"x and y on 2x2", "rows:2; cols:2", "x:rows; y:cols"},
    {"classes split 3 ways (the ops' path)", "p:3", "classes:p"},
    {"batch and y on 2x4", "rows:2; cols:4", "batch:rows; y:cols"},
};

// The fused loss with labels on another layout than the logits where `l` splits x alone (the op
// moves them), and its gradient; with `by_ops`, the same loss written with the ops.
std::vector<Tensor<float>> dice_ce(Mesh& m, const Layout& l, bool by_ops, DiceOptions options,
                                   const Shape& shape = logits_shape) {
  auto logits = (test_input(m, shape, l, 1) * 3.0f).set_requires_grad();
  auto weights = full<float>(m, "classes:3", l, 1.0f) + test_input(m, "classes:3", l, 2) * 0.5f;
  const Layout label_layout = l.to_string() == "x:p" ? Layout("y:p") : l;
  auto labels = one_hot(m, label_layout, shape);
  Tensor<float> loss;
  if (by_ops) {
    const auto dice = soft_dice(softmax(logits, "classes"), relayout(labels, l), "classes",
                                float(options.smooth));
    const auto mean_dice = reduce_sum(crop(dice, "classes", options.first_class, 0)) *
                           (1.0f / float(3 - options.first_class));
    loss =
        softmax_cross_entropy(logits, relayout(labels, l), "classes", weights) + (1.0f - mean_dice);
  } else {
    loss = dice_cross_entropy(logits, labels, "classes", weights, options);
  }
  backward(loss * 3.0f);
  return {loss, logits.grad()};
}
}  // namespace

TEST_CASE("the fused Dice + cross-entropy loss is the ops' loss, with the same gradient") {
  // Classes last (positions tiled in runs along the block) and in the middle (tiled per row).
  const Shape classes_inside("batch:2, classes:3, x:9, y:6");
  for (const DiceOptions options : {DiceOptions{}, DiceOptions{0, 1e-3}}) {
    INFO("first Dice class " << options.first_class << ", smoothing " << options.smooth);
    CHECK(compare_with_one_processor(
              [&](Mesh& m, const Layout& l) { return dice_ce(m, l, false, options); }, 1e-5,
              loss_cases) == "");
    for (const Shape& shape : {logits_shape, classes_inside}) {
      INFO(shape.to_string());
      const auto why = on_one_processor([&](Mesh& m) {
        const auto fused = dice_ce(m, Layout{}, false, options, shape),
                   ops = dice_ce(m, Layout{}, true, options, shape);
        std::string first;
        for (std::size_t k = 0; k < fused.size() && first.empty(); ++k)
          first = mismatch(local_block(fused[k]), local_block(ops[k]).data, 1e-5);
        return first;
      });
      CHECK(why == "");
    }
  }
}

TEST_CASE("the loss's vectorizable exp and log are within 3e-7 of libm's") {
  double worst_exp = 0, worst_log = 0;
  for (float x = -87.0f; x <= 88.0f; x += 0.001953125f) {  // 2^-9 steps, 89600 points
    const double exact = std::exp(double(x));
    worst_exp = std::max(worst_exp, std::abs(kernels::cpu::exp_approx(x) - exact) / exact);
  }
  for (float x = 1e-30f; x < 1e30f; x *= 1.0009765625f) {
    const double exact = std::log(double(x));
    const double error = std::abs(kernels::cpu::log_approx(x) - exact);
    worst_log = std::max(worst_log, exact == 0 ? error : error / std::max(1.0, std::abs(exact)));
  }
  CHECK(worst_exp < 3e-7);
  CHECK(worst_log < 3e-7);
  CHECK(kernels::cpu::exp_approx(-200.0f) < 1e-37f);  // clamped, not wrapped around
#if defined(__AVX512F__)
  // The 16-lane forms (the loss's class tiles) compute the same polynomials: within 1 ulp.
  double worst_lanes = 0;
  for (float x0 = -87.0f; x0 <= 88.0f; x0 += 16 * 0.01171875f) {
    alignas(64) float in[16], e[16], l[16];
    for (int j = 0; j < 16; ++j) in[j] = x0 + 0.01171875f * float(j);
    _mm512_store_ps(e, kernels::cpu::exp_approx(_mm512_load_ps(in)));
    for (int j = 0; j < 16; ++j) in[j] = std::exp(in[j] / 4);  // positive, normal
    _mm512_store_ps(l, kernels::cpu::log_approx(_mm512_load_ps(in)));
    for (int j = 0; j < 16; ++j) {
      const float x = x0 + 0.01171875f * float(j), scalar_exp = kernels::cpu::exp_approx(x);
      worst_lanes = std::max(worst_lanes, std::abs(double(e[j]) - scalar_exp) / scalar_exp);
      const float scalar_log = kernels::cpu::log_approx(in[j]);
      worst_lanes = std::max(
          worst_lanes, std::abs(double(l[j]) - scalar_log) / std::max(1.0f, std::abs(scalar_log)));
    }
  }
  CHECK(worst_lanes < 1.2e-7);
  alignas(64) float nan[16];
  _mm512_store_ps(nan, kernels::cpu::exp_approx(_mm512_set1_ps(NAN)));
  CHECK(std::isnan(nan[0]));  // a NaN score makes a NaN loss, which the training loop stops on
#endif
}

TEST_CASE("GELU's vector form is within 5e-6 of libm's formula, forward and backward") {
  std::vector<float> x, g;
  for (float v = -12.0f; v <= 12.0f; v += 0.00048828125f) x.push_back(v);  // 2^-11 steps
  for (std::size_t i = 0; i < x.size(); ++i) g.push_back(std::sin(0.37f * float(i)));
  const auto n = std::int64_t(x.size());
  std::vector<float> y(x.size()), dx(x.size());
  LocalProcessor local;
  if (!kernels::cpu::activation::gelu(x.data(), y.data(), n)) {
    WARN("no vector form of GELU on this CPU (no AVX2): the element-wise loop computes it");
    return;
  }
  REQUIRE(kernels::cpu::activation::gelu_times_derivative(g.data(), x.data(), dx.data(), n));
  const kernels::Unary<float, kernels::UnaryOp::gelu> gelu;
  const kernels::Unary<float, kernels::UnaryOp::gelu_derivative> derivative;
  double worst = 0, worst_gradient = 0;
  for (std::size_t i = 0; i < x.size(); ++i) {
    const double want = gelu(x[i]);
    if (std::abs(want) > 1e-37) worst = std::max(worst, std::abs(y[i] - want) / std::abs(want));
    // Per unit of the incoming gradient: the derivative crosses zero near x = -0.75.
    const double gradient = double(g[i]) * derivative(x[i]);
    worst_gradient = std::max(worst_gradient, std::abs(dx[i] - gradient));
  }
  CHECK(worst < 5e-6);
  CHECK(worst_gradient < 1e-6);
  // Every length: the last partial vector computed, nothing written past it.
  for (std::int64_t length = 0; length <= 17; ++length) {
    std::vector<float> out(std::size_t(length) + 1, -7.0f);
    kernels::cpu::activation::gelu(x.data() + 20000, out.data(), length);
    CHECK(out.back() == -7.0f);
    for (std::int64_t i = 0; i < length; ++i)
      CHECK(out[std::size_t(i)] == Approx(gelu(x[std::size_t(20000 + i)])).epsilon(5e-6));
  }
  // As libm's: NaN stays NaN, gelu(inf) = inf, gelu(-inf) = -inf * 0.
  const std::vector<float> special{NAN, INFINITY, -INFINITY};
  std::vector<float> out(3);
  kernels::cpu::activation::gelu(special.data(), out.data(), 3);
  CHECK(std::isnan(out[0]));
  CHECK(out[1] == INFINITY);
  CHECK(std::isnan(out[2]));
  // Held to the baseline by the kernel policy, no form runs.
  Settings baseline;
  baseline.kernels.cpu_instructions = KernelPolicy::CpuInstructions::baseline;
  LocalProcessor plain(baseline);
  CHECK_FALSE(kernels::cpu::activation::gelu(x.data(), y.data(), n));
}

namespace {
// The fused loss's kernels on positions with the classes innermost (the class tiles where the CPU
// has them) and the same values with the classes outermost (the portable tiles): sums within 1e-6
// relative, gradients within float's or bfloat16's rounding.
template <class T, class L>
void compare_class_layouts(std::int64_t classes) {
  const std::int64_t positions = 16 * 9 + 7;  // whole tiles and a part tile
  std::mt19937 random(7);
  std::normal_distribution<float> normal(0.0f, 3.0f);
  std::vector<T> inner(std::size_t(positions * classes)), outer(inner.size());
  std::vector<L> label_inner(inner.size(), L(0.0f)), label_outer(inner.size(), L(0.0f));
  for (std::int64_t q = 0; q < positions; ++q) {
    const std::int64_t truth = std::int64_t(random() % std::uint32_t(classes));
    for (std::int64_t c = 0; c < classes; ++c) {
      const T score = T(normal(random));
      inner[std::size_t(q * classes + c)] = outer[std::size_t(c * positions + q)] = score;
      const L label = L(c == truth ? 1.0f : 0.0f);
      label_inner[std::size_t(q * classes + c)] = label_outer[std::size_t(c * positions + q)] =
          label;
    }
  }
  const std::vector<float> weights = {0.3f, 1.0f, 2.5f};
  const kernels::ClassBlock last{positions, classes, 1}, first{1, classes, positions};
  const kernels::DiceCrossEntropySums order{classes};
  std::vector<double> sums_last(std::size_t(order.size())), sums_first(sums_last.size());
  kernels::cpu::dice_cross_entropy_sums(last, inner.data(), label_inner.data(), weights.data(),
                                        sums_last.data());
  kernels::cpu::dice_cross_entropy_sums(first, outer.data(), label_outer.data(), weights.data(),
                                        sums_first.data());
  for (std::size_t k = 0; k < sums_last.size(); ++k)
    CHECK(sums_last[k] == Approx(sums_first[k]).epsilon(1e-6));

  kernels::DiceCrossEntropyCoefficients coefficients{
      1.0 / 40, {0.02, -0.05, 0.03}, {0.1, 0.2, -0.1}};
  std::vector<T> grad_last(inner.size()), grad_first(inner.size());
  kernels::cpu::dice_cross_entropy_gradient(last, inner.data(), label_inner.data(), weights.data(),
                                            coefficients, 0.7, grad_last.data());
  kernels::cpu::dice_cross_entropy_gradient(first, outer.data(), label_outer.data(), weights.data(),
                                            coefficients, 0.7, grad_first.data());
  const double rounding = std::is_same_v<T, float> ? 1e-5 : 1.0 / 128;  // float: vs double terms
  double worst = 0;
  for (std::int64_t q = 0; q < positions; ++q)
    for (std::int64_t c = 0; c < classes; ++c) {
      const double a = float(grad_last[std::size_t(q * classes + c)]),
                   b = float(grad_first[std::size_t(c * positions + q)]);
      worst = std::max(worst, std::abs(a - b) / (std::abs(b) + 1e-3));
    }
  CHECK(worst < rounding);
}
}  // namespace

TEST_CASE("the fused loss's kernels agree with classes innermost and outermost, 2 and 3 classes") {
  INFO("class tiles in registers: " << (kernels::cpu::class_tiles_fit<3, float, float>() ? "yes"
                                                                                         : "no"));
  for (const std::int64_t classes : {2, 3}) {
    INFO(classes << " classes");
    compare_class_layouts<float, float>(classes);
    compare_class_layouts<bf16, float>(classes);
    compare_class_layouts<bf16, bf16>(classes);
  }
}

TEST_CASE("the fused loss takes bfloat16 logits and labels and keeps nothing over the volume") {
  const auto why = on_one_processor([](Mesh& m) {
    auto logits = (test_input(m, logits_shape, Layout{}, 1) * 3.0f).set_requires_grad();
    auto weights = full<float>(m, "classes:3", Layout{}, 1.0f);
    const auto labels = one_hot(m, Layout{});
    auto half = cast<bf16>(logits);
    auto loss = dice_cross_entropy(half, cast<bf16>(labels), "classes", weights);
    backward(loss);
    const auto reduced = std::vector<Tensor<float>>{loss, logits.grad()};
    auto again = cast<float>(cast<bf16>(logits.detach())).set_requires_grad();
    auto reference = dice_cross_entropy(again, labels, "classes", weights);
    backward(reference);
    std::string first = mismatch(local_block(reduced[0]), local_block(reference).data, 1e-6);
    if (first.empty())  // the gradient rounded once to bfloat16
      first = mismatch(local_block(reduced[1]), local_block(again.grad()).data, 1.0 / 128);
    return first;
  });
  CHECK(why == "");
  // What backward keeps: the logits and labels it was given, nothing else the size of the volume.
  const double kept_mib = on_one_processor([](Mesh& m) {
    const Shape big("batch:1, x:64, y:64, z:32, classes:3");  // 1.5 MiB in fp32
    auto logits = test_input(m, big, Layout{}, 1).set_requires_grad();
    const auto labels = full<float>(m, big, Layout{}, 0.0f) + 1.0f;
    auto weights = full<float>(m, "classes:3", Layout{}, 1.0f);
    const auto before = memory_stats().in_use;
    auto loss = dice_cross_entropy(logits, labels, "classes", weights);
    return double(memory_stats().in_use - before) / (1 << 20);
  });
  CHECK(kept_mib < 0.1);
}

TEST_CASE("the fused loss names what is wrong with its arguments") {
  const auto errors = on_one_processor([](Mesh& m) {
    auto logits = test_input(m, logits_shape, Layout{}, 1);
    auto weights = full<float>(m, "classes:3", Layout{}, 1.0f);
    const auto labels = one_hot(m, Layout{});
    std::vector<std::string> messages;
    auto message = [&](auto&& f) {
      try {
        f();
        messages.push_back("");
      } catch (const Error& e) {
        messages.push_back(e.what());
      }
    };
    message([&] { dice_cross_entropy(logits, labels, "class", weights); });
    message([&] {
      dice_cross_entropy(logits, full<float>(m, "batch:2, x:9, y:6, classes:4", Layout{}, 0.0f),
                         "classes", weights);
    });
    message([&] {
      dice_cross_entropy(logits, labels, "classes", full<float>(m, "classes:2", Layout{}, 1.0f));
    });
    message([&] { dice_cross_entropy(logits, labels, "classes", weights, DiceOptions{3, 1.0}); });
    return messages;
  });
  REQUIRE(errors.size() == 4);
  CHECK_THAT(errors[0],
             Catch::Contains("no class dim \"class\"") && Catch::Contains("\"classes\""));
  CHECK_THAT(errors[1], Catch::Contains("must have the logits' shape"));
  CHECK_THAT(errors[2], Catch::Contains("must be [classes=3]"));
  CHECK_THAT(errors[3], Catch::Contains("give 0 to 2"));
}

TEST_CASE("softmax and the cross-entropy over a dim the tensor lacks name themselves") {
  const auto errors = on_one_processor([](Mesh& m) {
    const auto logits = test_input(m, logits_shape, Layout{}, 1);
    const auto labels = one_hot(m, Layout{});
    std::vector<std::string> messages;
    for (const auto& f : std::vector<std::function<void()>>{
             [&] { softmax(logits, "clases"); }, [&] { log_softmax(logits, "clases"); },
             [&] { softmax_cross_entropy(logits, labels, "clases"); }}) {
      try {
        f();
        messages.push_back("");
      } catch (const ShapeError& e) {
        messages.push_back(e.what());
      }
    }
    return messages;
  });
  REQUIRE(errors.size() == 3);
  CHECK_THAT(errors[0], Catch::StartsWith("softmax: ") && Catch::Contains("no dim \"clases\""));
  CHECK_THAT(errors[1], Catch::StartsWith("log_softmax: "));
  CHECK_THAT(errors[2], Catch::StartsWith("softmax_cross_entropy: ") &&
                            Catch::Contains("\"classes\""));  // the dims it has
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

}  // namespace test_activation_loss
