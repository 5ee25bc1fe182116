#pragma once
// `unet3d predict`: labels (and optionally class probabilities) for a CT volume — a NIfTI scan, or
// an .npy array in Hounsfield units — with the model of a checkpoint, on any mesh and layout, the
// whole volume at once (no sliding windows, no seams). Each processor reads only its block of the
// input; NIfTI outputs are on the scan's own grid, with its header.
//
// `unet3d generate`: a phantom volume and its labels as .npy files, to try predict on.

#include <chrono>
#include <cstdint>
#include <string>

#include <meshtensor/meshtensor.hpp>

#include "checkpoint.hpp"
#include "metrics.hpp"
#include "model.hpp"
#include "options.hpp"
#include "phantom.hpp"
#include "scan.hpp"

namespace unet3d {

inline ModelConfig config_from(const json& flags) {
  ModelConfig c;
  c.depth = flags.value("depth", 3);
  c.channels = flags.value("channels", 8);
  c.norm = flags.value("norm", std::string("batch"));
  c.seed = flags.value("seed", std::uint64_t(1));
  return c;
}

/// Wall time of predict's phases, in seconds: what a user waits for, beside the network alone.
struct PredictTimes {
  double read = 0, network = 0, write = 0;
};

inline double seconds_since(std::chrono::steady_clock::time_point start) {
  return std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
}

// A CT scan (NIfTI): prepared as in training, predicted whole, and the labels (and probabilities)
// written on the scan's own grid, in its orientation, with its header.
inline PredictTimes predict_scan(mt::Mesh& mesh, const PredictOptions& o, const mt::Layout& layout,
                                 const json& flags, UNet& net) {
  PredictTimes times;
  auto start = std::chrono::steady_clock::now();
  for (const auto& [flag, path] : {std::pair<std::string, std::string>{"--output", o.output},
                                   {"--probabilities", o.probabilities}})
    if (!path.empty() && !mt::nifti::is_nifti_name(path))
      throw mt::Error(flag + " " + path +
                      ": the labels of a NIfTI scan are written as NIfTI; name it .nii or .nii.gz");
  Preprocessing p;
  p.depth = flags.value("depth", 3);
  p.spacing = flags.value("spacing", p.spacing);
  p.shape = flags.value("resize", p.shape);
  p.layouts = o.layouts;
  const Scan scan = read_scan(mesh, o.input, "", layout, p);
  times.read = seconds_since(start);
  start = std::chrono::steady_clock::now();
  const auto logits = net(scan.input, /*training=*/false);
  const auto probabilities =
      to_scan_grid(mt::drop_dim(mt::softmax(logits, "classes"), "batch"), scan.grid);
  const auto labels = mt::argmax<std::uint8_t>(probabilities, "classes");
  times.network = seconds_since(start);
  start = std::chrono::steady_clock::now();
  mt::save_nifti(labels, o.output, scan.volume,
                 {"unet3d labels: 0 background, 1 organ, 2 tumour", NIFTI_INTENT_LABEL, 0, 2});
  if (!o.probabilities.empty())
    mt::save_nifti(
        probabilities, o.probabilities, scan.volume,
        {"unet3d class probabilities (background, organ, tumour)", NIFTI_INTENT_NONE, 0, 1});
  times.write = seconds_since(start);
  return times;
}

// A volume (.npy, HU, float32), unbatched [x, y, z] or batched [batch, x, y, z].
inline PredictTimes predict_array(mt::Mesh& mesh, const PredictOptions& o, const mt::Layout& layout,
                                  UNet& net, int depth) {
  PredictTimes times;
  auto start = std::chrono::steady_clock::now();
  const mt::npy::Header header = mt::npy::read_header(o.input);
  mt::npy::check_type<float>(header, o.input);
  const bool batched = header.shape.size() == 4;
  if (header.shape.size() != 3 && !batched)
    throw mt::IoError(
        o.input + ": holds an array of shape " + mt::npy::shape_text(header.shape) +
        "; predict needs a volume [x, y, z] or a batch [batch, x, y, z] in HU (float32)");
  const std::size_t first = batched ? 1 : 0;
  const std::array<std::int64_t, 3> size{header.shape[first], header.shape[first + 1],
                                         header.shape[first + 2]};
  if (o.size[0] && o.size != size)
    throw mt::Error(o.input + ": the volume is " +
                    mt::npy::shape_text({size[0], size[1], size[2]}) + " but --size/--shape says " +
                    mt::npy::shape_text({o.size[0], o.size[1], o.size[2]}));
  check_geometry(size, depth, mesh.shape(), schedule_or(o.layouts, layout),
                 batched ? header.shape[0] : 1);
  mt::Shape volume_shape =
      batched ? mt::Shape{mt::Dim("batch", header.shape[0]), mt::Dim("x", size[0]),
                          mt::Dim("y", size[1]), mt::Dim("z", size[2])}
              : mt::Shape{mt::Dim("x", size[0]), mt::Dim("y", size[1]), mt::Dim("z", size[2])};
  auto hu = mt::load_npy<float>(mesh, o.input, volume_shape, layout);
  times.read = seconds_since(start);
  start = std::chrono::steady_clock::now();
  if (!batched) hu = mt::append_dim(hu, "batch", 0);
  const auto input =
      mt::append_dim(mt::map(hu, [](float v) { return network_input(v); }), "channels");
  const auto logits = net(input, /*training=*/false);
  auto labels = mt::argmax<std::uint8_t>(logits, "classes");
  if (!batched) labels = mt::drop_dim(labels, "batch");
  times.network = seconds_since(start);
  start = std::chrono::steady_clock::now();
  mt::save_npy(labels, o.output);
  if (!o.probabilities.empty()) {
    auto p = mt::softmax(logits, "classes");
    if (!batched) p = mt::drop_dim(p, "batch");
    mt::save_npy(p, o.probabilities);
  }
  times.write = seconds_since(start);
  return times;
}

inline void predict(mt::Mesh& mesh, const PredictOptions& o, const mt::Layout& layout) {
  const auto [manifest, where] = read_manifest(o.checkpoint);
  ModelConfig config = config_from(manifest["flags"]);
  config.layouts = o.layouts;
  UNet net(mesh, config);
  restore_checkpoint(mesh, manifest, where, net, nullptr);
  mt::autodiff::NoGrad no_grad(mesh);
  const PredictTimes times = mt::nifti::is_nifti_name(o.input)
                                 ? predict_scan(mesh, o, layout, manifest["flags"], net)
                                 : predict_array(mesh, o, layout, net, config.depth);
  const double peak = mt::all_reduce_value(mesh.world(), peak_rss_mib(), mt::ReduceOp::max);
  if (mesh.processor() == 0) {
    std::printf("unet3d: labels of %s written to %s%s%s\n", o.input.c_str(), o.output.c_str(),
                o.probabilities.empty() ? "" : ", probabilities to ", o.probabilities.c_str());
    // The first use of each shape also builds its kernels: network_s includes that.
    std::printf("%s\n", json{{"read_s", times.read},
                             {"network_s", times.network},
                             {"write_s", times.write},
                             {"peak_rss_mib", peak},
                             {"processors", mesh.num_processors()},
                             {"mesh", mesh.shape().to_string()},
                             {"layout", layout.to_string()},
                             {"transport", mesh.transport()}}
                            .dump()
                            .c_str());
  }
}

struct GenerateOptions {
  std::array<std::int64_t, 3> size{64, 64, 64};
  std::uint64_t seed = 1;
  std::int64_t index = 0;
  std::string output, labels;
};

/// Writes validation volume `index` of `seed` (the held-out volumes of training) in HU, and labels.
inline void generate_volume(mt::Mesh& mesh, const GenerateOptions& o, const mt::Layout& layout) {
  const Anatomy anatomy(volume_seed(o.seed, "validation", o.index), o.size);
  const mt::RandomStream noise(volume_seed(o.seed, "validation", o.index), "noise");
  const mt::Shape shape{mt::Dim("x", o.size[0]), mt::Dim("y", o.size[1]), mt::Dim("z", o.size[2])};
  auto at = [&](const mt::Index& i) {
    const std::array<std::int64_t, 3> p{i["x"], i["y"], i["z"]};
    return voxel(anatomy, o.size, p,
                 noise.normal((std::uint64_t(p[0]) * o.size[1] + p[1]) * o.size[2] + p[2]));
  };
  mt::save_npy(
      mt::generate<float>(mesh, shape, layout, [&](const mt::Index& i) { return at(i).hu; }),
      o.output);
  if (!o.labels.empty())
    mt::save_npy(
        mt::generate<std::uint8_t>(mesh, shape, layout,
                                   [&](const mt::Index& i) { return std::uint8_t(at(i).label); }),
        o.labels);
}

}  // namespace unet3d
