// Batch norm, max-pooling and a convolution as one op (batch_norm_pool_conv), the convolution's
// halo sent as raw rows before the norm's statistics are agreed: both outputs (the normalised
// tensor and the convolution) and every gradient equal the single-processor run on every spatial
// layout class, equal the three ops one after the other exactly (fp32 and bfloat16), and send as
// many messages. Where the pooling does not tile the blocks (uneven splits, overlapping windows)
// the three ops run, with the same results. nn::norm_pool_conv gives its layers' results.
#include <catch2/catch.hpp>

#include <algorithm>
#include <string>
#include <type_traits>
#include <vector>

#include <meshtensor/autodiff/backward.hpp>
#include <meshtensor/comm/halo_step.hpp>
#include <meshtensor/nn/layers.hpp>
#include <meshtensor/ops/norm_pool_conv.hpp>

#include "support/op_check.hpp"
#include "support/same_results.hpp"
#include "support/spatial_cases.hpp"
#include "support/traffic.hpp"

using namespace meshtensor;
using namespace meshtensor::testing;

// In a namespace of its own: test files share a program (tests/CMakeLists.txt).
namespace test_norm_pool_conv {

namespace {

// Even sizes along x, y and z, so that 2x2x2 windows tile the volume and the blocks of x split 2,
// 4 or 8 ways (and y and z 2 or 4 ways) pool in place.
const Shape even_volume("batch:2, x:16, y:8, z:8, channels:3");

struct Case {
  Shape weight = Shape("kx:3, ky:3, kz:3, channels:3, out:2");
  Window window = Window("x, y, z").padding("same");
  Window pool = Window("x, y, z").kernel(2);
  Activation activation = Activation::relu;
  Shape input = even_volume;
  float gamma_offset = 1.5f;  // gamma's values lie within 1 of it
};

enum class Run { fused, three_ops };

// The normalised x, the convolution's output, and the gradients of x, gamma, beta and the
// weight, for loss = sum(y * r) + sum(out * s); activations in T, parameters in fp32.
template <class T = float>
std::vector<Tensor<float>> forward_backward(Mesh& m, const Layout& l, const Case& c, Run run) {
  auto x = test_input(m, c.input, l, 1).set_requires_grad();
  auto weight = test_input(m, c.weight, l, 2).set_requires_grad();
  const Shape channels{c.input.dim("channels")};
  auto gamma = (test_input(m, channels, l, 3) + c.gamma_offset).detach().set_requires_grad();
  auto beta = test_input(m, channels, l, 4).set_requires_grad();
  Tensor<T> h;
  if constexpr (std::is_same_v<T, float>)
    h = x;
  else
    h = cast<T>(x);
  Tensor<T> y, out;
  if (run == Run::fused) {
    std::tie(y, out) = batch_norm_pool_conv(h, gamma, beta, c.pool, weight, c.window, "channels",
                                            1e-5, nullptr, c.activation);
  } else {
    y = batch_norm(h, gamma, beta, "channels", 1e-5, nullptr, c.activation);
    out = conv(max_pool(y, c.pool), weight, c.window);
  }
  std::vector<Tensor<float>> results;
  for (const auto& t : {y, out}) {
    if constexpr (std::is_same_v<T, float>)
      results.push_back(t);
    else
      results.push_back(cast<float>(t));
  }
  backward(reduce_sum(results[0] * test_input(m, y.shape(), l, 5)) +
           reduce_sum(results[1] * test_input(m, out.shape(), l, 6)));
  for (const auto& t : {x, gamma, beta, weight}) results.push_back(t.grad());
  return results;
}

std::string check(const Case& c, const std::vector<LayoutCase>& cases = spatial_cases()) {
  return compare_with_one_processor(
      [&](Mesh& m, const Layout& l) { return forward_backward(m, l, c, Run::fused); }, 1e-4, cases);
}

// The largest difference between the one op's results and the three ops' on any processor of
// any spatial layout class.
template <class T>
double fused_against_three_ops(const Case& c) {
  return largest_difference(
      spatial_cases(),
      [&](Mesh& m, const Layout& l) { return forward_backward<T>(m, l, c, Run::fused); },
      [&](Mesh& m, const Layout& l) { return forward_backward<T>(m, l, c, Run::three_ops); });
}

}  // namespace

TEST_CASE("batch norm, 2x2x2 max-pooling and a 3x3x3 convolution match one processor") {
  CHECK(check(Case{}) == "");
}

TEST_CASE("the raw rows sent before the statistics give exactly the three ops' results") {
  // Each receiver normalises the raw rows with their owner's coefficients and takes the same
  // maxima: the same values, in fp32 and in bfloat16. Under the fixed rule: where oneDNN has
  // bfloat16 kernels, timing races them against meshtensor's per call, and two runs could each
  // pick another under load.
  const Setting fixed("MESHTENSOR_KERNELS", "fixed");
  CHECK(fused_against_three_ops<float>(Case{}) == 0.0);
  CHECK(fused_against_three_ops<bfloat16>(Case{}) == 0.0);
  Case negative_scale;  // a negative scale turns the rows' maxima into their minima
  negative_scale.activation = Activation::none;
  negative_scale.gamma_offset = -1.5f;
  CHECK(fused_against_three_ops<float>(negative_scale) == 0.0);
}

TEST_CASE("a wider, dilated window over the pooled tensor reads raw rows of several owners") {
  // 5 wide along x over the pooled x (8 rows): x split 8 ways leaves one pooled row a block, so
  // each processor reads two rows from each side, the raw rows of two owners.
  Case wide;
  wide.weight = Shape("kx:5, ky:3, channels:3, out:2");
  wide.window = Window("x, y").padding("same").dilation({1, 2});
  wide.pool = Window("x, y").kernel(2);
  wide.activation = Activation::none;
  CHECK(check(wide) == "");
  CHECK(fused_against_three_ops<float>(wide) == 0.0);
}

TEST_CASE("where the pooling does not tile the blocks the three ops run, with the same results") {
  // x:10 split 4 ways holds 3, 3, 2, 2 rows; x:12 split 8 ways holds 2 or 1: blocks that start
  // between two windows. A 3-wide pooling window with stride 2 overlaps its neighbours.
  Case uneven;
  uneven.input = Shape("batch:2, x:10, y:8, z:6, channels:3");
  const std::vector<LayoutCase> cases{{"one processor", "p:1", ""},
                                      {"x (10) split 4 ways", "p:4", "x:p"},
                                      {"x and y on 2x2", "rows:2; cols:2", "x:rows; y:cols"}};
  CHECK(check(uneven, cases) == "");
  Case thin;
  thin.input = Shape("batch:1, x:12, y:4, z:4, channels:3");
  CHECK(check(thin, {{"one processor", "p:1", ""}, {"x (12) split 8 ways", "p:8", "x:p"}}) == "");
  Case overlapping;
  overlapping.pool = Window("x, y, z").kernel(3).stride(2).padding("same");
  CHECK(check(overlapping, cases) == "");
}

TEST_CASE(
    "a bfloat16 norm, pooling and convolution match one processor as closely as the three "
    "ops") {
  // As for the other bf16 ops (test_conv_norm_conv): the volume's values and the input's gradient
  // within 1/16 of their scale, the parameters' gradients (sums over the volume) within 20%.
  for (const Run run : {Run::fused, Run::three_ops}) {
    INFO((run == Run::fused ? "one op" : "three ops"));
    const auto op = [run](Mesh& m, const Layout& l) {
      return forward_backward<bfloat16>(m, l, Case{}, run);
    };
    CHECK(compare_with_one_processor(results_between(op, 0, 3), 1.0 / 16, spatial_cases()) == "");
    CHECK(compare_with_one_processor(results_between(op, 3, SIZE_MAX), 0.2, spatial_cases()) == "");
  }
}

TEST_CASE("the one op sends as many messages as the three ops, the raw rows under the pooled") {
  // With the overlap off (MESHTENSOR_HALO_OVERLAP=off) it is the three ops, bytes and all.
  const auto sent = sent_by_both([](Mesh& m, const Layout& l, bool fused) {
    forward_backward(m, l, Case{}, fused ? Run::fused : Run::three_ops);
  });
  for (const SentBoth& p : sent) {
    INFO(p.layout);
    CHECK(p.fused_messages > 0);
    CHECK(p.fused_messages == p.ops_messages);
    if (halo_overlap())
      CHECK(p.fused_bytes > p.ops_bytes);
    else
      CHECK(p.fused_bytes == p.ops_bytes);
  }
}

TEST_CASE("nn::norm_pool_conv gives its layers' results one after the other") {
  // Batch norm in training takes the one op; in evaluation, and instance norm, the layers run
  // one by one. Either way the results are the layers'.
  for (const auto kind : {nn::NormKind::batch, nn::NormKind::instance}) {
    for (const bool training : {true, false}) {
      INFO("instance norm: " << (kind == nn::NormKind::instance) << ", training: " << training);
      auto run = [&](bool one_op) {
        return [&, one_op](Mesh& m, const Layout& l) {
          nn::Parameters<float> params;
          nn::Norm<float> norm(m, params, "n", kind, Dim("channels", 3), "x, y, z");
          nn::Conv<float> conv(m, params, "c", Dim("channels", 3), Dim("channels", 2),
                               Window("x, y, z").kernel(3).padding("same"), 7);
          auto x = test_input(m, even_volume, l, 1).set_requires_grad();
          const Window pool = Window("x, y, z").kernel(2);
          Tensor<float> y, out;
          if (one_op) {
            std::tie(y, out) = nn::norm_pool_conv(norm, pool, conv, x, training, Activation::relu);
          } else {
            y = norm(x, training, Activation::relu);
            out = conv(max_pool(y, pool));
          }
          backward(reduce_sum(out * test_input(m, out.shape(), l, 2)) + reduce_sum(y));
          std::vector<Tensor<float>> results{y, out, x.grad()};
          for (const auto& p : params.trainable()) results.push_back(p.grad());
          for (const auto& entry : params.entries())
            if (!entry.trainable) results.push_back(entry.tensor);  // running statistics
          return results;
        };
      };
      CHECK(largest_difference({{"x split 2 ways", "p:2", "x:p"}}, run(true), run(false)) == 0.0);
    }
  }
}

}  // namespace test_norm_pool_conv
