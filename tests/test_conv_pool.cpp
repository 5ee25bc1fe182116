// Convolution, transposed convolution and pooling: output, input gradient and weight gradient on
// every spatial layout class equal the single-processor run — strided, dilated, padded, valid,
// overlapping and halo-wider-than-a-block cases included.
#include <catch2/catch.hpp>

#include <algorithm>
#include <cmath>
#include <cstdlib>
#include <optional>
#include <string>
#include <tuple>

#include <xtensor/xmath.hpp>

#include <meshtensor/autodiff/backward.hpp>
#include <meshtensor/ops/conv_norm_conv.hpp>
#include <meshtensor/ops/detail/conv_boxes.hpp>
#include <meshtensor/ops/norm_conv.hpp>

#include "support/environment.hpp"
#include "support/errors.hpp"
#include "support/op_check.hpp"
#include "support/spatial_cases.hpp"

using namespace meshtensor;
using namespace meshtensor::testing;

// In a namespace of its own: test files share a program (tests/CMakeLists.txt).
namespace test_conv_pool {
using Catch::Matchers::Contains;

namespace {

// out, d(loss)/d(input), d(loss)/d(weight) for loss = sum(out * r) with a fixed random r.
template <class Op>
std::vector<Tensor<float>> forward_backward(Mesh& m, const Layout& l, const Shape& weight_shape,
                                            Op&& op, const Shape& input_shape = volume_shape) {
  auto x = test_input(m, input_shape, l, 1).set_requires_grad();
  auto w = test_input(m, weight_shape, l, 2).set_requires_grad();
  auto out = op(x, w);
  auto r = test_input(m, out.shape(), l, 3);
  backward(reduce_sum(out * r));
  return {out, x.grad(), w.grad()};
}

std::string check_conv(const Shape& weight, const Window& window, bool transposed = false) {
  return compare_with_one_processor(
      [&](Mesh& m, const Layout& l) {
        return forward_backward(m, l, weight, [&](const Tensor<float>& x, const Tensor<float>& w) {
          return transposed ? conv_transpose(x, w, window) : conv(x, w, window);
        });
      },
      1e-5, spatial_cases());
}

std::string check_pool(const Window& window, bool is_max, bool count_padding = true) {
  return compare_with_one_processor(
      [&](Mesh& m, const Layout& l) {
        auto x = test_input(m, volume_shape, l, 1).set_requires_grad();
        auto out = is_max ? max_pool(x, window) : avg_pool(x, window, count_padding);
        backward(reduce_sum(out * test_input(m, out.shape(), l, 3)));
        return std::vector<Tensor<float>>{out, x.grad()};
      },
      1e-5, spatial_cases());
}

}  // namespace

TEST_CASE("3-D convolution, 3x3x3 'same', matches one processor on every layout") {
  CHECK(check_conv("kx:3, ky:3, kz:3, channels:3, features:4", Window("x, y, z").padding("same")) ==
        "");
}

TEST_CASE(
    "convolutions that overlap the halo exchange with the interior rows match one processor") {
  // The op computes the outputs that need no halo while it is in flight: by rows for one volume
  // split along x only, by boxes for splits along several dims or several volumes (two volumes
  // below). Uneven splits, blocks narrower than the halo, strides.
  const std::vector<LayoutCase> x_splits{
      {"one processor", "p:1", ""},
      {"x split 2 ways", "p:2", "x:p"},
      {"x split 3 ways (uneven)", "p:3", "x:p"},
      {"x split 8 ways: halos wider than a block", "p:8", "x:p"},
      {"x and y split 2x2", "a:2; b:2", "x:a; y:b"},
      {"y and z split 3x2 (uneven)", "a:3; b:2", "y:a; z:b"},
      {"x, y and z split 2x2x2", "a:2; b:2; c:2", "x:a; y:b; z:c"},
      {"batch and x split 2x2", "a:2; b:2", "batch:a; x:b"}};
  for (const Shape& volumes :
       {Shape("batch:1, x:11, y:6, z:5, channels:3"), Shape("batch:2, x:11, y:6, z:5, channels:3")})
    for (const auto& [weight, window] : std::vector<std::pair<std::string, Window>>{
             {"kx:3, ky:3, kz:3, channels:3, features:4", Window("x, y, z").padding("same")},
             {"kx:5, ky:3, channels:3, features:2", Window("x, y").padding("same")},
             {"kx:3, ky:3, kz:3, channels:3, features:2", Window("x, y, z").stride(2)},
             {"kx:3, channels:3, features:2", Window("x").dilation(2).padding("same")}}) {
      INFO(weight << " on " << volumes.to_string());
      CHECK(compare_with_one_processor(
                [&](Mesh& m, const Layout& l) {
                  return forward_backward(
                      m, l, Shape(weight),
                      [&](const Tensor<float>& x, const Tensor<float>& w) {
                        return conv(x, w, window);
                      },
                      volumes);
                },
                1e-5, x_splits) == "");
    }
}

TEST_CASE("a convolution overlapped by boxes computes each output once: interior and shell tile") {
  using meshtensor::detail::Ranges3;
  const Ranges3 all{Range{0, 6}, Range{0, 5}, Range{0, 4}};
  for (const Ranges3& interior :
       {Ranges3{Range{1, 5}, Range{1, 4}, Range{1, 3}},   // halo on every side
        Ranges3{Range{0, 5}, Range{1, 5}, Range{0, 3}},   // on some sides only
        Ranges3{Range{0, 6}, Range{0, 5}, Range{2, 3}},   // along the last dim only
        Ranges3{Range{0, 6}, Range{0, 5}, Range{0, 4}}})  // none: no shell
  {
    std::vector<int> written(6 * 5 * 4, 0);
    auto write = [&](const Ranges3& box) {
      for (auto i = box[0].begin; i < box[0].end; ++i)
        for (auto j = box[1].begin; j < box[1].end; ++j)
          for (auto k = box[2].begin; k < box[2].end; ++k) ++written[(i * 5 + j) * 4 + k];
    };
    write(interior);
    for (const Ranges3& box : meshtensor::detail::shell_boxes(interior, all)) write(box);
    CHECK(std::all_of(written.begin(), written.end(), [](int n) { return n == 1; }));
  }
}

TEST_CASE(
    "convolutions split along several dims, their kept box read in slabs, match one processor") {
  // Boxes of more than 2 MiB, which backward reads a slab of rows at a time, never rebuilt whole.
  // Values in {-1, 0, 1}: every sum (64³ products for the weight's gradient) is exact in float,
  // in any order, so a row of a slab read twice or missed cannot hide in rounding.
  const std::vector<LayoutCase> splits{
      {"one processor", "p:1", ""},
      {"x and y split 2x2", "a:2; b:2", "x:a; y:b"},
      {"x, y and z split 2x3x2", "a:2; b:3; c:2", "x:a; y:b; z:c"}};
  auto small_integers = [](Mesh& m, const Shape& shape, const Layout& l, int seed) {
    return generate<float>(m, shape, l, [seed](const Index& i) {
      return float(std::fmod(std::floor(std::abs(test_value(i, seed)) * 997.0), 3.0) - 1.0);
    });
  };
  const Shape volume("batch:1, x:64, y:64, z:64, channels:8");
  for (const auto& [weight, window] : std::vector<std::pair<std::string, Window>>{
           {"kx:3, ky:3, kz:3, channels:8, features:4", Window("x, y, z").padding("same")},
           {"kx:3, ky:3, kz:3, channels:8, features:2", Window("x, y, z").stride(2)}}) {
    INFO(weight);
    CHECK(compare_with_one_processor(
              [&](Mesh& m, const Layout& l) {
                auto x = small_integers(m, volume, l, 1).set_requires_grad();
                auto w = small_integers(m, Shape(weight), l, 2).set_requires_grad();
                auto out = conv(x, w, window);
                backward(reduce_sum(out * small_integers(m, out.shape(), l, 3)));
                return std::vector<Tensor<float>>{out, x.grad(), w.grad()};
              },
              1e-6, splits) == "");
  }
}

TEST_CASE("strided, dilated, valid and asymmetric convolutions match one processor") {
  CHECK(check_conv("kx:3, ky:3, kz:3, channels:3, features:2", Window("x, y, z").stride(2)) == "");
  CHECK(check_conv("kx:3, ky:3, channels:3, features:2",
                   Window("x, y").dilation(2).padding("same")) == "");
  CHECK(check_conv("kx:3, ky:1, kz:2, channels:3, features:2",
                   Window("x, y, z").stride({2, 1, 3}).padding(
                       Padding::explicit_sizes({{2, 0}, {0, 1}, {1, 1}}))) == "");
  CHECK(check_conv("kx:1, ky:1, kz:1, channels:3, features:5", Window("x, y, z")) == "");
}

TEST_CASE("1-D convolutions, including a 7-tap window wider than an 8-way split's blocks") {
  CHECK(check_conv("kx:5, channels:3, features:2",
                   Window("x").padding(Padding::explicit_sizes({{2, 1}}))) == "");
  CHECK(check_conv("kx:7, channels:3, features:2", Window("x").padding("same")) == "");
  CHECK(check_conv("kx:3, channels:3, features:2", Window("x").dilation(3).padding("same")) == "");
}

TEST_CASE("transposed convolutions match one processor (the U-Net's 2x2x2 stride 2 and others)") {
  CHECK(check_conv("kx:2, ky:2, kz:2, channels:3, features:2", Window("x, y, z").stride(2), true) ==
        "");
  CHECK(check_conv("kx:3, ky:3, channels:3, features:2", Window("x, y").stride(2).padding("same"),
                   true) == "");
  CHECK(check_conv("kx:3, channels:3, features:2",
                   Window("x").dilation(2).padding(Padding::explicit_sizes({{1, 2}})), true) == "");
  CHECK(check_conv("kx:4, kz:2, channels:3, features:2", Window("x, z").stride({3, 1}), true) ==
        "");
}

namespace {

const Window same_3x3x3 = Window("x, y, z").padding("same");

// h = relu(batch_norm(conv(x, w))) with `features` channels, and the parameters it takes.
struct NormalisedConv {
  Tensor<float> w, gamma, beta, h;
};
NormalisedConv normalised_conv(Mesh& m, const Layout& l, const Tensor<float>& x,
                               std::int64_t features) {
  const std::string in = std::to_string(x.shape().dim("channels").size),
                    out = std::to_string(features);
  NormalisedConv n{
      test_input(m, Shape("kx:3, ky:3, kz:3, channels:" + in + ", features:" + out), l, 2),
      test_input(m, Shape("channels:" + out), l, 4), test_input(m, Shape("channels:" + out), l, 5),
      Tensor<float>()};
  for (Tensor<float>* p : {&n.w, &n.gamma, &n.beta}) p->set_requires_grad();
  n.h = rename(conv(x, n.w, same_3x3x3), "features", "channels");
  n.h = batch_norm(n.h, n.gamma, n.beta, "channels", 1e-5, nullptr, Activation::relu);
  return n;
}

// conv(concat(relu(batch_norm(conv(x))), x)): the second convolution saves a concatenation of a
// normalisation's output, both of which it keeps as recipes. `plain` multiplies by one first,
// which gives the same values without a recipe.
std::vector<Tensor<float>> norm_concat_chain(Mesh& m, const Layout& l, bool plain) {
  auto x = test_input(m, volume_shape, l, 1).set_requires_grad();
  const NormalisedConv n = normalised_conv(m, l, x, 3);
  auto w2 = test_input(m, "kx:3, ky:3, kz:3, channels:6, features:2", l, 3).set_requires_grad();
  auto joined = concat({n.h, x}, "channels");
  if (plain) joined = joined * 1.0f;
  auto out = conv(joined, w2, same_3x3x3);
  backward(reduce_sum(out * test_input(m, out.shape(), l, 6)));
  return {out, x.grad(), n.w.grad(), w2.grad(), n.gamma.grad(), n.beta.grad()};
}

// Each run below is a fresh processor, which would time its own kernel choices (oneDNN's formats,
// an input gradient as a forward convolution) and these round differently: on a loaded machine
// two runs could choose apart. The fixed kernel policy, while it lives, for runs compared bit for
// bit.
struct FixedKernelChoice : Setting {
  FixedKernelChoice() : Setting("MESHTENSOR_KERNELS", "fixed") {}
};

}  // namespace

TEST_CASE("a convolution keeps the recipes of a normalisation's output and of a concatenation") {
  SECTION("the gradients are the same, bit for bit, as with the outputs kept") {
    const FixedKernelChoice fixed;
    const auto kept = on_one_processor([](Mesh& m) { return norm_concat_chain(m, "", true); });
    const auto recomputed =
        on_one_processor([](Mesh& m) { return norm_concat_chain(m, "", false); });
    for (std::size_t k = 0; k < kept.size(); ++k) {
      INFO("result " << k);
      const bool same_bits = gather(kept[k]) == gather(recomputed[k]);
      CHECK(same_bits);
    }
  }
  SECTION("and match one processor on every layout, halos included") {
    CHECK(compare_with_one_processor(
              [](Mesh& m, const Layout& l) { return norm_concat_chain(m, l, false); }, 1e-5,
              spatial_cases()) == "");
  }
  SECTION("the normalisation's output and the concatenation are freed after forward") {
    // Held after forward, with and without the recipes: the recipes save the normalised output
    // and the concatenation (3 + 6 channels of the volume).
    auto held_after_forward = [](bool plain) {
      return on_one_processor([plain](Mesh& m) {
        const auto before = memory_stats().in_use;
        auto x = test_input(m, "batch:1, x:32, y:32, z:32, channels:3", "", 1).set_requires_grad();
        auto w1 = test_input(m, "kx:3, ky:3, kz:3, channels:3, features:3", "", 2);
        auto w2 = test_input(m, "kx:3, ky:3, kz:3, channels:6, features:2", "", 3);
        auto gamma = test_input(m, "channels:3", "", 4).set_requires_grad();
        auto beta = test_input(m, "channels:3", "", 5);
        const Window same = Window("x, y, z").padding("same");
        auto h = rename(conv(x, w1.set_requires_grad(), same), "features", "channels");
        h = batch_norm(h, gamma, beta, "channels", 1e-5, nullptr, Activation::relu);
        auto joined = concat({h, x}, "channels");
        if (plain) joined = joined * 1.0f;
        auto out = conv(joined, w2.set_requires_grad(), same);
        h = joined = Tensor<float>();
        return double(memory_stats().in_use - before);
      });
    };
    const double volume = 32.0 * 32 * 32 * sizeof(float);
    CHECK(held_after_forward(true) - held_after_forward(false) >= 5.5 * volume);
  }
}

namespace {

// h = relu(batch_norm(conv(x, w1))), 8 channels, read by conv(h, w2) and conv_concat({h, x}, w3)
// (8 features each): both weight gradients compute h from conv(x, w1) as they read it (the row
// kernels take h as its affine map) where MESHTENSOR_MAPPED_INPUTS is on, else from a copy.
std::vector<Tensor<float>> mapped_norm_chain(Mesh& m, const Layout& l, std::int64_t batch = 2) {
  // Rows of 21: a vector's positions through registers and a tail of 5.
  const Shape volume("batch:" + std::to_string(batch) + ", x:8, y:6, z:21, channels:5");
  auto x = test_input(m, volume, l, 1).set_requires_grad();
  const NormalisedConv n = normalised_conv(m, l, x, 8);
  auto w2 = test_input(m, "kx:3, ky:3, kz:3, channels:8, features:8", l, 3).set_requires_grad();
  auto w3 = test_input(m, "kx:3, ky:3, kz:3, channels:13, features:8", l, 6).set_requires_grad();
  auto out = conv(n.h, w2, same_3x3x3) + conv_concat({n.h, x}, w3, same_3x3x3);
  backward(reduce_sum(out * test_input(m, out.shape(), l, 7)));
  return {out, x.grad(), n.w.grad(), w2.grad(), w3.grad(), n.gamma.grad(), n.beta.grad()};
}

}  // namespace

TEST_CASE("a convolution's weight gradient computes a normalisation's output as it reads it") {
  SECTION("the same bits as from the output recomputed, with two block copies fewer") {
    const FixedKernelChoice fixed;
    auto run = [](const char* mapped) {
      const Setting setting("MESHTENSOR_MAPPED_INPUTS", mapped);
      return on_one_processor([](Mesh& m) {
        const std::size_t before = memory_stats().allocations;
        auto results = mapped_norm_chain(m, "");
        return std::make_pair(std::move(results), memory_stats().allocations - before);
      });
    };
    const auto [copied, copied_allocations] = run("off");
    const auto [mapped, mapped_allocations] = run("on");
    for (std::size_t k = 0; k < copied.size(); ++k) {
      INFO("result " << k);
      const bool same_bits = gather(copied[k]) == gather(mapped[k]);
      CHECK(same_bits);
    }
    // h recomputed for each of the two weight gradients, or never.
    CHECK(copied_allocations - mapped_allocations == 2);
  }
  SECTION("and on a split, by rows: the same bits, the block not recomputed") {
    // Each processor's convolution reads its own rows in place and the halo rows kept apart
    // (conv_rows.hpp): its weight gradient reads the own rows as the norm's map too.
    const FixedKernelChoice fixed;
    auto run = [](const char* mapped) {
      const Setting setting("MESHTENSOR_MAPPED_INPUTS", mapped);
      return on_mesh(MeshShape("p:2"), [](Mesh& m) {
        const std::size_t before = memory_stats().allocations;
        std::vector<xt::xarray<float>> blocks;
        for (const auto& t : mapped_norm_chain(m, "x:p", 1)) blocks.push_back(local_block(t).data);
        const std::size_t allocations = memory_stats().allocations - before;
        return std::make_tuple(std::move(blocks), allocations,
                               kernels::current_backend() == kernels::Backend::cpu);
      });
    };
    const auto copied = run("off"), mapped = run("on");
    REQUIRE(copied.size() == mapped.size());
    for (std::size_t p = 0; p < mapped.size(); ++p) {
      INFO("processor " << p);
      const auto& [copied_blocks, copied_allocations, on_cpu] = copied[p];
      const auto& [mapped_blocks, mapped_allocations, also_on_cpu] = mapped[p];
      const bool same_bits = copied_blocks == mapped_blocks;
      CHECK(same_bits);
      // conv(h, w2)'s weight gradient recomputed h's block, or never (conv_concat runs on the
      // joined concatenation on a split, whose recipe is not a map). With overlap off the
      // convolution reads its box in slabs, each copied together from h recomputed either way;
      // on a GPU's blocks the kernels read a copy of the map's values.
      const bool maps = on_cpu && also_on_cpu && halo_overlap();
      CHECK(copied_allocations - mapped_allocations == (maps ? 1u : 0u));
    }
  }
  SECTION("and match one processor, with halos and without") {
    std::vector<LayoutCase> cases = spatial_cases();
    cases.push_back({"batch split 2 ways", "p:2", "batch:p"});
    CHECK(compare_with_one_processor(
              [](Mesh& m, const Layout& l) { return mapped_norm_chain(m, l); }, 1e-4, cases) == "");
    // Batch 1: a split's convolutions go by rows (the weight gradient maps its own rows).
    CHECK(compare_with_one_processor(
              [](Mesh& m, const Layout& l) { return mapped_norm_chain(m, l, 1); }, 1e-4,
              spatial_cases()) == "");
  }
  SECTION("a setting that is neither on nor off is refused, naming it") {
    CHECK_THROWS_WITH(
        Setting("MESHTENSOR_MAPPED_INPUTS", "yes"),
        Catch::Contains("MESHTENSOR_MAPPED_INPUTS=yes") && Catch::Contains("expected on or off"));
  }
}

namespace {

// conv(relu(batch_norm(conv(x, w1))), w2), 8 channels between: `fused` runs the last two as
// batch_norm_conv, whose convolution computes the normalisation's output as it reads it where no
// halo is exchanged and the row kernels take the shape; else batch_norm, then conv. Activations
// in T (the parameters and the input's gradient in fp32).
template <class T = float>
std::vector<Tensor<float>> norm_then_conv(Mesh& m, const Layout& l, bool fused) {
  auto x = test_input(m, "batch:2, x:8, y:6, z:21, channels:5", l, 1).set_requires_grad();
  auto w1 = test_input(m, "kx:3, ky:3, kz:3, channels:5, features:8", l, 2).set_requires_grad();
  auto gamma = test_input(m, "channels:8", l, 4).set_requires_grad();
  auto beta = test_input(m, "channels:8", l, 5).set_requires_grad();
  auto w2 = test_input(m, "kx:3, ky:3, kz:3, channels:8, features:8", l, 3).set_requires_grad();
  auto y = rename(conv(cast<T>(x), w1, same_3x3x3), "features", "channels");
  auto out = fused ? batch_norm_conv(y, gamma, beta, w2, same_3x3x3, "channels", 1e-5, nullptr,
                                     Activation::relu)
                   : conv(batch_norm(y, gamma, beta, "channels", 1e-5, nullptr, Activation::relu),
                          w2, same_3x3x3);
  const Tensor<float> result = cast<float>(out);
  backward(reduce_sum(result * test_input(m, out.shape(), l, 7)));
  return {result, x.grad(), w1.grad(), w2.grad(), gamma.grad(), beta.grad()};
}

}  // namespace

namespace {

// norm_then_conv in T, fused and mapped against the two ops and against mapping off: the same
// bits, and the norm's output never written out (the block allocations each other road makes).
template <class T>
void check_norm_read_as_mapped() {
  const FixedKernelChoice fixed;
  auto run = [](const char* mapped, bool fused) {
    const Setting setting("MESHTENSOR_MAPPED_INPUTS", mapped);
    return on_one_processor([fused](Mesh& m) {
      const std::size_t before = memory_stats().allocations;
      auto results = norm_then_conv<T>(m, "", fused);
      return std::make_pair(std::move(results), memory_stats().allocations - before);
    });
  };
  const auto [two_ops, two_ops_allocations] = run("on", false);
  const auto [copied, copied_allocations] = run("off", true);
  const auto [mapped, mapped_allocations] = run("on", true);
  for (std::size_t k = 0; k < two_ops.size(); ++k) {
    INFO("result " << k);
    const bool as_two_ops = gather(two_ops[k]) == gather(mapped[k]);
    const bool as_copied = gather(copied[k]) == gather(mapped[k]);
    CHECK(as_two_ops);
    CHECK(as_copied);
  }
  // The norm's output written in forward by the two ops (their weight gradient maps it); by
  // the fused pair mapped off, in forward and again for the weight gradient; on, never.
  CHECK(two_ops_allocations - mapped_allocations == 1);
  CHECK(copied_allocations - mapped_allocations == 2);
}

}  // namespace

TEST_CASE("a convolution after batch norm computes the norm's output as it reads it, in forward") {
  SECTION("the same bits as the two ops, with the norm's output never written out") {
    check_norm_read_as_mapped<float>();
  }
  SECTION("in bfloat16 too, on the row kernels in float products") {
    // (oneDNN's bf16 kernels and the dot products read a copy: test_conv_parts.)
    const Setting kernels("MESHTENSOR_BF16_CONV", "widened");
    const Setting products("MESHTENSOR_BF16_PRODUCTS", "float");
    check_norm_read_as_mapped<bfloat16>();
  }
  SECTION("and match one processor on every layout and a batch split") {
    std::vector<LayoutCase> cases = spatial_cases();
    cases.push_back({"batch split 2 ways", "p:2", "batch:p"});
    CHECK(compare_with_one_processor(
              [](Mesh& m, const Layout& l) { return norm_then_conv(m, l, true); }, 1e-4, cases) ==
          "");
    // bfloat16 on a batch split, where each processor's convolution maps its block: against
    // one processor, whose reductions round in another order (held to bfloat16's 1/32).
    const Setting kernels("MESHTENSOR_BF16_CONV", "widened");
    const Setting products("MESHTENSOR_BF16_PRODUCTS", "float");
    CHECK(compare_with_one_processor(
              [](Mesh& m, const Layout& l) { return norm_then_conv<bfloat16>(m, l, true); },
              1.0 / 32, {{"batch split 2 ways", "p:2", "batch:p"}}) == "");
  }
}

TEST_CASE("max and average pooling, overlapping or not, padded or not, match one processor") {
  CHECK(check_pool(Window("x, y, z").kernel(2), true) == "");
  CHECK(check_pool(Window("x, y, z").kernel(3).stride(2).padding("same"), true) == "");
  CHECK(check_pool(Window("x, y").kernel(3).stride(1).padding("same"), false, true) == "");
  CHECK(check_pool(Window("x, y").kernel(3).stride(1).padding("same"), false, false) == "");
  CHECK(check_pool(Window("x").kernel(3).stride(1), true) == "");
  CHECK(check_pool(Window("x, z").kernel({4, 2}).stride({3, 2}), false) == "");
}

TEST_CASE("circular, reflect and replicate padding of windowed ops match one processor") {
  const Shape cube("kx:3, ky:3, kz:3, channels:3, features:2");
  CHECK(check_conv(cube, Window("x, y, z").padding("same").padding_mode(PadMode::circular)) == "");
  CHECK(check_conv("kx:3, ky:3, channels:3, features:2",
                   Window("x, y")
                       .stride(2)
                       .dilation({1, 2})
                       .padding_mode("circular")
                       .padding(Padding::explicit_sizes({{1, 2}, {2, 2}}))) == "");
  CHECK(check_conv(cube, Window("x, y, z").padding("same").padding_mode(PadMode::reflect)) == "");
  CHECK(check_conv("kx:3, kz:3, channels:3, features:2",
                   Window("x, z").padding("same").padding_mode(PadMode::replicate)) == "");
  CHECK(check_conv(cube, Window("x, y, z").padding("same").padding_mode(PadMode::circular),
                   /*transposed=*/true) == "");
  CHECK(check_conv(cube,
                   Window("x, y, z").stride({2, 1, 3}).padding("same").padding_mode("circular"),
                   /*transposed=*/true) == "");
  CHECK(check_pool(Window("x, y, z").kernel(3).stride(2).padding("same").padding_mode("circular"),
                   true) == "");
  CHECK(check_pool(Window("x, y").kernel(3).stride(1).padding("same").padding_mode("circular"),
                   false) == "");
}

TEST_CASE("fused convolutions with a circular window equal their ops one after the other") {
  const Window window = Window("x, y, z").padding("same").padding_mode(PadMode::circular);
  auto fused_and_apart = [&](Mesh& m, const Layout& l) {
    auto x = test_input(m, volume_shape, l, 1);
    auto w1 = test_input(m, "kx:3, ky:3, kz:3, channels:3, features:3", l, 2);
    auto w2 = test_input(m, "kx:3, ky:3, kz:3, channels:3, features:2", l, 3);
    auto gamma = test_input(m, "channels:3", l, 4), beta = test_input(m, "channels:3", l, 5);
    auto first = rename(conv(x, w1, window), "features", "channels");
    return std::vector<Tensor<float>>{
        conv_norm_conv(x, w1, gamma, beta, w2, window),
        conv(batch_norm(first, gamma, beta, "channels", 1e-5, nullptr, Activation::relu), w2,
             window),
        batch_norm_conv(x, gamma, beta, w2, window), conv(batch_norm(x, gamma, beta), w2, window)};
  };
  const auto one = on_one_processor([&](Mesh& m) {
    std::vector<xt::xarray<float>> arrays;
    for (const auto& t : fused_and_apart(m, "")) arrays.push_back(gather(t));
    return arrays;
  });
  CHECK(xt::allclose(one[0], one[1], 1e-5, 1e-5));
  CHECK(xt::allclose(one[2], one[3], 1e-5, 1e-5));
  CHECK(compare_with_one_processor(fused_and_apart, 1e-5, spatial_cases()) == "");
}

TEST_CASE("a circular transposed convolution is the circular convolution's adjoint") {
  // sum(conv(x, w) * y) = sum(x * conv_transpose(y, w')), w' the weight with its two channel dims'
  // roles swapped: the one is the input gradient of the other, periodic edges included.
  const Window window = Window("x, y, z")
                            .stride({2, 1, 1})
                            .padding(Padding::explicit_sizes({{1, 1}, {1, 1}, {0, 2}}))
                            .padding_mode(PadMode::circular);
  const auto results = on_one_processor([&](Mesh& m) {
    auto x = test_input(m, volume_shape, "", 1).set_requires_grad();
    auto w = test_input(m, "kx:3, ky:3, kz:3, channels:3, features:4", "", 2);
    auto out = conv(x, w, window);
    auto y = test_input(m, out.shape(), "", 3);
    backward(reduce_sum(out * y));
    auto swapped =
        rename(rename(rename(w, "channels", "c_in"), "features", "channels"), "c_in", "features");
    auto adjoint = conv_transpose(rename(y, "features", "channels"), swapped, window);
    return std::vector<xt::xarray<float>>{gather(x.grad()), gather(adjoint)};
  });
  REQUIRE(results[0].shape() == results[1].shape());
  CHECK(xt::allclose(results[0], results[1], 1e-5, 1e-5));
  on_one_processor([&](Mesh& m) {
    auto x = test_input(m, volume_shape, "", 1);
    auto w = test_input(m, "kx:3, ky:3, kz:3, channels:3, features:4", "", 2);
    CHECK_THROWS_WITH(
        conv_transpose(x, w, Window("x, y, z").padding("same").padding_mode("reflect")),
        Contains("conv_transpose: padding mode \"reflect\" has no transposed form"));
    CHECK_THROWS_WITH(
        conv(x, w,
             Window("x, y, z")
                 .padding(Padding::explicit_sizes({{1, 1}, {1, 1}, {6, 0}}))
                 .padding_mode(PadMode::circular)),
        Contains("conv: circular padding along dim \"z\" of size 5 can add at most 5"));
    return 0;
  });
}

TEST_CASE("a split that leaves processors empty blocks still gives the single-processor result") {
  // x:3 over 4 processors: one holds nothing, yet every window is served from its owners.
  const std::vector<LayoutCase> cases{{"x:3 split 4 ways", "p:4", "x:p"},
                                      {"x:3 and y:2 on 4x4", "rows:4; cols:4", "x:rows; y:cols"}};
  CHECK(compare_with_one_processor(
            [](Mesh& m, const Layout& l) {
              auto x = test_input(m, "batch:1, x:3, y:2, channels:2", l, 1).set_requires_grad();
              auto w = test_input(m, "kx:3, ky:2, channels:2, out:2", l, 2).set_requires_grad();
              auto up = test_input(m, "kx:2, channels:2, out:2", l, 3).set_requires_grad();
              auto h = conv(x, w, Window("x, y").padding("same"));
              auto out =
                  conv_transpose(max_pool(h, Window("x").kernel(2).stride(1).padding("same")), up,
                                 Window("x").stride(2), "out");
              backward(reduce_sum(square(out)));
              return std::vector<Tensor<float>>{out, x.grad(), w.grad(), up.grad()};
            },
            1e-5, cases) == "");
}

TEST_CASE(
    "channel splits (input channels summed across processors, output channels apart, "
    "processors without channels) match one processor") {
  const std::vector<LayoutCase> cases{
      {"input channels split 2 ways", "p:2", "channels:p"},
      {"input channels (3) split 4 ways: one processor has none", "p:4", "channels:p"},
      {"output channels split 2 ways", "p:2", "features:p"},
      {"output channels (3) split 4 ways: one processor has none", "p:4", "features:p"},
      {"input channels over rows, output channels over cols", "rows:2; cols:2",
       "channels:rows; features:cols"},
      {"x over rows, output channels over cols (uneven)", "rows:2; cols:4",
       "x:rows; features:cols"}};
  CHECK(
      compare_with_one_processor(
          [](Mesh& m, const Layout& l) {
            auto x = test_input(m, volume_shape, l, 1).set_requires_grad();
            auto w =
                test_input(m, "kx:3, ky:3, kz:3, channels:3, features:3", l, 2).set_requires_grad();
            auto gamma = test_input(m, "features:3", l, 3).set_requires_grad();
            auto beta = test_input(m, "features:3", l, 4).set_requires_grad();
            auto up =
                test_input(m, "kx:2, ky:2, kz:2, features:3, out:2", l, 5).set_requires_grad();
            auto h = conv(x, w, Window("x, y, z").padding("same"));
            h = batch_norm(h, gamma, beta, "features", 1e-5, nullptr, Activation::relu);
            auto out = conv_transpose(max_pool(h, Window("x, y, z").kernel(2)), up,
                                      Window("x, y, z").stride(2), "features");
            backward(reduce_sum(out * test_input(m, out.shape(), l, 6)));
            return std::vector<Tensor<float>>{
                h, out, x.grad(), w.grad(), gamma.grad(), beta.grad(), up.grad()};
          },
          1e-5, cases) == "");
}

TEST_CASE("partial sums over split input channels are reduce-scattered into the output channels") {
  // Each processor keeps its share of the output channels, on the input channels' mesh axis; where
  // the output channels are split already, the sums are all-reduced and the output keeps that.
  auto axes = on_mesh("rows:2; cols:2", [](Mesh& m) {
    auto x = test_input(m, volume_shape, "channels:rows", 1);
    const Window same = Window("x, y, z").padding("same");
    const auto scattered =
        conv(x, test_input(m, "kx:3, channels:3, features:4", "channels:rows", 2),
             Window("x").padding("same"));
    const auto reduced = conv(x,
                              test_input(m, "kx:3, ky:3, kz:3, channels:3, features:4",
                                         "channels:rows; features:cols", 3),
                              same);
    return std::vector<std::string>{*scattered.layout().layout().mesh_axis_of("features"),
                                    *reduced.layout().layout().mesh_axis_of("features")};
  });
  for (const auto& a : axes) CHECK(a == std::vector<std::string>{"rows", "cols"});
}

TEST_CASE("windowed ops reject what cannot be computed, naming the op and dim") {
  auto errors = on_mesh("p:2", [](Mesh& m) {
    ErrorLog record;
    auto x = test_input(m, volume_shape, "x:p", 1);
    record([&] { conv(x, test_input(m, "kx:11, channels:3, out:2", "", 2), Window("x")); });
    record([&] { conv(x, test_input(m, "kx:3, channels:4, out:2", "", 2), Window("x")); });
    record([&] { conv(x, test_input(m, "kx:3, channels:3, out:2", "", 2), Window("w")); });
    record([&] {
      conv(x, test_input(m, "kx:3, channels:3, out:2", "", 2), Window("x").padding("full"));
    });
    record([&] { max_pool(x, Window("x, y").kernel(2).stride(0)); });
    record([&] { max_pool(x, Window("x, y")); });
    record([&] {
      conv(x, test_input(m, "kx:3, ky:3, channels:3, out:2", "", 2),
           Window("x, y").stride({1, 2, 3}));
    });
    record([&] {
      conv_transpose(x, test_input(m, "kx:2, channels:3, out:2", "", 2),
                     Window("x").padding(Padding::explicit_sizes({{9, 9}})));
    });
    return record.messages();
  });
  for (const auto& what : errors) {
    CHECK_THAT(what[0], Contains("conv") && Contains("dim \"x\"") && Contains("spans 11") &&
                            Contains("padded extent is only 9"));
    CHECK_THAT(what[1], Contains("channels=3") && Contains("channels=4"));
    CHECK_THAT(what[2], Contains("spatial dim \"w\""));
    CHECK_THAT(what[3], Contains("padding \"full\"") && Contains("\"same\""));
    CHECK_THAT(what[4], Contains("max_pool") && Contains("stride (0)"));
    CHECK_THAT(what[5], Contains("kernel size"));
    CHECK_THAT(what[6], Contains("stride needs one value for each of the 2 spatial dims"));
    CHECK_THAT(what[7], Contains("conv_transpose") && Contains("leaves no output"));
  }
}

TEST_CASE("the halo overlap setting turns the convolutions' overlap on or off") {
  CHECK(halo_overlap() == current_processor().settings().halo_overlap);
  {
    const Setting off("MESHTENSOR_HALO_OVERLAP", "off");
    CHECK_FALSE(halo_overlap());
  }
  // ctest runs this file again with the overlap off (test_conv_pool_no_overlap): every case
  // above then takes the exchange-first path.
  CHECK(halo_overlap() == environment_settings().halo_overlap);
}

}  // namespace test_conv_pool
