#pragma once
// The command-line settings of unet3d and the checks that reject what cannot run, naming the flag.

#include <algorithm>
#include <array>
#include <cstdint>
#include <cstdlib>
#include <sstream>
#include <string>
#include <utility>
#include <vector>

#include <meshtensor/meshtensor.hpp>

#include "augment.hpp"
#include "console.hpp"
#include "task.hpp"

namespace unet3d {

namespace mt = meshtensor;

/// How scans become network volumes: a target voxel spacing in mm (0: keep the scan's) or a target
/// shape (0: from the spacing), and the depth whose 2^depth the padded size must be a multiple of.
struct Preprocessing {
  std::array<double, 3> spacing{0, 0, 0};
  std::array<std::int64_t, 3> shape{0, 0, 0};
  int depth = 3;
  mt::LayoutSchedule layouts;  // the network's, per level, each volume must fit (empty: its own)
};

struct TrainOptions {
  std::array<std::int64_t, 3> size{64, 64, 64};
  std::int64_t batch = 1;
  int depth = 3;
  int channels = 8;
  std::string norm = "batch";
  bool recompute = false;          // keep only each level's input and output; recompute the rest
  bool graphs = false;             // on GPUs, each step one CUDA graph from the second on
  std::string precision = "fp32";  // or "bf16": activations in bfloat16, parameters in fp32
  std::int64_t steps = 600;
  std::int64_t stop_after =
      0;  // stop (with a checkpoint) after this many steps of this run: 0 = never
  double lr = 3e-3;
  std::string on_nonfinite =
      "stop";            // or "skip-step": what a NaN or infinite loss or gradient does
  Task task;             // classes, input channels and class weights: the phantoms' by default
  Augmentation augment;  // --augment: none by default
  std::uint64_t seed = 1;
  std::string checkpoint;  // empty: no checkpoints
  bool resume = false;
  std::string log;  // empty: <out>/metrics.jsonl
  std::string out = "unet3d-output";
  std::int64_t validate_every = 50;
  std::int64_t validation_volumes = 2;
  std::int64_t checkpoint_every = 50;
  std::string data;  // a folder of scans; empty: phantoms
  Preprocessing preprocessing;
  mt::LayoutSchedule layouts;  // per level (--layouts); empty: the data's layout at every level
  // --deep-halos: the levels whose two convolutions share one exchange of a deep halo — "off",
  // "on" (every level), a list such as "2,3", or "auto" (chosen by plans: resolved before the
  // model is built); "" is auto under --layout auto, else off.
  std::string deep_halos;
};

/// The levels of a U-Net of `depth` that --deep-halos `text` names (not "auto"), one flag each.
inline std::vector<bool> deep_halo_levels(const std::string& text, int depth) {
  std::vector<bool> levels(std::size_t(depth + 1), text == "on");
  if (text.empty() || text == "off" || text == "on") return levels;
  std::stringstream list(text);
  std::string item;
  while (std::getline(list, item, ',')) {
    char* end = nullptr;
    const long level = std::strtol(item.c_str(), &end, 10);
    if (item.empty() || *end != '\0' || level < 0 || level > depth)
      throw mt::Error("--deep-halos \"" + text + "\": expected off, on, auto or levels 0 to " +
                      std::to_string(depth) + " separated by commas, e.g. 2,3");
    levels[std::size_t(level)] = true;
  }
  return levels;
}

/// The text --deep-halos takes for `levels`.
inline std::string deep_halos_text(const std::vector<bool>& levels) {
  std::string text;
  for (std::size_t l = 0; l < levels.size(); ++l)
    if (levels[l]) text += (text.empty() ? "" : ",") + std::to_string(l);
  return text.empty() ? "off" : text;
}

struct PredictOptions {
  std::string checkpoint;
  std::string which = "best";         // the checkpoint `best` names, else `latest`; or "latest"
  std::vector<std::string> inputs;    // a scan (its channel files), a folder, or a dataset.json
  std::string output, probabilities;  // files, or folders for a folder of scans
  std::array<std::int64_t, 3> size{0, 0, 0};  // when given, the input must have it
  mt::LayoutSchedule layouts;                 // per level; empty: the input's layout at every level
  std::string precision;                      // fp32 or bf16; empty: the checkpoint's training's
};

namespace level_fit {

inline const char* const spatial_names[3] = {"x", "y", "z"};

// The spatial dims of `layout` that split finer than `level` has voxels, with their parts.
inline std::vector<std::pair<int, int>> sliver_splits(const std::array<std::int64_t, 3>& size,
                                                      int level, const mt::MeshShape& mesh,
                                                      const mt::Layout& layout) {
  std::vector<std::pair<int, int>> slivers;
  for (int d = 0; d < 3; ++d) {
    const auto axis = layout.mesh_axis_of(spatial_names[d]);
    if (!axis) continue;
    const int parts = mesh[*mesh.find(*axis)].size;
    if ((size[d] >> level) < parts) slivers.push_back({d, parts});
  }
  return slivers;
}

// The layout with its too-fine spatial splits moved to the channels (the first) or dropped (the
// others: those processors repeat the work).
inline mt::Layout without_slivers(const mt::Layout& layout,
                                  const std::vector<std::pair<int, int>>& slivers) {
  std::vector<mt::LayoutRule> rules;
  bool channels_split = layout.mesh_axis_of("channels").has_value();
  for (const auto& rule : layout.rules()) {
    const bool sliver = std::any_of(slivers.begin(), slivers.end(), [&](const auto& s) {
      return rule.dim == spatial_names[s.first];
    });
    if (!sliver) {
      rules.push_back(rule);
    } else if (!channels_split) {
      rules.push_back({"channels", rule.mesh_axis});
      channels_split = true;
    }
  }
  return mt::Layout(rules);
}

// A schedule like `layouts` in which every level of the U-Net fits: the levels that fit keep
// their layout, the others split channels where they split too-small spatial dims.
inline mt::LayoutSchedule fitting_schedule(const std::array<std::int64_t, 3>& size, int depth,
                                           const mt::MeshShape& mesh,
                                           const mt::LayoutSchedule& layouts) {
  std::vector<mt::Layout> levels;
  for (int level = 0; level <= depth; ++level) {
    const mt::Layout& layout = layouts.at(std::size_t(level));
    levels.push_back(without_slivers(layout, sliver_splits(size, level, mesh, layout)));
  }
  while (levels.size() > 1 && levels[levels.size() - 2] == levels.back()) levels.pop_back();
  return mt::LayoutSchedule(levels);
}

}  // namespace level_fit

/// Throws when the model cannot run on `size` under `layouts` (one per level, the last repeating)
/// on `mesh`: sizes that 2^depth does not divide, a schedule with more stages than levels or with
/// a layout the mesh cannot hold, and splits that leave a processor no voxel of a dim at some
/// level, where its 3x3x3 convolutions would have nothing to work on. That error names the level
/// and suggests a schedule that fits.
inline void check_geometry(const std::array<std::int64_t, 3>& size, int depth,
                           const mt::MeshShape& mesh, const mt::LayoutSchedule& layouts,
                           std::int64_t batch = 1) {
  if (depth < 1 || depth > 6)
    throw mt::Error("--depth " + std::to_string(depth) + ": use 1 to 6 levels");
  const std::int64_t factor = std::int64_t(1) << depth;
  for (int d = 0; d < 3; ++d) {
    if (size[d] < 1 || size[d] % factor != 0)
      throw mt::Error("size " + std::to_string(size[d]) + " along " + level_fit::spatial_names[d] +
                      " is not divisible by 2^depth = " + std::to_string(factor) + " (--depth " +
                      std::to_string(depth) + "); choose --size or --shape a multiple of " +
                      std::to_string(factor));
  }
  if (layouts.size() > std::size_t(depth) + 1)
    throw mt::Error("--layouts \"" + layouts.to_string() + "\" has " +
                    std::to_string(layouts.size()) + " levels but the U-Net of --depth " +
                    std::to_string(depth) + " has " + std::to_string(depth + 1) + " (0 to " +
                    std::to_string(depth) + "); give at most " + std::to_string(depth + 1) +
                    " (the last one repeats for the levels below it)");
  for (int level = 0; level <= depth; ++level) {
    const mt::Layout& layout = layouts.at(std::size_t(level));
    try {
      mt::TensorLayout(mt::Shape{mt::Dim("batch", batch), mt::Dim("x", size[0] >> level),
                                 mt::Dim("y", size[1] >> level), mt::Dim("z", size[2] >> level),
                                 mt::Dim("channels", 1)},
                       mesh, layout);
    } catch (const mt::Error& e) {
      throw mt::Error("layout \"" + layout.to_string() + "\" of level " + std::to_string(level) +
                      ": " + e.what());
    }
    const auto slivers = level_fit::sliver_splits(size, level, mesh, layout);
    if (slivers.empty()) continue;
    const auto [d, parts] = slivers.front();
    throw mt::Error(
        "layout \"" + layout.to_string() + "\" at level " + std::to_string(level) + " (" +
        std::to_string(size[0] >> level) + "x" + std::to_string(size[1] >> level) + "x" +
        std::to_string(size[2] >> level) + " voxels): dim \"" + level_fit::spatial_names[d] +
        "\" has " + std::to_string(size[d] >> level) + ", fewer than the " + std::to_string(parts) +
        " processors of mesh axis \"" + *layout.mesh_axis_of(level_fit::spatial_names[d]) +
        "\" that split it, so some would hold no voxel for the 3x3x3 convolutions there; give the "
        "deep levels a layout of their own, e.g. --layouts \"" +
        level_fit::fitting_schedule(size, depth, mesh, layouts).to_string() +
        "\", or use a larger size or a smaller --depth");
  }
}

/// `layouts`, or `layout` at every level where the schedule is empty.
inline mt::LayoutSchedule schedule_or(const mt::LayoutSchedule& layouts, const mt::Layout& layout) {
  return layouts.empty() ? mt::LayoutSchedule(std::vector<mt::Layout>{layout}) : layouts;
}

}  // namespace unet3d
