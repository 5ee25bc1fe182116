#pragma once
// `--layout auto`: the U-Net's layout per level chosen with plans (mt::choose_layouts): the
// fastest predicted schedule whose peak memory per processor fits --memory-per-processor, priced
// with this machine's kernel throughput (calibrated once and cached) and the --network preset.

#include <algorithm>
#include <cstdio>
#include <set>
#include <string>
#include <vector>

#include <meshtensor/meshtensor.hpp>

#include "options.hpp"
#include "step.hpp"

namespace unet3d {

/// What `--layout auto` needs beside the training flags.
struct AutoLayout {
  double budget_bytes = 0;
  std::string network = "shared-memory";
  bool calibrate = false;  // measure the kernels again, even where a calibration is cached
  std::string kernels;     // a throughput file (another machine's); empty: this machine's
};

/// The step a calibration times: the example's model (C=8, depth 3, batch norm) at 96^3, one
/// processor, its second step — whatever the model to be planned, so that one calibration serves.
/// Where a level's layout splits the channels, its skip connection's concatenation runs on the
/// resampling kernels, which one processor's step never runs: a crop of a level's size measures
/// them too.
inline void calibration_step(mt::Mesh& mesh) {
  TrainOptions o;
  o.size = {96, 96, 96};
  o.layouts = mt::LayoutSchedule(std::vector<mt::Layout>{mt::Layout()});
  model_and_two_steps(mesh, o, mt::Layout(), /*count_second_only=*/true);
  const auto level = mt::zeros<float>(mesh, "x:48, y:48, z:48, channels:16");
  (void)mt::crop(level, "x", 1, 1);
}

/// Whether a calibration measured the resampling kernels (one cached before calibration_step()
/// ran them lacks them).
inline bool calibrated_fully(const mt::Throughput& t) {
  return t.per_second[std::size_t(mt::Throughput::Family::resample)] > 0;
}

/// The kernels of one processor of this machine with `threads` compute threads; `again`:
/// measured anew (once per run and thread count), not read from the cache.
inline mt::Throughput kernels_here(int threads, bool again) {
  static std::set<int> measured_in_this_run;
  if (!again || measured_in_this_run.count(threads))
    if (auto cached = mt::cached_throughput(threads); cached && calibrated_fully(*cached))
      return *cached;
  measured_in_this_run.insert(threads);
  // Under a launcher only processor 0 chooses (chosen_on_first): the other ranks wait, idle, for
  // its choice, so the calibration has this node's cores to itself.
  std::fprintf(stderr, "calibrating this machine's kernels with %d thread%s (once; cached in %s)\n",
               threads, threads == 1 ? "" : "s", mt::throughput_cache_file(threads).c_str());
  return mt::throughput(threads, calibration_step, /*again=*/true);
}

/// The machine `processors` processors would run on: this one's cores shared among them over
/// shared memory, or each with this machine's cores (or the --kernels file's) and the named network
/// between them.
inline mt::MachineModel machine_for(int processors, const AutoLayout& a) {
  mt::MachineModel m;
  m.network = mt::network_named(a.network);
  if (!a.kernels.empty()) {  // another machine's processors, each with its own cores or GPU
    m.kernels = mt::Throughput::from_file(a.kernels, "--kernels");
    return m;
  }
  const int cores = mt::cores_available();
  const bool one_node = a.network == "shared-memory";
  const int threads = one_node ? std::max(1, cores / processors) : cores;
  m.kernels = kernels_here(threads, a.calibrate);
  if (one_node) m.cores_per_node = cores, m.processors_per_node = processors;
  return m;
}

inline void print_option(const char* role, const mt::ScheduleOption& s) {
  say("  %-10s \"%s\": peak %s per processor, step %.3f s predicted (compute %.3f s, "
      "communication %.3f s)\n",
      role, s.layouts.to_string().c_str(), mt::format_bytes(s.peak_bytes).c_str(), s.step.seconds,
      s.step.compute_s, s.step.communication_s);
}

/// Chooses the layouts of `o`'s U-Net on `mesh` and prints the choice beside the runner-up.
inline mt::LayoutSchedule choose_schedule(const TrainOptions& o, const mt::MeshShape& mesh,
                                          const AutoLayout& a) {
  mt::ChoiceOptions c;
  c.budget_bytes = a.budget_bytes;
  c.stages = o.depth + 1;
  // Level 0 splits x, y, z over the mesh axes in order; with a batch, also the batch over the
  // first axis and space over the others.
  const std::vector<std::string> spatial{"x", "y", "z"}, batched{"batch", "x", "y", "z"};
  for (const auto* dims : {&spatial, &batched}) {
    if (dims == &batched && o.batch < 2) continue;
    std::vector<mt::LayoutRule> rules;
    for (std::size_t axis = 0; axis < mesh.rank() && axis < dims->size(); ++axis)
      rules.push_back({(*dims)[axis], mesh[axis].name});
    c.bases.push_back(mt::Layout(rules));
  }
  c.machine = [&](const mt::MeshShape& m) { return machine_for(m.num_processors(), a); };
  const auto step = [&](mt::Mesh& m, const mt::LayoutSchedule& layouts) {
    TrainOptions planned = o;
    planned.layouts = layouts;
    // Layouts are weighed without deep halos; those are chosen for the schedule chosen.
    if (planned.deep_halos == "auto") planned.deep_halos = "off";
    check_geometry(o.size, o.depth, m.shape(), layouts, o.batch);
    model_and_two_steps(m, planned, layouts.at(0), /*count_second_only=*/true);
  };
  const mt::LayoutChoice choice = mt::choose_layouts(mesh, c, step);
  const mt::ScheduleOption& best = choice.best();
  say("--layout auto: %zu schedules weighed on mesh %s (%zu within %s per processor, %zu "
      "over it, %zu that cannot run); network %s, kernels of %s\n",
      choice.fitting.size() + choice.too_big.size() + choice.failed.size(),
      mesh.to_string().c_str(), choice.fitting.size(), mt::format_bytes(a.budget_bytes).c_str(),
      choice.too_big.size(), choice.failed.size(), a.network.c_str(),
      machine_for(mesh.num_processors(), a).kernels.machine.c_str());
  print_option("chosen", best);
  if (choice.fitting.size() > 1) print_option("runner-up", choice.fitting[1]);
  std::fflush(stdout);
  return best.layouts;
}

}  // namespace unet3d

namespace unet3d {

/// A choice in a job of several processes: processor 0 makes it (`choose`, returning text;
/// calibrating this machine's kernels first where none is cached) while the others wait, and
/// tells them, or they all fail with its error, which the job says once.
template <class Choose>
std::string chosen_on_first(mt::Mesh& mesh, Choose&& choose) {
  std::string chosen;
  std::string failure;
  if (mesh.processor() == 0) failure = mt::failure_of([&] { chosen = choose(); });
  mt::agree_on(mesh, failure);
  std::vector<char> text(chosen.begin(), chosen.end());
  mt::broadcast(mesh.world(), text, 0);
  return std::string(text.begin(), text.end());
}

/// --layout auto in a job of several processes.
inline mt::LayoutSchedule choose_on_first(mt::Mesh& mesh, const TrainOptions& o,
                                          const AutoLayout& a) {
  return mt::LayoutSchedule(
      chosen_on_first(mesh, [&] { return choose_schedule(o, mesh.shape(), a).to_string(); }));
}

/// --deep-halos auto: starting from no level with a deep halo, each level's in turn, kept where
/// the plans predict a faster step on `pricing`'s machine (the fewer exchanges against the rows
/// computed twice). Returns the --deep-halos text.
inline std::string choose_deep_halos(const TrainOptions& o, const mt::MeshShape& mesh,
                                     const AutoLayout& pricing) {
  const mt::MachineModel machine = machine_for(mesh.num_processors(), pricing);
  const mt::Layout& data_layout = o.layouts.at(0);
  auto predicted = [&](const std::vector<bool>& levels) {
    TrainOptions planned = o;
    planned.deep_halos = deep_halos_text(levels);
    const mt::PlanReport report = mt::plan(mesh, data_layout, [&](mt::Mesh& m) {
      model_and_two_steps(m, planned, data_layout, /*count_second_only=*/true);
    });
    return mt::predict_step(report, machine).seconds;
  };
  std::vector<bool> levels(std::size_t(o.depth + 1), false);
  const double without = predicted(levels);
  double best = without;
  for (std::size_t level = 0; level < levels.size(); ++level) {
    levels[level] = true;
    const double with = predicted(levels);
    if (with < best)
      best = with;
    else
      levels[level] = false;
  }
  const std::string chosen = deep_halos_text(levels);
  say("--deep-halos auto: %s (predicted step %.4f s; %.4f s without; network %s, kernels of "
      "%s)\n",
      chosen == "off" ? "none" : ("levels " + chosen).c_str(), best, without,
      pricing.network.c_str(), machine.kernels.machine.c_str());
  std::fflush(stdout);
  return chosen;
}

/// The same in a job of several processes.
inline std::string choose_deep_halos_on_first(mt::Mesh& mesh, const TrainOptions& o,
                                              const AutoLayout& pricing) {
  return chosen_on_first(mesh, [&] { return choose_deep_halos(o, mesh.shape(), pricing); });
}

}  // namespace unet3d
