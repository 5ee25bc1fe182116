#pragma once
// The command-line settings of unet3d and the checks that reject what cannot run, naming the flag.

#include <array>
#include <cstdint>
#include <string>

#include <meshtensor/meshtensor.hpp>

namespace unet3d {

namespace mt = meshtensor;

/// How scans become network volumes: a target voxel spacing in mm (0: keep the scan's) or a target
/// shape (0: from the spacing), and the depth whose 2^depth the padded size must be a multiple of.
struct Preprocessing {
  std::array<double, 3> spacing{0, 0, 0};
  std::array<std::int64_t, 3> shape{0, 0, 0};
  int depth = 3;
};

struct TrainOptions {
  std::array<std::int64_t, 3> size{64, 64, 64};
  std::int64_t batch = 1;
  int depth = 3;
  int channels = 8;
  std::string norm = "batch";
  bool recompute = false;  // keep only each level's input and output; recompute the rest
  std::int64_t steps = 600;
  std::int64_t stop_after =
      0;  // stop (with a checkpoint) after this many steps of this run: 0 = never
  double lr = 3e-3;
  std::array<double, 3> class_weights{1.0, 3.0, 3.0};  // background, organ, tumour
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
};

struct PredictOptions {
  std::string checkpoint, input, output, probabilities;
  std::array<std::int64_t, 3> size{0, 0, 0};  // when given, the input must have it
};

/// Throws when the model cannot run on `size` under `layout` on `mesh`: sizes that 2^depth does not
/// divide, and splits that leave a processor no voxel of a dim at the deepest level, where the
/// 3x3x3 convolutions of the bottom of the U would have nothing to work on.
inline void check_geometry(const std::array<std::int64_t, 3>& size, int depth,
                           const mt::MeshShape& mesh, const mt::Layout& layout,
                           std::int64_t batch = 1) {
  if (depth < 1 || depth > 6)
    throw mt::Error("--depth " + std::to_string(depth) + ": use 1 to 6 levels");
  const std::int64_t factor = std::int64_t(1) << depth;
  const char* names[3] = {"x", "y", "z"};
  for (int d = 0; d < 3; ++d) {
    if (size[d] < 1 || size[d] % factor != 0)
      throw mt::Error("size " + std::to_string(size[d]) + " along " + names[d] +
                      " is not divisible by 2^depth = " + std::to_string(factor) + " (--depth " +
                      std::to_string(depth) + "); choose --size or --shape a multiple of " +
                      std::to_string(factor));
  }
  const mt::TensorLayout at_bottom(
      mt::Shape{mt::Dim("batch", batch), mt::Dim("x", size[0] / factor),
                mt::Dim("y", size[1] / factor), mt::Dim("z", size[2] / factor)},
      mesh, layout);
  for (int d = 0; d < 3; ++d) {
    const auto axis = at_bottom.mesh_axis_of(names[d]);
    if (!axis) continue;
    const int parts = mesh[*axis].size;
    if (size[d] / factor < parts)
      throw mt::Error("--layout \"" + layout.to_string() + "\": at level " + std::to_string(depth) +
                      " (the deepest) dim \"" + names[d] + "\" has " +
                      std::to_string(size[d] / factor) + " voxels, fewer than the " +
                      std::to_string(parts) + " processors of mesh axis \"" + mesh[*axis].name +
                      "\" that split it, so some would hold no voxel for the 3x3x3 "
                      "convolutions there; split fewer processors over " +
                      names[d] + ", split another dim, use a larger size or a smaller --depth");
  }
}

}  // namespace unet3d
