// Every differentiable op of the windowed, resampling, normalisation, activation and loss families,
// its gradient checked against central finite differences (one processor, double precision).
#include <catch2/catch.hpp>

#include "support/gradcheck.hpp"

using namespace meshtensor;
using namespace meshtensor::testing;

// In a namespace of its own: test files share a program (tests/CMakeLists.txt).
namespace test_gradcheck {

using Inputs = std::vector<Tensor<double>>;

namespace {
const Shape image("batch:2, x:5, y:4, channels:2");
// A loss that weighs every output element differently, so no gradient cancels by symmetry.
Tensor<double> weigh(const Tensor<double>& out) {
  auto r = generate<double>(out.mesh(), out.shape(), Layout{},
                            [](const Index& i) { return double(test_value(i, 77)); });
  return reduce_sum(out * r);
}
}  // namespace

TEST_CASE("convolutions and transposed convolutions") {
  CHECK(gradcheck({image, "kx:3, ky:2, channels:2, out:3"}, [](Mesh&, const Inputs& in) {
          return weigh(conv(in[0], in[1], Window("x, y").padding("same")));
        }) == "");
  CHECK(gradcheck({image, "kx:3, ky:3, channels:2, out:2"}, [](Mesh&, const Inputs& in) {
          return weigh(conv(in[0], in[1],
                            Window("x, y").stride(2).dilation({1, 2}).padding(
                                Padding::explicit_sizes({{1, 2}, {2, 0}}))));
        }) == "");
  CHECK(gradcheck({image, "kx:2, ky:2, channels:2, out:3"}, [](Mesh&, const Inputs& in) {
          return weigh(conv_transpose(in[0], in[1], Window("x, y").stride(2)));
        }) == "");
  CHECK(gradcheck({image, "kx:3, channels:2, out:2"}, [](Mesh&, const Inputs& in) {
          return weigh(conv_transpose(in[0], in[1], Window("x").stride(2).padding("same")));
        }) == "");
}

TEST_CASE("pooling") {
  CHECK(gradcheck({image}, [](Mesh&, const Inputs& in) {
          return weigh(max_pool(in[0], Window("x, y").kernel(2)));
        }) == "");
  CHECK(gradcheck({image}, [](Mesh&, const Inputs& in) {
          return weigh(max_pool(in[0], Window("x, y").kernel(3).stride(2).padding("same")));
        }) == "");
  CHECK(gradcheck({image}, [](Mesh&, const Inputs& in) {
          return weigh(avg_pool(in[0], Window("x, y").kernel(3).stride(1).padding("same"), false));
        }) == "");
  CHECK(gradcheck({image}, [](Mesh&, const Inputs& in) {
          return weigh(avg_pool(in[0], Window("x").kernel(2).stride(1)));
        }) == "");
}

TEST_CASE("padding, cropping, upsampling, concatenation and relabelling") {
  CHECK(gradcheck({image}, [](Mesh&, const Inputs& in) {
          return weigh(pad(pad(pad(in[0], "x", 1, 2), "y", 2, 1, PadMode::reflect), "x", 1, 0,
                           PadMode::replicate));
        }) == "");
  CHECK(gradcheck({image}, [](Mesh&, const Inputs& in) { return weigh(crop(in[0], "x", 1, 2)); }) ==
        "");
  CHECK(gradcheck({image},
                  [](Mesh&, const Inputs& in) { return weigh(upsample(in[0], "x, y", 2)); }) == "");
  CHECK(gradcheck({image}, [](Mesh&, const Inputs& in) {
          return weigh(upsample(in[0], "x, y", 3, Interpolation::linear));
        }) == "");
  CHECK(gradcheck({image, "batch:2, x:5, y:4, channels:3"}, [](Mesh&, const Inputs& in) {
          return weigh(concat({in[0], in[1]}, "channels"));
        }) == "");
  CHECK(gradcheck({image}, [](Mesh&, const Inputs& in) {
          auto split = split_dim(rename(in[0], "channels", "c"), "x", Dim("x0", 5), Dim("x1", 1));
          return weigh(merge_dims(split, "x0", "x1", "x") * 2.0);
        }) == "");
}

TEST_CASE("normalisation") {
  CHECK(gradcheck(
            {image, "channels:2", "channels:2"},
            [](Mesh&, const Inputs& in) { return weigh(batch_norm(in[0], in[1], in[2])); },
            1e-5) == "");
  CHECK(gradcheck(
            {image, "channels:2", "channels:2"},
            [](Mesh&, const Inputs& in) {
              return weigh(
                  batch_norm(in[0], in[1], in[2], "channels", 1e-5, nullptr, Activation::relu));
            },
            1e-5) == "");
  CHECK(
      gradcheck(
          {image, "channels:2", "channels:2"},
          [](Mesh&, const Inputs& in) { return weigh(instance_norm(in[0], in[1], in[2], "x, y")); },
          1e-5) == "");
  CHECK(
      gradcheck(
          {"batch:2, x:5, y:4, channels:4", "channels:4", "channels:4"},
          [](Mesh&, const Inputs& in) { return weigh(group_norm(in[0], in[1], in[2], 2, "x, y")); },
          1e-5) == "");
}

TEST_CASE("activations, dropout and losses") {
  CHECK(gradcheck({image}, [](Mesh&, const Inputs& in) {
          return weigh(relu(in[0]) + leaky_relu(in[0], 0.1) + sigmoid(in[0]) +
                       softmax(in[0], "channels") + log_softmax(in[0] * 3.0, "x"));
        }) == "");
  CHECK(gradcheck({image}, [](Mesh&, const Inputs& in) {
          return weigh(dropout(in[0], 0.3, 7, "drop"));
        }) == "");
  CHECK(gradcheck({"batch:2, x:5, classes:3", "classes:3"}, [](Mesh& m, const Inputs& in) {
          auto labels = generate<double>(
              m, "batch:2, x:5, classes:3", Layout{},
              [](const Index& i) { return double((i["x"] + i["batch"]) % 3 == i["classes"]); });
          return softmax_cross_entropy(in[0], labels, "classes", abs(in[1]) + 0.5) +
                 softmax_cross_entropy(in[0], labels, "classes") * 0.5;
        }) == "");
  CHECK(gradcheck({"batch:2, x:5, classes:3"}, [](Mesh& m, const Inputs& in) {
          auto labels = generate<double>(
              m, "batch:2, x:5, classes:3", Layout{},
              [](const Index& i) { return double((i["x"] * 2 + i["batch"]) % 3 == i["classes"]); });
          return reduce_sum(soft_dice(softmax(in[0], "classes"), labels, "classes") * 0.7);
        }) == "");
}

TEST_CASE("the transformer's activations, norms, embedding and class-number loss") {
  CHECK(gradcheck({image}, [](Mesh&, const Inputs& in) {
          return weigh(gelu(in[0] * 2.0) + gelu(in[0] * 2.0, GeluApproximation::tanh) +
                       silu(in[0] * 2.0));
        }) == "");
  CHECK(gradcheck(
            {image, "y:4, channels:2", "channels:2", "channels:2"},
            [](Mesh&, const Inputs& in) {
              return weigh(layer_norm(in[0], "y, channels", in[1], in[2]) +
                           rms_norm(in[0], "y, channels", in[1]) +
                           rms_norm(in[0], "channels", in[3]));
            },
            1e-5) == "");
  CHECK(gradcheck({"vocab:5, channels:3", "batch:2, x:4, vocab:5"}, [](Mesh& m, const Inputs& in) {
          // Ids 0..5: 5 is outside the vocabulary, its position ignored.
          auto ids = generate<double>(m, "batch:2, x:4", Layout{}, [](const Index& i) {
            return double((i["x"] * 2 + i["batch"] * 3) % 6);
          });
          return weigh(embedding(ids, in[0], "vocab")) + softmax_cross_entropy(in[1], ids, "vocab");
        }) == "");
}

}  // namespace test_gradcheck
