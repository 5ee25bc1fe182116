// One training step of the example's 3D U-Net (forward, loss, backward, Adam) on a fixed phantom
// volume: step time, memory and halo cost, on the transport the program is started on. One JSON
// object per line, figures per processor (the largest over processors).
//
//   bench_unet [--size 64] [--mesh p:1] [--steps 4] [--channels 8] [--depth 3] [--recompute 1]
//              [--precision fp32|bf16|pair] [--layouts "x:a; y:b | channels:a"]
//              [--deep-halos off|on|2,3] [--graphs off|on|both]
//   mpirun -np 4 bench_unet --size 128 --mesh p:4
// --precision pair: an fp32 and a bf16 model in one process, their steps alternated, and the
// median of the steps' bf16 / fp32 ratios (one line, "unet_precision_pair"): a shared host's speed
// drifts by a fifth over minutes, which separate runs' medians take for the precisions' difference.
// --graphs on: on a GPU, the step runs as one CUDA graph from its second call (mt::StepGraph); the
// warm-up step is the graph's eager call, the next its capture. --graphs both: the steps as they
// are, then as a graph, in one run ("graphs_step_s", or "graphs_error" where it cannot be
// captured). MESHTENSOR_HALO_OVERLAP=off: the convolutions exchange their halos before computing
// (the "halo_overlap" field), to measure what the overlap hides. "cpu_idle": the fraction of the
// machine's CPU time left idle over the timed steps (Linux): with more processors than cores, a
// processor waiting for its halo leaves its core to another, so halo_s counts waits that cost the
// step nothing; cpu_idle counts what the cores lost.

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <fstream>
#include <string>
#include <vector>

#include <meshtensor/meshtensor.hpp>

#include "metrics.hpp"
#include "model.hpp"
#include "phantom.hpp"
#include "step.hpp"

namespace mt = meshtensor;

namespace {

struct Options {
  std::int64_t size = 64;
  std::string mesh = "p:1";
  int steps = 4;
  int channels = 8;
  int depth = 3;
  bool recompute = false;
  std::string precision = "fp32";  // or bf16, or pair (both, steps alternated)
  std::string layouts;  // per level (mt::LayoutSchedule); empty: x over the mesh's first axis
  std::string deep_halos = "off";  // levels sharing a deep halo: off, on, or a list such as 2,3
  std::string graphs = "off";      // the step as a CUDA graph on a GPU: off, on, or both
  std::string math;                // float convolutions on a GPU: fp32 or tf32; empty: the setting
};

Options parse(int argc, char** argv) {
  Options o;
  for (int i = 1; i < argc; ++i) {
    const std::string flag = argv[i];
    if (i + 1 >= argc) throw mt::Error("flag " + flag + " needs a value");
    const std::string value = argv[++i];
    if (flag == "--size")
      o.size = std::stoll(value);
    else if (flag == "--mesh")
      o.mesh = value;
    else if (flag == "--steps")
      o.steps = std::stoi(value);
    else if (flag == "--channels")
      o.channels = std::stoi(value);
    else if (flag == "--depth")
      o.depth = std::stoi(value);
    else if (flag == "--recompute")
      o.recompute = value == "1" || value == "true";
    else if (flag == "--layouts")
      o.layouts = value;
    else if (flag == "--deep-halos")
      o.deep_halos = value;
    else if (flag == "--precision" && (value == "fp32" || value == "bf16" || value == "pair"))
      o.precision = value;
    else if (flag == "--precision")
      throw mt::Error("--precision " + value + ": valid values are fp32, bf16 and pair");
    else if (flag == "--graphs" && (value == "on" || value == "off" || value == "both"))
      o.graphs = value;
    else if (flag == "--graphs")
      throw mt::Error("--graphs " + value + ": valid values are off, on and both");
    else if (flag == "--math" && (value == "fp32" || value == "tf32"))
      o.math = value;
    else if (flag == "--math")
      throw mt::Error("--math " + value + ": valid values are fp32 and tf32");
    else
      throw mt::Error(
          "unknown flag " + flag +
          "; valid flags are --size, --mesh, --steps, --channels, --depth, --recompute, "
          "--precision, --layouts, --deep-halos, --graphs and --math");
  }
  return o;
}

// A field of /proc/self/status in MiB (VmRSS: now, VmHWM: peak).
double status_mib(const std::string& field) {
  std::ifstream in("/proc/self/status");
  std::string line;
  while (std::getline(in, line))
    if (line.rfind(field + ":", 0) == 0) return std::stod(line.substr(field.size() + 1)) / 1024;
  return 0;
}

double largest(mt::Mesh& mesh, double value) {
  mt::all_reduce(mesh.world(), &value, 1, mt::ReduceOp::max);
  return value;
}

double mean(mt::Mesh& mesh, double value) {
  mt::all_reduce(mesh.world(), &value, 1, mt::ReduceOp::sum);
  return value / mesh.num_processors();
}

// The fewest bytes a processor must send in halos per step, on average: each 3x3x3 "same"
// convolution sends one plane of its input each way across each of the P-1 cuts of x, forward and
// again backward (but the first, whose input needs no gradient, only forward); pooling, transposed
// convolutions and the 1x1 head need none.
double minimum_halo_bytes(const Options& o, int parts) {
  if (parts == 1) return 0;
  double elements = 0;
  auto conv = [&](int level, std::int64_t in_channels, double passes = 2) {
    const double n = double(o.size >> level);
    elements += passes * 2.0 * (parts - 1) * n * n * in_channels;
  };
  const std::int64_t c = o.channels;
  for (int l = 0; l < o.depth; ++l) {
    if (l == 0)
      conv(l, 1, /*passes=*/1);
    else
      conv(l, c << (l - 1));
    conv(l, c << l);
  }
  conv(o.depth, c << (o.depth - 1));
  conv(o.depth, c << o.depth);
  for (int l = 0; l < o.depth; ++l) {
    conv(l, 2 * (c << l));
    conv(l, c << l);
  }
  return elements * sizeof(float) / parts;  // shared by P processors
}

// The machine's CPU time so far (Linux /proc/stat, in clock ticks): idle and in all. Processors
// that wait for a message sleep (threads) or yield (MPI when oversubscribed); what the cores then
// do not spend on another processor's work is the machine's idle time.
struct CpuTicks {
  double idle = 0, all = 0;
};
CpuTicks cpu_ticks() {
  std::ifstream stat("/proc/stat");
  std::string cpu;
  CpuTicks t;
  double v[8] = {};  // user nice system idle iowait irq softirq steal
  if (!(stat >> cpu) || cpu != "cpu") return t;
  for (double& x : v) stat >> x;
  for (double x : v) t.all += x;
  t.idle = v[3] + v[4];
  return t;
}

// The median wall time of `steps` calls of `step`, each between barriers and waited for on a
// device; `idle` the fraction
// of the machine's CPU time idle over them (-1 where /proc/stat is not there); `host` the median
// time the host took to queue a step (on a GPU, before the GPU has run it).
template <typename Step>
double median_step_seconds(mt::Mesh& mesh, Step& step, int steps, double& idle, double& host) {
  std::vector<double> times, queued;
  mesh.world().barrier();
  const CpuTicks before = cpu_ticks();
  for (int s = 0; s < steps; ++s) {
    mesh.world().barrier();
    const auto start = std::chrono::steady_clock::now();
    step();
    queued.push_back(
        std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count());
    // A step queues its work on a GPU and returns: the time is the device's once it has run. The
    // timing's own wait is not the step's, and is not counted as one.
    const std::uint64_t waits = mt::device_activity().waits;
    mt::wait_for_device();
    mt::device_activity().waits = waits;
    mesh.world().barrier();
    times.push_back(
        std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count());
  }
  const CpuTicks after = cpu_ticks();
  idle = after.all > before.all ? (after.idle - before.idle) / (after.all - before.all) : -1;
  std::sort(times.begin(), times.end());
  std::sort(queued.begin(), queued.end());
  host = queued[queued.size() / 2];
  return times[times.size() / 2];
}

// What a step asked of the device, per step (the largest processor's): kernels launched, cuDNN
// and cuBLAS calls, cuDNN's algorithm queries, host waits, CPU loops run on the device's blocks
// (0 on a CPU processor).
std::string device_activity_per_step(mt::Mesh& mesh, const mt::DeviceActivity& before, int steps) {
  const mt::DeviceActivity& now = mt::device_activity();
  const auto per_step = [&](std::uint64_t after, std::uint64_t from) {
    return std::to_string(largest(mesh, double(after - from) / steps));
  };
  return "\"gpu_kernels_per_step\":" + per_step(now.kernels, before.kernels) +
         ",\"gpu_library_calls_per_step\":" + per_step(now.library_calls, before.library_calls) +
         ",\"gpu_library_queries_per_step\":" +
         per_step(now.library_queries, before.library_queries) +
         ",\"gpu_waits_per_step\":" + per_step(now.waits, before.waits) +
         ",\"gpu_host_fallbacks_per_step\":" + per_step(now.host_fallbacks, before.host_fallbacks) +
         ",\"gpu_graph_launches_per_step\":" + per_step(now.graph_launches, before.graph_launches);
}

// `text` as a JSON string.
std::string json_string(const std::string& text) {
  std::string out = "\"";
  for (const char c : text) {
    if (c == '"' || c == '\\') out += '\\';
    out += (static_cast<unsigned char>(c) < 0x20) ? ' ' : c;
  }
  return out + "\"";
}

// The step as one CUDA graph (--graphs both), after its steps as they are: the fields of its
// median step and of what a launch asks of the device, or why it could not be captured.
template <typename Step>
std::string as_graph(mt::Mesh& mesh, const Step& step, int steps) {
  mt::StepGraph graph;
  auto launch = [&] { graph.run(step); };
  try {
    launch();  // as it is
    launch();  // captured
  } catch (const std::exception& e) {
    return ",\"graphs_error\":" + json_string(e.what());
  }
  const mt::DeviceActivity before = mt::device_activity();
  double idle = 0, host_s = 0;
  const double step_s = median_step_seconds(mesh, launch, steps, idle, host_s);
  const mt::DeviceActivity& now = mt::device_activity();
  return ",\"graphs_step_s\":" + std::to_string(largest(mesh, step_s)) +
         ",\"graphs_host_s\":" + std::to_string(largest(mesh, host_s)) +
         ",\"graphs_kernels_per_step\":" +
         std::to_string(largest(mesh, double(now.kernels - before.kernels) / steps)) +
         ",\"graphs_launches_per_step\":" +
         std::to_string(largest(mesh, double(now.graph_launches - before.graph_launches) / steps));
}

// Where a step's time goes, per processor (the largest over processors): each kernel family's
// seconds (every call timed, kernels/timing.hpp) and the convolutions' by pass, over `steps` more
// steps; the rest of the step is halo exchange, waiting and the ops' own work. Timing each call
// costs a little, so these steps are not the ones step_s is the median of.
template <typename Step>
void print_breakdown(mt::Mesh& mesh, Step& step, int steps, double step_s, double halo_s) {
  namespace kernels = mt::kernels;
  kernels::KernelTimes& times = kernels::kernel_times();
  times.on = true;
  mesh.world().barrier();
  times.restart();
  for (int s = 0; s < steps; ++s) step();
  times.settle();  // a GPU's calls: timed on the GPU, added once it has run them
  times.on = false;
  std::string families, passes;
  double all = 0;
  for (std::size_t f = 0; f < times.seconds.size(); ++f) {
    const double seconds = largest(mesh, times.seconds[f] / steps);
    all += times.seconds[f] / steps;
    families += std::string(families.empty() ? "" : ",") + "\"" +
                kernels::plan::family_name(kernels::plan::Family(f)) +
                "\":" + std::to_string(seconds);
  }
  std::array<double, kernels::plan::ConvClass::passes> by_pass{};
  for (std::size_t c = 0; c < times.conv_seconds.size(); ++c)
    by_pass[kernels::plan::ConvClass::pass_of(c)] += times.conv_seconds[c] / steps;
  const char* names[] = {"forward", "backward_input", "backward_weight"};
  for (int p = 0; p < kernels::plan::ConvClass::passes; ++p)
    passes += std::string(p ? "," : "") + "\"" + names[p] +
              "\":" + std::to_string(largest(mesh, by_pass[p]));
  // By class too: "pass/width" (3x3x3 or one tap, narrower side's channels rounded down to a
  // power of two), where a precision's gains and losses show.
  std::string classes;
  for (std::size_t c = 0; c < times.conv_seconds.size(); ++c) {
    const double seconds = largest(mesh, times.conv_seconds[c] / steps);
    if (seconds == 0) continue;
    using Class = kernels::plan::ConvClass;
    classes += std::string(classes.empty() ? "" : ",") + "\"" + names[Class::pass_of(c)] + "/" +
               (Class::one_tap_of(c) ? "1x1x1/" : "") + std::to_string(1 << Class::width_of(c)) +
               "\":" + std::to_string(seconds);
  }
  const double kernels_s = largest(mesh, all);
  // On a GPU the families' seconds are the GPU's (bench/gpu.sh reads them as gpu_family_s).
  const bool on_gpu = mesh.device().is_cuda();
  if (mesh.processor() == 0)
    std::printf(
        "{\"bench\":\"unet_step_breakdown\",\"processors\":%d,\"step_s\":%.4f,"
        "\"kernels_s\":%.4f,\"halo_s\":%.4f,\"rest_s\":%.4f,\"%s\":{%s},"
        "\"conv_pass_s\":{%s},\"conv_class_s\":{%s}}\n",
        mesh.num_processors(), step_s, kernels_s, halo_s, step_s - kernels_s - halo_s,
        on_gpu ? "gpu_family_s" : "kernel_s", families.c_str(), passes.c_str(), classes.c_str());
}

// One training step of each model in turn, `steps` times after a warm-up step each: the median
// step of each and the median of the pairs' bf16 / fp32 ratios, with their range.
template <class Batch, class Weights>
void print_precision_pair(mt::Mesh& mesh, const Options& o, const unet3d::ModelConfig& fp32,
                          const unet3d::ModelConfig& bf16, const Batch& batch,
                          const Weights& weights) {
  unet3d::UNet fp32_net(mesh, fp32), bf16_net(mesh, bf16);
  mt::nn::Adam<float> fp32_adam(fp32_net.parameters().trainable(), 1e-3);
  mt::nn::Adam<float> bf16_adam(bf16_net.parameters().trainable(), 1e-3);
  const auto timed = [&](unet3d::UNet& net, mt::nn::Adam<float>& adam) {
    mesh.world().barrier();
    const auto start = std::chrono::steady_clock::now();
    unet3d::train_step(net, adam, batch, weights);
    mt::wait_for_device();  // on a GPU, until the step has run
    mesh.world().barrier();
    return largest(mesh,
                   std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count());
  };
  timed(fp32_net, fp32_adam), timed(bf16_net, bf16_adam);  // warm-up: kernels chosen, pool filled
  std::vector<double> fp32_s, bf16_s, ratios;
  for (int s = 0; s < o.steps; ++s) {
    fp32_s.push_back(timed(fp32_net, fp32_adam));
    bf16_s.push_back(timed(bf16_net, bf16_adam));
    ratios.push_back(bf16_s.back() / fp32_s.back());
  }
  const auto median = [](std::vector<double> v) {
    std::sort(v.begin(), v.end());
    return v[v.size() / 2];
  };
  if (mesh.processor() == 0)
    std::printf(
        "{\"bench\":\"unet_precision_pair\",\"transport\":\"%s\",\"processors\":%d,"
        "\"threads\":%d,\"size\":%lld,\"channels\":%d,\"depth\":%d,\"steps\":%d,"
        "\"fp32_step_s\":%.4f,\"bf16_step_s\":%.4f,\"bf16_over_fp32\":%.4f,"
        "\"bf16_over_fp32_low\":%.4f,\"bf16_over_fp32_high\":%.4f}\n",
        mesh.transport().c_str(), mesh.num_processors(), mt::compute_threads(), (long long)o.size,
        o.channels, o.depth, o.steps, median(fp32_s), median(bf16_s), median(ratios),
        *std::min_element(ratios.begin(), ratios.end()),
        *std::max_element(ratios.begin(), ratios.end()));
}

}  // namespace

int main(int argc, char** argv) {
  Options o;
  try {
    o = parse(argc, argv);
  } catch (const std::exception& e) {
    std::fprintf(stderr, "bench_unet: %s\n", e.what());
    return 2;
  }
  const double rss_start = status_mib("VmRSS");
  mt::Settings settings = mt::environment_settings();
  if (!o.math.empty())
    settings.kernels.math =
        o.math == "tf32" ? mt::KernelPolicy::Math::tf32 : mt::KernelPolicy::Math::fp32;
  return mt::run(
      argc, argv, mt::MeshShape(o.mesh),
      [&](mt::Mesh& mesh) {
        const mt::LayoutSchedule layouts(o.layouts.empty() ? "x:" + mesh.shape()[0].name
                                                           : o.layouts);
        const mt::Layout& layout = layouts.at(0);
        const std::array<std::int64_t, 3> size{o.size, o.size, o.size};
        const auto batch = unet3d::make_batch(mesh, layout, 1, "bench", 0, 1, size);
        const auto weights = mt::generate<float>(
            mesh, mt::Shape{mt::Dim("classes", unet3d::num_classes)}, mt::Layout{},
            [](const mt::Index& i) { return i["classes"] == 0 ? 1.0f : 3.0f; });
        mesh.world().barrier();
        const double rss_before_model = largest(mesh, status_mib("VmRSS"));
        const auto pool_before_model = mt::memory_stats().in_use;

        const auto config_in = [&](const std::string& precision) {
          unet3d::ModelConfig config;
          config.channels = o.channels;
          config.depth = o.depth;
          config.recompute = o.recompute;
          config.precision = precision;
          config.layouts = layouts;
          config.deep_halos = unet3d::deep_halo_levels(o.deep_halos, o.depth);
          return config;
        };
        if (o.precision == "pair")
          return print_precision_pair(mesh, o, config_in("fp32"), config_in("bf16"), batch,
                                      weights);
        const unet3d::ModelConfig config = config_in(o.precision);
        unet3d::UNet net(mesh, config);
        mt::nn::Adam<float> adam(net.parameters().trainable(), 1e-3);
        mt::StepGraph graph;
        auto step = [&] {
          if (o.graphs == "on")
            graph.run([&] { unet3d::train_step(net, adam, batch, weights); });
          else
            unet3d::train_step(net, adam, batch, weights);
        };
        step();  // warm-up: primitives built, pool filled, optimiser state allocated
        if (o.graphs == "on") step();  // captured: the timed steps are the graph's launches
        mt::memory_pool().reset_peak();
        const auto halo_before = mt::halo_profile(mesh);
        const auto pool_before = mt::memory_stats();
        const mt::DeviceActivity device_before = mt::device_activity();
        double cpu_idle = 0, host_s = 0;
        const double step_s = median_step_seconds(mesh, step, o.steps, cpu_idle, host_s);
        std::string device = device_activity_per_step(mesh, device_before, o.steps) +
                             ",\"host_s\":" + std::to_string(largest(mesh, host_s));
        if (o.graphs == "both")
          device += as_graph(
              mesh, [&] { unet3d::train_step(net, adam, batch, weights); }, o.steps);
        const auto halo = mt::halo_profile(mesh);
        const auto stats = mt::memory_stats();
        const double mib = 1024.0 * 1024.0;
        const double halo_s = largest(mesh, (halo.seconds - halo_before.seconds) / o.steps);
        const double halo_bytes =
            mean(mesh, double(halo.bytes_sent - halo_before.bytes_sent) / o.steps);
        const double halo_exchanges =
            largest(mesh, double(halo.exchanges - halo_before.exchanges) / o.steps);
        const double misses = largest(
            mesh, double(stats.system_allocations - pool_before.system_allocations) / o.steps);
        const double fresh_mib = largest(
            mesh, double(stats.fresh_bytes - pool_before.fresh_bytes) / o.steps / (1 << 20));
        const double allocations =
            largest(mesh, double(stats.allocations - pool_before.allocations) / o.steps);
        const double pool_step_peak =
            largest(mesh, double(stats.peak_held - pool_before_model) / mib);
        const double pool_peak = largest(mesh, double(stats.peak_held) / mib);
        // What live tensors and buffers needed at most; held beyond it is cached for reuse.
        const double pool_in_use_peak = largest(mesh, double(stats.peak_in_use) / mib);
        const double rss_peak = largest(mesh, status_mib("VmHWM"));
        // What the peak in use was made of, by what the blocks were for (the largest processor's).
        std::string at_peak;
        for (std::size_t u = 0; u < mt::memory_uses; ++u)
          at_peak += std::string(u ? "," : "") + "\"" + mt::memory_use_name(mt::MemoryUse(u)) +
                     "\":" + std::to_string(largest(mesh, double(stats.at_peak[u]) / mib));
        const double parameters_mib = largest(mesh, [&] {
          double bytes = 0;
          for (auto& p : net.parameters().trainable()) bytes += p.local().size() * sizeof(float);
          return 3 * bytes / mib;  // the values and Adam's two moments
        }());
        unet3d::TrainOptions model;  // the model's convolutions' FLOPs, counted from its definition
        model.size = size;
        model.channels = o.channels;
        model.depth = o.depth;
        const double conv_gflop = unet3d::conv_flops_per_step(model) / 1e9;
        if (mesh.processor() == 0)
          std::printf(
              "{\"bench\":\"unet_step\",\"transport\":\"%s\",\"processors\":%d,\"mesh\":\"%s\","
              "\"layouts\":\"%s\",\"threads\":%d,"
              "\"size\":%lld,\"channels\":%d,\"depth\":%d,\"recompute\":%s,\"precision\":\"%s\","
              "\"halo_overlap\":%s,\"deep_halos\":\"%s\",\"graphs\":%s,\"step_s\":%.4f,\"halo_s\":%"
              ".4f,"
              "\"cpu_idle\":%.4f,"
              "\"halo_exchanges\":%.0f,"
              "\"halo_bytes\":%.0f,\"halo_bytes_minimum\":%.0f,\"pool_peak_mib\":%.1f,"
              "\"pool_step_mib\":%.1f,\"pool_in_use_peak_mib\":%.1f,\"pool_at_peak_mib\":{%s},"
              "\"parameters_and_state_mib\":%.2f,"
              "\"rss_start_mib\":%.1f,"
              "\"rss_before_model_mib\":%.1f,\"rss_peak_mib\":%.1f,\"pool_allocations\":%.0f,"
              "\"system_allocations\":%.0f,\"fresh_mib_per_step\":%.1f,\"conv_gflop_per_step\":%."
              "2f,"
              "\"conv_gflops\":%.2f,%s}\n",
              mesh.transport().c_str(), mesh.num_processors(), o.mesh.c_str(),
              layouts.to_string().c_str(), mt::compute_threads(), (long long)o.size, o.channels,
              o.depth, o.recompute ? "true" : "false", o.precision.c_str(),
              mt::halo_overlap() ? "true" : "false",
              unet3d::deep_halos_text(config.deep_halos).c_str(),
              o.graphs == "on" ? "true" : "false", step_s, halo_s, cpu_idle, halo_exchanges,
              halo_bytes, minimum_halo_bytes(o, mesh.shape()[0].size), pool_peak, pool_step_peak,
              pool_in_use_peak, at_peak.c_str(), parameters_mib, rss_start, rss_before_model,
              rss_peak, allocations, misses, fresh_mib, conv_gflop, conv_gflop / step_s,
              device.c_str());
        // Timed family by family, the step runs as it is: a graph's launch runs no host timer.
        auto eager = [&] { unet3d::train_step(net, adam, batch, weights); };
        print_breakdown(mesh, eager, o.steps, step_s, halo_s);
      },
      settings);
}
