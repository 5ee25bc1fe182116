// The plan against a real run: the U-Net's model and two training steps (examples/unet3d/step.hpp)
// on one mesh and layout, run for real (threads, or MPI under mpirun) and planned without data;
// one JSON line with, per processor, the worst difference in messages, bytes and collectives
// (exactly 0 expected), the plan's peak over the pool's, and the plan's convolution FLOPs over
// the model's by formula.
//
//   bench_plan --size 64 --mesh "a:2; b:2" --layout "x:a; y:b" [--batch 2] [--depth 3]
//              [--channels 8]
//
// oneDNN's formats are chosen by channel count (MESHTENSOR_ONEDNN_FORMATS=by_channels), the
// plan's assumption: timing them at a shape's first use would add scratch to the real peak.

#include <CLI/CLI.hpp>

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <string>
#include <vector>

#include <meshtensor/meshtensor.hpp>

#include "step.hpp"

namespace mt = meshtensor;

namespace {

// One processor's real counts, as doubles for an all-gather.
constexpr std::size_t measures = 5;
std::vector<double> measured(mt::Mesh& mesh) {
  const auto t = mesh.traffic();
  return {double(t.messages), double(t.bytes), double(t.collectives), double(t.collective_bytes),
          double(mt::memory_stats().peak_in_use)};
}
std::vector<double> planned(const mt::ProcessorPlan& p) {
  return {double(p.traffic.messages), double(p.traffic.bytes), double(p.traffic.collectives),
          double(p.traffic.collective_bytes), double(p.memory.peak_in_use)};
}

void compare(mt::Mesh& mesh, const std::vector<double>& real, const unet3d::TrainOptions& o,
             const mt::Layout& layout) {
  const auto report = mt::plan(mesh.shape(), layout,
                               [&](mt::Mesh& m) { unet3d::model_and_two_steps(m, o, layout); });
  double traffic_differences = 0, worst_ratio = 1, peak_real = 0, peak_plan = 0;
  std::vector<double> most(4, 0.0);
  for (std::size_t p = 0; p < report.processors.size(); ++p) {
    const auto plan = planned(report.processors[p]);
    const double* r = real.data() + p * measures;
    for (std::size_t k = 0; k < 4; ++k) {
      traffic_differences += std::abs(plan[k] - r[k]);
      most[k] = std::max(most[k], r[k]);
    }
    const double ratio = plan[4] / r[4];
    if (std::abs(ratio - 1) > std::abs(worst_ratio - 1)) worst_ratio = ratio;
    peak_real = std::max(peak_real, r[4]);
    peak_plan = std::max(peak_plan, plan[4]);
  }
  const double conv = report.total(
      [](const mt::ProcessorPlan& p) { return p.flops(mt::kernels::plan::Family::conv); });
  std::printf(
      "{\"bench\":\"plan\",\"size\":%lld,\"batch\":%lld,\"mesh\":\"%s\",\"layout\":\"%s\","
      "\"transport\":\"%s\",\"processors\":%d,\"traffic_differences\":%.0f,"
      "\"messages_max\":%.0f,\"bytes_max\":%.0f,\"collectives_max\":%.0f,"
      "\"collective_bytes_max\":%.0f,"
      "\"peak_real_mib\":%.2f,\"peak_plan_mib\":%.2f,\"worst_peak_ratio\":%.4f,"
      "\"conv_flops_ratio\":%.12f,\"plan_seconds\":%.3f}\n",
      (long long)o.size[0], (long long)o.batch, report.mesh.c_str(), report.layout.c_str(),
      mesh.transport().c_str(), mesh.num_processors(), traffic_differences, most[0], most[1],
      most[2], most[3], peak_real / (1 << 20), peak_plan / (1 << 20), worst_ratio,
      conv / (2 * unet3d::conv_flops_per_step(o)), report.seconds);
}

}  // namespace

int main(int argc, char** argv) {
  CLI::App app{"bench_plan: a plan of the U-Net against a real run of it"};
  std::int64_t size = 64;
  std::string mesh = "p:2", layout = "x:p";
  unet3d::TrainOptions o;
  app.add_option("--size", size, "edge of the cubic volumes");
  app.add_option("--mesh", mesh, "mesh axes");
  app.add_option("--layout", layout, "layout rules");
  app.add_option("--batch", o.batch, "volumes per step");
  app.add_option("--depth", o.depth, "levels");
  app.add_option("--channels", o.channels, "channels at the top level");
  CLI11_PARSE(app, argc, argv);
  o.size = {size, size, size};
  mt::Settings settings = mt::environment_settings();
  settings.kernels.onednn_formats = mt::KernelPolicy::Formats::by_channels;
  const mt::Layout rules(layout);
  return mt::run(
      argc, argv, mt::MeshShape(mesh),
      [&](mt::Mesh& m) {
        unet3d::model_and_two_steps(m, o, rules);
        const auto mine = measured(m);
        const auto all = mt::all_gather(m.world(), mine);
        if (m.processor() == 0) compare(m, all, o, rules);
      },
      settings);
}
