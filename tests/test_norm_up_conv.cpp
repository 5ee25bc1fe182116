// Batch norm, a 2x2x2 up-sampling, its concatenation after a skip and a convolution as one op
// (batch_norm_up_conv), the convolution's halo sent as the skip's rows and the raw coarse rows
// before the norm's statistics are agreed: the output and every gradient equal the
// single-processor run on every spatial layout class and the ops one after the other within
// rounding (fp32 and bfloat16). Where the blocks do not nest (uneven splits) or the up-sampling's
// windows overlap, the ops run, with the same results. nn::norm_up_conv gives its layers' results.
#include <catch2/catch.hpp>

#include <algorithm>
#include <string>
#include <type_traits>
#include <vector>

#include <meshtensor/autodiff/backward.hpp>
#include <meshtensor/comm/halo_step.hpp>
#include <meshtensor/nn/layers.hpp>
#include <meshtensor/ops/norm_up_conv.hpp>

#include "support/op_check.hpp"
#include "support/same_results.hpp"
#include "support/spatial_cases.hpp"
#include "support/traffic.hpp"

using namespace meshtensor;
using namespace meshtensor::testing;

// In a namespace of its own: test files share a program (tests/CMakeLists.txt).
namespace test_norm_up_conv {

namespace {

// The coarse z is half the skip along x, y and z, so that x split 2, 4 or 8 ways (and y and z 2
// or 4 ways) gives blocks that nest.
struct Case {
  Shape z = Shape("batch:2, x:8, y:4, z:4, channels:4");
  Shape skip = Shape("batch:2, x:16, y:8, z:8, channels:3");
  Shape up_weight = Shape("kx:2, ky:2, kz:2, channels:4, channels_out:3");
  Window up_window = Window("x, y, z").kernel(2).stride(2);
  Shape weight = Shape("kx:3, ky:3, kz:3, channels:6, out:2");
  Window window = Window("x, y, z").kernel(3).padding("same");
  Activation activation = Activation::relu;
};

enum class Run { fused, ops };

// The convolution's output and the gradients of z, the skip, gamma, beta, the up-sampling's
// weight and bias and the convolution's weight, for loss = sum(out * s); activations in T,
// parameters in fp32.
template <class T = float>
std::vector<Tensor<float>> forward_backward(Mesh& m, const Layout& l, const Case& c, Run run) {
  auto z = test_input(m, c.z, l, 1).set_requires_grad();
  auto skip = test_input(m, c.skip, l, 2).set_requires_grad();
  const Shape channels{c.z.dim("channels")};
  auto gamma = (test_input(m, channels, l, 3) + 1.5f).detach().set_requires_grad();
  auto beta = test_input(m, channels, l, 4).set_requires_grad();
  auto up_weight = test_input(m, c.up_weight, l, 5).set_requires_grad();
  auto up_bias = test_input(m, Shape{Dim("channels", c.up_weight.dim("channels_out").size)}, l, 6)
                     .set_requires_grad();
  auto weight = test_input(m, c.weight, l, 7).set_requires_grad();
  auto as_t = [](const Tensor<float>& t) {
    if constexpr (std::is_same_v<T, float>)
      return t;
    else
      return cast<T>(t);
  };
  const Tensor<T> h = as_t(z), s = as_t(skip);
  Tensor<T> out;
  if (run == Run::fused) {
    out = batch_norm_up_conv(h, gamma, beta, UpSampling<float>{up_weight, up_bias, c.up_window}, s,
                             weight, c.window, "channels", 1e-5, nullptr, c.activation);
  } else {
    auto y = batch_norm(h, gamma, beta, "channels", 1e-5, nullptr, c.activation);
    auto u =
        rename(conv_transpose(y, up_weight, c.up_window), "channels_out", "channels") + up_bias;
    out = conv(concat({s, u}, "channels"), weight, c.window);
  }
  std::vector<Tensor<float>> results;
  if constexpr (std::is_same_v<T, float>)
    results.push_back(out);
  else
    results.push_back(cast<float>(out));
  backward(reduce_sum(results[0] * test_input(m, out.shape(), l, 8)));
  for (const auto& t : {z, skip, gamma, beta, up_weight, up_bias, weight})
    results.push_back(t.grad());
  return results;
}

std::string check(const Case& c, const std::vector<LayoutCase>& cases = spatial_cases()) {
  return compare_with_one_processor(
      [&](Mesh& m, const Layout& l) { return forward_backward(m, l, c, Run::fused); }, 1e-4, cases);
}

// The largest difference between the one op's results and the ops' on any processor of any
// spatial layout class.
template <class T>
double fused_against_ops(const Case& c) {
  return largest_difference(
      spatial_cases(),
      [&](Mesh& m, const Layout& l) { return forward_backward<T>(m, l, c, Run::fused); },
      [&](Mesh& m, const Layout& l) { return forward_backward<T>(m, l, c, Run::ops); });
}

}  // namespace

TEST_CASE(
    "batch norm, 2x2x2 up-sampling, concatenation and a 3x3x3 convolution match one processor") {
  CHECK(check(Case{}) == "");
}

TEST_CASE("the raw coarse rows sent before the statistics give the ops' results") {
  // Each receiver normalises the coarse rows with their owner's coefficients and up-samples them
  // in the kernels' order of summation: equal within fp32 rounding (the values are of order 10,
  // the sums of many), and within one bfloat16 rounding of the up-sampled rows.
  CHECK(fused_against_ops<float>(Case{}) < 1e-4);
  CHECK(fused_against_ops<bfloat16>(Case{}) < 0.5);
  Case no_activation;  // values below zero reach the up-sampling too
  no_activation.activation = Activation::none;
  CHECK(fused_against_ops<float>(no_activation) < 1e-4);
}

TEST_CASE("a wider, dilated window over the concatenation reads coarse rows of several owners") {
  // 5 wide along x over the fine x (16 rows): x split 8 ways leaves two fine rows a block, so
  // each processor reads two rows from each side, under them the coarse rows of two owners.
  Case wide;
  wide.weight = Shape("kx:5, ky:3, channels:6, out:2");
  wide.window = Window("x, y").padding("same").dilation({1, 2});
  CHECK(check(wide) == "");
  CHECK(fused_against_ops<float>(wide) < 1e-4);
}

TEST_CASE(
    "where the blocks do not nest or the windows overlap the ops run, with the same results") {
  // x:12 split 4 ways holds 3 rows a block, the coarse x:6 2, 2, 1 and 1: fine blocks that start
  // within a coarse row's up-sampling. A 3-wide up-sampling window with stride 2 overlaps.
  Case uneven;
  uneven.z = Shape("batch:2, x:6, y:4, z:3, channels:4");
  uneven.skip = Shape("batch:2, x:12, y:8, z:6, channels:3");
  const std::vector<LayoutCase> cases{{"one processor", "p:1", ""},
                                      {"x (12) split 4 ways", "p:4", "x:p"},
                                      {"x and y on 2x2", "rows:2; cols:2", "x:rows; y:cols"}};
  CHECK(check(uneven, cases) == "");
  Case overlapping;
  overlapping.up_weight = Shape("kx:3, ky:2, kz:2, channels:4, channels_out:3");
  overlapping.up_window = Window("x, y, z").kernel({3, 2, 2}).stride(2).padding(
      Padding::explicit_sizes({{0, 1}, {0, 0}, {0, 0}}));  // 13 outputs along x, the last cut
  CHECK(check(overlapping, cases) == "");
}

TEST_CASE(
    "a bfloat16 norm, up-sampling and convolution match one processor as closely as the ops") {
  // As for the other bf16 ops (test_norm_pool_conv), but the inputs' gradients within 1/8 of
  // their scale, not 1/16: z's passes the norm's backward after two convolutions' (differences of
  // bf16 sums); the parameters' gradients (sums over the volume) within 20%.
  for (const Run run : {Run::fused, Run::ops}) {
    INFO((run == Run::fused ? "one op" : "the ops"));
    const auto op = [run](Mesh& m, const Layout& l) {
      return forward_backward<bfloat16>(m, l, Case{}, run);
    };
    CHECK(compare_with_one_processor(results_between(op, 0, 3), 1.0 / 8, spatial_cases()) == "");
    CHECK(compare_with_one_processor(results_between(op, 3, SIZE_MAX), 0.2, spatial_cases()) == "");
  }
}

TEST_CASE("the one op sends the skip's rows and the coarse rows in place of the concatenation's") {
  // Two exchanges where the ops have one: more messages, fewer bytes (a coarse row holds a
  // quarter of a fine row's positions). With the overlap off (MESHTENSOR_HALO_OVERLAP=off) it is
  // the ops, messages and all.
  const auto sent = sent_by_both([](Mesh& m, const Layout& l, bool fused) {
    forward_backward(m, l, Case{}, fused ? Run::fused : Run::ops);
  });
  for (const SentBoth& p : sent) {
    INFO(p.layout);
    CHECK(p.ops_messages > 0);
    if (halo_overlap()) {
      CHECK(p.fused_messages > p.ops_messages);
      CHECK(p.fused_bytes < p.ops_bytes);
    } else {
      CHECK(p.fused_messages == p.ops_messages);
      CHECK(p.fused_bytes == p.ops_bytes);
    }
  }
}

namespace {

// conv_concat (the concatenation read as its parts where each block is read in place) or conv of
// the concatenation written out: the output and the gradients of the parts and the weight.
template <class T>
std::vector<Tensor<float>> concat_conv(Mesh& m, const Layout& l, std::int64_t first,
                                       std::int64_t second, bool as_parts) {
  const Shape a_shape("batch:2, x:6, y:5, z:18, channels:" + std::to_string(first));
  const Shape b_shape("batch:2, x:6, y:5, z:18, channels:" + std::to_string(second));
  auto a = test_input(m, a_shape, l, 1).set_requires_grad();
  auto b = test_input(m, b_shape, l, 2).set_requires_grad();
  auto weight =
      test_input(m,
                 Shape("kx:3, ky:3, kz:3, channels:" + std::to_string(first + second) + ", out:8"),
                 l, 3)
          .set_requires_grad();
  const Window window = Window("x, y, z").kernel(3).padding("same");
  // bfloat16 parts with the fp32 weight (the U-Net's bf16 decoder): gradients in fp32 through the
  // casts (a cast to the same type is the tensor itself).
  const Tensor<T> ha = cast<T>(a), hb = cast<T>(b);
  const Tensor<float> out =
      cast<float>(as_parts ? conv_concat({ha, hb}, weight, window)
                           : conv(concat({ha, hb}, "channels"), weight, window));
  backward(reduce_sum(out * test_input(m, out.shape(), l, 4)));
  return {out, a.grad(), b.grad(), weight.grad()};
}

// conv_concat of T on every spatial layout class and a batch split, 8 + 8 and 3 + 5 channels:
// checked against one processor within `rtol`; returns its largest difference from conv(concat).
template <class T>
double concat_conv_checked(double rtol) {
  std::vector<LayoutCase> cases = spatial_cases();
  cases.push_back({"batch split 2 ways", "p:2", "batch:p"});
  double largest = 0;
  for (const auto& [first, second] : {std::pair<int, int>{8, 8}, {3, 5}}) {
    INFO(first << " + " << second << " channels");
    const auto parts = [=](Mesh& m, const Layout& l) {
      return concat_conv<T>(m, l, first, second, true);
    };
    CHECK(compare_with_one_processor(parts, rtol, cases) == "");
    largest = std::max(largest, largest_difference(cases, parts, [=](Mesh& m, const Layout& l) {
                         return concat_conv<T>(m, l, first, second, false);
                       }));
  }
  return largest;
}

}  // namespace

TEST_CASE("a bfloat16 convolution reads a concatenation as its parts, its weight in fp32") {
  // As below, with bfloat16 parts: the same kernels read the parts where the float ones would, so
  // the results are conv(concat)'s exactly. Against one processor within bfloat16's rounding: the
  // input gradient's halo partial sums are each rounded at their owner before they meet (four at
  // the corner of a 2 x 2 split, each a step of 2^-8 of sums over 16 channels and 27 taps). Under
  // the fixed rule: where oneDNN has bfloat16 kernels (AVX512_BF16), timing races them against the
  // row kernels, and the two calls could each pick another under load.
  const Setting fixed("MESHTENSOR_KERNELS", "fixed");
  CHECK(concat_conv_checked<bf16>(1.0 / 16) == 0.0);
}

TEST_CASE("a convolution reads a concatenation as its parts, with the ops' results") {
  // 8 + 8 -> 8 rows of 18: the row kernels read the parts and write their gradients (float, on a
  // CPU with AVX2 or AVX-512); 3 + 5: parts the input gradient cannot be written to in tiles.
  // Layouts that split a spatial dim or the channels run the ops; a batch split reads in place.
  CHECK(concat_conv_checked<float>(1e-4) < 1e-3);
  // On one processor the concatenation is never written: one copy fewer (the join; the row
  // kernels read the parts) than conv of the concatenation.
  const auto copies_of = [](bool as_parts) {
    return on_one_processor([&](Mesh& m) {
      kernels::kernel_times().on = true;
      auto& calls = kernels::plan::counts().calls[std::size_t(kernels::plan::Family::copy)];
      const auto a = test_input(m, Shape("batch:1, x:4, y:4, z:32, channels:8"), Layout{}, 1);
      const auto b = test_input(m, Shape("batch:1, x:4, y:4, z:32, channels:8"), Layout{}, 2);
      const auto w = test_input(m, Shape("kx:3, ky:3, kz:3, channels:16, out:8"), Layout{}, 3);
      const Window window = Window("x, y, z").kernel(3).padding("same");
      const auto before = calls;
      const auto out =
          as_parts ? conv_concat({a, b}, w, window) : conv(concat({a, b}, "channels"), w, window);
      return calls - before;
    });
  };
  if (kernels::rows::available()) CHECK(copies_of(true) < copies_of(false));
}

TEST_CASE("nn::norm_up_conv gives its layers' results one after the other") {
  // Batch norm in training takes the one op; in evaluation, and instance norm, the layers run
  // one by one. Either way the results are the layers' within rounding.
  const Case c;
  for (const auto kind : {nn::NormKind::batch, nn::NormKind::instance}) {
    for (const bool training : {true, false}) {
      INFO("instance norm: " << (kind == nn::NormKind::instance) << ", training: " << training);
      auto run = [&](bool one_op) {
        return [&, one_op](Mesh& m, const Layout& l) {
          nn::Parameters<float> params;
          nn::Norm<float> norm(m, params, "n", kind, Dim("channels", 4), "x, y, z");
          nn::Conv<float> up(m, params, "up", Dim("channels", 4), Dim("channels", 3), c.up_window,
                             5, /*transposed=*/true);
          nn::Conv<float> conv(m, params, "c", Dim("channels", 6), Dim("channels", 2), c.window, 7);
          auto z = test_input(m, c.z, l, 1).set_requires_grad();
          auto skip = test_input(m, c.skip, l, 2).set_requires_grad();
          Tensor<float> out =
              one_op ? nn::norm_up_conv(norm, up, skip, conv, z, training, Activation::relu)
                     : conv(concat({skip, up(norm(z, training, Activation::relu))}, "channels"));
          backward(reduce_sum(out * test_input(m, out.shape(), l, 3)));
          std::vector<Tensor<float>> results{out, z.grad(), skip.grad()};
          for (const auto& p : params.trainable()) results.push_back(p.grad());
          for (const auto& entry : params.entries())
            if (!entry.trainable) results.push_back(entry.tensor);  // running statistics
          return results;
        };
      };
      CHECK(largest_difference({{"x split 2 ways", "p:2", "x:p"}}, run(true), run(false)) < 1e-4);
    }
  }
}

}  // namespace test_norm_up_conv
