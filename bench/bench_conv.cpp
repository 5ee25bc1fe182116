// 3x3x3 convolution throughput, forward + backward (data and weights), batch 1, "same" padding:
// meshtensor's conv op on one processor (forward, then backward through the tape), and the raw
// oneDNN primitives in the formats oneDNN picks, data already in those formats (the floor any
// framework on oneDNN can reach). Also the machine's FMA peak. One JSON object per line.
//
//   bench_conv [--channels 8,16,32,64] [--sizes 32,64,128] [--threads 2] [--seconds 2]

#include <omp.h>
#include <oneapi/dnnl/dnnl.hpp>

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <random>
#include <sstream>
#include <string>
#include <vector>

#include <meshtensor/meshtensor.hpp>

#include "fma_peak.hpp"

namespace mt = meshtensor;

namespace {

struct Options {
  std::vector<long> channels{8, 16, 32, 64};
  std::vector<long> sizes{32, 64, 128};
  int threads = 0;       // 0: all cores
  double seconds = 2.0;  // measuring time per case (at least 2 repetitions)
};

std::vector<long> parse_list(const std::string& flag, const std::string& text) {
  std::vector<long> values;
  std::stringstream in(text);
  std::string item;
  while (std::getline(in, item, ',')) try {
      values.push_back(std::stol(item));
    } catch (const std::exception&) {
      throw mt::Error(flag + ": " + mt::detail::quote(item) +
                      " is not a number; give e.g. 8,16,32");
    }
  return values;
}

Options parse(int argc, char** argv) {
  Options options;
  for (int i = 1; i < argc; ++i) {
    const std::string flag = argv[i];
    if (i + 1 >= argc) throw mt::Error("flag " + flag + " needs a value");
    const std::string value = argv[++i];
    if (flag == "--channels")
      options.channels = parse_list(flag, value);
    else if (flag == "--sizes")
      options.sizes = parse_list(flag, value);
    else if (flag == "--threads")
      options.threads = std::stoi(value);
    else if (flag == "--seconds")
      options.seconds = std::stod(value);
    else
      throw mt::Error("unknown flag " + flag +
                      "; valid flags are --channels, --sizes, --threads and --seconds");
  }
  return options;
}

double now() {
  return std::chrono::duration<double>(std::chrono::steady_clock::now().time_since_epoch()).count();
}

// Median time of each phase over repetitions of `phases`, after one warm-up; repeats until
// `seconds` have passed (at least twice).
template <std::size_t N, class F>
std::array<double, N> median_phases(double seconds, F&& phases) {
  std::array<double, N> warm{};
  phases(warm);
  std::vector<std::array<double, N>> runs;
  const double start = now();
  while (runs.size() < 2 || (now() - start < seconds && runs.size() < 50)) {
    std::array<double, N> t{};
    phases(t);
    runs.push_back(t);
  }
  std::array<double, N> median{};
  for (std::size_t p = 0; p < N; ++p) {
    std::vector<double> v;
    for (const auto& r : runs) v.push_back(r[p]);
    std::sort(v.begin(), v.end());
    median[p] = v[v.size() / 2];
  }
  return median;
}

double conv_flops(long c, long s) { return 2.0 * c * c * 27.0 * s * s * s; }  // one pass

void print(const char* impl, long c, long s, int threads, const std::array<double, 3>& t) {
  const double total = t[0] + t[1] + t[2];
  std::printf(
      "{\"bench\":\"conv\",\"impl\":\"%s\",\"channels\":%ld,\"size\":%ld,\"threads\":%d,"
      "\"forward_s\":%.6f,\"backward_data_s\":%.6f,\"backward_weights_s\":%.6f,"
      "\"total_s\":%.6f,\"gflops\":%.2f}\n",
      impl, c, s, threads, t[0], t[1], t[2], total, 3 * conv_flops(c, s) / total / 1e9);
  std::fflush(stdout);
}

// --- raw oneDNN -----------------------------------------------------------------------------

std::array<double, 3> raw_onednn(long c, long s, double seconds, bool plain) {
  using namespace dnnl;
  using tag = memory::format_tag;
  engine eng(engine::kind::cpu, 0);
  stream str(eng);
  const auto f32 = memory::data_type::f32;
  const tag act = plain ? tag::ndhwc : tag::any;
  const memory::desc src({1, c, s, s, s}, f32, act), wei({c, c, 3, 3, 3}, f32, tag::any),
      dst({1, c, s, s, s}, f32, act);
  const memory::dims strides{1, 1, 1}, dilates{0, 0, 0}, pad{1, 1, 1};
  const auto alg = algorithm::convolution_direct;
  convolution_forward::primitive_desc fwd(
      {prop_kind::forward_training, alg, src, wei, dst, strides, dilates, pad, pad}, eng);
  convolution_backward_data::primitive_desc bwd_data(
      {alg, src, wei, dst, strides, dilates, pad, pad}, eng, fwd);
  convolution_backward_weights::primitive_desc bwd_weights(
      {alg, src, wei, dst, strides, dilates, pad, pad}, eng, fwd);
  std::mt19937 rng(1);
  std::uniform_real_distribution<float> uniform(-1, 1);
  auto filled = [&](const memory::desc& d) {
    memory m(d, eng);
    auto* p = static_cast<float*>(m.get_data_handle());
    for (std::size_t i = 0; i < d.get_size() / sizeof(float); ++i) p[i] = uniform(rng);
    return m;
  };
  memory x = filled(fwd.src_desc()), w = filled(fwd.weights_desc()), y(fwd.dst_desc(), eng);
  memory dy = filled(bwd_data.diff_dst_desc()), dx(bwd_data.diff_src_desc(), eng);
  memory w_data = filled(bwd_data.weights_desc()), x_weights = filled(bwd_weights.src_desc()),
         dy_weights = filled(bwd_weights.diff_dst_desc()), dw(bwd_weights.diff_weights_desc(), eng);
  convolution_forward forward(fwd);
  convolution_backward_data backward_data(bwd_data);
  convolution_backward_weights backward_weights(bwd_weights);
  return median_phases<3>(seconds, [&](std::array<double, 3>& t) {
    double start = now();
    forward.execute(str, {{DNNL_ARG_SRC, x}, {DNNL_ARG_WEIGHTS, w}, {DNNL_ARG_DST, y}});
    str.wait();
    t[0] = now() - start;
    start = now();
    backward_data.execute(
        str, {{DNNL_ARG_DIFF_DST, dy}, {DNNL_ARG_WEIGHTS, w_data}, {DNNL_ARG_DIFF_SRC, dx}});
    str.wait();
    t[1] = now() - start;
    start = now();
    backward_weights.execute(
        str,
        {{DNNL_ARG_SRC, x_weights}, {DNNL_ARG_DIFF_DST, dy_weights}, {DNNL_ARG_DIFF_WEIGHTS, dw}});
    str.wait();
    t[2] = now() - start;
  });
}

// --- meshtensor -----------------------------------------------------------------------------

// Forward is the conv op; backward replays its tape step, which computes both the input's and the
// weight's gradients (reported together under backward_data; backward_weights is 0).
std::array<double, 3> meshtensor_conv(mt::Mesh& mesh, long c, long s, double seconds) {
  const mt::Shape input_shape{{"batch", 1}, {"x", s}, {"y", s}, {"z", s}, {"channels", c}};
  const mt::Shape weight_shape{{"kx", 3}, {"ky", 3}, {"kz", 3}, {"channels", c}, {"out", c}};
  auto x = mt::random_uniform<float>(mesh, input_shape, mt::Layout{}, 1, "x", -1, 1);
  auto w = mt::random_uniform<float>(mesh, weight_shape, mt::Layout{}, 1, "w", -0.1, 0.1);
  x.set_requires_grad();
  w.set_requires_grad();
  const mt::Shape output_shape{{"batch", 1}, {"x", s}, {"y", s}, {"z", s}, {"out", c}};
  const auto dy = mt::random_uniform<float>(mesh, output_shape, mt::Layout{}, 1, "dy", -1, 1);
  const mt::Window window = mt::Window("x, y, z").padding("same");
  return median_phases<3>(seconds, [&](std::array<double, 3>& t) {
    x.zero_grad();
    w.zero_grad();
    double start = now();
    auto y = mt::conv(x, w, window);
    t[0] = now() - start;
    start = now();
    mt::backward(y, dy);
    t[1] = now() - start;
    t[2] = 0;
  });
}

}  // namespace

int main(int argc, char** argv) {
  Options options;
  try {
    options = parse(argc, argv);
  } catch (const std::exception& e) {
    std::fprintf(stderr, "bench_conv: %s\n", e.what());
    return 2;
  }
  const int threads = options.threads > 0 ? options.threads : mt::threads_per_processor(1);
  omp_set_num_threads(threads);
  std::printf("{\"bench\":\"fma_peak\",\"threads\":%d,\"gflops\":%.1f}\n", threads,
              bench::fma_peak_gflops(threads));
  for (long s : options.sizes)
    for (long c : options.channels)
      print("onednn_raw", c, s, threads, raw_onednn(c, s, options.seconds, false));
  for (long s : options.sizes)
    for (long c : options.channels)
      print("onednn_raw_ndhwc", c, s, threads, raw_onednn(c, s, options.seconds, true));
  setenv("MESHTENSOR_THREADS_PER_PROCESSOR", std::to_string(threads).c_str(), 1);
  return mt::run(argc, argv, mt::MeshShape("p:1"), [&](mt::Mesh& mesh) {
    for (long s : options.sizes)
      for (long c : options.channels)
        print("meshtensor", c, s, threads, meshtensor_conv(mesh, c, s, options.seconds));
  });
}
