// bfloat16 as an element type: its rounding (the same on every CPU path), casts with their
// gradient, bfloat16 tensors moving between processors — relayouts and reductions — equal to
// moving them in fp32 and rounding after, and convolutions of bfloat16 activations with fp32
// master weights: on every layout class equal to one processor within bfloat16's rounding, and
// close to the fp32 convolution, under threads and MPI.
#include <catch2/catch.hpp>

#include <cmath>
#include <cstdlib>
#include <cstring>
#include <limits>
#include <random>
#include <stdexcept>
#include <string>
#include <vector>

#include "support/op_check.hpp"
#include "support/spatial_cases.hpp"

using namespace meshtensor;
using namespace meshtensor::testing;

namespace {
float from_bits(std::uint32_t u) {
  float f;
  std::memcpy(&f, &u, sizeof f);
  return f;
}
std::uint32_t bits_of(float f) {
  std::uint32_t u;
  std::memcpy(&u, &f, sizeof u);
  return u;
}

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

TEST_CASE("bfloat16 keeps the upper half of a float, rounded to nearest, ties to even") {
  CHECK(bf16(1.0f).bits == 0x3f80);
  CHECK(float(bf16(1.0f)) == 1.0f);
  CHECK(bf16(1.0f + 0x1p-8f).bits == 0x3f80);             // a tie: stays at the even 1.0
  CHECK(bf16(1.0f + 3 * 0x1p-8f).bits == 0x3f82);         // a tie: up to the even 1 + 2^-6
  CHECK(bf16(1.0f + 0x1p-8f + 0x1p-20f).bits == 0x3f81);  // past the tie: up
  CHECK(bf16(-2.5f).bits == 0xc020);
  CHECK(std::isinf(float(bf16(std::numeric_limits<float>::infinity()))));
  CHECK(std::isinf(float(bf16(3.4e38f))));  // beyond bfloat16's largest: overflows
  CHECK(std::isnan(float(bf16(std::numeric_limits<float>::quiet_NaN()))));
  CHECK(std::isnan(float(bf16(from_bits(0x7f800001u)))));  // a NaN whose payload would round off
  CHECK(float(std::numeric_limits<bf16>::max()) == from_bits(0x7f7f0000u));
  CHECK(float(std::numeric_limits<bf16>::epsilon()) == 0x1p-7f);
  bf16 sum = 1.0f;
  sum += 0.5f;
  CHECK(float(sum) == 1.5f);
}

TEST_CASE("float <-> bfloat16 conversions round alike on every path, denormals as zero") {
  std::mt19937 rng(7);
  std::vector<float> values;
  for (int i = 0; i < 100000; ++i) values.push_back(from_bits(rng()));
  for (std::uint32_t special : {0x00000001u, 0x807fffffu, 0x00800000u, 0x7f7fffffu, 0x7f800000u,
                                0xff800000u, 0x7fc00000u, 0x7f800001u, 0x3f808000u, 0x3f818000u})
    values.push_back(from_bits(special));
  std::vector<bf16> narrowed(values.size());
  kernels::cpu::convert(values.data(), std::int64_t(values.size()), narrowed.data());
  std::vector<float> widened(values.size());
  kernels::cpu::convert(narrowed.data(), std::int64_t(values.size()), widened.data());
  for (std::size_t i = 0; i < values.size(); ++i) {
    const bf16 expected = kernels::cpu::to_bf16_flushed(values[i]);
    INFO("value bits " << std::hex << bits_of(values[i]));
    REQUIRE(narrowed[i].bits == expected.bits);
    REQUIRE(bits_of(widened[i]) == std::uint32_t(expected.bits) << 16);
  }
  CHECK(kernels::cpu::to_bf16_flushed(from_bits(0x00000001u)).bits == 0x0000);
  CHECK(kernels::cpu::to_bf16_flushed(from_bits(0x807fffffu)).bits == 0x8000);
}

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

namespace {
// A convolution's three passes on bfloat16 blocks (run a slab of rows at a time, each widened)
// against the float kernels on the same values, widened whole: `why` names the first pass off.
// On `threads` compute threads where given.
std::string bf16_passes_match_float(const kernels::ConvGeometry& g, int threads = 0) {
  const std::int64_t n_in = kernels::conv_input_size(g), n_out = kernels::conv_output_size(g),
                     n_w = kernels::conv_weight_size(g);
  std::mt19937 rng(11);
  std::uniform_real_distribution<float> uniform(-1.0f, 1.0f);
  auto draw = [&](std::int64_t n) {
    std::vector<bf16> v(static_cast<std::size_t>(n));
    for (auto& x : v) x = bf16(uniform(rng));
    return v;
  };
  auto wide = [](const std::vector<bf16>& v) { return std::vector<float>(v.begin(), v.end()); };
  const auto x = draw(n_in), w = draw(n_w), go = draw(n_out);
  // Within a rounding step of the float result, relative to the largest magnitude (sums of a few
  // hundred products in another order, then rounded once).
  auto close = [](const auto& got, const std::vector<float>& want, double rtol) {
    double largest = 0;
    for (float v : want) largest = std::max(largest, double(std::abs(v)));
    for (std::size_t i = 0; i < want.size(); ++i)
      if (std::abs(double(got[i]) - double(want[i])) > rtol * largest) return false;
    return true;
  };
  return on_one_processor([&](Mesh&) -> std::string {
    if (threads > 0) current_processor().set_compute_threads(threads);
    std::vector<bf16> y(static_cast<std::size_t>(n_out)), gx(static_cast<std::size_t>(n_in));
    std::vector<double> gw(static_cast<std::size_t>(n_w), 0.0), gw_float(gw);
    std::vector<float> y_float(y.size()), gx_float(gx.size());
    kernels::conv_forward(g, x.data(), w.data(), y.data());
    kernels::conv_forward(g, wide(x).data(), wide(w).data(), y_float.data());
    if (!close(y, y_float, 1.0 / 128)) return "forward";
    kernels::conv_backward_input(g, go.data(), w.data(), gx.data());
    kernels::conv_backward_input(g, wide(go).data(), wide(w).data(), gx_float.data());
    if (!close(gx, gx_float, 1.0 / 128)) return "input gradient";
    kernels::conv_backward_weight(g, x.data(), go.data(), gw.data());
    kernels::conv_backward_weight(g, wide(x).data(), wide(go).data(), gw_float.data());
    if (!close(gw, std::vector<float>(gw_float.begin(), gw_float.end()), 1e-4))
      return "weight gradient";
    return "";
  });
}

kernels::ConvGeometry geometry(std::array<std::int64_t, 3> in, std::array<std::int64_t, 3> out,
                               std::int64_t kernel, kernels::Taps taps, std::int64_t batch,
                               std::int64_t c_in = 8, std::int64_t c_out = 8) {
  kernels::ConvGeometry g;
  g.batch = batch;
  g.c_in = c_in;
  g.c_out = c_out;
  g.in = in;
  g.out = out;
  g.kernel = {kernel, kernel, kernel};
  g.taps = {taps, taps, taps};
  return g;
}

// MESHTENSOR_BF16_CONV set to `value` while it lives.
class Bf16Kernels {
 public:
  explicit Bf16Kernels(const char* value) { setenv("MESHTENSOR_BF16_CONV", value, 1); }
  ~Bf16Kernels() { unsetenv("MESHTENSOR_BF16_CONV"); }
};
}  // namespace

TEST_CASE("bfloat16 convolution kernels run in slabs of rows as the float kernels do") {
  // Rows of 96 x 96 x 8 values: a few MiB of widened rows hold 14 of them, so these blocks run in
  // several slabs, each reading the rows around it; batch 2 runs entry by entry. Each on the
  // widened float kernels, on oneDNN's bf16 ones (where it has none, widened), and as timed.
  for (const char* kernels_setting : {"widened", "native", "auto"}) {
    INFO("MESHTENSOR_BF16_CONV=" << kernels_setting);
    const Bf16Kernels setting(kernels_setting);
    kernels::Taps same;
    same.origin = -1;
    CHECK(bf16_passes_match_float(geometry({24, 96, 96}, {24, 96, 96}, 3, same, 1)) == "");
    kernels::Taps strided;
    strided.stride = 2;
    CHECK(bf16_passes_match_float(geometry({31, 96, 96}, {15, 47, 47}, 3, strided, 1)) == "");
    kernels::Taps up;
    up.transposed = true;
    up.stride = 2;
    CHECK(bf16_passes_match_float(geometry({15, 48, 48}, {30, 96, 96}, 2, up, 1)) == "");
    CHECK(bf16_passes_match_float(geometry({6, 10, 10}, {6, 10, 10}, 3, same, 2)) == "");
    // The U-Net's other channel counts: its first layer, a wider level, up-sampling from it.
    CHECK(bf16_passes_match_float(geometry({12, 40, 40}, {12, 40, 40}, 3, same, 1, 1, 8)) == "");
    CHECK(bf16_passes_match_float(geometry({12, 20, 20}, {12, 20, 20}, 3, same, 1, 32, 16)) == "");
    CHECK(bf16_passes_match_float(geometry({6, 10, 10}, {12, 20, 20}, 2, up, 1, 32, 16)) == "");
  }
}

TEST_CASE("a widened bfloat16 slab gives every compute thread a row") {
  // Rows of 128 x 128 x 8 floats: 2 fit the slab's 1 MiB; 16 threads get 16 rows, and a block
  // of 40 rows then runs in slabs of 16, 16 and 8, each matching the float kernels.
  const auto rows = on_one_processor([](Mesh&) {
    current_processor().set_compute_threads(1);
    const std::int64_t one = kernels::detail::rows_per_slab(128 * 128 * 8);
    current_processor().set_compute_threads(16);
    return std::make_pair(one, kernels::detail::rows_per_slab(128 * 128 * 8));
  });
  CHECK(rows == std::make_pair(std::int64_t(2), std::int64_t(16)));
  const Bf16Kernels setting("widened");
  kernels::Taps same;
  same.origin = -1;
  CHECK(bf16_passes_match_float(geometry({40, 128, 128}, {40, 128, 128}, 3, same, 1), 16) == "");
}

TEST_CASE("MESHTENSOR_BF16_CONV takes auto, native or widened") {
  const Bf16Kernels setting("fast");
  kernels::Taps same;
  same.origin = -1;
  const kernels::ConvGeometry g = geometry({4, 16, 16}, {4, 16, 16}, 3, same, 1);
  std::vector<bf16> x(static_cast<std::size_t>(kernels::conv_input_size(g))),
      w(static_cast<std::size_t>(kernels::conv_weight_size(g))),
      y(static_cast<std::size_t>(kernels::conv_output_size(g)));
  const std::string error = on_one_processor([&](Mesh&) -> std::string {
    try {
      kernels::conv_forward(g, x.data(), w.data(), y.data());
    } catch (const std::invalid_argument& e) {
      return e.what();
    }
    return "";
  });
#if defined(MESHTENSOR_WITH_ONEDNN)
  CHECK(error == "MESHTENSOR_BF16_CONV=fast: expected auto, native or widened");
#else
  CHECK(error == "");  // only the widened kernels: nothing to choose
#endif
}

TEST_CASE("bfloat16 weight gradients on oneDNN keep its scratchpad small") {
  // AMX's bf16 weight gradient asks a scratchpad of 2.3 MiB per row of 128 x 128 (9x the
  // activations), a transposed one's about 1.6 MiB per output row; slabs of rows keep it under
  // 16 MiB. Whole, these take about 55 and 52 MiB.
  const Bf16Kernels setting("native");
  kernels::Taps same;
  same.origin = -1;
  kernels::Taps up;
  up.transposed = true;
  up.stride = 2;
  for (const auto& g : {geometry({24, 128, 128}, {24, 128, 128}, 3, same, 1),
                        geometry({16, 64, 64}, {32, 128, 128}, 2, up, 1, 16, 8)}) {
    INFO("input rows " << g.in[0] << ", output rows " << g.out[0]);
    std::vector<bf16> x(static_cast<std::size_t>(kernels::conv_input_size(g)), bf16(0.5f)),
        go(static_cast<std::size_t>(kernels::conv_output_size(g)), bf16(0.25f));
    std::vector<double> gw(static_cast<std::size_t>(kernels::conv_weight_size(g)), 0.0);
    const double added_mib = on_one_processor([&](Mesh&) {
      kernels::conv_backward_weight(g, x.data(), go.data(), gw.data());  // primitives built
      const auto before = memory_stats();
      memory_pool().reset_peak();
      kernels::conv_backward_weight(g, x.data(), go.data(), gw.data());
      return double(memory_stats().peak_in_use - before.in_use) / (1 << 20);
    });
    CHECK(added_mib <= 20.0);
    // Every weight sums 0.5 * 0.25 over the (input, output) pairs its tap joins, twice: of a
    // convolution, the outputs whose tap (0, 0, 0) reads inside the box; of the transposed one,
    // every input.
    const double pairs = g.taps[0].transposed ? 16.0 * 64 * 64 : 23.0 * 127 * 127;
    CHECK(gw[0] == Approx(2 * 0.125 * pairs).epsilon(1e-3));
  }
}
