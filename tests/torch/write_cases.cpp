// Writes inputs, outputs and gradients of meshtensor ops (one processor, float64) for
// crosscheck.py, which recomputes them with PyTorch. Usage: torch_cases <directory>
#include <cstdio>
#include <fstream>
#include <string>
#include <vector>

#include <meshtensor/autodiff/backward.hpp>
#include <meshtensor/io/npy.hpp>
#include <meshtensor/meshtensor.hpp>

namespace mt = meshtensor;
using T = mt::Tensor<double>;

namespace {

std::string directory;
std::vector<std::string> manifest;

T input(mt::Mesh& m, const mt::Shape& shape, int seed) {
  const mt::RandomStream stream(seed, "crosscheck");
  return mt::generate<double>(m, shape, "", [&](const mt::Index& i) { return stream.normal(i); })
      .set_requires_grad();
}

// Saves the named tensors of one case, and its parameters (a JSON object body) in the manifest.
void save(const std::string& name, const std::string& params,
          const std::vector<std::pair<std::string, T>>& arrays) {
  std::string keys;
  for (const auto& [key, t] : arrays) {
    mt::npy::write(directory + "/" + name + "." + key + ".npy", t.local());
    keys += std::string(keys.empty() ? "" : ", ") + "\"" + key + "\"";
  }
  manifest.push_back("{\"name\": \"" + name + "\", " + params + ", \"arrays\": [" + keys + "]}");
}

// out = op(inputs...), then the gradient of sum(out * r) for each input.
template <class Op>
void case_of(mt::Mesh& m, const std::string& name, const std::string& params,
             std::vector<std::pair<std::string, T>> inputs, Op op) {
  std::vector<T> xs;
  for (auto& [key, t] : inputs) xs.push_back(t);
  T out = op(xs);
  T r = input(m, out.shape(), 99).detach();
  mt::backward(mt::reduce_sum(out * r));
  auto arrays = inputs;
  arrays.emplace_back("out", out);
  arrays.emplace_back("r", r);
  for (auto& [key, t] : inputs)
    if (t.requires_grad()) arrays.emplace_back("grad_" + key, t.grad());
  save(name, params, arrays);
}

}  // namespace

int main(int argc, char** argv) {
  if (argc != 2) {
    std::fprintf(stderr, "usage: torch_cases <directory>\n");
    return 2;
  }
  directory = argv[1];
  mt::threads::run(mt::MeshShape{}, [](mt::Mesh& m) {
    const mt::Shape volume("batch:2, x:7, y:6, z:5, channels:3");
    case_of(m, "conv",
            "\"op\": \"conv\", \"stride\": [1, 2, 1], \"dilation\": [1, 1, 2], \"pad\": [[1, 1], "
            "[0, 2], [2, 2]]",
            {{"x", input(m, volume, 1)}, {"w", input(m, "kx:3, ky:3, kz:3, channels:3, out:4", 2)}},
            [](auto& in) {
              return mt::conv(in[0], in[1],
                              mt::Window("x, y, z").stride({1, 2, 1}).dilation({1, 1, 2}).padding(
                                  mt::Padding::explicit_sizes({{1, 1}, {0, 2}, {2, 2}})));
            });
    case_of(
        m, "conv_transpose_unet",
        "\"op\": \"conv_transpose\", \"stride\": [2, 2, 2], \"dilation\": [1, 1, 1], \"padding\": "
        "[0, 0, 0], \"output_padding\": [0, 0, 0]",
        {{"x", input(m, volume, 3)}, {"w", input(m, "kx:2, ky:2, kz:2, channels:3, out:2", 4)}},
        [](auto& in) { return mt::conv_transpose(in[0], in[1], mt::Window("x, y, z").stride(2)); });
    case_of(m, "conv_transpose_padded",
            "\"op\": \"conv_transpose\", \"stride\": [2, 1, 3], \"dilation\": [1, 2, 1], "
            "\"padding\": [1, 1, 2], \"output_padding\": [1, 0, 0]",
            {{"x", input(m, volume, 5)}, {"w", input(m, "kx:3, ky:3, kz:4, channels:3, out:2", 6)}},
            [](auto& in) {
              return mt::conv_transpose(
                  in[0], in[1],
                  mt::Window("x, y, z").stride({2, 1, 3}).dilation({1, 2, 1}).padding(
                      mt::Padding::explicit_sizes({{1, 0}, {1, 1}, {2, 2}})));
            });
    case_of(m, "max_pool",
            "\"op\": \"max_pool\", \"kernel\": [3, 3, 3], \"stride\": [2, 2, 2], \"padding\": [1, "
            "1, 1]",
            {{"x", input(m, volume, 7)}}, [](auto& in) {
              return mt::max_pool(in[0],
                                  mt::Window("x, y, z").kernel(3).stride(2).padding(
                                      mt::Padding::explicit_sizes({{1, 1}, {1, 1}, {1, 1}})));
            });
    for (bool count : {true, false})
      case_of(m, count ? "avg_pool_count_pad" : "avg_pool",
              std::string("\"op\": \"avg_pool\", \"kernel\": [3, 2, 3], \"stride\": [1, 2, 1], "
                          "\"padding\": [1, 0, 1], \"count_include_pad\": ") +
                  (count ? "true" : "false"),
              {{"x", input(m, volume, 8)}}, [count](auto& in) {
                return mt::avg_pool(
                    in[0],
                    mt::Window("x, y, z").kernel({3, 2, 3}).stride({1, 2, 1}).padding(
                        mt::Padding::explicit_sizes({{1, 1}, {0, 0}, {1, 1}})),
                    count);
              });
    case_of(m, "upsample_nearest", "\"op\": \"upsample\", \"mode\": \"nearest\", \"factor\": 2",
            {{"x", input(m, volume, 9)}},
            [](auto& in) { return mt::upsample(in[0], "x, y, z", 2); });
    case_of(m, "upsample_trilinear", "\"op\": \"upsample\", \"mode\": \"trilinear\", \"factor\": 2",
            {{"x", input(m, volume, 10)}},
            [](auto& in) { return mt::upsample(in[0], "x, y, z", 2, mt::Interpolation::linear); });
    for (auto [name, mode] : {std::pair("pad_reflect", mt::PadMode::reflect),
                              std::pair("pad_replicate", mt::PadMode::replicate)})
      case_of(m, name,
              std::string("\"op\": \"pad\", \"mode\": \"") +
                  (mode == mt::PadMode::reflect ? "reflect" : "replicate") +
                  "\", \"pad\": [[2, 1], [0, 3], [1, 1]]",
              {{"x", input(m, volume, 11)}}, [mode](auto& in) {
                return mt::pad(mt::pad(mt::pad(in[0], "x", 2, 1, mode), "y", 0, 3, mode), "z", 1, 1,
                               mode);
              });
    // Periodic domains: nn.Conv3d's padding_mode, pooling and padding of F.pad's circular mode,
    // and the circular convolution's adjoint as the transposed one.
    case_of(m, "pad_circular",
            "\"op\": \"pad\", \"mode\": \"circular\", \"pad\": [[2, 7], [6, 0], [1, 3]]",
            {{"x", input(m, volume, 22)}}, [](auto& in) {
              const auto c = mt::PadMode::circular;
              return mt::pad(mt::pad(mt::pad(in[0], "x", 2, 7, c), "y", 6, 0, c), "z", 1, 3, c);
            });
    for (const char* mode : {"circular", "reflect", "replicate"})
      case_of(
          m, std::string("conv_") + mode,
          std::string("\"op\": \"conv_module\", \"padding_mode\": \"") + mode +
              "\", \"stride\": [1, 2, 1], \"dilation\": [1, 1, 2], \"padding\": [1, 2, 2]",
          {{"x", input(m, volume, 23)}, {"w", input(m, "kx:3, ky:3, kz:3, channels:3, out:4", 24)}},
          [mode](auto& in) {
            return mt::conv(in[0], in[1],
                            mt::Window("x, y, z")
                                .stride({1, 2, 1})
                                .dilation({1, 1, 2})
                                .padding(mt::Padding::explicit_sizes({{1, 1}, {2, 2}, {2, 2}}))
                                .padding_mode(mode));
          });
    case_of(
        m, "conv_transpose_circular",
        "\"op\": \"conv_transpose_circular\", \"stride\": [2, 1, 1], \"dilation\": [1, 1, "
        "1], \"padding\": [1, 1, 1]",
        {{"x", input(m, volume, 25)}, {"w", input(m, "kx:3, ky:3, kz:3, channels:3, out:2", 26)}},
        [](auto& in) {
          return mt::conv_transpose(
              in[0], in[1],
              mt::Window("x, y, z")
                  .stride({2, 1, 1})
                  .padding(mt::Padding::explicit_sizes({{1, 1}, {1, 1}, {1, 1}}))
                  .padding_mode(mt::PadMode::circular));
        });
    case_of(m, "max_pool_circular",
            "\"op\": \"max_pool\", \"padding_mode\": \"circular\", \"kernel\": [3, 3, 3], "
            "\"stride\": [2, 2, 2], \"padding\": [1, 1, 1]",
            {{"x", input(m, volume, 27)}}, [](auto& in) {
              return mt::max_pool(
                  in[0], mt::Window("x, y, z")
                             .kernel(3)
                             .stride(2)
                             .padding(mt::Padding::explicit_sizes({{1, 1}, {1, 1}, {1, 1}}))
                             .padding_mode(mt::PadMode::circular));
            });
    const mt::Shape channel("channels:3");
    case_of(m, "batch_norm", "\"op\": \"batch_norm\"",
            {{"x", input(m, volume, 12)},
             {"gamma", input(m, channel, 13)},
             {"beta", input(m, channel, 14)}},
            [](auto& in) { return mt::batch_norm(in[0], in[1], in[2]); });
    case_of(m, "instance_norm", "\"op\": \"instance_norm\"",
            {{"x", input(m, volume, 15)},
             {"gamma", input(m, channel, 16)},
             {"beta", input(m, channel, 17)}},
            [](auto& in) { return mt::instance_norm(in[0], in[1], in[2], "x, y, z"); });
    const mt::Shape six("batch:2, x:7, y:6, z:5, channels:6"), six_channels("channels:6");
    case_of(m, "group_norm", "\"op\": \"group_norm\", \"groups\": 3",
            {{"x", input(m, six, 18)},
             {"gamma", input(m, six_channels, 19)},
             {"beta", input(m, six_channels, 20)}},
            [](auto& in) { return mt::group_norm(in[0], in[1], in[2], 3, "x, y, z"); });
    const mt::Shape logits("batch:2, x:7, y:6, z:5, classes:3");
    auto labels = mt::generate<double>(m, logits, "", [](const mt::Index& i) {
      return double((i["x"] + 2 * i["y"] + i["z"] * i["batch"]) % 3 == i["classes"]);
    });
    auto weights = mt::generate<double>(m, "classes:3", "",
                                        [](const mt::Index& i) { return 0.5 + i["classes"]; });
    case_of(m, "cross_entropy", "\"op\": \"cross_entropy\"",
            {{"logits", input(m, logits, 21)},
             {"labels", labels.detach()},
             {"weights", weights.detach()}},
            [](auto& in) { return mt::softmax_cross_entropy(in[0], in[1], "classes", in[2]); });
  });
  std::ofstream out(directory + "/manifest.json");
  out << "[\n";
  for (std::size_t i = 0; i < manifest.size(); ++i)
    out << "  " << manifest[i] << (i + 1 < manifest.size() ? ",\n" : "\n");
  out << "]\n";
  return 0;
}
