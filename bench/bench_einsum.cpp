// Matrix-product throughput of einsum on one processor: y[rows, out] = x[rows, in] w[in, out]
// (a dense layer), forward alone and forward + backward (the tape's two gradient products), on
// each kernel of kernels/sum_candidates.hpp asked for, in fp32 and bf16. Also the machine's FMA
// peak, and each line's share of it. One JSON object per line; torch_bench.py matmul gives
// PyTorch's figures for the same shapes. A shape is ROWSxINxOUT.
//
//   bench_einsum [--shapes 512x2048x2048,64x512x2048] [--kernels onednn,reference]
//                [--threads 2] [--seconds 2] [--precision fp32|bf16|both]

#include <omp.h>

#include <algorithm>
#include <array>
#include <chrono>
#include <cstdio>
#include <sstream>
#include <string>
#include <vector>

#include <meshtensor/meshtensor.hpp>

#include "fma_peak.hpp"

namespace mt = meshtensor;

namespace {

struct Product {
  long rows, in, out;
  double flops() const { return 2.0 * double(rows) * double(in) * double(out); }
};

struct Options {
  std::vector<Product> shapes{{512, 2048, 2048}, {64, 512, 2048}, {1024, 1024, 1024}};
  std::vector<std::string> kernels{"onednn"};
  int threads = 0;       // 0: all cores
  double seconds = 2.0;  // measuring time per case (at least 2 repetitions)
  bool fp32 = true, bf16 = false;
};

std::vector<std::string> parse_names(const std::string& text) {
  std::vector<std::string> names;
  std::stringstream in(text);
  std::string item;
  while (std::getline(in, item, ',')) names.push_back(item);
  return names;
}

std::vector<Product> parse_shapes(const std::string& text) {
  std::vector<Product> shapes;
  for (const std::string& item : parse_names(text)) {
    Product p{};
    char x1 = 0, x2 = 0;
    std::stringstream in(item);
    if (!(in >> p.rows >> x1 >> p.in >> x2 >> p.out) || x1 != 'x' || x2 != 'x' || p.rows < 1 ||
        p.in < 1 || p.out < 1 || in.peek() != EOF)
      throw mt::Error("--shapes: " + mt::detail::quote(item) +
                      " is not ROWSxINxOUT; give e.g. 512x2048x2048");
    shapes.push_back(p);
  }
  return shapes;
}

Options parse(int argc, char** argv) {
  Options options;
  for (int i = 1; i < argc; ++i) {
    const std::string flag = argv[i];
    if (i + 1 >= argc) throw mt::Error("flag " + flag + " needs a value");
    const std::string value = argv[++i];
    if (flag == "--shapes")
      options.shapes = parse_shapes(value);
    else if (flag == "--kernels")
      options.kernels = parse_names(value);
    else if (flag == "--threads")
      options.threads = std::stoi(value);
    else if (flag == "--seconds")
      options.seconds = std::stod(value);
    else if (flag == "--precision" && (value == "fp32" || value == "bf16" || value == "both")) {
      options.fp32 = value != "bf16";
      options.bf16 = value != "fp32";
    } else if (flag == "--precision")
      throw mt::Error("--precision: " + mt::detail::quote(value) + " is not fp32, bf16 or both");
    else
      throw mt::Error(
          "unknown flag " + flag +
          "; valid flags are --shapes, --kernels, --threads, --seconds and --precision");
  }
  return options;
}

double now() {
  return std::chrono::duration<double>(std::chrono::steady_clock::now().time_since_epoch()).count();
}

// Median forward and backward times over repetitions after one warm-up; repeats until `seconds`
// have passed (at least twice).
template <class T>
std::array<double, 2> timed_product(mt::Mesh& mesh, Product p, double seconds) {
  auto x = mt::random_uniform<T>(mesh, mt::Shape{{"rows", p.rows}, {"in", p.in}}, mt::Layout{}, 1,
                                 "x", -1, 1);
  auto w = mt::random_uniform<T>(mesh, mt::Shape{{"in", p.in}, {"out", p.out}}, mt::Layout{}, 1,
                                 "w", -0.1, 0.1);
  const auto dy = mt::random_uniform<T>(mesh, mt::Shape{{"rows", p.rows}, {"out", p.out}},
                                        mt::Layout{}, 1, "dy", -1, 1);
  x.set_requires_grad();
  w.set_requires_grad();
  std::vector<double> forward, backward;
  const double start = now();
  for (int rep = 0; rep < 3 || now() - start < seconds; ++rep) {
    x.zero_grad();
    w.zero_grad();
    const double t0 = now();
    auto y = mt::einsum({x, w}, "rows, out");
    const double t1 = now();
    mt::backward(y, dy);
    const double t2 = now();
    if (rep == 0) continue;  // warm-up: primitives built, memory pooled
    forward.push_back(t1 - t0);
    backward.push_back(t2 - t1);
  }
  auto median = [](std::vector<double> v) {
    std::nth_element(v.begin(), v.begin() + long(v.size() / 2), v.end());
    return v[v.size() / 2];
  };
  return {median(forward), median(backward)};
}

double fma_peak = 0;

void print(const char* precision, const std::string& kernel, Product p, int threads,
           std::array<double, 2> t) {
  const double forward = p.flops() / t[0] / 1e9, step = 3 * p.flops() / (t[0] + t[1]) / 1e9;
  std::printf(
      "{\"bench\":\"einsum\",\"impl\":\"meshtensor\",\"kernel\":\"%s\",\"precision\":\"%s\","
      "\"rows\":%ld,\"in\":%ld,\"out\":%ld,\"threads\":%d,\"forward_s\":%.6f,\"backward_s\":%.6f,"
      "\"forward_gflops\":%.1f,\"step_gflops\":%.1f,\"forward_peak\":%.3f,\"step_peak\":%.3f}\n",
      kernel.c_str(), precision, p.rows, p.in, p.out, threads, t[0], t[1], forward, step,
      forward / fma_peak, step / fma_peak);
  std::fflush(stdout);
}

}  // namespace

int main(int argc, char** argv) {
  Options options;
  try {
    options = parse(argc, argv);
  } catch (const std::exception& e) {
    std::fprintf(stderr, "bench_einsum: %s\n", e.what());
    return 2;
  }
  const int threads = options.threads > 0 ? options.threads : mt::threads_per_processor(1);
  omp_set_num_threads(threads);
  fma_peak = bench::fma_peak_gflops(threads);
  std::printf("{\"bench\":\"fma_peak\",\"threads\":%d,\"gflops\":%.1f}\n", threads, fma_peak);
  for (const std::string& kernel : options.kernels) {
    mt::Settings settings = mt::environment_settings();
    settings.threads_per_processor = threads;
    settings.kernels.sum_kernel = kernel;
    const int status = mt::run(
        argc, argv, mt::MeshShape("p:1"),
        [&](mt::Mesh& mesh) {
          for (const Product& p : options.shapes) {
            if (options.fp32)
              print("fp32", kernel, p, threads, timed_product<float>(mesh, p, options.seconds));
            if (options.bf16)
              print("bf16", kernel, p, threads,
                    timed_product<mt::bfloat16>(mesh, p, options.seconds));
          }
        },
        settings);
    if (status != 0) return status;
  }
  return 0;
}
