// 3x3x3 convolution throughput, forward + backward (data and weights), batch 1, "same" padding:
// meshtensor's conv op on one processor (forward, then backward through the tape), meshtensor's
// kernels pass by pass (the candidates kernels/conv_candidates.hpp chose, named in the line's
// "kernels": forward/data/weights), and the
// raw oneDNN primitives in the formats oneDNN picks, data already in those formats (the floor any
// framework on oneDNN can reach). Also the machine's FMA peak, and each line's share of it. One
// JSON object per line. A channel entry is C (C -> C) or CIN:COUT (1:8, the U-Net's first layer).
// --precision bf16 adds meshtensor's bfloat16 kernels pass by pass (impl meshtensor_kernels_bf16:
// the roads MESHTENSOR_BF16_CONV and MESHTENSOR_BF16_PRODUCTS pick; weight gradients summed in
// double, as in training); --precision both runs fp32's set and these.
//
//   bench_conv [--channels 8,16,32,64] [--sizes 32,64,128] [--threads 2] [--seconds 2]
//              [--precision fp32|bf16|both] [--only onednn,kernels,op]
//
// --only runs some of the three sets (raw oneDNN, meshtensor's kernels, meshtensor's op): to
// profile one of them alone.

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

struct Channels {
  long in, out;
};

struct Options {
  std::vector<Channels> channels{{8, 8}, {16, 16}, {32, 32}, {64, 64}};
  std::vector<long> sizes{32, 64, 128};
  int threads = 0;       // 0: all cores
  double seconds = 2.0;  // measuring time per case (at least 2 repetitions)
  bool fp32 = true, bf16 = false;
  bool onednn = true, kernels = true, op = true;  // which sets run (--only)
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

std::vector<Channels> parse_channels(const std::string& text) {
  std::vector<Channels> pairs;
  std::stringstream in(text);
  std::string item;
  while (std::getline(in, item, ',')) {
    const auto colon = item.find(':');
    const auto numbers = parse_list(
        "--channels",
        colon == std::string::npos ? item : item.substr(0, colon) + "," + item.substr(colon + 1));
    if (numbers.size() != (colon == std::string::npos ? 1u : 2u))
      throw mt::Error("--channels: " + mt::detail::quote(item) +
                      " is neither C nor CIN:COUT; give e.g. 8,16 or 1:8,8:8");
    pairs.push_back({numbers.front(), numbers.back()});
  }
  return pairs;
}

void parse_only(const std::string& text, Options& options) {
  options.onednn = options.kernels = options.op = false;
  std::stringstream in(text);
  std::string set;
  while (std::getline(in, set, ',')) {
    if (set == "onednn")
      options.onednn = true;
    else if (set == "kernels")
      options.kernels = true;
    else if (set == "op")
      options.op = true;
    else
      throw mt::Error("--only: " + mt::detail::quote(set) +
                      " is not a set; give some of onednn, kernels and op, e.g. --only kernels");
  }
}

Options parse(int argc, char** argv) {
  Options options;
  for (int i = 1; i < argc; ++i) {
    const std::string flag = argv[i];
    if (i + 1 >= argc) throw mt::Error("flag " + flag + " needs a value");
    const std::string value = argv[++i];
    if (flag == "--channels")
      options.channels = parse_channels(value);
    else if (flag == "--sizes")
      options.sizes = parse_list(flag, value);
    else if (flag == "--threads")
      options.threads = std::stoi(value);
    else if (flag == "--seconds")
      options.seconds = std::stod(value);
    else if (flag == "--precision" && (value == "fp32" || value == "bf16" || value == "both")) {
      options.fp32 = value != "bf16";
      options.bf16 = value != "fp32";
    } else if (flag == "--precision")
      throw mt::Error("--precision: " + mt::detail::quote(value) + " is not fp32, bf16 or both");
    else if (flag == "--only")
      parse_only(value, options);
    else
      throw mt::Error(
          "unknown flag " + flag +
          "; valid flags are --channels, --sizes, --threads, --seconds, --precision and --only");
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

// One pass, counting the multiply-adds that read padding as the frameworks do.
double conv_flops(Channels c, long s) { return 2.0 * c.in * c.out * 27.0 * s * s * s; }

double fma_peak = 0;  // GFLOP/s, measured first

// The passes' GFLOP/s where they were timed apart, and the whole: `passes` of them.
void print(const char* impl, Channels c, long s, int threads, const std::array<double, 3>& t,
           int passes = 3, const std::string& kernels = "") {
  const double total = t[0] + t[1] + t[2], pass = conv_flops(c, s) / 1e9;
  const double gflops = passes * pass / total;
  std::printf(
      "{\"bench\":\"conv\",\"impl\":\"%s\",\"channels\":%ld,\"channels_out\":%ld,"
      "\"size\":%ld,\"threads\":%d,\"forward_s\":%.6f,\"backward_data_s\":%.6f,"
      "\"backward_weights_s\":%.6f,\"total_s\":%.6f,\"gflops\":%.2f,\"peak_percent\":%.1f",
      impl, c.in, c.out, s, threads, t[0], t[1], t[2], total, gflops, 100 * gflops / fma_peak);
  if (t[2] > 0)
    std::printf(
        ",\"forward_gflops\":%.2f,\"backward_data_gflops\":%.2f,"
        "\"backward_weights_gflops\":%.2f",
        t[0] > 0 ? pass / t[0] : 0.0, t[1] > 0 ? pass / t[1] : 0.0, pass / t[2]);
  if (!kernels.empty()) std::printf(",\"kernels\":\"%s\"", kernels.c_str());
  std::printf("}\n");
  std::fflush(stdout);
}

// --- raw oneDNN -----------------------------------------------------------------------------

std::array<double, 3> raw_onednn(Channels c, long s, double seconds, bool plain) {
  using namespace dnnl;
  using tag = memory::format_tag;
  engine eng(engine::kind::cpu, 0);
  stream str(eng);
  const auto f32 = memory::data_type::f32;
  const tag act = plain ? tag::ndhwc : tag::any;
  const memory::desc src({1, c.in, s, s, s}, f32, act), wei({c.out, c.in, 3, 3, 3}, f32, tag::any),
      dst({1, c.out, s, s, s}, f32, act);
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
std::array<double, 3> meshtensor_conv(mt::Mesh& mesh, Channels c, long s, double seconds) {
  const mt::Shape input_shape{{"batch", 1}, {"x", s}, {"y", s}, {"z", s}, {"channels", c.in}};
  const mt::Shape weight_shape{{"kx", 3}, {"ky", 3}, {"kz", 3}, {"channels", c.in}, {"out", c.out}};
  auto x = mt::random_uniform<float>(mesh, input_shape, mt::Layout{}, 1, "x", -1, 1);
  auto w = mt::random_uniform<float>(mesh, weight_shape, mt::Layout{}, 1, "w", -0.1, 0.1);
  x.set_requires_grad();
  w.set_requires_grad();
  const mt::Shape output_shape{{"batch", 1}, {"x", s}, {"y", s}, {"z", s}, {"out", c.out}};
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

// The kernels the conv op calls, pass by pass, on a whole block with 'same' zero padding, in
// element type T (float or bfloat16).
mt::kernels::ConvGeometry same_padding(Channels c, long s) {
  mt::kernels::ConvGeometry g;
  g.c_in = c.in;
  g.c_out = c.out;
  g.in = g.out = {s, s, s};
  g.kernel = {3, 3, 3};
  for (auto& taps : g.taps) taps.origin = -1;
  return g;
}

// The candidates that ran each pass (kernels/conv_candidates.hpp), forward/data/weights.
template <class T>
std::string kernel_names(Channels c, long s) {
  using Pass = mt::kernels::plan::ConvClass::Pass;
  const auto g = same_padding(c, s);
  std::string names;
  for (Pass pass : {Pass::forward, Pass::backward_input, Pass::backward_weight})
    names += (names.empty() ? "" : "/") + mt::kernels::conv_kernel_name<T>(g, pass);
  return names;
}

template <class T>
std::array<double, 3> meshtensor_kernels(Channels c, long s, double seconds) {
  namespace kernels = mt::kernels;
  const kernels::ConvGeometry g = same_padding(c, s);
  std::mt19937 rng(1);
  std::uniform_real_distribution<float> uniform(-1, 1);
  // Aligned as the library's tensors are: streamed stores need whole aligned vectors, and an
  // unaligned vector load spans two cache lines.
  auto filled = [&](std::int64_t n) {
    mt::Buffer<T> v(static_cast<std::size_t>(n));
    for (auto& e : v) e = T(uniform(rng));
    return v;
  };
  const auto x = filled(kernels::conv_input_size(g)), w = filled(27 * c.in * c.out),
             dy = filled(kernels::conv_output_size(g));
  mt::Buffer<T> y(dy.size()), dx(x.size());
  std::vector<double> dw(w.size());
  return median_phases<3>(seconds, [&](std::array<double, 3>& t) {
    double start = now();
    kernels::conv_forward(g, x.data(), w.data(), y.data());
    t[0] = now() - start;
    start = now();
    kernels::conv_backward_input(g, dy.data(), w.data(), dx.data());
    t[1] = now() - start;
    start = now();
    kernels::conv_backward_weight(g, x.data(), dy.data(), dw.data());
    t[2] = now() - start;
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
  fma_peak = bench::fma_peak_gflops(threads);
  std::printf("{\"bench\":\"fma_peak\",\"threads\":%d,\"gflops\":%.1f}\n", threads, fma_peak);
  const bool raw = options.fp32 && options.onednn;
  for (bool ndhwc : {false, true})
    for (long s : raw ? options.sizes : std::vector<long>{})
      for (Channels c : options.channels)
        print(ndhwc ? "onednn_raw_ndhwc" : "onednn_raw", c, s, threads,
              raw_onednn(c, s, options.seconds, ndhwc));
  mt::Settings settings = mt::environment_settings();
  settings.threads_per_processor = threads;
  return mt::run(
      argc, argv, mt::MeshShape("p:1"),
      [&](mt::Mesh& mesh) {
        for (long s : options.kernels ? options.sizes : std::vector<long>{})
          for (Channels c : options.channels) {
            // Named after the timing: a raced pair's winner is known then.
            if (options.fp32) {
              const auto t = meshtensor_kernels<float>(c, s, options.seconds);
              print("meshtensor_kernels", c, s, threads, t, 3, kernel_names<float>(c, s));
            }
            if (options.bf16) {
              const auto t = meshtensor_kernels<mt::bfloat16>(c, s, options.seconds);
              print("meshtensor_kernels_bf16", c, s, threads, t, 3,
                    kernel_names<mt::bfloat16>(c, s));
            }
          }
        if (!options.fp32 || !options.op) return;
        for (long s : options.sizes)
          for (Channels c : options.channels)
            print("meshtensor", c, s, threads, meshtensor_conv(mesh, c, s, options.seconds));
      },
      settings);
}
