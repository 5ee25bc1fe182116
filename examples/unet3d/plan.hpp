#pragma once
// `unet3d plan`: what one training step would cost on every processor of a mesh of any size, from
// the shapes alone (mt::plan): FLOPs, peak memory, halo exchanges, all-reduces and relayouts,
// as a table and one JSON line. It runs the step `unet3d train` runs, on blocks without data.

#include <cstdio>
#include <string>

#include <nlohmann/json.hpp>

#include <meshtensor/meshtensor.hpp>

#include "auto_layout.hpp"
#include "options.hpp"
#include "step.hpp"

namespace unet3d {

/// Plans a step of `o` and prints it; with `pricing`, also its predicted time.
inline void plan_training(const TrainOptions& o, const mt::MeshShape& mesh,
                          const mt::Layout& layout, const AutoLayout* pricing = nullptr) {
  if (!o.data.empty())
    throw mt::Error("--data: a plan runs on phantom volumes of --size or --shape, without data");
  // The first step makes Adam's moments; the second is what every later step does.
  const mt::PlanReport report = mt::plan(mesh, layout, [&](mt::Mesh& m) {
    model_and_two_steps(m, o, layout, /*count_second_only=*/true);
  });
  const bool per_level = o.layouts.size() > 1;
  say("unet3d plan: one training step, volumes %lldx%lldx%lld, batch %lld, depth %d, %d channels, "
      "mesh %s, %s \"%s\", deep halos %s: %zu processors (%d planned, the others like one "
      "of them) in %.2f s\n"
      "FLOPs and traffic are one step's; memory is each processor's peak over the first two "
      "steps, by use at that moment (real peaks were at most 0.4%% above it from 64^3 to 256^3 "
      "with "
      "MESHTENSOR_ONEDNN_FORMATS=by_channels: bench/RESULTS.md)\n%s",
      (long long)o.size[0], (long long)o.size[1], (long long)o.size[2], (long long)o.batch, o.depth,
      o.channels, report.mesh.c_str(), per_level ? "layouts per level" : "layout",
      per_level ? o.layouts.to_string().c_str() : report.layout.c_str(), o.deep_halos.c_str(),
      report.processors.size(), report.planned, report.seconds, report.table().c_str());
  auto summary = nlohmann::ordered_json::parse(report.json());
  summary["size"] = o.size;
  summary["batch"] = o.batch;
  summary["depth"] = o.depth;
  summary["channels"] = o.channels;
  summary["norm"] = o.norm;
  summary["recompute"] = o.recompute;
  summary["deep_halos"] = o.deep_halos;
  summary["precision"] = o.precision;
  if (per_level) summary["layouts"] = o.layouts.to_string();
  if (pricing) {
    const mt::MachineModel machine = machine_for(mesh.num_processors(), *pricing);
    const mt::StepPrediction step = mt::predict_step(report, machine);
    say("predicted step: %.3f s on processor %d (compute %.3f s with %d thread%s, %.2g "
        "threads per core; communication %.3f s over %s), kernels of %s\n",
        step.seconds, step.processor, step.compute_s, machine.kernels.threads,
        machine.kernels.threads == 1 ? "" : "s", machine.sharing(), step.communication_s,
        pricing->network.c_str(), machine.kernels.machine.c_str());
    summary["predicted_step_s"] = step.seconds;
    summary["predicted_compute_s"] = step.compute_s;
    summary["predicted_communication_s"] = step.communication_s;
    summary["network"] = pricing->network;
  }
  std::printf("%s\n", summary.dump().c_str());
}

}  // namespace unet3d
