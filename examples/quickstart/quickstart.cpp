// Quick start: a CT-like volume of 2 scans x 3 channels, split over a 2x2 mesh of processors.
// Each processor creates only its block; the statistics and the channel mixing below are written
// against the global shape, and the library all-reduces wherever a sum crosses a split. The run
// ends by repeating the computation on one processor and printing the largest difference.
//
//   quickstart [--mesh "rows:2; cols:2"] [--layout "x:rows; y:cols"] [--size 64]
//
// Started by hand it runs one thread per processor; under `mpirun -np 4` one rank per processor.

#include <cmath>
#include <cstdio>
#include <cstring>
#include <string>

#include <meshtensor/meshtensor.hpp>

namespace mt = meshtensor;

namespace {

struct Options {
  std::string mesh = "rows:2; cols:2";
  std::string layout = "x:rows; y:cols";
  std::int64_t size = 64;
};

Options parse(int argc, char** argv) {
  Options options;
  for (int i = 1; i < argc; ++i) {
    const std::string flag = argv[i];
    if (i + 1 >= argc) throw mt::Error("flag " + flag + " needs a value");
    if (flag == "--mesh")
      options.mesh = argv[++i];
    else if (flag == "--layout")
      options.layout = argv[++i];
    else if (flag == "--size")
      options.size = std::stoll(argv[++i]);
    else
      throw mt::Error("unknown flag " + flag + "; valid flags are --mesh, --layout and --size");
  }
  return options;
}

// A body-like phantom: an ellipsoid of soft tissue with a dense sphere inside; channel c is the
// same anatomy seen with a different contrast.
float phantom(const mt::Index& i, std::int64_t n) {
  const double u = (i["x"] + 0.5) / n - 0.5, v = (i["y"] + 0.5) / n - 0.5,
               w = (i["z"] + 0.5) / (n / 2) - 0.5;
  const double body = (u * u) / 0.16 + (v * v) / 0.12 + (w * w) / 0.2;
  const double organ = (u - 0.1) * (u - 0.1) + (v + 0.05) * (v + 0.05) + w * w;
  double value = body < 1 ? 40.0 : -1000.0;
  if (organ < 0.01 + 0.005 * i["batch"]) value = 300.0;
  return static_cast<float>(value * (1.0 + 0.25 * i["channels"]));
}

// The computation, written once against global shapes; `layout` only says where data lives.
mt::Tensor<float> features(mt::Mesh& mesh, const mt::Layout& layout, std::int64_t n,
                           mt::Tensor<float>* channel_means) {
  mt::Dim batch{"batch", 2}, x{"x", n}, y{"y", n}, z{"z", n / 2}, channels{"channels", 3};
  auto volume = mt::generate<float>(mesh, {batch, x, y, z, channels}, layout,
                                    [n](const mt::Index& i) { return phantom(i, n); });
  // Per-scan, per-channel mean over the split volume: partial sums, then one all-reduce.
  auto mean = mt::reduce_mean(volume, {"x", "y", "z"});
  auto centred = volume - mean;
  auto spread = mt::sqrt(mt::reduce_mean(mt::square(centred), {"x", "y", "z"}) + 1e-6f);
  *channel_means = mean;
  // Mix the normalised channels into 4 features with a small weight matrix.
  auto weights = mt::generate<float>(
      mesh, {channels, mt::Dim{"features", 4}}, layout,
      [](const mt::Index& i) { return 0.5f - 0.25f * float((i["channels"] + i["features"]) % 3); });
  return mt::einsum({centred / spread, weights}, "batch, x, y, z, features");
}

}  // namespace

int main(int argc, char** argv) {
  Options options;
  try {
    options = parse(argc, argv);
  } catch (const std::exception& e) {
    std::fprintf(stderr, "quickstart: %s\n", e.what());
    return 2;
  }
  return mt::run(argc, argv, options.mesh, [&](mt::Mesh& mesh) {
    const mt::Layout layout(options.layout);
    mt::Tensor<float> means;
    auto out = features(mesh, layout, options.size, &means);
    const auto means_here = mt::gather(means);
    const float checksum = mt::reduce_sum(mt::abs(out)).item();
    // The same on a single processor (each processor computes it for itself, on its own).
    float largest_difference = 0;
    const auto mine = mt::gather(out);
    mt::threads::run(mt::MeshShape{}, [&](mt::Mesh& single) {
      mt::Tensor<float> single_means;
      const auto reference = features(single, mt::Layout{}, options.size, &single_means).local();
      for (std::size_t k = 0; k < reference.size(); ++k)
        largest_difference =
            std::max(largest_difference, std::abs(reference.data()[k] - mine.data()[k]));
    });
    largest_difference = mt::all_reduce_value(mesh.world(), largest_difference, mt::ReduceOp::max);
    if (mesh.processor() != 0) return;
    std::printf("meshtensor %s quick start: %d processors on the %s transport\n", mt::version,
                mesh.num_processors(), mesh.transport().c_str());
    std::printf("mesh %s, layout \"%s\"\n\n", mesh.shape().to_string().c_str(),
                layout.to_string().c_str());
    std::printf("volume %s is held as:\n%s\n", out.layout().to_string().c_str(),
                mt::ownership_table(out.layout()).c_str());
    std::printf("mean intensity per scan and channel (reduced over the split x, y, z):\n");
    for (std::size_t b = 0; b < means_here.shape()[0]; ++b)
      std::printf("  scan %zu: %8.3f %8.3f %8.3f\n", b, means_here(b, 0), means_here(b, 1),
                  means_here(b, 2));
    std::printf("\nsum of |features| over the whole volume: %.6g\n", checksum);
    std::printf("largest difference from a single-processor run: %.3g\n", largest_difference);
  });
}
