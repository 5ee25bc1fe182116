// Padding, cropping, upsampling, concatenation, flips, transposes, 90° rotations and
// normalisation: outputs and input gradients on every spatial layout class equal the
// single-processor run.
#include <catch2/catch.hpp>

#include <functional>
#include <string>
#include <utility>
#include <vector>

#include <meshtensor/autodiff/backward.hpp>

#include "support/op_check.hpp"
#include "support/spatial_cases.hpp"

using namespace meshtensor;
using namespace meshtensor::testing;

// In a namespace of its own: test files share a program (tests/CMakeLists.txt).
namespace test_resample_norm {

namespace {

// out and d(sum(out * r))/d(inputs) for an op of the volume (and extra inputs made alike).
template <class Op>
std::string check(Op&& op, const std::vector<Shape>& extra = {}) {
  return compare_with_one_processor(
      [&](Mesh& m, const Layout& l) {
        std::vector<Tensor<float>> inputs{test_input(m, volume_shape, l, 1).set_requires_grad()};
        for (std::size_t k = 0; k < extra.size(); ++k)
          inputs.push_back(test_input(m, extra[k], l, int(k) + 2).set_requires_grad());
        auto out = op(inputs);
        backward(reduce_sum(out * test_input(m, out.shape(), l, 9)));
        std::vector<Tensor<float>> results{out};
        for (const auto& t : inputs) results.push_back(t.grad());
        return results;
      },
      1e-5, spatial_cases());
}

}  // namespace

TEST_CASE("padding with zeros, reflection and replication, and cropping, match one processor") {
  CHECK(check([](auto& in) { return pad(in[0], "x", 2, 3); }) == "");
  CHECK(check([](auto& in) { return pad(in[0], "x", 3, 1, PadMode::reflect); }) == "");
  CHECK(check([](auto& in) {
          return pad(pad(in[0], "y", 1, 2, PadMode::replicate), "z", 4, 0, PadMode::replicate);
        }) == "");
  CHECK(check([](auto& in) { return crop(crop(in[0], "x", 2, 3), "y", 1, 0); }) == "");
}

TEST_CASE("circular padding matches one processor, the far processor's rows as the halo") {
  CHECK(check([](auto& in) { return pad(in[0], "x", 3, 2, PadMode::circular); }) == "");
  // As much as the dim holds, on both sides of two dims: wider than any split's blocks.
  CHECK(check([](auto& in) {
          return pad(pad(in[0], "x", 9, 9, PadMode::circular), "y", 0, 6, PadMode::circular);
        }) == "");
  CHECK(check([](auto& in) { return pad(in[0], "channels", 1, 3, PadMode::circular); }) == "");
}

TEST_CASE("circular padding wraps as numpy's wrap mode, up to the dim's size per side") {
  // x:3 holding 0, 1, 2: np.pad(a, (2, 3), mode="wrap") = [1, 2, 0, 1, 2, 0, 1, 2].
  const auto wrapped = on_one_processor([](Mesh& m) {
    auto t = generate<float>(m, "x:3", "", [](const Index& i) { return float(i["x"]); });
    return gather(pad(t, "x", 2, 3, PadMode::circular));
  });
  CHECK((wrapped == xt::xarray<float>{1, 2, 0, 1, 2, 0, 1, 2}));
  on_one_processor([](Mesh& m) {
    auto t = generate<float>(m, "x:3, y:2", "", [](const Index&) { return 0.0f; });
    CHECK_THROWS_WITH(
        pad(t, "x", 4, 0, PadMode::circular),
        Catch::Contains("circular padding along dim \"x\" of size 3 can add at most 3"));
    CHECK_THROWS_WITH(parse_pad_mode("wrap"), Catch::Contains("\"circular\""));
    return 0;
  });
}

TEST_CASE("nearest and linear upsampling match one processor") {
  CHECK(check([](auto& in) { return upsample(in[0], "x, y, z", 2); }) == "");
  CHECK(check([](auto& in) { return upsample(in[0], "x, y, z", 2, Interpolation::linear); }) == "");
  CHECK(check([](auto& in) { return upsample(in[0], "x", 3, Interpolation::linear); }) == "");
}

TEST_CASE("concatenation along a split or unsplit dim matches one processor") {
  CHECK(check(
            [](auto& in) {
              return concat({in[0], in[1]}, "channels");
            },
            {"batch:2, x:9, y:6, z:5, channels:2"}) == "");
  CHECK(check(
            [](auto& in) {
              return concat({in[1], in[0], in[2]}, "x");
            },
            {"batch:2, x:4, y:6, z:5, channels:3", "batch:2, x:1, y:6, z:5, channels:3"}) == "");
}

TEST_CASE("flips, transposes and 90-degree rotations match one processor, on split dims too") {
  CHECK(check([](auto& in) { return flip(in[0], "x"); }) == "");
  CHECK(check([](auto& in) { return flip(flip(in[0], "y"), "channels"); }) == "");
  CHECK(check([](auto& in) { return flip(in[0], "batch"); }) == "");
  CHECK(check([](auto& in) { return transpose(in[0], "batch, z, x, channels, y"); }) == "");
  // A plane of unequal sizes: an odd number of turns swaps them (9x6 becomes 6x9).
  for (int turns : {1, 2, 3, -1})
    CHECK(check([&](auto& in) { return rotate90(in[0], "x", "y", turns); }) == "");
  CHECK(check([](auto& in) { return rotate90(in[0], "z", "x"); }) == "");
}

TEST_CASE("flips and rotations move each element where numpy's flip and rot90 put it") {
  // x:3, y:2 holding 10x + y: each result checked against the rule, element by element.
  auto results = on_one_processor([](Mesh& m) {
    auto t = generate<float>(m, "x:3, y:2", "",
                             [](const Index& i) { return float(10 * i["x"] + i["y"]); });
    return std::vector<xt::xarray<float>>{
        gather(flip(t, "x")), gather(rotate90(t, "x", "y")), gather(rotate90(t, "x", "y", 2)),
        gather(rotate90(t, "x", "y", 3)), gather(transpose(t, "y, x"))};
  });
  const xt::xarray<float> flipped{{20, 21}, {10, 11}, {0, 1}};
  // numpy: np.rot90(m) for m = [[0, 1], [10, 11], [20, 21]].
  const xt::xarray<float> once{{1, 11, 21}, {0, 10, 20}};
  const xt::xarray<float> twice{{21, 20}, {11, 10}, {1, 0}};
  const xt::xarray<float> thrice{{20, 10, 0}, {21, 11, 1}};
  const xt::xarray<float> transposed{{0, 10, 20}, {1, 11, 21}};
  CHECK((results[0] == flipped));
  CHECK((results[1] == once));
  CHECK((results[2] == twice));
  CHECK((results[3] == thrice));
  CHECK((results[4] == transposed));
  on_one_processor([](Mesh& m) {
    auto t = generate<float>(m, "x:3, y:2", "", [](const Index&) { return 0.0f; });
    CHECK_THROWS_WITH(rotate90(t, "x", "x"), Catch::Contains("two different dims"));
    CHECK_THROWS_WITH(transpose(t, "x"), Catch::Contains("name each of them once"));
    CHECK_THROWS_WITH(transpose(t, "x, x"), Catch::Contains("twice"));
    CHECK_THROWS_WITH(flip(t, "z"), Catch::Contains("no dim \"z\""));
    return 0;
  });
}

TEST_CASE("batch, instance and group norm match one processor, gradients of gamma and beta too") {
  CHECK(check([](auto& in) { return batch_norm(in[0], in[1], in[2]); },
              {"channels:3", "channels:3"}) == "");
  CHECK(check(
            [](auto& in) {
              return batch_norm(in[0], in[1], in[2], "channels", 1e-5, nullptr, Activation::relu);
            },
            {"channels:3", "channels:3"}) == "");
  CHECK(check([](auto& in) { return instance_norm(in[0], in[1], in[2], "x, y, z"); },
              {"channels:3", "channels:3"}) == "");
  CHECK(compare_with_one_processor(
            [](Mesh& m, const Layout& l) {
              auto x =
                  test_input(m, "batch:2, x:9, y:6, z:5, channels:4", l, 1).set_requires_grad();
              auto gamma = test_input(m, "channels:4", l, 2).set_requires_grad();
              auto beta = test_input(m, "channels:4", l, 3).set_requires_grad();
              auto out = group_norm(x, gamma, beta, 2, "x, y, z");
              backward(reduce_sum(out * test_input(m, out.shape(), l, 9)));
              return std::vector<Tensor<float>>{out, x.grad(), gamma.grad(), beta.grad()};
            },
            1e-5, spatial_cases()) == "");
}

TEST_CASE("fused batch norm (+ ReLU) equals normalise, scale, shift (and ReLU) as separate ops") {
  auto run = [](bool fused, Activation activation) {
    return on_one_processor([&](Mesh& m) {
      auto x = test_input(m, volume_shape, "", 1).set_requires_grad();
      auto gamma = test_input(m, "channels:3", "", 2).set_requires_grad();
      auto beta = test_input(m, "channels:3", "", 3).set_requires_grad();
      Tensor<float> out;
      if (fused) {
        out = batch_norm(x, gamma, beta, "channels", 1e-5, nullptr, activation);
      } else {
        out = normalize(x, "batch, x, y, z", 1e-5) * gamma + beta;
        if (activation == Activation::relu) out = relu(out);
      }
      backward(reduce_sum(out * test_input(m, out.shape(), "", 9)));
      std::vector<std::vector<float>> values;
      for (const auto& t : {out, x.grad(), gamma.grad(), beta.grad()})
        values.emplace_back(t.local().begin(), t.local().end());
      return values;
    });
  };
  for (auto activation : {Activation::none, Activation::relu}) {
    const auto fused = run(true, activation), separate = run(false, activation);
    for (std::size_t k = 0; k < fused.size(); ++k) {
      REQUIRE(fused[k].size() == separate[k].size());
      for (std::size_t i = 0; i < fused[k].size(); ++i)
        CHECK(fused[k][i] == Approx(separate[k][i]).epsilon(1e-4).margin(1e-5));
    }
  }
}

TEST_CASE("batch statistics are the same on every layout and are stable for large offsets") {
  CHECK(compare_with_one_processor(
            [](Mesh& m, const Layout& l) {
              // Values around 1e4 with spread 1: naive sums of squares lose the variance in float.
              auto x = generate<float>(m, volume_shape, l,
                                       [](const Index& i) { return float(1e4 + test_value(i)); });
              Moments<float> moments;
              normalize(x, "batch, x, y, z", 1e-5, &moments);
              return std::vector<Tensor<float>>{moments.mean, moments.variance};
            },
            1e-5, spatial_cases()) == "");
  auto variance = on_one_processor([](Mesh& m) {
    auto x =
        generate<float>(m, "x:1000", "", [](const Index& i) { return float(1e4 + (i["x"] % 2)); });
    Moments<float> moments;
    normalize(x, "x", 0.0, &moments);
    return moments.variance.item();
  });
  CHECK(variance == Approx(0.25).epsilon(1e-6));
}

TEST_CASE("an op's error names the op and what the tensor has") {
  // Misused, each op says so by its own name (not by the ops it is made of) and lists the dims.
  using Probe = std::pair<std::string, std::function<void(Mesh&)>>;
  const std::vector<Probe> probes = {
      {"pad: tensor [x=8@p, y=6, channels=4] has no dim \"q\"; its dims are \"x\", \"y\", "
       "\"channels\"",
       [](Mesh& m) { pad(zeros<float>(m, "x:8, y:6, channels:4", "x:p"), "q", 1, 1); }},
      {"crop: tensor", [](Mesh& m) { crop(zeros<float>(m, "x:8, y:6", "x:p"), "q", 1, 1); }},
      {"upsample: tensor", [](Mesh& m) { upsample(zeros<float>(m, "x:8", "x:p"), "q", 2); }},
      {"resize: tensor", [](Mesh& m) { resize(zeros<float>(m, "x:8", "x:p"), "q", 4); }},
      {"argmax: tensor", [](Mesh& m) { argmax(zeros<float>(m, "x:8", "x:p"), "q"); }},
      {"flip: tensor", [](Mesh& m) { flip(zeros<float>(m, "x:8", "x:p"), "q"); }},
      {"rotate90: tensor", [](Mesh& m) { rotate90(zeros<float>(m, "x:8, y:8", "x:p"), "x", "q"); }},
      {"merge_dims: tensor",
       [](Mesh& m) { merge_dims(zeros<float>(m, "x:8, y:6"), "x", "q", "xq"); }},
      {"split_dim: tensor",
       [](Mesh& m) { split_dim(zeros<float>(m, "x:8"), "q", Dim("a", 2), Dim("b", 4)); }},
      {"rename: tensor", [](Mesh& m) { rename(zeros<float>(m, "x:8", "x:p"), "q", "r"); }},
      {"rename of dim \"x\": tensor [x=8@p, y=6] already has a dim \"y\"",
       [](Mesh& m) { rename(zeros<float>(m, "x:8, y:6", "x:p"), "x", "y"); }},
      {"batch_norm: tensor [x=8@p, channels=4] has no dim \"c\"",
       [](Mesh& m) {
         const auto g = zeros<float>(m, "c:4");
         batch_norm(zeros<float>(m, "x:8, channels:4", "x:p"), g, g, "c");
       }},
      {"batch_norm: gamma [channels=3] has dim \"channels\" of size 3, which x [x=8, channels=4] "
       "does not have",
       [](Mesh& m) {
         const auto g = zeros<float>(m, "channels:3");
         batch_norm(zeros<float>(m, "x:8, channels:4", "x:p"), g, g);
       }},
      {"instance_norm: tensor [x=8@p, channels=4] has no dim \"y\"",
       [](Mesh& m) {
         const auto g = zeros<float>(m, "channels:4");
         instance_norm(zeros<float>(m, "x:8, channels:4", "x:p"), g, g, "x, y");
       }},
      {"group_norm: gamma [k=4] has dim \"k\" of size 4, which x",
       [](Mesh& m) {
         const auto g = zeros<float>(m, "k:4");
         group_norm(zeros<float>(m, "x:8, channels:4", "x:p"), g, g, 2, "x");
       }},
  };
  for (const auto& [expected, op] : probes) {
    INFO(expected);
    const auto messages = on_mesh("p:2", [&](Mesh& m) {
      try {
        op(m);
        return std::string("no error");
      } catch (const ShapeError& e) {
        return std::string(e.what());
      }
    });
    for (const auto& message : messages) CHECK_THAT(message, Catch::StartsWith(expected));
  }
}

}  // namespace test_resample_norm
