// bfloat16 as an element type in the distributed ops: casts with their gradient, bfloat16 tensors
// moving between processors — relayouts and reductions — equal to moving them in fp32 and
// rounding after, and convolutions of bfloat16 activations with fp32 master weights: on every
// layout class equal to one processor within bfloat16's rounding, and close to the fp32
// convolution, under threads and MPI. Its rounding and its kernels alone: test_bf16_kernels.cpp.
#include <catch2/catch.hpp>

#include <string>
#include <vector>

#include "support/op_check.hpp"
#include "support/spatial_cases.hpp"

using namespace meshtensor;
using namespace meshtensor::testing;

// In a namespace of its own: test files share a program (tests/CMakeLists.txt).
namespace test_bf16 {

namespace {
// A bfloat16 result may differ from another run's by a few rounding steps (2^-8 relative each):
// float sums in another order land on either side of a rounding boundary, and an input gradient's
// halo part is added at its owner in bfloat16, each partial sum rounded before they meet (up to 8
// at a corner of a split along three dims).
constexpr double bf16_rtol = 1.0 / 32;

// A convolution of bfloat16 activations with an fp32 weight: its output and the fp32 gradients
// of the input (through its cast) and of the weight, for loss = sum(out * r).
std::vector<Tensor<float>> bf16_conv(Mesh& m, const Layout& l, const Shape& weight_shape,
                                     const Window& window, bool transposed) {
  auto x = test_input(m, volume_shape, l, 1).set_requires_grad();
  auto w = test_input(m, weight_shape, l, 2).set_requires_grad();
  const Tensor<bf16> h = cast<bf16>(x);
  const Tensor<bf16> out = transposed ? conv_transpose(h, w, window) : conv(h, w, window);
  auto y = cast<float>(out);
  backward(reduce_sum(y * test_input(m, y.shape(), l, 3)));
  return {y, x.grad(), w.grad()};
}

std::string check_bf16_conv(const Shape& weight, const Window& window, bool transposed = false) {
  return compare_with_one_processor(
      [&](Mesh& m, const Layout& l) { return bf16_conv(m, l, weight, window, transposed); },
      bf16_rtol, spatial_cases());
}
}  // namespace

TEST_CASE("a cast to bfloat16 and back matches one processor, its gradient in fp32") {
  CHECK(compare_with_one_processor([](Mesh& m, const Layout& l) {
          auto x = test_input(m, "batch:2, x:6, y:5, c:3", l, 1).set_requires_grad();
          auto b = test_input(m, "batch:2, x:6, y:5, c:3", l, 2);
          auto rounded = cast<float>(cast<bf16>(x));
          backward(reduce_sum(rounded * b));
          return std::vector<Tensor<float>>{rounded, x.grad()};
        }) == "");
  // The values: each rounded once, and the gradient passed straight through (b, in fp32).
  auto checks = on_mesh("p:2", [](Mesh& m) {
    auto x = test_input(m, "x:6, c:3", "x:p", 1).set_requires_grad();
    auto h = cast<bf16>(x);
    backward(reduce_sum(cast<float>(h) * 3.0f));
    bool rounded = true, gradient = true;
    const auto xs = x.local();
    const auto hs = h.local();
    const auto gs = x.grad().local();
    for (std::size_t i = 0; i < xs.size(); ++i) {
      rounded &= hs.data()[i].bits == bf16(xs.data()[i]).bits;
      gradient &= gs.data()[i] == 3.0f;
    }
    return std::pair(rounded, gradient);
  });
  for (const auto& [rounded, gradient] : checks) {
    CHECK(rounded);
    CHECK(gradient);
  }
}

TEST_CASE("bfloat16 tensors relayout exactly as fp32 tensors do") {
  // Moving rounded values moves them unchanged: every layout class to another split of its dims.
  const std::vector<std::string> dims{"batch", "x", "y", "c"};
  CHECK(compare_with_one_processor(
            [&](Mesh& m, const Layout& l) {
              auto x = test_input(m, "batch:2, x:6, y:5, c:3", l, 1);
              auto moved = relayout(cast<bf16>(x), shifted(l, dims));
              return cast<float>(relayout(moved, l));
            },
            0.0) == "");
}

TEST_CASE("bfloat16 all-reduces give every processor the same values, combined in float") {
  auto sums = on_mesh("p:4", [](Mesh& m) {
    const float mine = float(m.processor() + 1);
    std::vector<bf16> values{bf16(mine), bf16(mine * 0.25f), bf16(-mine)};
    all_reduce(m.world(), values, ReduceOp::sum);
    std::vector<bf16> largest{bf16(mine), bf16(-mine)};
    all_reduce(m.world(), largest, ReduceOp::max);
    return std::vector<float>{values[0], values[1], values[2], largest[0], largest[1]};
  });
  for (const auto& s : sums) CHECK(s == std::vector<float>{10.0f, 2.5f, -10.0f, 4.0f, -1.0f});
}

TEST_CASE("bfloat16 convolutions with fp32 weights match one processor on every layout") {
  CHECK(check_bf16_conv("kx:3, ky:3, kz:3, channels:3, features:4",
                        Window("x, y, z").padding("same")) == "");
  CHECK(check_bf16_conv("kx:3, ky:3, kz:3, channels:3, features:2", Window("x, y, z").stride(2)) ==
        "");
  CHECK(check_bf16_conv("kx:2, ky:2, kz:2, channels:3, features:2",
                        Window("x, y, z").stride(2).padding("valid"), /*transposed=*/true) == "");
}

TEST_CASE("a bfloat16 convolution is the fp32 one within bfloat16's rounding") {
  const Shape weight("kx:3, ky:3, kz:3, channels:3, features:4");
  const Window window = Window("x, y, z").padding("same");
  const auto close = on_one_processor([&](Mesh& m) {
    const auto reduced = bf16_conv(m, Layout{}, weight, window, false);
    auto x = test_input(m, volume_shape, Layout{}, 1).set_requires_grad();
    auto w = test_input(m, weight, Layout{}, 2).set_requires_grad();
    auto y = conv(x, w, window);
    backward(reduce_sum(y * test_input(m, y.shape(), Layout{}, 3)));
    const std::vector<Tensor<float>> full{y, x.grad(), w.grad()};
    std::string why;
    for (std::size_t k = 0; k < full.size() && why.empty(); ++k)
      why = mismatch(local_block(reduced[k]), local_block(full[k]).data, 0.05);
    return why;
  });
  CHECK(close == "");
}

namespace {
// The U-Net's other ops on bfloat16 activations: conv + fp32 bias, batch norm with fp32 gamma and
// beta and fused ReLU, max pooling, the concatenation of a skip. First the tensors over the volume
// (outputs, the input's gradient), then the fp32 parameters' gradients and the statistics. With
// `T` = float the same in fp32, for the reference.
template <class T>
std::vector<Tensor<float>> unet_ops(Mesh& m, const Layout& l) {
  auto x = test_input(m, volume_shape, l, 1).set_requires_grad();
  auto w = test_input(m, "kx:3, ky:3, kz:3, channels:3, features:3", l, 2).set_requires_grad();
  auto bias = test_input(m, "features:3", l, 4).set_requires_grad();
  auto gamma = test_input(m, "channels:3", l, 5).set_requires_grad();
  auto beta = test_input(m, "channels:3", l, 6).set_requires_grad();
  const Tensor<T> h = cast<T>(x);
  auto y = rename(conv(h, w, Window("x, y, z").padding("same")) + bias, "features", "channels");
  Moments<float> moments;
  auto normed = batch_norm(y, gamma, beta, "channels", 1e-5, &moments, Activation::relu);
  auto pooled = cast<float>(max_pool(normed, Window("x, y, z").kernel(2).padding("same")));
  auto joined = cast<float>(concat({normed, relu(h)}, "channels"));
  backward(reduce_sum(joined * test_input(m, joined.shape(), l, 3)) +
           reduce_sum(pooled * test_input(m, pooled.shape(), l, 7)));
  return {joined,       pooled,      x.grad(),     w.grad(),        bias.grad(),
          gamma.grad(), beta.grad(), moments.mean, moments.variance};
}
constexpr std::size_t volume_results = 3;  // the first three: values over the volume

std::vector<Tensor<float>> part(std::vector<Tensor<float>> all, bool volume) {
  if (volume) return {all.begin(), all.begin() + volume_results};
  return {all.begin() + volume_results, all.end()};
}
}  // namespace

TEST_CASE("the U-Net's other ops in bfloat16 match one processor on every layout") {
  CHECK(compare_with_one_processor(
            [](Mesh& m, const Layout& l) { return part(unet_ops<bf16>(m, l), true); }, bf16_rtol,
            spatial_cases()) == "");
  // Sums over the whole volume (parameter gradients, statistics) gather every element's rounding
  // and every flipped ReLU mask: held to 10%, about what bfloat16 itself moves them from fp32
  // (checked below).
  CHECK(compare_with_one_processor(
            [](Mesh& m, const Layout& l) { return part(unet_ops<bf16>(m, l), false); }, 0.1,
            spatial_cases()) == "");
}

namespace {
// Max and average pooling on bfloat16 activations (windows of 2; of 3 with stride 1 and "same"
// padding, counting it and not): outputs and the input's gradient. `T` = float: the reference.
template <class T>
std::vector<Tensor<float>> pools(Mesh& m, const Layout& l) {
  auto x = test_input(m, volume_shape, l, 1).set_requires_grad();
  const Tensor<T> h = cast<T>(x);
  const Window halves = Window("x, y, z").kernel(2).padding("same");
  const Window neighbours = Window("x, y, z").kernel(3).padding("same");
  const std::vector<Tensor<float>> pooled{
      cast<float>(max_pool(h, halves)), cast<float>(avg_pool(h, halves)),
      cast<float>(avg_pool(h, neighbours)), cast<float>(avg_pool(h, neighbours, false))};
  Tensor<float> loss = reduce_sum(pooled[0] * test_input(m, pooled[0].shape(), l, 2));
  for (std::size_t k = 1; k < pooled.size(); ++k)
    loss = loss + reduce_sum(pooled[k] * test_input(m, pooled[k].shape(), l, 2 + int(k)));
  backward(loss);
  std::vector<Tensor<float>> results = pooled;
  results.push_back(x.grad());
  return results;
}
}  // namespace

TEST_CASE("bfloat16 pooling matches one processor on every layout and fp32 within rounding") {
  CHECK(compare_with_one_processor(pools<bf16>, bf16_rtol, spatial_cases()) == "");
  const auto why = on_one_processor([](Mesh& m) {
    const auto reduced = pools<bf16>(m, Layout{}), full = pools<float>(m, Layout{});
    std::string first;
    for (std::size_t k = 0; k < full.size() && first.empty(); ++k)
      first = mismatch(local_block(reduced[k]), local_block(full[k]).data, bf16_rtol);
    return first;
  });
  CHECK(why == "");
}

TEST_CASE("the U-Net's ops in bfloat16 are their fp32 values within bfloat16's rounding") {
  const auto why = on_one_processor([](Mesh& m) {
    const auto reduced = unet_ops<bf16>(m, Layout{}), full = unet_ops<float>(m, Layout{});
    std::string first;
    for (std::size_t k = 0; k < full.size() && first.empty(); ++k)
      first = mismatch(local_block(reduced[k]), local_block(full[k]).data,
                       k < volume_results ? 0.05 : 0.1);
    return first;
  });
  CHECK(why == "");
}

}  // namespace test_bf16
